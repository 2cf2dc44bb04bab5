"""QuantizeLinear / DequantizeLinear 21 -> 19: blocked quantization and the 16- and 4-bit integer types, in arithmetic.

Opset 21 added ``block_size`` (a scale, and zero point, of the input's rank, one entry per ``block_size`` elements
along ``axis``) and int16/uint16/int4/uint4 quantized types (onnx/defs/quantization/defs.cc). A node without
either is already in its opset-19 form and keeps its place (the other new types, float8, were in 19 already).
Otherwise the formula is spelled out in float32: the scale and zero point are repeated ``block_size`` times
along ``axis`` (Unsqueeze, Expand, Reshape, then a Slice to the input's length, since the last block may be
short) or, per axis, reshaped to broadcast along it; then ``y = (x - zero_point) * scale`` cast to the scale's
type, or ``q = clip(round(x / scale) + zero_point, qmin, qmax)`` cast to the quantized type (Round is half to
even, as QuantizeLinear's rounding). float8 outputs, whose saturation differs, are refused in this form. The
input rank must be known.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from bridge.rewriting import Builder
from bridge.rewriting.attrs import optional_int
from opsets.registry import register
from opsets.version_adapters._util import Rewritten, fail, input_or_none

F32 = ir.DataType.FLOAT
_NEW_INTS = {ir.DataType.INT16, ir.DataType.UINT16, ir.DataType.INT4, ir.DataType.UINT4}
_INTS = {ir.DataType.INT8, ir.DataType.UINT8, *_NEW_INTS}
_BOUNDS = {ir.DataType.INT8: (-128, 127), ir.DataType.UINT8: (0, 255), ir.DataType.INT16: (-32768, 32767),
           ir.DataType.UINT16: (0, 65535), ir.DataType.INT4: (-8, 7), ir.DataType.UINT4: (0, 15)}


def _spread(b: Builder, node: ir.Node, hop: str, param: ir.Value, x: ir.Value, axis: int, block: int) -> ir.Value:
    """``param`` (a scale or zero point, in float32) broadcastable against ``x``."""
    if x.shape is None:
        raise fail(node, hop, "the input rank must be known")
    rank = len(x.shape)
    axis %= rank
    value = b.cast(param, F32)
    if block > 0:  # repeat every entry block times along axis, then cut to the input's length
        shape = b.op("Shape", param)
        expanded = b.op("Expand", b.unsqueeze(value, axis + 1), b.op(
            "Concat", b.op("Slice", shape, b.i64(0), b.i64(axis + 1)), b.i64(block),
            b.op("Slice", shape, b.i64(axis + 1), b.i64(rank + 1)), axis=0))
        merged = b.op("Reshape", expanded, b.op(
            "Concat", b.op("Slice", shape, b.i64(0), b.i64(axis)), b.i64(-1),
            b.op("Slice", shape, b.i64(axis + 1), b.i64(rank + 1)), axis=0))
        return b.op("Slice", merged, b.i64(0), b.dim(x, axis), b.i64(axis))
    if param.shape is not None and len(param.shape) == 1 and rank > 1:  # per axis
        return b.op("Reshape", value, b.i64(-1, *([1] * (rank - axis - 1))))
    return value


@register("DequantizeLinear", 21, 19)
def dequantizelinear_21_19(b: Builder, node: ir.Node) -> Rewritten:
    hop = "dequantizelinear_21_19"
    x, scale, zero_point = node.inputs[0], node.inputs[1], input_or_none(node, 2)
    block = optional_int(node, "block_size", 0)
    if x is None or scale is None or x.dtype is None:
        raise fail(node, hop, "the input and its type must be known")
    if block == 0 and x.dtype not in _NEW_INTS:
        node.attributes.pop("block_size", None)
        return None
    if x.dtype not in _INTS and x.dtype != ir.DataType.INT32:
        raise fail(node, hop, f"a blocked DequantizeLinear of {x.dtype.name} has no opset-19 form")
    axis = optional_int(node, "axis", 1)
    value = b.cast(x, F32)
    if zero_point is not None:
        value = b.op("Sub", value, _spread(b, node, hop, zero_point, x, axis, block))
    y = b.op("Mul", value, _spread(b, node, hop, scale, x, axis, block))
    out_type = scale.dtype or F32
    return [y if out_type == F32 else b.cast(y, out_type)]


@register("QuantizeLinear", 21, 19)
def quantizelinear_21_19(b: Builder, node: ir.Node) -> Rewritten:
    hop = "quantizelinear_21_19"
    x, scale, zero_point = node.inputs[0], node.inputs[1], input_or_none(node, 2)
    block = optional_int(node, "block_size", 0)
    if x is None or scale is None:
        raise fail(node, hop, "an input is missing")
    out_type = zero_point.dtype if zero_point is not None else None
    if out_type is None:
        code = optional_int(node, "output_dtype", 0)
        out_type = ir.DataType(code) if code else ir.DataType.UINT8
    if block == 0 and out_type not in _NEW_INTS:
        node.attributes.pop("block_size", None)
        if optional_int(node, "output_dtype", 0) not in (0, out_type.value):
            raise fail(node, hop, "output_dtype disagrees with the zero point's type")
        node.attributes.pop("output_dtype", None)
        if zero_point is None and out_type != ir.DataType.UINT8:
            # QuantizeLinear-19 takes its output type from a zero point only: give it a zero one
            attrs = {name: node.attributes[name].as_int() for name in ("axis", "saturate") if name in node.attributes}
            return [b.op("QuantizeLinear", x, scale, b.const(np.zeros((), out_type.numpy())), **attrs)]
        return None
    if out_type not in _INTS:
        raise fail(node, hop, f"a blocked QuantizeLinear to {out_type.name} has no opset-19 form")
    axis = optional_int(node, "axis", 1)
    q = b.op("Round", b.op("Div", b.cast(x, F32), _spread(b, node, hop, scale, x, axis, block)))
    if zero_point is not None:
        q = b.op("Add", q, _spread(b, node, hop, zero_point, x, axis, block))
    low, high = _BOUNDS[out_type]
    q = b.op("Clip", q, b.const(np.asarray(low, np.float32)), b.const(np.asarray(high, np.float32)))
    return [b.cast(q, out_type)]
