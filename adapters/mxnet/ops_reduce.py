"""Reductions MXNet has as single ops: nansum / nanprod, moments, cumsum, and ``_histogram``."""

from __future__ import annotations

import dataclasses

import numpy as np
from onnx import TensorProto

from adapters.mxnet.context import ConversionContext
from adapters.mxnet.ops_tensor import DTYPES
from adapters.mxnet.registry import TRANSLATORS, out, translator
from adapters.mxnet.symbol import MXNode


# ---- reductions ------------------------------------------------------------------------------------------
@translator("nansum", "nanprod")
def nansum(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # NaN counts as 0 (sum) or 1 (prod); axis / keepdims / exclude as sum and prod (broadcast_reduce_op.h)
    x = inputs[0]
    if ctx.np_dtype(x).kind == "f":
        fill = ctx.scalar(0 if node.op == "nansum" else 1, x, f"{node.name}__fill")
        x = ctx.emit("Where", [ctx.emit("IsNaN", [x], 1, name=f"{node.name}__isnan")[0], fill, x], 1,
                     name=f"{node.name}__clean")[0]
    op = "sum" if node.op == "nansum" else "prod"
    return TRANSLATORS[op](ctx, dataclasses.replace(node, op=op), [x])


def _axes(ctx: ConversionContext, node: MXNode, x: str) -> list[int]:
    rank = ctx.rank(x, node.name)
    return sorted(a % rank for a in node.attrs.optional_ints("axes")) if "axes" in node.attrs else list(range(rank))


@translator("moments")
def moments(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # src/operator/nn/moments-inl.h: mean and population variance mean((x - mean)^2) over ``axes``
    x = inputs[0]
    axes = _axes(ctx, node, x)
    keep = node.attrs.optional_bool("keepdims", False)
    mean = ctx.reduce("ReduceMean", x, axes, True, name=f"{node.name}__mean")
    d = ctx.emit("Sub", [x, mean], 1, name=f"{node.name}__center")[0]
    var = ctx.reduce("ReduceMean", ctx.emit("Mul", [d, d], 1, name=f"{node.name}__sq")[0], axes, keep,
                     name=f"{node.name}__var", output=out(ctx, node, 1, 2))
    m = (ctx.emit("Identity", [mean], [out(ctx, node, 0, 2)], name=f"{node.name}__m")[0] if keep
         else ctx.squeeze(mean, axes, name=f"{node.name}__m", output=out(ctx, node, 0, 2)))
    return [m, var]


@translator("cumsum")
def cumsum(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # np_cumsum-inl.h: along ``axis`` (flattened when None), accumulated in ``dtype`` when given
    x = inputs[0]
    n = node.name
    dtype = node.attrs.optional_str("dtype")
    if dtype is not None and DTYPES[dtype] != ctx.elem(x):
        x = ctx.emit("Cast", [x], 1, name=f"{n}__cast", to=DTYPES[dtype])[0]
    axis = node.attrs.optional_int("axis", None)
    if axis is None:
        x = ctx.emit("Reshape", [x, ctx.i64([-1], f"{n}__flat")], 1, name=f"{n}__flatten")[0]
        axis = 0
    return ctx.emit("CumSum", [x, ctx.const(np.asarray(axis, np.int64), f"{n}__axis")], [out(ctx, node)], name=n)


# ---- histogram -------------------------------------------------------------------------------------------
@translator("_histogram")
def _histogram(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # tensor/histogram.cc: bins from bin_cnt + range (edges DType((max*i + (cnt-i)*min) / cnt), in double;
    # min == max widened by 0.5) or a given edge vector. A value v in [first, last] edge falls in the bin
    # counting the interior edges <= v (the last bin is closed); others are ignored. Counts int64, edges DType.
    x = inputs[0]
    n = node.name
    a = node.attrs
    dt = ctx.np_dtype(x)
    flat = ctx.emit("Reshape", [x, ctx.i64([-1], f"{n}__flat")], 1, name=f"{n}__flat")[0]
    count = a.optional_int("bin_cnt", None)
    if count is not None:
        lo, hi = (float(v) for v in (a.optional_str("range", "(0, 1)") or "(0, 1)").strip("()[] ").split(","))
        if lo == hi:
            lo, hi = lo - 0.5, hi + 0.5
        edges_np = np.asarray([(hi * i + (count - i) * lo) / count for i in range(count + 1)]).astype(dt)
        edges = ctx.const(edges_np, f"{n}__edges")
        xd = ctx.emit("Cast", [flat], 1, name=f"{n}__xd", to=TensorProto.DOUBLE)[0]
        inside = ctx.emit("And", [ctx.emit("GreaterOrEqual", [xd, ctx.const(np.asarray(lo), f"{n}__lo")], 1,
                                           name=f"{n}__ge_lo")[0],
                                  ctx.emit("LessOrEqual", [xd, ctx.const(np.asarray(hi), f"{n}__hi")], 1,
                                           name=f"{n}__le_hi")[0]], 1, name=f"{n}__inside")[0]
        interior = ctx.const(edges_np[1:-1], f"{n}__interior")
    else:
        edges = inputs[1]
        count = ctx.static_dims(edges, n, [0])[0] - 1
        first = ctx.emit("Slice", [edges, ctx.i64([0], f"{n}__b0"), ctx.i64([1], f"{n}__e0")], 1, name=f"{n}__first")[0]
        last = ctx.emit("Slice", [edges, ctx.i64([-1], f"{n}__b1"), ctx.i64([count + 1], f"{n}__e1")], 1,
                        name=f"{n}__last")[0]
        inside = ctx.emit("And", [ctx.emit("GreaterOrEqual", [flat, first], 1, name=f"{n}__ge_lo")[0],
                                  ctx.emit("LessOrEqual", [flat, last], 1, name=f"{n}__le_hi")[0]], 1,
                          name=f"{n}__inside")[0]
        interior = ctx.emit("Slice", [edges, ctx.i64([1], f"{n}__b2"), ctx.i64([count], f"{n}__e2")], 1,
                            name=f"{n}__interior")[0]
    col = ctx.unsqueeze(flat, [1], name=f"{n}__col")
    passed = ctx.emit("Cast", [ctx.emit("GreaterOrEqual", [col, interior], 1, name=f"{n}__passed")[0]], 1,
                      name=f"{n}__passed_i", to=TensorProto.INT64)[0]
    idx = ctx.reduce("ReduceSum", passed, [1], True, name=f"{n}__bin")  # (N, 1)
    hit = ctx.emit("Equal", [idx, ctx.const(np.arange(count, dtype=np.int64), f"{n}__bins")], 1, name=f"{n}__hit")[0]
    hit = ctx.emit("And", [hit, ctx.unsqueeze(inside, [1], name=f"{n}__inside_col")], 1, name=f"{n}__counted")[0]
    ones = ctx.emit("Cast", [hit], 1, name=f"{n}__ones", to=TensorProto.INT64)[0]
    counts = ctx.reduce("ReduceSum", ones, [0], False, name=f"{n}__counts", output=out(ctx, node, 0, 2))
    return [counts, ctx.emit("Identity", [edges], [out(ctx, node, 1, 2)], name=f"{n}__edges_out")[0]]
