"""Scatter and index arithmetic: scatter_nd, ``_scatter_set_nd``, ``_contrib_index_copy``,
``_contrib_boolean_mask``, ravel / unravel of multi-indices (ScatterND, Compress, integer arithmetic)."""

from __future__ import annotations

import numpy as np

from adapters.mxnet.context import ConversionContext
from adapters.mxnet.registry import out, translator
from adapters.mxnet.symbol import MXNode
from bridge.errors import ExportError


# ---- scatter / index ---------------------------------------------------------------------------------------
def _nd_indices(ctx: ConversionContext, node: MXNode, indices: str) -> str:
    """MXNet's (M, ...) index tensors (first axis = coordinate) as ONNX's (..., M)."""
    idx = ctx.as_int64(indices, f"{node.name}__idx")
    rank = ctx.rank(idx, node.name)
    if rank == 1:  # one index of M coordinates
        return idx
    return ctx.emit("Transpose", [idx], 1, name=f"{node.name}__idx_t", perm=[*range(1, rank), 0])[0]


@translator("scatter_nd")
def scatter_nd(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # indexing_op.h ScatterNDForward: zeros of ``shape`` with out[indices[:, i]] = data[i] (indices unique)
    data, indices = inputs[:2]
    shape = list(node.attrs.optional_ints("shape"))
    zeros = ctx.const(np.zeros(shape, ctx.np_dtype(data)), f"{node.name}__zeros") if int(np.prod(shape)) <= 4096 else \
        ctx.emit("Expand", [ctx.scalar(0, data, f"{node.name}__zero"), ctx.i64(shape, f"{node.name}__shape")], 1,
                 name=f"{node.name}__zeros")[0]
    return ctx.emit("ScatterND", [zeros, _nd_indices(ctx, node, indices), data], [out(ctx, node)], name=node.name)


@translator("_scatter_set_nd")
def _scatter_set_nd(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # indexing_op.cc: lhs with lhs[indices[:, i]] = rhs[i]
    lhs, rhs, indices = inputs[:3]
    return ctx.emit("ScatterND", [lhs, _nd_indices(ctx, node, indices), rhs], [out(ctx, node)], name=node.name)


@translator("_contrib_index_copy")
def _contrib_index_copy(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # contrib/index_copy-inl.h: old with row index[i] replaced by new[i]
    old, index, new = inputs[:3]
    idx = ctx.unsqueeze(ctx.as_int64(index, f"{node.name}__idx"), [1], name=f"{node.name}__idx_col")
    return ctx.emit("ScatterND", [old, idx, new], [out(ctx, node)], name=node.name)


@translator("_contrib_boolean_mask")
def _contrib_boolean_mask(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # contrib/boolean_mask.cc: the slices along ``axis`` where index is nonzero (a data-dependent length)
    data, index = inputs[:2]
    keep = ctx.as_bool(index, f"{node.name}__keep")
    return ctx.emit("Compress", [data, keep], [out(ctx, node)], name=node.name, axis=node.attrs.optional_int("axis", 0) or 0)


def _strides(shape: list[int]) -> list[int]:
    return [int(np.prod(shape[i + 1:], dtype=np.int64)) for i in range(len(shape))]


@translator("_ravel_multi_index", "ravel_multi_index")
def ravel_multi_index(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # tensor/ravel.h: data (ndim, N) of coordinates (truncated to int) -> flat row-major index, in data's dtype
    x = inputs[0]
    n = node.name
    shape = list(node.attrs.optional_ints("shape"))
    idx = ctx.as_int64(x, f"{n}__int")
    strides = ctx.const(np.asarray(_strides(shape), np.int64).reshape(-1, 1), f"{n}__strides")
    flat = ctx.reduce("ReduceSum", ctx.emit("Mul", [idx, strides], 1, name=f"{n}__scaled")[0], [0], False,
                      name=f"{n}__sum")
    return ctx.emit("Cast", [flat], [out(ctx, node)], name=n, to=ctx.elem(x))


@translator("_unravel_index", "unravel_index")
def unravel_index(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # tensor/ravel.h: flat index (truncated to int) -> coordinates (ndim, N): (i // stride_j) % shape_j
    x = inputs[0]
    n = node.name
    shape = list(node.attrs.optional_ints("shape"))
    if ctx.rank(x, n) != 1:  # MXNet reads the first dim's count of values from any other rank
        raise ExportError(f"node '{n}': unravel_index takes a 1-d index vector (got rank {ctx.rank(x, n)})")
    idx = ctx.unsqueeze(ctx.as_int64(x, f"{n}__int"), [0], name=f"{n}__row")
    rank = ctx.rank(x, n)
    col = (-1,) + (1,) * rank
    strides = ctx.const(np.asarray(_strides(shape), np.int64).reshape(col), f"{n}__strides")
    dims = ctx.const(np.asarray(shape, np.int64).reshape(col), f"{n}__dims")
    q = ctx.emit("Div", [idx, strides], 1, name=f"{n}__div")[0]
    r = ctx.emit("Mod", [q, dims], 1, name=f"{n}__mod")[0]
    return ctx.emit("Cast", [r], [out(ctx, node)], name=n, to=ctx.elem(x))
