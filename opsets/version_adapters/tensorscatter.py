"""TensorScatter-24 -> opset 23: a ScatterElements along the sequence axis, as TensorScatter does not exist before 24.

TensorScatter writes ``update`` (the cache's shape but ``sequence_length`` along ``axis``) into ``past_cache`` at
positions ``write_indices[batch] + s`` for ``s`` in ``[0, sequence_length)``, modulo ``max_sequence_length`` when
``mode="circular"`` (its schema's pseudocode, onnx/reference/ops/op_tensor_scatter.py). Those positions, broadcast
over ``update``'s shape, are ScatterElements' indices along ``axis``: within a line they never repeat (linear mode
requires ``write_index + sequence_length <= max_sequence_length``, circular wraps at most once), so no reduction is
needed and the result is exact. ``write_indices`` defaults to zeros. The input rank must be known; the sizes may be
dynamic.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from bridge.rewriting import Builder
from bridge.rewriting.attrs import optional_int, optional_str
from opsets.registry import register
from opsets.version_adapters._util import Rewritten, fail, input_or_none

# ScatterElements' types (onnx/defs/tensor/defs.cc): no float8, 4-bit or float8e8m0
_SCATTERABLE = {ir.DataType.UINT8, ir.DataType.UINT16, ir.DataType.UINT32, ir.DataType.UINT64, ir.DataType.INT8,
                ir.DataType.INT16, ir.DataType.INT32, ir.DataType.INT64, ir.DataType.BFLOAT16, ir.DataType.FLOAT16,
                ir.DataType.FLOAT, ir.DataType.DOUBLE, ir.DataType.STRING, ir.DataType.BOOL, ir.DataType.COMPLEX64,
                ir.DataType.COMPLEX128}


@register("TensorScatter", 24, 23)
def tensorscatter_24_23(b: Builder, node: ir.Node) -> Rewritten:
    hop = "tensorscatter_24_23"
    past, update, write = node.inputs[0], node.inputs[1], input_or_none(node, 2)
    if past is None or update is None or past.shape is None:
        raise fail(node, hop, "the cache's rank must be known")
    if past.dtype is not None and past.dtype not in _SCATTERABLE:
        raise fail(node, hop, f"the cache is {past.dtype.name}, which ScatterElements does not take")
    mode = optional_str(node, "mode", "linear")
    if mode not in ("linear", "circular"):
        raise fail(node, hop, f"unknown mode={mode!r}")
    rank = len(past.shape)
    axis = optional_int(node, "axis", -2) % rank
    start = (b.const(np.zeros(1, np.int64)) if write is None else b.cast(write, ir.DataType.INT64))
    view = [1] * rank
    view[0] = -1
    start = b.op("Reshape", start, b.i64(*view))  # [batch, 1, ...]
    length = b.op("Squeeze", b.dim(update, axis), b.i64(0))
    steps = b.op("Range", b.const(np.asarray(0, np.int64)), length, b.const(np.asarray(1, np.int64)))
    view = [1] * rank
    view[axis] = -1
    positions = b.op("Add", start, b.op("Reshape", steps, b.i64(*view)))
    if mode == "circular":
        positions = b.op("Mod", positions, b.dim(past, axis), fmod=0)
    indices = b.op("Expand", positions, b.op("Shape", update))
    return [b.op("ScatterElements", past, indices, update, axis=axis)]
