"""Translators for MXNet's shape and indexing ops (Reshape, transpose, slicing, tiling, reductions...).

MXNet's Reshape special codes (0, -1, -2, -3, -4, reverse) are resolved here against the tracked
input shape, as in MXNet src/operator/tensor/matrix_op-inl.h (InferReshapeShape); dims that depend on
a dynamic axis are read at run time with Shape/Gather.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from adapters.mxnet.context import ConversionContext, Dim, ShapeExpr, TensorType
from adapters.mxnet.registry import out, translator
from adapters.mxnet.symbol import MXNode
from bridge.errors import ExportError

INT64_MAX = np.iinfo(np.int64).max

# MXNet dtype names -> ONNX element types
DTYPES = {
    "float32": TensorProto.FLOAT, "float64": TensorProto.DOUBLE, "float16": TensorProto.FLOAT16,
    "uint8": TensorProto.UINT8, "int8": TensorProto.INT8, "int32": TensorProto.INT32,
    "int64": TensorProto.INT64, "bool": TensorProto.BOOL,
}


def resolve_reshape(src: list[Dim], spec: list[int], reverse: bool, node: str) -> list[ShapeExpr]:
    """MXNet's reshape codes as ShapeExprs over ``src`` dims; an inferred dim is ShapeExpr(const=-1)."""
    n = len(src)
    idx = list(range(n))
    if reverse:
        idx, spec = idx[::-1], spec[::-1]
    res: list[ShapeExpr] = []
    si = 0
    i = 0
    inferred = False
    while i < len(spec):
        p = spec[i]
        if p == 0:
            if si >= n:
                raise ExportError(f"node '{node}': Reshape code 0 at position {i} has no input dim to copy")
            res.append(ShapeExpr(dims=[idx[si]]))
            si += 1
        elif p == -1:
            if inferred:
                raise ExportError(f"node '{node}': Reshape infers more than one dim")
            inferred = True
            res.append(ShapeExpr(const=-1))
            si += 1
        elif p == -2:
            while si < n:
                res.append(ShapeExpr(dims=[idx[si]]))
                si += 1
        elif p == -3:
            if si + 1 >= n:
                raise ExportError(f"node '{node}': Reshape code -3 needs two input dims")
            res.append(ShapeExpr(dims=[idx[si], idx[si + 1]]))
            si += 2
        elif p == -4:
            if i + 2 >= len(spec) or si >= n:
                raise ExportError(f"node '{node}': Reshape code -4 needs two following values and an input dim")
            d0 = src[idx[si]]
            d1, d2 = spec[i + 1], spec[i + 2]
            if d1 == -1 and d2 == -1:
                raise ExportError(f"node '{node}': Reshape -4 split dims cannot both be -1")
            if -1 in (d1, d2):
                if not isinstance(d0, int):
                    raise ExportError(f"node '{node}': Reshape -4 on a dynamic dim needs both split sizes")
                d1, d2 = (d0 // d2, d2) if d1 == -1 else (d1, d0 // d1)
            res += [ShapeExpr(const=d1), ShapeExpr(const=d2)]
            si += 1
            i += 2
        elif p > 0:
            res.append(ShapeExpr(const=p))
            si += 1
        else:
            raise ExportError(f"node '{node}': unknown Reshape code {p}")
        i += 1
    return res[::-1] if reverse else res


@translator("Reshape")
def Reshape(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    a = node.attrs
    x = inputs[0]
    src = list(ctx.shape(x) or [])
    if "shape" in a and a.optional_ints("shape"):
        exprs = resolve_reshape(src, list(a.optional_ints("shape")), a.optional_bool("reverse", False), node.name)
    elif "target_shape" in a:
        # deprecated form: 0 in target_shape means "infer"; keep_highest keeps the first input dim
        tgt = [-1 if d == 0 else d for d in a.optional_ints("target_shape")]
        exprs = [ShapeExpr(const=d) for d in tgt]
        if a.optional_bool("keep_highest", False):
            exprs = [ShapeExpr(dims=[0]), *exprs]
    else:
        raise ExportError(f"node '{node.name}': Reshape without a shape")
    shape = ctx.shape_of(exprs, x, name=node.name)
    return ctx.emit("Reshape", [x, shape], [out(ctx, node)], name=node.name)


@translator("transpose")
def transpose(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    axes = list(node.attrs.optional_ints("axes"))
    return ctx.emit("Transpose", inputs[:1], [out(ctx, node)], name=node.name, perm=axes or None)


@translator("Concat", "concat")
def Concat(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    return ctx.emit("Concat", inputs, [out(ctx, node)], name=node.name, axis=node.attrs.optional_int("dim", 1))


@translator("SliceChannel", "split")
def SliceChannel(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # as in MXNet src/operator/slice_channel-inl.h: equal parts along axis (default 1); outputs are
    # named output0..output{n-1}; squeeze_axis drops the (size-1) axis
    a = node.attrs
    x = inputs[0]
    n = a.required_int("num_outputs")
    axis = a.optional_int("axis", 1) or 0
    rank = ctx.rank(x, node.name)
    axis = axis + rank if axis < 0 else axis
    names = [ctx.reserve(f"{node.name}_output{i}") for i in range(n)]
    squeeze = a.optional_bool("squeeze_axis", False)
    parts = names if not squeeze else n
    dim = (ctx.shape(x) or [None] * rank)[axis]
    if isinstance(dim, int):
        split = ctx.i64([dim // n] * n, f"{node.name}__split")
        outs = ctx.emit("Split", [x, split], parts, name=node.name if not squeeze else f"{node.name}__split",
                        axis=axis)
    elif ctx.opset >= 18:
        outs = ctx.emit("Split", [x], parts, name=node.name, axis=axis, num_outputs=n)
    else:  # before Split-18's num_outputs: the sizes [dim / n] * n computed from the input's shape
        shp = ctx.emit("Shape", [x], 1, name=f"{node.name}__shape")[0]
        size = ctx.emit("Gather", [shp, ctx.i64([axis], f"{node.name}__axis")], 1, name=f"{node.name}__dim",
                        axis=0)[0]
        part = ctx.emit("Div", [size, ctx.i64([n], f"{node.name}__n")], 1, name=f"{node.name}__part")[0]
        sizes = ctx.emit("Tile", [part, ctx.i64([n], f"{node.name}__reps")], 1, name=f"{node.name}__sizes")[0]
        outs = ctx.emit("Split", [x, sizes], parts, name=node.name if not squeeze else f"{node.name}__split",
                        axis=axis)
    if not squeeze:
        return outs
    return [ctx.squeeze(o, [axis], name=node.name, output=nm) for o, nm in zip(outs, names, strict=True)]


@translator("slice_axis")
def slice_axis(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    a = node.attrs
    axis = a.required_int("axis")
    begin = a.optional_int("begin", 0) or 0
    end = a.optional_int("end", None)
    args = [inputs[0], ctx.i64([begin], f"{node.name}__starts"),
            ctx.i64([INT64_MAX if end is None else end], f"{node.name}__ends"), ctx.i64([axis], f"{node.name}__axes")]
    return ctx.emit("Slice", args, [out(ctx, node)], name=node.name)


@translator("slice")
def slice_(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # begin/end/step tuples may hold None (whole axis, direction given by step)
    from adapters.mxnet.attrs import parse_int, split_tuple

    a = node.attrs

    def items(key: str) -> list[int | None]:
        text = a.optional_str(key)
        return [None if p == "None" else parse_int(p, node=node.name, key=key) for p in split_tuple(text or "()")]

    begin, end, step = items("begin"), items("end"), items("step")
    step += [None] * (len(begin) - len(step))
    starts, ends, steps = [], [], []
    for b, e, s in zip(begin, end, step, strict=True):
        st = 1 if s is None else s
        starts.append((0 if st > 0 else INT64_MAX) if b is None else b)
        ends.append((INT64_MAX if st > 0 else -INT64_MAX) if e is None else e)
        steps.append(st)
    args = [inputs[0], ctx.i64(starts, f"{node.name}__starts"), ctx.i64(ends, f"{node.name}__ends"),
            ctx.i64(range(len(starts)), f"{node.name}__axes"), ctx.i64(steps, f"{node.name}__steps")]
    return ctx.emit("Slice", args, [out(ctx, node)], name=node.name)


@translator("slice_like")
def slice_like(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # as in MXNet src/operator/tensor/matrix_op-inl.h (SliceLike): crop data to shape_like's size on
    # ``axes`` (all axes when empty), starting at 0
    x, like = inputs[0], inputs[1]
    axes = list(node.attrs.optional_ints("axes"))
    rank = ctx.rank(x, node.name)
    axes = [d + rank if d < 0 else d for d in axes] or list(range(rank))
    like_shape = ctx.shape(like)
    if like_shape is not None and all(isinstance(like_shape[d], int) for d in axes):
        ends = ctx.i64([int(like_shape[d]) for d in axes], f"{node.name}__ends")  # type: ignore[arg-type]
    else:
        shp = ctx.emit("Shape", [like], 1, name=f"{node.name}__shape")[0]
        ends = ctx.emit("Gather", [shp, ctx.i64(axes, f"{node.name}__axes_idx")], 1, name=f"{node.name}__ends",
                        axis=0)[0]
    args = [x, ctx.i64([0] * len(axes), f"{node.name}__starts"), ends, ctx.i64(axes, f"{node.name}__axes")]
    return ctx.emit("Slice", args, [out(ctx, node)], name=node.name)


@translator("expand_dims")
def expand_dims(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    return [ctx.unsqueeze(inputs[0], [node.attrs.required_int("axis")], name=node.name, output=out(ctx, node))]


@translator("squeeze")
def squeeze(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # as in MXNet src/operator/tensor/matrix_op-inl.h (SqueezeShape): size-1 axes (all, or the given ones) are
    # dropped, but a result with no axis left is shape (1,), never 0-d (outside MXNet's numpy mode)
    x = inputs[0]
    axes = list(node.attrs.optional_ints("axis"))
    shape = ctx.shape(x)
    if not axes and shape is not None and all(isinstance(d, int) for d in shape):
        axes = [i for i, d in enumerate(shape) if d == 1]
        if not axes:
            return ctx.emit("Identity", [x], [out(ctx, node)], name=node.name)
    if axes and shape is not None:
        if len({a % len(shape) for a in axes}) == len(shape):  # every axis goes: MXNet keeps one
            return ctx.emit("Reshape", [x, ctx.i64([1], f"{node.name}__one")], [out(ctx, node)], name=node.name)
        return [ctx.squeeze(x, axes, name=node.name, output=out(ctx, node))]
    if axes:
        return [ctx.squeeze(x, axes, name=node.name, output=out(ctx, node))]
    # no axis given and some dims known only at run time: which axes go (and so the result's rank) depends on
    # their run-time sizes, and an ONNX graph output needs a fixed rank
    unknown = [i for i, d in enumerate(shape or ()) if not isinstance(d, int)]
    dims = f"dims {unknown}" if unknown else "dims (its rank is unknown)"
    raise ExportError(f"node '{node.name}' (squeeze without axis): the result's rank depends on the run-time size of "
                      f"{dims} of '{x}' (MXNet drops every axis of size 1); give the squeeze an axis, or pass a static "
                      "--input shape for those dims")


@translator("tile")
def tile(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # as in MXNet src/operator/tensor/matrix_op-inl.h (TileOpShape): short reps are left-padded with 1,
    # a short input is promoted by prepending size-1 axes
    x = inputs[0]
    reps = list(node.attrs.optional_ints("reps"))
    rank = ctx.rank(x, node.name)
    if len(reps) > rank:
        x = ctx.unsqueeze(x, list(range(len(reps) - rank)), name=f"{node.name}__promote")
    reps = [1] * (max(rank, len(reps)) - len(reps)) + reps
    return ctx.emit("Tile", [x, ctx.i64(reps, f"{node.name}__reps")], [out(ctx, node)], name=node.name)


@translator("repeat")
def repeat(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # np.repeat semantics (MXNet src/operator/tensor/matrix_op-inl.h): each element repeated along axis;
    # no axis = repeat the flattened input. Built as Unsqueeze -> Tile -> Reshape.
    a = node.attrs
    x = inputs[0]
    r = a.required_int("repeats")
    axis = a.optional_int("axis", None)
    if axis is None:
        x = ctx.emit("Reshape", [x, ctx.i64([-1], f"{node.name}__flat")], 1, name=f"{node.name}__flatten")[0]
        axis = 0
    rank = ctx.rank(x, node.name)
    axis = axis + rank if axis < 0 else axis
    u = ctx.unsqueeze(x, [axis + 1], name=f"{node.name}__unsqueeze")
    reps = [1] * (rank + 1)
    reps[axis + 1] = r
    t = ctx.emit("Tile", [u, ctx.i64(reps, f"{node.name}__reps")], 1, name=f"{node.name}__tile")[0]
    exprs = [ShapeExpr(dims=[d]) for d in range(axis)] + [ShapeExpr(const=-1)]
    exprs += [ShapeExpr(dims=[d]) for d in range(axis + 1, rank)]
    shape = ctx.shape_of(exprs, x, name=f"{node.name}__target")
    return ctx.emit("Reshape", [t, shape], [out(ctx, node)], name=node.name)


@translator("where")
def where(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # MXNet where: nonzero condition picks x; a 1-D condition selects whole rows along axis 0
    cond, x, y = inputs[:3]
    c = ctx.emit("Cast", [cond], 1, name=f"{node.name}__cond", to=TensorProto.BOOL)[0]
    cr, xr = ctx.rank(cond, node.name), ctx.rank(x, node.name)
    if cr == 1 and xr > 1:
        c = ctx.unsqueeze(c, list(range(1, xr)), name=f"{node.name}__rows")
    return ctx.emit("Where", [c, x, y], [out(ctx, node)], name=node.name)


def _filled_like(ctx: ConversionContext, node: MXNode, x: str, fill: int) -> list[str]:
    """ConstantOfShape(Shape(x)), typed as ``x``: ONNX's inference of ConstantOfShape over a computed shape knows
    only the rank, and the dims lost here would leave every consumer (where, concat, box_nms) shapeless."""
    from onnx import numpy_helper

    shp = ctx.emit("Shape", [x], 1, name=f"{node.name}__shape")[0]
    value = numpy_helper.from_array(np.asarray([fill], dtype=ctx.np_dtype(x)))
    return ctx.emit("ConstantOfShape", [shp], [out(ctx, node)], name=node.name, value=value,
                    out_types=[TensorType(ctx.elem(x) or TensorProto.FLOAT, ctx.shape(x))])


@translator("zeros_like")
def zeros_like(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    return _filled_like(ctx, node, inputs[0], 0)


@translator("ones_like")
def ones_like(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    return _filled_like(ctx, node, inputs[0], 1)


@translator("_arange")
def _arange(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # as in MXNet src/operator/tensor/init_op.h (RangeParam / range_fwd): length ceil((stop-start)/step),
    # value start + (i // repeat) * step with start and step cast to DType first (so truncated for integer
    # types and, in MXNet 1.9.1 on CPU, for float16 too); a constant, folded here
    a = node.attrs
    if a.optional_bool("infer_range", False):
        # resolvable ones (consumed by a same-shape elementwise op) were rewritten before translation
        raise ExportError(f"node '{node.name}': _arange(infer_range=True) is not supported here: MXNet infers its "
                          "length backwards from its consumer, and bridge resolves that only for a same-shape "
                          "elementwise consumer (elemwise_add, ...); contrib.arange_like(x) gives the same values")
    start = float(a.optional_str("start", "0") or 0)
    stop_s = a.optional_str("stop")
    step = float(a.optional_str("step", "1") or 1)
    rep = a.optional_int("repeat", 1) or 1
    stop = float(stop_s) if stop_s is not None else start
    if stop_s is None:
        start = 0.0
    n = int(np.ceil((stop - start) / step))
    dtype = np.dtype(a.optional_str("dtype", "float32") or "float32")
    work = dtype if dtype in (np.float32, np.float64) else np.dtype(np.int64)  # int64 wraps like MXNet's casts
    i = (np.arange(max(n, 0) * rep) // rep).astype(work)
    vals = np.asarray(np.trunc(start)).astype(work) + i * np.asarray(np.trunc(step)).astype(work) \
        if work.kind == "i" else work.type(start) + i * work.type(step)
    c = ctx.const(vals.astype(dtype), f"{node.name}__values")
    return ctx.emit("Identity", [c], [out(ctx, node)], name=node.name)


@translator("Crop")
def Crop(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # as in MXNet src/operator/crop-inl.h: crop H, W to h_w or to the second input's H, W, at offset
    # (or centred: (H - h) / 2, integer division)
    a = node.attrs
    x = inputs[0]
    h_in, w_in = ctx.static_dims(x, node.name, slice(2, 4))
    if (a.optional_int("num_args", 1) or 1) > 1:
        h, w = ctx.static_dims(inputs[1], node.name, slice(2, 4))
    else:
        h, w = a.optional_ints("h_w", (0, 0))
    oy, ox = a.optional_ints("offset", (0, 0))
    if a.optional_bool("center_crop", False):
        oy, ox = (h_in - h) // 2, (w_in - w) // 2
    args = [x, ctx.i64([oy, ox], f"{node.name}__starts"), ctx.i64([oy + h, ox + w], f"{node.name}__ends"),
            ctx.i64([2, 3], f"{node.name}__axes")]
    return ctx.emit("Slice", args, [out(ctx, node)], name=node.name)


@translator("Cast", "amp_cast")
def Cast(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    dtype = node.attrs.optional_str("dtype", "float32") or "float32"
    if dtype not in DTYPES:
        raise ExportError(f"node '{node.name}': Cast to {dtype} is not supported")
    return ctx.emit("Cast", inputs[:1], [out(ctx, node)], name=node.name, to=DTYPES[dtype])


@translator("_copy", "identity", "BlockGrad", "stop_gradient")
def _copy(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    return ctx.emit("Identity", inputs[:1], [out(ctx, node)], name=node.name)


_REDUCE = {"sum": "ReduceSum", "sum_axis": "ReduceSum", "mean": "ReduceMean", "max": "ReduceMax",
           "max_axis": "ReduceMax", "min": "ReduceMin", "min_axis": "ReduceMin", "prod": "ReduceProd"}


@translator(*_REDUCE)
def sum(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # as in MXNet src/operator/tensor/broadcast_reduce_op.h (ReduceAxesParam): axis None/() = all axes,
    # exclude=True reduces over the axes *not* listed
    a = node.attrs
    x = inputs[0]
    axes: list[int] | None = list(a.optional_ints("axis")) or None
    if a.optional_bool("exclude", False) and axes is not None:
        rank = ctx.rank(x, node.name)
        keep = {d + rank if d < 0 else d for d in axes}
        axes = [d for d in range(rank) if d not in keep]
    keepdims = a.optional_bool("keepdims", False)
    rank = ctx.rank(x, node.name)
    if node.op == "prod" and ctx.elem(x) in _INTEGER_TYPES:
        reduced = sorted({d % rank for d in axes} if axes is not None else range(rank))
        shape = ctx.shape(x) or ()
        if reduced and all(isinstance(shape[d], int) for d in reduced):
            return [_wrapping_prod(ctx, node, x, reduced, keepdims)]
    if not keepdims and (axes is None or len({d % rank for d in axes}) == rank):
        # legacy MXNet ops never return 0-d arrays: a full reduction has shape (1,)
        r = ctx.reduce(_REDUCE[node.op], x, axes, False, name=f"{node.name}__reduce")
        return ctx.emit("Reshape", [r, ctx.i64([1], f"{node.name}__one")], [out(ctx, node)], name=node.name)
    return [ctx.reduce(_REDUCE[node.op], x, axes, keepdims, name=node.name, output=out(ctx, node))]


_INTEGER_TYPES = {TensorProto.INT8, TensorProto.INT16, TensorProto.INT32, TensorProto.INT64, TensorProto.UINT8,
                  TensorProto.UINT16, TensorProto.UINT32, TensorProto.UINT64}


def _rows(ctx: ConversionContext, t: str, lo: int, hi: int, name: str) -> str:
    args = [t, ctx.i64([lo], f"{name}_lo"), ctx.i64([hi], f"{name}_hi"), ctx.i64([0], f"{name}_axis")]
    return ctx.emit("Slice", args, 1, name=name)[0]


def _wrapping_prod(ctx: ConversionContext, node: MXNode, x: str, reduced: list[int], keepdims: bool) -> str:
    """An integer product that wraps on overflow as MXNet's does (two's complement, modulo 2**bits):
    onnxruntime's int64 ReduceProd saturates instead (100**120 gives INT64_MAX where MXNet gives 0). The
    reduced axes go first, flattened to K rows, and rows are multiplied pairwise (Mul wraps) in
    ceil(log2 K) halvings; the order does not matter, the product modulo 2**bits is associative."""
    rank = ctx.rank(x, node.name)
    shape = ctx.shape(x) or ()
    kept = [d for d in range(rank) if d not in reduced]
    k = 1
    for d in reduced:
        k *= int(shape[d])  # type: ignore[arg-type]
    t = ctx.emit("Transpose", [x], 1, name=f"{node.name}__first", perm=reduced + kept)[0]
    t = ctx.emit("Reshape", [t, ctx.i64([k, -1], f"{node.name}__rows")], 1, name=f"{node.name}__rows")[0]
    step = 0
    while k > 1:
        half, tag = k // 2, f"{node.name}__step{step}"
        m = ctx.emit("Mul", [_rows(ctx, t, 0, half, f"{tag}_a"), _rows(ctx, t, half, 2 * half, f"{tag}_b")], 1,
                     name=f"{tag}_mul")[0]
        if k % 2:
            m = ctx.emit("Concat", [m, _rows(ctx, t, 2 * half, k, f"{tag}_odd")], 1, name=f"{tag}_concat", axis=0)[0]
        t, k, step = m, half + k % 2, step + 1
    if keepdims:
        exprs = [ShapeExpr(const=1) if d in reduced else ShapeExpr(dims=[d]) for d in range(rank)]
    else:  # legacy MXNet ops never return 0-d arrays: a full reduction has shape (1,)
        exprs = [ShapeExpr(dims=[d]) for d in kept] or [ShapeExpr(const=1)]
    target = ctx.shape_of(exprs, x, name=f"{node.name}__target")
    return ctx.emit("Reshape", [t, target], [out(ctx, node)], name=node.name)[0]


@translator("clip")
def clip(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    x = inputs[0]
    lo = ctx.scalar(node.attrs.optional_float("a_min", None), x, f"{node.name}__min")
    hi = ctx.scalar(node.attrs.optional_float("a_max", None), x, f"{node.name}__max")
    return ctx.emit("Clip", [x, lo, hi], [out(ctx, node)], name=node.name)
