"""Translators for MXNet's indexing, sorting, layout and matrix-product ops.

topk / argsort / sort / argmax / argmin, take / pick / batch_take / gather_nd / one_hot / diag,
reverse / SwapAxis / stack / _split_v2 /
Pad / depth_to_space / space_to_depth, the broadcast_* shape ops, reshape_like, shape_array /
size_array, dot / batch_dot / _linalg_gemm2 and norm, each as the ONNX nodes that reproduce MXNet 1.9's
CPU results exactly, including its output dtypes: index outputs of topk / argsort are floats by default
(``dtype='float32'``) and argmax / argmin return indices in the *input* dtype. Semantics are cited
from MXNet's sources (src/operator/tensor/ordering_op-inl.h, indexing_op.h, matrix_op-inl.h,
broadcast_reduce_op.h, dot-inl.h, la_op.h, pad-inl.h).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from onnx import TensorProto, numpy_helper

from adapters.mxnet.attrs import is_none
from adapters.mxnet.context import ConversionContext, Dim, TensorType, onnx_to_np
from adapters.mxnet.ops_tensor import DTYPES, INT64_MAX
from adapters.mxnet.registry import out, translator
from adapters.mxnet.symbol import MXNode
from bridge.errors import ExportError

INT64_MIN = int(np.iinfo(np.int64).min)

# a dim of a shape tensor under construction: a constant, or (tensor, axis) read from a tensor's shape
DimRef = int | tuple[str, int]


def dims_tensor(ctx: ConversionContext, dims: Sequence[DimRef], *, name: str) -> str:
    """An int64 1-D tensor of ``dims``; a constant when every dim is static, else Shape/Gather/Concat."""
    static: list[int] = []
    for d in dims:
        if isinstance(d, int):
            static.append(d)
            continue
        t, ax = d
        v = (ctx.shape(t) or ())[ax] if ctx.shape(t) is not None and ax < len(ctx.shape(t) or ()) else None
        if not isinstance(v, int):
            break
        static.append(v)
    else:
        return ctx.i64(static, f"{name}__dims")
    parts = []
    shapes: dict[str, str] = {}
    for i, d in enumerate(dims):
        if isinstance(d, int):
            parts.append(ctx.i64([d], f"{name}__d{i}"))
            continue
        t, ax = d
        if t not in shapes:
            shapes[t] = ctx.emit("Shape", [t], 1, name=f"{name}__shape")[0]
        parts.append(ctx.emit("Gather", [shapes[t], ctx.i64([ax], f"{name}__i{i}")], 1, name=f"{name}__dim", axis=0)[0])
    if not parts:
        return ctx.i64([], f"{name}__dims")
    return ctx.emit("Concat", parts, 1, name=f"{name}__dims", axis=0)[0]


def reshape_dims(ctx: ConversionContext, x: str, dims: Sequence[DimRef], *, name: str, output: str | None = None) -> str:
    """Reshape ``x`` to ``dims``; when ONNX's per-node inference loses the result's rank (a computed shape
    tensor), the type is declared from the dims themselves (symbolic names of dynamic axes included)."""
    r = ctx.emit("Reshape", [x, dims_tensor(ctx, dims, name=name)], [output] if output else 1, name=name)[0]
    known = ctx.shape(r)
    if known is None or None in known:
        resolved: list[Dim] = []
        for d in dims:
            src = ctx.shape(d[0]) if not isinstance(d, int) else None
            resolved.append(d if isinstance(d, int) else src[d[1]] if src is not None and d[1] < len(src) else None)
        ctx.types[r] = ctx.declared[r] = TensorType(ctx.elem(x), tuple(resolved))
    return r


def _axis(ctx: ConversionContext, node: MXNode, x: str, axis: int) -> int:
    rank = ctx.rank(x, node.name)
    if not -rank <= axis < rank:
        raise ExportError(f"node '{node.name}': axis {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def _flatten_axis(node: MXNode, default: int | None) -> int | None:
    """The ``axis`` attribute where an explicit 'None' means "flatten first" (ordering ops, argmax)."""
    raw = node.raw_attrs.get("axis")
    if raw is None:
        return default
    return None if is_none(raw) else node.attrs.optional_int("axis", default)


def _flat(ctx: ConversionContext, node: MXNode, x: str) -> str:
    return ctx.emit("Reshape", [x, ctx.i64([-1], f"{node.name}__flat")], 1, name=f"{node.name}__flatten")[0]


def _dtype(node: MXNode, key: str, default: str) -> int:
    name = node.attrs.optional_str(key, default) or default
    if name not in DTYPES:
        raise ExportError(f"node '{node.name}': {key}='{name}' is not supported")
    return DTYPES[name]


def _cast(ctx: ConversionContext, x: str, to: int, *, name: str, output: str | None = None) -> str:
    if output is None and ctx.elem(x) == to:
        return x
    return ctx.emit("Cast", [x], [output] if output else 1, name=name, to=to)[0]


# ---- sorting -----------------------------------------------------------------------------------
def _topk_core(ctx: ConversionContext, node: MXNode, x: str, axis: int | None, k: int,
               largest: bool) -> tuple[str, str, int]:
    """TopK along ``axis`` (None: of the flattened input); k < 1 means the whole axis (a full sort).
    Exact ties keep the lower index first in ONNX TopK; MXNet 1.9.1's topk (CPU, k < n) can put the higher one
    first (measured on CenterNet, bench/results/2026-11-28-gluoncv-fpn-pinning.md): pinning proves such orders."""
    if axis is None:
        x, axis = _flat(ctx, node, x), 0
    axis = _axis(ctx, node, x, axis)
    dim = (ctx.shape(x) or ())[axis]
    if isinstance(dim, int):
        if k > dim:
            raise ExportError(f"node '{node.name}': k={k} exceeds the axis length {dim}")
        kk = ctx.i64([dim if k < 1 else k], f"{node.name}__k")
    elif k >= 1:
        kk = ctx.i64([k], f"{node.name}__k")
    else:
        kk = dims_tensor(ctx, [(x, axis)], name=f"{node.name}__k")
    values, indices = ctx.emit("TopK", [x, kk], 2, name=f"{node.name}__topk", axis=axis, largest=int(largest),
                               sorted=1)
    return values, indices, axis


@translator("topk")
def topk(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # as in MXNet src/operator/tensor/ordering_op-inl.h (TopKParam): axis=-1 (None: flattened), k=1,
    # ret_typ indices | value | mask | both, is_ascend=False, dtype of the indices float32
    a = node.attrs
    x = inputs[0]
    ret = a.optional_str("ret_typ", "indices") or "indices"
    if ret not in ("indices", "value", "mask", "both"):
        raise ExportError(f"node '{node.name}': topk ret_typ='{ret}' is not supported")
    values, indices, axis = _topk_core(ctx, node, x, _flatten_axis(node, -1), a.optional_int("k", 1) or 0,
                                       not a.optional_bool("is_ascend", False))
    dtype = _dtype(node, "dtype", "float32")
    if ret == "value":
        return ctx.emit("Identity", [values], [out(ctx, node)], name=node.name)
    if ret == "indices":
        return [_cast(ctx, indices, dtype, name=node.name, output=out(ctx, node))]
    if ret == "both":
        v = ctx.emit("Identity", [values], [out(ctx, node, 0, 2)], name=node.name)[0]
        return [v, _cast(ctx, indices, dtype, name=f"{node.name}__indices", output=out(ctx, node, 1, 2))]
    # mask: 1 at the selected positions, 0 elsewhere, in the data dtype and shape
    src = x if _flatten_axis(node, -1) is not None else _flat(ctx, node, x)
    fill = numpy_helper.from_array(np.zeros(1, ctx.np_dtype(x)))
    zeros = ctx.emit("ConstantOfShape", [ctx.emit("Shape", [src], 1, name=f"{node.name}__shape")[0]], 1,
                     name=f"{node.name}__zeros", value=fill)[0]
    one = numpy_helper.from_array(np.ones(1, ctx.np_dtype(x)))
    ones = ctx.emit("ConstantOfShape", [ctx.emit("Shape", [indices], 1, name=f"{node.name}__kshape")[0]], 1,
                    name=f"{node.name}__ones", value=one)[0]
    if src is x:
        return ctx.emit("ScatterElements", [zeros, indices, ones], [out(ctx, node)], name=node.name, axis=axis)
    m = ctx.emit("ScatterElements", [zeros, indices, ones], 1, name=f"{node.name}__scatter", axis=axis)[0]
    return [reshape_dims(ctx, m, [(x, d) for d in range(ctx.rank(x, node.name))], name=node.name,
                         output=out(ctx, node))]


@translator("argsort")
def argsort(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # as in MXNet src/operator/tensor/ordering_op-inl.h (ArgSortParam): axis=-1 (None: flattened),
    # is_ascend=True, dtype float32; a full TopK
    a = node.attrs
    _, indices, _ = _topk_core(ctx, node, inputs[0], _flatten_axis(node, -1), 0, not a.optional_bool("is_ascend", True))
    return [_cast(ctx, indices, _dtype(node, "dtype", "float32"), name=node.name, output=out(ctx, node))]


@translator("sort")
def sort(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # as in ordering_op-inl.h (SortParam): axis=-1 (None: flattened), is_ascend=True; a full TopK's values
    values, _, _ = _topk_core(ctx, node, inputs[0], _flatten_axis(node, -1), 0, not node.attrs.optional_bool("is_ascend", True))
    return ctx.emit("Identity", [values], [out(ctx, node)], name=node.name)


@translator("argmax", "argmin")
def argmax(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # as in MXNet src/operator/tensor/broadcast_reduce_op_index.cc: the index in the input dtype; axis
    # None flattens (result shape (1,), or all ones of the input's rank with keepdims); ties give the first
    # index, as ONNX ArgMax/ArgMin do
    x = inputs[0]
    op = "ArgMax" if node.op == "argmax" else "ArgMin"
    axis = _flatten_axis(node, None)
    keepdims = node.attrs.optional_bool("keepdims", False)
    ones = None
    if axis is None:
        ones = [1] * ctx.rank(x, node.name) if keepdims else None
        x, axis, keepdims = _flat(ctx, node, x), 0, True
    i = ctx.emit(op, [x], 1, name=f"{node.name}__{op.lower()}", axis=axis, keepdims=int(keepdims))[0]
    if ones is not None:
        i = ctx.emit("Reshape", [i, ctx.i64(ones, f"{node.name}__ones")], 1, name=f"{node.name}__keep")[0]
    return [_cast(ctx, i, ctx.elem(inputs[0]), name=node.name, output=out(ctx, node))]


@translator("argmax_channel")
def argmax_channel(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # as in MXNet broadcast_reduce_op_index.cc: argmax over the last axis, in the input dtype
    i = ctx.emit("ArgMax", inputs[:1], 1, name=f"{node.name}__argmax", axis=-1, keepdims=0)[0]
    return [_cast(ctx, i, ctx.elem(inputs[0]), name=node.name, output=out(ctx, node))]


# ---- gathering ---------------------------------------------------------------------------------
def _as_index(ctx: ConversionContext, idx: str, *, name: str) -> str:
    # MXNet reads float indices with static_cast<int64> (truncation toward zero), as ONNX Cast does
    return _cast(ctx, idx, TensorProto.INT64, name=name)


@translator("take")
def take(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # as in MXNet src/operator/tensor/indexing_op.h (TakeParam, TakeRspKernel/Take): axis=0; mode clip
    # clamps to [0, N-1], wrap takes the index modulo N (non-negative), raise fails on any index outside
    # [0, N-1] - negative ones included; a Gather on N instead of a negative index fails the same way
    a = node.attrs
    data, idx = inputs[:2]
    axis = _axis(ctx, node, data, a.optional_int("axis", 0) or 0)
    mode = a.optional_str("mode", "clip") or "clip"
    i = _as_index(ctx, idx, name=f"{node.name}__index")
    n = dims_tensor(ctx, [(data, axis)], name=f"{node.name}__n")
    zero = ctx.i64([0], f"{node.name}__zero")
    if mode == "clip":
        hi = ctx.emit("Sub", [n, ctx.i64([1], f"{node.name}__one")], 1, name=f"{node.name}__last")[0]
        i = ctx.emit("Min", [ctx.emit("Max", [i, zero], 1, name=f"{node.name}__lo")[0], hi], 1,
                     name=f"{node.name}__hi")[0]
    elif mode == "wrap":
        i = ctx.emit("Mod", [i, n], 1, name=f"{node.name}__wrap", fmod=0)[0]  # sign of the divisor
    elif mode == "raise":
        neg = ctx.emit("Less", [i, zero], 1, name=f"{node.name}__neg")[0]
        i = ctx.emit("Where", [neg, n, i], 1, name=f"{node.name}__raise")[0]
    else:
        raise ExportError(f"node '{node.name}': take mode='{mode}' is not supported")
    return ctx.emit("Gather", [data, i], [out(ctx, node)], name=node.name, axis=axis)


def _bounded_index(ctx: ConversionContext, node: MXNode, idx: str, n: str, mode: str) -> str:
    """Truncated int64 indices clipped to [0, n-1] (clip) or taken modulo n (wrap)."""
    i = _as_index(ctx, idx, name=f"{node.name}__index")
    if mode == "wrap":
        return ctx.emit("Mod", [i, n], 1, name=f"{node.name}__wrap", fmod=0)[0]
    if mode != "clip":
        raise ExportError(f"node '{node.name}': {node.op} mode='{mode}' is not supported")
    hi = ctx.emit("Sub", [n, ctx.i64([1], f"{node.name}__one")], 1, name=f"{node.name}__last")[0]
    lo = ctx.emit("Max", [i, ctx.i64([0], f"{node.name}__zero")], 1, name=f"{node.name}__lo")[0]
    return ctx.emit("Min", [lo, hi], 1, name=f"{node.name}__hi")[0]


@translator("pick")
def pick(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # as in MXNet broadcast_reduce_op.h (PickParam): out[..] = data[.., index[..], ..] along axis (-1),
    # index shaped like data without that axis; mode clip (default) or wrap; keepdims keeps a 1 there
    a = node.attrs
    data, idx = inputs[:2]
    raw = node.raw_attrs.get("axis")
    if raw is not None and is_none(raw):
        raise ExportError(f"node '{node.name}': pick with axis=None (MXNet 1.9 rejects it too)")
    axis = _axis(ctx, node, data, a.optional_int("axis", -1) or 0 if raw is not None else -1)
    n = dims_tensor(ctx, [(data, axis)], name=f"{node.name}__n")
    i = _bounded_index(ctx, node, idx, n, a.optional_str("mode", "clip") or "clip")
    if ctx.rank(idx, node.name) < ctx.rank(data, node.name):
        i = ctx.unsqueeze(i, [axis], name=f"{node.name}__at_axis")
    keep = a.optional_bool("keepdims", False)
    g = ctx.emit("GatherElements", [data, i], [out(ctx, node)] if keep else 1, name=node.name if keep else
                 f"{node.name}__gather", axis=axis)[0]
    return [g] if keep else [ctx.squeeze(g, [axis], name=node.name, output=out(ctx, node))]


@translator("batch_take")
def batch_take(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # as in indexing_op.h (BatchTake, deprecated for pick): a (N, M), indices (N,) -> a[i, clip(indices[i])]
    a, idx = inputs[:2]
    n = dims_tensor(ctx, [(a, 1)], name=f"{node.name}__n")
    i = ctx.unsqueeze(_bounded_index(ctx, node, idx, n, "clip"), [1], name=f"{node.name}__col")
    g = ctx.emit("GatherElements", [a, i], 1, name=f"{node.name}__gather", axis=1)[0]
    return [ctx.squeeze(g, [1], name=node.name, output=out(ctx, node))]


@translator("diag")
def diag(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # as in MXNet src/operator/tensor/diag_op-inl.h: a 1-D input becomes the square matrix with it on
    # diagonal k; otherwise diagonal k of the (axis1, axis2) planes, appended as the last axis (numpy's
    # order). Built from constant index tables, so the sizes involved must be static.
    a = node.attrs
    x = inputs[0]
    k = a.optional_int("k", 0) or 0
    shape = ctx.static_shape(x, node.name)
    if len(shape) == 1:
        n = shape[0]
        size = n + abs(k)
        table = np.full((size, size), n, np.int64)  # n points at an appended zero
        for i in range(n):
            table[i - min(k, 0), i + max(k, 0)] = i
        zero = ctx.const(np.zeros(1, ctx.np_dtype(x)), f"{node.name}__zero")
        padded = ctx.emit("Concat", [x, zero], 1, name=f"{node.name}__padded", axis=0)[0]
        return ctx.emit("Gather", [padded, ctx.const(table, f"{node.name}__table")], [out(ctx, node)],
                        name=node.name, axis=0)
    rank = len(shape)
    a1 = _axis(ctx, node, x, a.optional_int("axis1", 0) or 0)
    a2 = _axis(ctx, node, x, a.optional_int("axis2", 1) or 0)
    n1, n2 = shape[a1], shape[a2]
    rows = range(max(0, -k), min(n1, n2 - k))
    if not rows:
        raise ExportError(f"node '{node.name}': diagonal k={k} of a {n1}x{n2} plane is empty")
    perm = [d for d in range(rank) if d not in (a1, a2)] + [a1, a2]
    t = ctx.emit("Transpose", [x], 1, name=f"{node.name}__planes", perm=perm)[0]
    flat = ctx.emit("Reshape", [t, ctx.i64([0] * (rank - 2) + [-1], f"{node.name}__flat")], 1,
                    name=f"{node.name}__flatten")[0]
    picks = ctx.i64([r * n2 + r + k for r in rows], f"{node.name}__picks")
    return ctx.emit("Gather", [flat, picks], [out(ctx, node)], name=node.name, axis=rank - 2)


@translator("gather_nd")
def gather_nd(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # as in MXNet indexing_op.h (GatherND): indices (M, Y0..) index data's first M axes along axis 0;
    # ONNX GatherND wants them last. Negative indices wrap in both.
    data, idx = inputs[:2]
    r = ctx.rank(idx, node.name)
    i = _as_index(ctx, idx, name=f"{node.name}__index")
    if r > 1:
        i = ctx.emit("Transpose", [i], 1, name=f"{node.name}__last", perm=[*range(1, r), 0])[0]
    return ctx.emit("GatherND", [data, i], [out(ctx, node)], name=node.name)


@translator("one_hot")
def one_hot(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # as in MXNet indexing_op.h (one_hot): a row of off_value with on_value at the (truncated) index;
    # indices outside [0, depth) - negative ones included - give all off_value (ONNX OneHot would wrap
    # negatives), so built as Equal against 0..depth-1
    a = node.attrs
    depth = a.required_int("depth")
    dtype = _dtype(node, "dtype", "float32")
    np_dtype = onnx_to_np(dtype)
    on = ctx.const(np.asarray(float(a.optional_str("on_value", "1") or 1)).astype(np_dtype), f"{node.name}__on")
    off = ctx.const(np.asarray(float(a.optional_str("off_value", "0") or 0)).astype(np_dtype), f"{node.name}__off")
    i = ctx.unsqueeze(_as_index(ctx, inputs[0], name=f"{node.name}__index"), [-1], name=f"{node.name}__col")
    hit = ctx.emit("Equal", [i, ctx.i64(range(depth), f"{node.name}__range")], 1, name=f"{node.name}__eq")[0]
    return ctx.emit("Where", [hit, on, off], [out(ctx, node)], name=node.name)


# ---- layout ------------------------------------------------------------------------------------
@translator("reverse", "flip")
def reverse(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    x = inputs[0]
    axes = sorted({_axis(ctx, node, x, d) for d in node.attrs.optional_ints("axis")})
    if not axes:
        return ctx.emit("Identity", [x], [out(ctx, node)], name=node.name)
    n = len(axes)
    args = [x, ctx.i64([-1] * n, f"{node.name}__starts"), ctx.i64([INT64_MIN] * n, f"{node.name}__ends"),
            ctx.i64(axes, f"{node.name}__axes"), ctx.i64([-1] * n, f"{node.name}__steps")]
    return ctx.emit("Slice", args, [out(ctx, node)], name=node.name)


@translator("SwapAxis", "swapaxes")
def SwapAxis(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # as in MXNet src/operator/swapaxis-inl.h: dim1=0, dim2=0
    x = inputs[0]
    rank = ctx.rank(x, node.name)
    d1 = _axis(ctx, node, x, node.attrs.optional_int("dim1", 0) or 0)
    d2 = _axis(ctx, node, x, node.attrs.optional_int("dim2", 0) or 0)
    perm = list(range(rank))
    perm[d1], perm[d2] = perm[d2], perm[d1]
    return ctx.emit("Transpose", [x], [out(ctx, node)], name=node.name, perm=perm)


@translator("stack")
def stack(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # axis counts in the output (rank + 1), as in MXNet matrix_op-inl.h (StackOpShape)
    axis = node.attrs.optional_int("axis", 0) or 0
    rank = ctx.rank(inputs[0], node.name) + 1
    if not -rank <= axis < rank:
        raise ExportError(f"node '{node.name}': stack axis {axis} is out of range for output rank {rank}")
    axis = axis + rank if axis < 0 else axis
    parts = [ctx.unsqueeze(x, [axis], name=f"{node.name}__unsqueeze{i}") for i, x in enumerate(inputs)]
    return ctx.emit("Concat", parts, [out(ctx, node)], name=node.name, axis=axis)


@translator("_split_v2")
def _split_v2(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # as in MXNet matrix_op-inl.h (SplitParam): ``indices`` are the start of each part (the Python
    # front end prepends 0), or ``sections`` equal parts; squeeze_axis drops a size-1 axis
    a = node.attrs
    x = inputs[0]
    axis = _axis(ctx, node, x, a.optional_int("axis", 1) or 0)
    sections = a.optional_int("sections", 0) or 0
    if sections > 0:
        dim = ctx.static_dims(x, node.name, [axis])[0]
        if dim % sections:
            raise ExportError(f"node '{node.name}': axis length {dim} does not split into {sections} sections")
        starts = [i * (dim // sections) for i in range(sections)]
    else:
        starts = list(a.optional_ints("indices"))
        if not starts:
            raise ExportError(f"node '{node.name}': _split_v2 needs indices or sections")
    n = len(starts)
    ends = [*starts[1:], INT64_MAX]
    squeeze = a.optional_bool("squeeze_axis", False)
    outs = []
    for k, (b, e) in enumerate(zip(starts, ends, strict=True)):
        name = out(ctx, node, k, n)
        args = [x, ctx.i64([b], f"{node.name}__b{k}"), ctx.i64([e], f"{node.name}__e{k}"),
                ctx.i64([axis], f"{node.name}__axis")]
        part = ctx.emit("Slice", args, [name] if not squeeze else 1, name=node.name)[0]
        outs.append(ctx.squeeze(part, [axis], name=node.name, output=name) if squeeze else part)
    return outs


@translator("Pad", "pad")
def Pad(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # as in MXNet src/operator/pad-inl.h: pad_width = (before0, after0, before1, after1, ...), modes
    # constant (constant_value cast to the data type) / edge / reflect, as ONNX Pad's modes
    a = node.attrs
    x = inputs[0]
    mode = a.optional_str("mode", "constant") or "constant"
    if mode not in ("constant", "edge", "reflect"):
        raise ExportError(f"node '{node.name}': Pad mode='{mode}' is not supported")
    width = list(a.optional_ints("pad_width"))
    rank = ctx.rank(x, node.name)
    if len(width) != 2 * rank:
        raise ExportError(f"node '{node.name}': pad_width has {len(width)} values for a rank-{rank} input")
    pads = ctx.i64(width[0::2] + width[1::2], f"{node.name}__pads")
    args = [x, pads]
    if mode == "constant":
        value = float(a.optional_str("constant_value", "0") or 0)
        args.append(ctx.scalar(value, x, f"{node.name}__value"))
    return ctx.emit("Pad", args, [out(ctx, node)], name=node.name, mode=mode)


_NATIVE_SPACE_DEPTH = {TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.UINT8}


def _space_depth_by_transpose(ctx: ConversionContext, node: MXNode, x: str, to_space: bool) -> list[str]:
    """The same data movement as Reshape -> Transpose -> Reshape (any dtype; C, H, W must be static)."""
    b = node.attrs.required_int("block_size")
    shape = ctx.shape(x)
    if shape is None or len(shape) != 4 or not all(isinstance(d, int) for d in shape[1:]):
        raise ExportError(f"node '{node.name}': {node.op} of {ctx.np_dtype(x).name} data needs static C, H, W "
                          f"(onnxruntime has no {node.op} kernel for that type), got {shape}")
    c, h, w = (int(d) for d in shape[1:])  # type: ignore[arg-type]
    if to_space:
        first, perm, last = [-1, b, b, c // (b * b), h, w], [0, 3, 4, 1, 5, 2], [-1, c // (b * b), h * b, w * b]
    else:
        first, perm, last = [-1, c, h // b, b, w // b, b], [0, 3, 5, 1, 2, 4], [-1, c * b * b, h // b, w // b]
    y = ctx.emit("Reshape", [x, ctx.i64(first, f"{node.name}__split")], 1, name=f"{node.name}__split")[0]
    y = ctx.emit("Transpose", [y], 1, name=f"{node.name}__move", perm=perm)[0]
    return ctx.emit("Reshape", [y, ctx.i64(last, f"{node.name}__merge")], [out(ctx, node)], name=node.name)


@translator("depth_to_space")
def depth_to_space(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # MXNet's order (matrix_op-inl.h DepthToSpaceOpForward: reshape (N, b, b, C', H, W)) is ONNX's DCR
    if ctx.elem(inputs[0]) not in _NATIVE_SPACE_DEPTH:
        return _space_depth_by_transpose(ctx, node, inputs[0], True)
    return ctx.emit("DepthToSpace", inputs[:1], [out(ctx, node)], name=node.name,
                    blocksize=node.attrs.required_int("block_size"), mode="DCR")


@translator("space_to_depth")
def space_to_depth(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    if ctx.elem(inputs[0]) not in _NATIVE_SPACE_DEPTH:
        return _space_depth_by_transpose(ctx, node, inputs[0], False)
    return ctx.emit("SpaceToDepth", inputs[:1], [out(ctx, node)], name=node.name,
                    blocksize=node.attrs.required_int("block_size"))


# ---- broadcasting and shapes -------------------------------------------------------------------
@translator("broadcast_to")
def broadcast_to(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # a 0 in ``shape`` keeps the input dim (broadcast_reduce_op.h BroadcastToShape); Expand's
    # two-way broadcast keeps it for a 1 in the target
    shape = [1 if d == 0 else d for d in node.attrs.optional_ints("shape")]
    return ctx.emit("Expand", [inputs[0], ctx.i64(shape, f"{node.name}__shape")], [out(ctx, node)], name=node.name)


@translator("broadcast_axis", "broadcast_axes")
def broadcast_axis(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    x = inputs[0]
    rank = ctx.rank(x, node.name)
    target = [1] * rank
    for ax, size in zip(node.attrs.optional_ints("axis"), node.attrs.optional_ints("size"), strict=True):
        target[_axis(ctx, node, x, ax)] = size
    return ctx.emit("Expand", [x, ctx.i64(target, f"{node.name}__shape")], [out(ctx, node)], name=node.name)


@translator("broadcast_like")
def broadcast_like(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # lhs_axes / rhs_axes: only those axes of lhs take the size of rhs's (broadcast_reduce_op.h)
    x, like = inputs[:2]
    a = node.attrs
    if "lhs_axes" not in a and "rhs_axes" not in a:
        shape = dims_tensor(ctx, [(like, d) for d in range(ctx.rank(like, node.name))], name=node.name)
    else:
        rank = ctx.rank(x, node.name)
        target: list[DimRef] = [1] * rank
        for lax, rax in zip(a.optional_ints("lhs_axes"), a.optional_ints("rhs_axes"), strict=True):
            target[_axis(ctx, node, x, lax)] = (like, _axis(ctx, node, like, rax))
        shape = dims_tensor(ctx, target, name=node.name)
    return ctx.emit("Expand", [x, shape], [out(ctx, node)], name=node.name)


@translator("reshape_like")
def reshape_like(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # as in MXNet elemwise_unary_op_basic.cc (ReshapeLikeShapeCompute): lhs[:lhs_begin] +
    # rhs[rhs_begin:rhs_end] + lhs[lhs_end:]; None = the whole range
    x, like = inputs[:2]
    a = node.attrs
    lr, rr = ctx.rank(x, node.name), ctx.rank(like, node.name)

    def bound(key: str, rank: int, default: int) -> int:
        v = a.optional_int(key, None)
        return default if v is None else (v + rank if v < 0 else v)

    lb, le = bound("lhs_begin", lr, 0), bound("lhs_end", lr, lr)
    rb, re_ = bound("rhs_begin", rr, 0), bound("rhs_end", rr, rr)
    dims: list[DimRef] = [(x, d) for d in range(lb)]
    dims.extend((like, d) for d in range(rb, re_))
    dims.extend((x, d) for d in range(le, lr))
    return [reshape_dims(ctx, x, dims, name=node.name, output=out(ctx, node))]


@translator("shape_array")
def shape_array(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    return ctx.emit("Shape", inputs[:1], [out(ctx, node)], name=node.name)


@translator("size_array")
def size_array(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    s = ctx.emit("Size", inputs[:1], 1, name=f"{node.name}__size")[0]
    return ctx.emit("Reshape", [s, ctx.i64([1], f"{node.name}__one")], [out(ctx, node)], name=node.name)


# ---- products and norms ------------------------------------------------------------------------
def _swap_last(ctx: ConversionContext, x: str, *, name: str) -> str:
    r = ctx.rank(x, name)
    return ctx.emit("Transpose", [x], 1, name=name, perm=[*range(r - 2), r - 1, r - 2])[0]


@translator("dot")
def dot(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # as in MXNet src/operator/tensor/dot-inl.h (DotShape): a is read as a matrix (prod(a.shape[:-1]), K)
    # - transpose_a: (K, prod(a.shape[1:])) transposed - and b as (K, prod(b.shape[1:])) - transpose_b:
    # (prod(b.shape[:-1]), K) transposed; the result has shape a_rest + b_rest, or (1,) when both are 1-D
    a, b = inputs[:2]
    ta, tb = node.attrs.optional_bool("transpose_a", False), node.attrs.optional_bool("transpose_b", False)
    ra, rb = ctx.rank(a, node.name), ctx.rank(b, node.name)
    if ra == 2 and rb == 2:
        a2 = _swap_last(ctx, a, name=f"{node.name}__ta") if ta else a
        b2 = _swap_last(ctx, b, name=f"{node.name}__tb") if tb else b
        return ctx.emit("MatMul", [a2, b2], [out(ctx, node)], name=node.name)
    a_rest: list[DimRef] = [(a, d) for d in (range(1, ra) if ta else range(ra - 1))]
    b_rest: list[DimRef] = [(b, d) for d in (range(rb - 1) if tb else range(1, rb))]
    ka: DimRef = (a, 0) if ta else (a, ra - 1)
    kb: DimRef = (b, rb - 1) if tb else (b, 0)
    a2 = ctx.emit("Reshape", [a, dims_tensor(ctx, [ka, -1] if ta else [-1, ka], name=f"{node.name}__a2")], 1,
                  name=f"{node.name}__a2")[0]
    b2 = ctx.emit("Reshape", [b, dims_tensor(ctx, [-1, kb] if tb else [kb, -1], name=f"{node.name}__b2")], 1,
                  name=f"{node.name}__b2")[0]
    if ta:
        a2 = _swap_last(ctx, a2, name=f"{node.name}__ta")
    if tb:
        b2 = _swap_last(ctx, b2, name=f"{node.name}__tb")
    m = ctx.emit("MatMul", [a2, b2], 1, name=f"{node.name}__matmul")[0]
    return [reshape_dims(ctx, m, (a_rest + b_rest) or [1], name=node.name, output=out(ctx, node))]


@translator("batch_dot")
def batch_dot(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # as in dot-inl.h (BatchDotShape): matrices in the last two axes, equal batch axes before them
    a, b = inputs[:2]
    if node.attrs.optional_bool("transpose_a", False):
        a = _swap_last(ctx, a, name=f"{node.name}__ta")
    if node.attrs.optional_bool("transpose_b", False):
        b = _swap_last(ctx, b, name=f"{node.name}__tb")
    return ctx.emit("MatMul", [a, b], [out(ctx, node)], name=node.name)


@translator("_linalg_gemm2", "linalg_gemm2")
def _linalg_gemm2(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # as in MXNet src/operator/tensor/la_op.h (LaMatrixMultParam): alpha * op(A) op(B) with matrices
    # in axes (axis, -1), axis=-2; the other axes are batch axes (moved in front, and back after)
    at = node.attrs
    a, b = inputs[:2]
    rank = ctx.rank(a, node.name)
    axis = _axis(ctx, node, a, at.optional_int("axis", -2) or -2)
    perm = None
    if axis != rank - 2:
        perm = [d for d in range(rank - 1) if d != axis] + [axis, rank - 1]
        a = ctx.emit("Transpose", [a], 1, name=f"{node.name}__pa", perm=perm)[0]
        b = ctx.emit("Transpose", [b], 1, name=f"{node.name}__pb", perm=perm)[0]
    if at.optional_bool("transpose_a", False):
        a = _swap_last(ctx, a, name=f"{node.name}__ta")
    if at.optional_bool("transpose_b", False):
        b = _swap_last(ctx, b, name=f"{node.name}__tb")
    alpha = at.optional_float("alpha", 1.0)
    last = perm is None and alpha == 1.0
    m = ctx.emit("MatMul", [a, b], [out(ctx, node)] if last else 1, name=node.name if last else f"{node.name}__mm")[0]
    if last:
        return [m]
    if alpha != 1.0:
        done = perm is None
        m = ctx.emit("Mul", [m, ctx.scalar(alpha, m, f"{node.name}__alpha")], [out(ctx, node)] if done else 1,
                     name=node.name if done else f"{node.name}__alpha")[0]
        if done:
            return [m]
    assert perm is not None
    inverse = [perm.index(d) for d in range(rank)]
    return ctx.emit("Transpose", [m], [out(ctx, node)], name=node.name, perm=inverse)


@translator("norm")
def norm(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # as in MXNet broadcast_reduce_op.h (NormParam): ord 1 (sum |x|) or 2 (sqrt sum x^2), axis None =
    # all axes with result shape (1,), keepdims, out_dtype; integer inputs reduce in double and are
    # truncated back to the integer type
    a = node.attrs
    x = inputs[0]
    ord_ = a.optional_int("ord", 2) or 2
    if ord_ not in (1, 2):
        raise ExportError(f"node '{node.name}': norm ord={ord_} is not supported (MXNet accepts 1 and 2)")
    rank = ctx.rank(x, node.name)
    axes = [_axis(ctx, node, x, d) for d in a.optional_ints("axis")] or None
    keepdims = a.optional_bool("keepdims", False)
    src_elem = ctx.elem(x)
    out_elem = _dtype(node, "out_dtype", "float32") if "out_dtype" in a else src_elem
    is_float = ctx.np_dtype(x).kind == "f"
    if not is_float and ord_ == 2:
        ctx.warn(f"node '{node.name}': MXNet's L2 norm of {ctx.np_dtype(x).name} data runs its scaled sum of squares "
                 "(mshadow_op.h nrm2) in integer arithmetic, so (abs / scale) truncates and e.g. norm([3, 4]) is 4 "
                 "there; the converted model returns the exact norm truncated to the integer type (5)")
    # out_dtype is the accumulation type too (MXNet 1.9.1's CPU kernel rejects any out_dtype other than the
    # input's at run time, so that form is checked against numpy only)
    y = x if is_float and out_elem == src_elem else _cast(
        ctx, x, out_elem if onnx_to_np(out_elem).kind == "f" else TensorProto.DOUBLE, name=f"{node.name}__acc")
    op = "ReduceL1" if ord_ == 1 else "ReduceL2"
    full = axes is None or len(set(axes)) == rank
    r = ctx.reduce(op, y, axes, keepdims, name=f"{node.name}__reduce")
    if full and not keepdims:  # legacy ops never return 0-d arrays
        r = ctx.emit("Reshape", [r, ctx.i64([1], f"{node.name}__one")], 1, name=f"{node.name}__1d")[0]
    return [ctx.emit("Cast", [r], [out(ctx, node)], name=node.name, to=out_elem)[0]]
