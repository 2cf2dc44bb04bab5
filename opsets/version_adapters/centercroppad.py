"""CenterCropPad-18 -> opset 17: a Slice (the crop) then a Pad-13 with zeros (the pad), as CenterCropPad does not
exist before 18.

For each listed axis (attribute ``axes``, all axes when absent; negative ones count from the end) of size ``d``
and target ``s`` (the ``shape`` input, one entry per listed axis), as in onnx's reference
(onnx/reference/ops/op_center_crop_pad.py): a crop (``s < d``) keeps ``[(d - s) // 2, (d - s) // 2 + s)``; a pad
(``s > d``) puts ``(s - d) // 2`` zeros before and the rest (one more when the difference is odd) after. Both
are computed from the run-time sizes: ``start = max(d - s, 0) // 2``, ``end = start + min(d, s)``,
``before = max(s - d, 0) // 2``, ``after = max(s - d, 0) - before``, so dynamic input shapes and a computed
``shape`` convert (max and min as Less/Where, which take int64 at every opset down to 11). The pads are scattered into ``2 * rank`` zeros; the input rank must be known.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from bridge.rewriting import Builder
from bridge.rewriting.attrs import optional_ints
from opsets.registry import register
from opsets.version_adapters._util import Rewritten, fail


@register("CenterCropPad", 18, 17)
def centercroppad_18_17(b: Builder, node: ir.Node) -> Rewritten:
    hop = "centercroppad_18_17"
    x, shape = node.inputs[0], node.inputs[1]
    if x is None or shape is None:
        raise fail(node, hop, "an input is missing")
    if x.shape is None:
        raise fail(node, hop, "the input rank must be known to spell Pad-13's pads for every axis")
    rank = len(x.shape)
    listed = optional_ints(node, "axes")
    axes = list(range(rank)) if listed is None else [a % rank for a in listed]
    axes_value = b.i64(*axes)
    dims = b.op("Gather", b.op("Shape", x), axes_value, axis=0)
    target = b.cast(shape, ir.DataType.INT64)
    zero, two = b.i64(0), b.i64(2)
    start = b.op("Div", _positive_part(b, b.op("Sub", dims, target), zero), two)
    end = b.op("Add", start, b.where(b.op("Less", dims, target), dims, target))
    cropped = b.op("Slice", x, start, end, axes_value)
    grow = _positive_part(b, b.op("Sub", target, dims), zero)
    before = b.op("Div", grow, two)
    after = b.op("Sub", grow, before)
    positions = b.const(np.asarray(axes + [a + rank for a in axes], np.int64))
    pads = b.op("ScatterElements", b.const(np.zeros(2 * rank, np.int64)), positions,
                b.op("Concat", before, after, axis=0), axis=0)
    return [b.op("Pad", cropped, pads, mode="constant")]


def _positive_part(b: Builder, value: ir.Value, zero: ir.Value) -> ir.Value:
    """``max(value, 0)`` with Less/Where: Max takes int64 only from opset 12, and later hops may go below it."""
    return b.where(b.op("Less", value, zero), zero, value)
