"""Protobuf-level steps (onnx's shape inference, its C++ version converter) on an onnx_ir model without
serialising its weights.

onnx's C APIs take a ModelProto; serialising a model for them copies every weight (a 1.5 GB model twice
over). ``call_without_weights`` hands them a proto whose initializers over 1 KB stand in as typed graph
inputs - onnx_ir's own helper, the one its ShapeInferencePass uses - and leaves the model as it was.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import onnx
import onnx_ir as ir

R = TypeVar("R")


def call_without_weights(func: Callable[[onnx.ModelProto], R], model: ir.Model) -> R:
    """``func`` on a serialized ``model`` whose initializers over 1 KB are typed inputs instead (the small,
    shape-like constants stay initializers); ``model`` is unchanged. With an onnx_ir that moved its private
    helper, the whole model is serialized."""
    try:
        from onnx_ir.passes.common._c_api_utils import call_onnx_api
    except ImportError:
        return func(ir.serde.serialize_model(model))
    return call_onnx_api(func, model)
