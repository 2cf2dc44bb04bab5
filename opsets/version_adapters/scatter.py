"""ScatterElements / ScatterND 18 -> 16: the ``max`` and ``min`` reductions, which opset 16 lacks.

Opset 18 added ``reduction="max"|"min"`` (onnx/defs/tensor/defs.cc): every target gets the max (min) of its
data and all updates aimed at it. Both ops are brought to ScatterND form, ``K`` index tuples each naming one
slice: ScatterND as it is; ScatterElements with full coordinates per update element (the element's own position,
its ``axis`` coordinate replaced by the index, negative ones counted from the end), so ``K`` is the number of
update elements. Updates aimed at the same target are first reduced among themselves through a ``[K, K]``
same-target mask (``Where(mask, updates, lowest)`` then ReduceMax over the partners; ``lowest`` is -inf or the
integer type's minimum), so every duplicate carries the same value; then ``ScatterND(data, idx, Max(GatherND(data,
idx), reduced))`` with no reduction writes that value, whatever order duplicates are written in. Integers compare
with Less/Where (integer Max/Min need opset 12), 8/16-bit and uint32 ones in int64 (onnxruntime has no
Where/ReduceMax for some of them); uint64 is refused (no wider type). Exact for every other numeric type; memory
grows with ``K^2`` times the slice size. Other reductions are already in their opset-16 form.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from bridge.rewriting import Builder
from bridge.rewriting.attrs import optional_int, optional_str
from opsets.registry import register
from opsets.version_adapters._util import Rewritten, fail

I64 = ir.DataType.INT64
_WIDEN = {ir.DataType.INT8, ir.DataType.UINT8, ir.DataType.INT16, ir.DataType.UINT16, ir.DataType.UINT32}


def _extreme(node: ir.Node, hop: str, dtype: ir.DataType | None, reduction: str) -> np.ndarray:
    """The identity of ``reduction`` in ``dtype``: the lowest value for max, the highest for min."""
    if dtype is None or dtype in (ir.DataType.STRING, ir.DataType.BOOL, ir.DataType.COMPLEX64, ir.DataType.COMPLEX128):
        raise fail(node, hop, f"reduction={reduction} on {dtype.name if dtype else 'an unknown type'} has no opset-16 form")
    np_dtype = dtype.numpy()
    if np.issubdtype(np_dtype, np.floating):
        return np.asarray(-np.inf if reduction == "max" else np.inf, np_dtype)
    info = np.iinfo(np_dtype)
    return np.asarray(info.min if reduction == "max" else info.max, np_dtype)


def _scatter_nd(b: Builder, node: ir.Node, hop: str, data: ir.Value, idx: ir.Value, updates: ir.Value,
                extra: int, reduction: str) -> ir.Value:
    """ScatterND(data, idx [K, q], updates [K, *slice]) with ``reduction`` max/min, in ScatterND-16 terms
    (``extra``: the slice rank)."""
    dtype = data.dtype
    lowest = b.const(_extreme(node, hop, dtype, reduction))
    if dtype == ir.DataType.UINT64:
        raise fail(node, hop, f"reduction={reduction} on UINT64: no wider type to compare in (Where, ReduceMax and "
                              "Max lack uint64 kernels in onnxruntime)")
    reduce_op = "ReduceMax" if reduction == "max" else "ReduceMin"
    same = b.op("Equal", b.unsqueeze(idx, 1), b.unsqueeze(idx, 0))  # [K, K, q]
    mask = b.cast(b.reduce("ReduceMin", b.cast(same, ir.DataType.INT32), [2], keepdims=0), ir.DataType.BOOL)
    if extra:
        mask = b.unsqueeze(mask, *range(2, 2 + extra))
    current = b.op("GatherND", data, idx)
    widen = dtype in _WIDEN  # compared in int64: Where/ReduceMax/Max lack these types (in onnxruntime, before 12)
    if widen:
        updates, lowest, current = (b.cast(v, I64) for v in (updates, lowest, current))
    # partners [j, k, *slice] reduced over j, the leading axis (the mask is symmetric): onnxruntime 1.31's integer
    # ReduceMax/ReduceMin over a later axis of a larger tensor can miss the maximum (seen on int64 [6, 6, 3], axis 1)
    partners = b.where(mask, b.unsqueeze(updates, 1), lowest)
    reduced = b.reduce(reduce_op, partners, [0], keepdims=0)  # [K, *slice]: the same value for duplicates
    if dtype is not None and dtype.is_floating_point():
        combined = b.op("Max" if reduction == "max" else "Min", current, reduced)  # NaN as Max/Min have it
    else:  # Max/Min take integers only from opset 12, and later hops may go below it
        keep = b.op("Less", reduced, current) if reduction == "max" else b.op("Less", current, reduced)
        combined = b.where(keep, current, reduced)
    if widen and dtype is not None:
        combined = b.cast(combined, dtype)  # one of the values: in range
    return b.op("ScatterND", data, idx, combined)


def _reduction(node: ir.Node) -> str:
    return optional_str(node, "reduction", "none")


@register("ScatterND", 18, 16)
def scatternd_18_16(b: Builder, node: ir.Node) -> Rewritten:
    hop = "scatternd_18_16"
    reduction = _reduction(node)
    if reduction not in ("max", "min"):
        return None
    data, idx, updates = node.inputs[0], node.inputs[1], node.inputs[2]
    if data is None or idx is None or updates is None or idx.shape is None or updates.shape is None:
        raise fail(node, hop, "the indices' and updates' ranks must be known")
    q = idx.shape[-1]
    if not isinstance(q, int):
        raise fail(node, hop, "the index tuples' length must be static")
    lead = len(idx.shape) - 1  # idx [*lead, q], updates [*lead, *slice]
    slice_shape = b.op("Slice", b.op("Shape", updates), b.i64(lead), b.i64(len(updates.shape)))
    flat_idx = b.op("Reshape", idx, b.i64(-1, q))
    flat_updates = b.op("Reshape", updates, b.op("Concat", b.i64(-1), slice_shape, axis=0))
    return [_scatter_nd(b, node, hop, data, flat_idx, flat_updates, len(updates.shape) - lead, reduction)]


@register("ScatterElements", 18, 16)
def scatterelements_18_16(b: Builder, node: ir.Node) -> Rewritten:
    hop = "scatterelements_18_16"
    reduction = _reduction(node)
    if reduction not in ("max", "min"):
        return None
    data, idx, updates = node.inputs[0], node.inputs[1], node.inputs[2]
    if data is None or idx is None or updates is None or data.shape is None:
        raise fail(node, hop, "the data rank must be known")
    rank = len(data.shape)
    axis = optional_int(node, "axis", 0) % rank
    shape = b.op("Shape", idx)
    index = b.cast(idx, I64)
    index = b.where(b.op("Less", index, b.i64(0)), b.op("Add", index, b.dim(data, axis)), index)
    coords = []
    for a in range(rank):
        if a == axis:
            coords.append(index)
            continue
        view = [1] * rank
        view[a] = -1
        line = b.op("Range", b.const(np.asarray(0, np.int64)), b.op("Squeeze", b.dim(idx, a), b.i64(0)),
                    b.const(np.asarray(1, np.int64)))
        coords.append(b.op("Expand", b.op("Reshape", line, b.i64(*view)), shape))
    tuples = b.op("Reshape", b.op("Concat", *[b.unsqueeze(c, rank) for c in coords], axis=rank), b.i64(-1, rank))
    flat_updates = b.op("Reshape", updates, b.i64(-1))
    return [_scatter_nd(b, node, hop, data, tuples, flat_updates, 0, reduction)]
