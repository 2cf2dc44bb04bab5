"""Pad-19 -> Pad-18: ``mode="wrap"`` as Gathers; Pad-18 -> Pad-13: the optional ``axes`` input becomes full-rank
``pads``.

Pad-19 added ``wrap`` (onnx/reference/ops/op_pad.py: numpy's ``wrap``): along each padded axis of size ``d`` with
pads ``b`` before and ``e`` after, output ``j`` is input ``(j - b) mod d`` for ``j`` in ``[0, d + b + e)``. That
is one Gather per axis with indices ``Mod(Range(-b, d + e), d)`` (Mod-13 with ``fmod=0`` is never negative), so
pads larger than the axis wrap more than once, and computed pads and dynamic sizes convert. A negative pad crops
first and the rest wraps around what is left, as onnxruntime does (numpy's ``wrap`` takes no negative pads):
``d' = d - max(-b, 0) - max(-e, 0)``, indices ``max(-b, 0) + Mod(Range(-max(b, 0), d' + max(e, 0)), d')``.
The axes must be constant and the input rank known. Other modes are already in their Pad-18 form.

Pad-18 (onnx/defs/tensor/defs.cc) pads only the listed ``axes`` (negative ones count from the end);
``pads`` then holds ``[begin_0, ..., begin_k, end_0, ..., end_k]`` for those axes. Pad-13 wants
``2 * rank`` values. Constant pads are rewritten as a constant; computed pads (e.g. a dynamo export
padding to a multiple of a window size) are scattered into zeros with ScatterElements. The axes must
be constant and the input rank known. A Pad-18 without ``axes`` is already in Pad-13 form.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from bridge.rewriting import Builder
from opsets.registry import register
from opsets.version_adapters._util import Rewritten, const_array, fail, in_place, input_or_none


@register("Pad", 19, 18)
def pad_19_18(b: Builder, node: ir.Node) -> Rewritten:
    hop = "pad_19_18"
    mode = node.attributes.get("mode")
    if mode is None or mode.as_string() != "wrap":
        return None
    x, pads = node.inputs[0], input_or_none(node, 1)
    if x is None or pads is None or x.shape is None:
        raise fail(node, hop, "the input rank must be known and pads given")
    rank = len(x.shape)
    axes_value = input_or_none(node, 3)
    axes_array = np.arange(rank) if axes_value is None else const_array(axes_value)
    if axes_array is None:
        raise fail(node, hop, "the axes input is computed; the padded axes must be known")
    axes = [int(a) % rank for a in axes_array.reshape(-1)]
    pad_values = b.cast(pads, ir.DataType.INT64)
    y = x
    zero, one = b.const(np.asarray(0, np.int64)), b.const(np.asarray(1, np.int64))
    for i, axis in enumerate(axes):
        before = b.op("Squeeze", b.op("Slice", pad_values, b.i64(i), b.i64(i + 1)), b.i64(0))
        after = b.op("Squeeze", b.op("Slice", pad_values, b.i64(i + len(axes)), b.i64(i + len(axes) + 1)), b.i64(0))
        cut_before, cut_after = _positive_part(b, b.op("Neg", before), zero), _positive_part(b, b.op("Neg", after), zero)
        size = b.op("Sub", b.op("Sub", b.op("Squeeze", b.dim(x, axis), b.i64(0)), cut_before), cut_after)
        positions = b.op("Range", b.op("Neg", _positive_part(b, before, zero)),
                         b.op("Add", size, _positive_part(b, after, zero)), one)
        y = b.op("Gather", y, b.op("Add", b.op("Mod", positions, size, fmod=0), cut_before), axis=axis)
    return [y]


def _positive_part(b: Builder, value: ir.Value, zero: ir.Value) -> ir.Value:
    """``max(value, 0)`` with Less/Where: Max takes int64 only from opset 12, and later hops may go below it."""
    return b.where(b.op("Less", value, zero), zero, value)


@register("Pad", 18, 13)
def pad_18_13(b: Builder, node: ir.Node) -> Rewritten:
    hop = "pad_18_13"
    axes_value = input_or_none(node, 3)
    if axes_value is None:
        return in_place(node)
    axes_array = const_array(axes_value)
    if axes_array is None:
        raise fail(node, hop, "the axes input is computed; Pad-13 needs to know which axes are padded")
    x = node.inputs[0]
    if x is None or x.shape is None:
        raise fail(node, hop, "the input rank must be known to spell pads for every axis")
    rank = len(x.shape)
    axes = [int(a) % rank for a in axes_array.reshape(-1)]
    positions = np.asarray(axes + [a + rank for a in axes], dtype=np.int64)  # where each given pad goes
    pads_value = node.inputs[1]
    if pads_value is None:
        raise fail(node, hop, "the pads input is missing")
    pads = const_array(pads_value)
    if pads is not None:
        full = np.zeros(2 * rank, dtype=np.int64)
        full[positions] = pads.reshape(-1).astype(np.int64)
        new_pads = b.const(full)
    else:
        zeros = b.const(np.zeros(2 * rank, dtype=np.int64))
        new_pads = b.op("ScatterElements", zeros, b.const(positions), b.cast(pads_value, ir.DataType.INT64), axis=0)
    inputs: list[ir.Value | None] = [x, new_pads]
    value = input_or_none(node, 2)
    if value is not None:
        inputs.append(value)
    mode = node.attributes.get("mode")
    attrs = {} if mode is None else {"mode": mode.as_string()}
    return [b.op("Pad", *inputs, **attrs)]
