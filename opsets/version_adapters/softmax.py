"""Softmax / LogSoftmax / Hardmax across the opset-13 semantic change.

Before 13 these ops flatten the input to 2-D at ``axis`` ([prod(d[:axis]), prod(d[axis:])]) and
normalise each row; from 13 they normalise along ``axis`` alone (onnx/defs/math/defs.cc,
Softmax-13 changelog). The two agree only when ``axis`` is the last axis. Defaults differ too:
axis=1 before 13, axis=-1 from 13.

onnx's converter handles Softmax/LogSoftmax 12 -> 13 (Flatten + op + Reshape) but keeps a
non-last axis unchanged going 13 -> 12, which changes results (0.88 on a softmax over axis 1
of a 4-D tensor), maps Hardmax 12 -> 13 without the flatten (off by 1.0), and has no Hardmax
13 -> 12 at all. Down: move the axis last with Transpose, normalise the last axis, move back.
"""

from __future__ import annotations

import onnx_ir as ir

from bridge.rewriting import Builder
from bridge.rewriting.attrs import optional_int
from opsets.registry import register
from opsets.version_adapters._util import Rewritten, fail, in_place


def _rank(node: ir.Node) -> int | None:
    x = node.inputs[0]
    return None if x is None or x.shape is None else len(x.shape)


def _per_axis_to_flattened(b: Builder, node: ir.Node, hop: str) -> Rewritten:
    """Opset-13 per-axis form -> opset-11 flattening form."""
    rank = _rank(node)
    axis = optional_int(node, "axis", -1)
    if rank is None:
        if axis == -1:
            return in_place(node, set_attrs={"axis": ir.AttrInt64("axis", -1)})
        raise fail(node, hop, f"axis={axis} needs the input rank to be known")
    axis %= rank
    if axis == rank - 1:
        return in_place(node, set_attrs={"axis": ir.AttrInt64("axis", rank - 1)})
    perm = [i for i in range(rank) if i != axis] + [axis]
    back = [0] * rank
    for i, p in enumerate(perm):
        back[p] = i
    moved = b.op("Transpose", node.inputs[0], perm=perm)
    normed = b.op(node.op_type, moved, axis=rank - 1)
    out = b.op("Transpose", normed, perm=back)
    return [out]


def _flattened_to_per_axis(b: Builder, node: ir.Node) -> Rewritten:
    """Opset-11 flattening form -> opset-13 per-axis form (Flatten, normalise rows, restore shape)."""
    rank = _rank(node)
    axis = optional_int(node, "axis", 1)
    if rank is not None and axis % rank == rank - 1:
        return in_place(node, set_attrs={"axis": ir.AttrInt64("axis", -1)})
    x = node.inputs[0]
    shape = b.op("Shape", x)
    flat = b.op("Flatten", x, axis=axis)
    normed = b.op(node.op_type, flat, axis=-1)
    out = b.op("Reshape", normed, shape)
    return [out]


@register("Softmax", 13, 11)
def softmax_13_11(b: Builder, node: ir.Node) -> Rewritten:
    return _per_axis_to_flattened(b, node, "softmax_13_11")


@register("LogSoftmax", 13, 11)
def logsoftmax_13_11(b: Builder, node: ir.Node) -> Rewritten:
    return _per_axis_to_flattened(b, node, "logsoftmax_13_11")


@register("Hardmax", 13, 11)
def hardmax_13_11(b: Builder, node: ir.Node) -> Rewritten:
    return _per_axis_to_flattened(b, node, "hardmax_13_11")


@register("Hardmax", 11, 13)
def hardmax_11_13(b: Builder, node: ir.Node) -> Rewritten:
    return _flattened_to_per_axis(b, node)
