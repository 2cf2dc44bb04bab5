"""Protobuf-level steps (onnx's shape inference, its C++ version converter) on an onnx_ir model without
serialising its weights.

onnx's C APIs take a ModelProto; serialising a model for them copies every weight (a 1.5 GB model twice
over). ``call_without_weights`` hands them a proto whose initializers over 1 KB stand in as typed graph
inputs - onnx_ir's own helper, the one its ShapeInferencePass uses - and leaves the model as it was.
``infer_shapes`` is that pass's inference with a merge that keeps sequence and optional types.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

import onnx
import onnx_ir as ir

R = TypeVar("R")
logger = logging.getLogger(__name__)


def call_without_weights(func: Callable[[onnx.ModelProto], R], model: ir.Model) -> R:
    """``func`` on a serialized ``model`` whose initializers over 1 KB are typed inputs instead (the small,
    shape-like constants stay initializers); ``model`` is unchanged. With an onnx_ir that moved its private
    helper, the whole model is serialized."""
    try:
        from onnx_ir.passes.common._c_api_utils import call_onnx_api
    except ImportError:
        return func(ir.serde.serialize_model(model))
    return call_onnx_api(func, model)


def infer_shapes(model: ir.Model, *, data_prop: bool = True) -> bool:
    """onnx's shape inference (non-strict) merged into ``model`` in place; whether anything changed.

    Unlike onnx_ir's ShapeInferencePass, which merges by dtype and so turns a value whose type it did
    not know into a *tensor* (a ``SequenceEmpty`` output becomes ``tensor(float)``, and onnxruntime then
    refuses the model), this takes the inferred type whole: sequences, optionals and maps stay what
    they are. A value that already has a type keeps its kind (a tensor is never made a sequence)."""

    def infer(proto: onnx.ModelProto) -> onnx.ModelProto:
        return onnx.shape_inference.infer_shapes(proto, check_type=True, strict_mode=False, data_prop=data_prop)

    try:
        inferred = ir.serde.deserialize_model(call_without_weights(infer, model))
    except Exception as exc:  # as onnx_ir's pass: inference is best effort, the checker judges the model later
        logger.warning("shape inference failed, model left unchanged: %s", exc)
        return False
    modified = False
    for graph, inferred_graph in zip(model.graphs(), inferred.graphs(), strict=False):
        known = ir.convenience.create_value_mapping(inferred_graph)
        for name, value in ir.convenience.create_value_mapping(graph).items():
            new = known.get(name)
            if new is None:
                continue
            if new.type is not None and new.type != value.type and (
                    value.type is None or type(value.type) is type(new.type)):
                value.type = new.type
                modified = True
            if new.shape is not None and new.shape != value.shape and type(value.type) is type(new.type):
                value.shape = new.shape
                modified = True
    return modified
