"""Split down-adapters: Split-18's num_outputs and Split-13's split input.

Split-18 ``num_outputs=n`` makes chunks of ceil(d/n) with a smaller last one (onnx/defs/tensor/
defs.cc); before 18 the sizes must be spelled out. On a static axis they are a constant; on a dynamic
one (a dynamo export splitting a batch- or sequence-sized axis) they are computed from the input's
Shape: ``c = (d + n - 1) / n`` for the first n-1 chunks and ``d - c * (n - 1)`` for the last. Split-13
takes sizes as an input; Split-11 as an attribute (constant only).
"""

from __future__ import annotations

import math

import onnx_ir as ir

from bridge.rewriting import Builder
from bridge.rewriting.attrs import optional_int
from opsets.registry import register
from opsets.version_adapters._util import Rewritten, const_array, fail, input_or_none


def _rebuild(b: Builder, node: ir.Node, inputs: list[ir.Value | None], attrs: dict[str, object]) -> Rewritten:
    outs = b.op_multi("Split", *inputs, **attrs, num_outputs=len(node.outputs))  # type: ignore[arg-type]
    return list(outs)


@register("Split", 18, 13)
def split_18_13(b: Builder, node: ir.Node) -> Rewritten:
    axis = optional_int(node, "axis", 0)
    if input_or_none(node, 1) is not None:
        return _rebuild(b, node, list(node.inputs), {"axis": axis})
    n = optional_int(node, "num_outputs", len(node.outputs))
    x = node.inputs[0]
    dim_value = None if x is None or x.shape is None else x.shape[axis]
    if not isinstance(dim_value, int):
        return list(b.op_multi("Split", x, _computed_sizes(b, node, axis, n), axis=axis, num_outputs=n))
    dim = dim_value
    chunk = math.ceil(dim / n)
    sizes = [chunk] * (n - 1) + [dim - chunk * (n - 1)]
    if dim % n == 0:
        return _rebuild(b, node, [node.inputs[0]], {"axis": axis})  # equal parts: Split-13's default
    split = b.const(sizes, "int64")
    outs = b.op_multi("Split", node.inputs[0], split, axis=axis, num_outputs=n)
    return list(outs)


def _computed_sizes(b: Builder, node: ir.Node, axis: int, n: int) -> ir.Value:
    """The Split-18 chunk sizes of ``node``'s input along ``axis``, computed at run time (int64 [n])."""
    x = node.inputs[0]
    if x is None:
        raise fail(node, "split_18_13", "the input is missing")
    if n == 1:
        return b.dim(x, axis)
    if axis < 0:
        if x.shape is None:
            raise fail(node, "split_18_13", "a negative axis needs the input rank")
        axis += len(x.shape)
    dim = b.dim(x, axis)  # [1]
    chunk = b.op("Div", b.op("Add", dim, b.i64(n - 1)), b.i64(n))  # ceil(d / n), d >= 0
    head = b.op("Expand", chunk, b.i64(n - 1))
    last = b.op("Sub", dim, b.op("Mul", chunk, b.i64(n - 1)))
    return b.op("Concat", head, last, axis=0)


@register("Split", 13, 11)
def split_13_11(b: Builder, node: ir.Node) -> Rewritten:
    axis = optional_int(node, "axis", 0)
    split_value = input_or_none(node, 1)
    attrs: dict[str, object] = {"axis": axis}
    if split_value is not None:
        sizes = const_array(split_value)
        if sizes is None:
            raise fail(node, "split_13_11", "the split input is computed; Split-11 needs constant sizes")
        attrs["split"] = [int(s) for s in sizes]
    return _rebuild(b, node, [node.inputs[0]], attrs)
