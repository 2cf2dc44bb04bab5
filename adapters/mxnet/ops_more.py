"""Translators for the rest of MXNet's inference-relevant operators (issue 11, part C).

What is here, and why each form is exact:

- legacy spellings MXNet still registers as aliases (``_Equal``, ``crop``, ``Softmax``, ...): the
  translator of the canonical op runs on the node with its op renamed;
- ops that are the identity at inference (loss heads such as ``MakeLoss``, ``SVMOutput``, the
  regression outputs; gradient tricks such as ``_contrib_gradientmultiplier``): their forward pass
  copies the data (MXNet src/operator/regression_output-inl.h, make_loss-inl.h, svm_output-inl.h);
- elementwise math written as short formulas (hypot, cbrt, smooth_l1, quadratic, logical ops);
- reductions and normalisations (nansum / nanprod, moments, GroupNorm, cumsum, softmin);
- index / scatter ops (scatter_nd, _scatter_set_nd, index_copy, boolean_mask, ravel / unravel);
- linear algebra with an ONNX form (gemm, det, slogdet, syrk, trmm, diagonal / triangle helpers);
- sampling grids (GridGenerator, BilinearSampler, SpatialTransformer) through ONNX GridSample (opset 16+);
- im2col / col2im as a convolution / transposed convolution with a 0/1 kernel;
- per-row samplers (``_sample_normal``, ``_sample_uniform``, exponential) as RandomUniformLike /
  RandomNormalLike, scaled: same distribution, other values, so outputs are compared by shape and dtype.

Ops with no exact ONNX form are refused in ``registry.NOT_TRANSLATED`` with the reason.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
from onnx import TensorProto

from adapters.mxnet.context import ConversionContext
from adapters.mxnet.ops_tensor import DTYPES
from adapters.mxnet.registry import TRANSLATORS, out, translator
from adapters.mxnet.symbol import MXNode
from bridge.errors import ExportError

# ---- aliases MXNet registers under a second name (nnvm writes the canonical one, old files the alias) ----
ALIASES: dict[str, str] = {
    "cast": "Cast", "flatten": "Flatten", "reshape": "Reshape", "Softmax": "SoftmaxOutput", "crop": "slice",
    "choose_element_0index": "pick", "_Equal": "_equal", "_Not_Equal": "_not_equal", "_Greater": "_greater",
    "_Greater_Equal": "_greater_equal", "_Lesser": "_lesser", "_Lesser_Equal": "_lesser_equal",
    "_EqualScalar": "_equal_scalar", "_NotEqualScalar": "_not_equal_scalar", "_GreaterScalar": "_greater_scalar",
    "_GreaterEqualScalar": "_greater_equal_scalar", "_LesserScalar": "_lesser_scalar",
    "_LesserEqualScalar": "_lesser_equal_scalar", "_MaximumScalar": "_maximum_scalar",
    "_MinimumScalar": "_minimum_scalar", "_PowerScalar": "_power_scalar", "_RPowerScalar": "_rpower_scalar",
    # ops whose inference forward is another op's (same attributes)
    "_contrib_round_ste": "round", "_contrib_SyncBatchNorm": "BatchNorm", "Convolution_v1": "Convolution",
    "Pooling_v1": "Pooling", "BatchNorm_v1": "BatchNorm", "_contrib_SparseEmbedding": "Embedding",
}


@translator(*ALIASES)
def alias(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    canonical = ALIASES[node.op]
    return TRANSLATORS[canonical](ctx, dataclasses.replace(node, op=canonical), inputs)


# ---- identity at inference --------------------------------------------------------------------------
IDENTITY = ("MakeLoss", "make_loss", "IdentityAttachKLSparseReg", "LinearRegressionOutput", "MAERegressionOutput",
            "SVMOutput", "_contrib_gradientmultiplier")


@translator(*IDENTITY)
def MakeLoss(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # forward copies the data; labels, regularisation state and gradient scales act in backward only
    # (make_loss names its output <node>_loss, as its FListOutputNames does)
    name = ctx.reserve(f"{node.name}_loss") if node.op == "make_loss" else out(ctx, node)
    return ctx.emit("Identity", inputs[:1], [name], name=node.name)


@translator("_contrib_sign_ste")
def _contrib_sign_ste(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # straight-through estimator: forward is sign(x) (src/operator/contrib/stes_op.h)
    return ctx.emit("Sign", inputs[:1], [out(ctx, node)], name=node.name)


@translator("amp_multicast")
def amp_multicast(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # src/operator/tensor/amp_cast.h: every float16/float32 input is cast to the widest of them (narrowest with
    # cast_narrow); other dtypes pass through unchanged
    count = node.attrs.int("num_outputs", len(inputs)) or len(inputs)
    floats = [ctx.elem(x) for x in inputs if ctx.elem(x) in (TensorProto.FLOAT16, TensorProto.FLOAT)]
    narrow = node.attrs.bool("cast_narrow", False)
    target = (min if narrow else max)(floats, key=lambda e: e == TensorProto.FLOAT) if floats else None
    outs = []
    for i, x in enumerate(inputs[:count]):
        name = out(ctx, node, i, count)
        if target is not None and ctx.elem(x) in (TensorProto.FLOAT16, TensorProto.FLOAT):
            outs += ctx.emit("Cast", [x], [name], name=f"{node.name}_{i}", to=target)
        else:
            outs += ctx.emit("Identity", [x], [name], name=f"{node.name}_{i}")
    return outs


# ---- elementwise ---------------------------------------------------------------------------------------
_LOGICAL = {"_logical_and": "And", "_Logical_And": "And", "_logical_or": "Or", "_Logical_Or": "Or",
            "_logical_xor": "Xor", "_Logical_Xor": "Xor"}
_LOGICAL_SCALAR = {"_logical_and_scalar": "And", "_LogicalAndScalar": "And", "_logical_or_scalar": "Or",
                   "_LogicalOrScalar": "Or", "_logical_xor_scalar": "Xor", "_LogicalXorScalar": "Xor"}


def _as_bool(ctx: ConversionContext, x: str, name: str) -> str:
    # nonzero is true (a NaN too), as C's && on DType
    z = ctx.emit("Equal", [x, ctx.scalar(0, x, f"{name}__zero")], 1, name=f"{name}__eq0")[0]
    return ctx.emit("Not", [z], 1, name=f"{name}__nz")[0]


def _logical(ctx: ConversionContext, node: MXNode, op: str, a: str, b: str, like: str) -> list[str]:
    r = ctx.emit(op, [_as_bool(ctx, a, f"{node.name}__a"), _as_bool(ctx, b, f"{node.name}__b")], 1,
                 name=f"{node.name}__{op.lower()}")[0]
    return ctx.emit("Cast", [r], [out(ctx, node)], name=node.name, to=ctx.elem(like) or TensorProto.FLOAT)


@translator(*_LOGICAL)
def _logical_and(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # mshadow_op.h logical_and / or / xor: 1 or 0 in the input dtype
    return _logical(ctx, node, _LOGICAL[node.op], inputs[0], inputs[1], inputs[0])


def _scalar(ctx: ConversionContext, node: MXNode, x: str, default: float = 0.0) -> str:
    """The op's ``scalar`` attribute cast to x's dtype (float32 of the decimal for floats, else the double)."""
    text = node.attrs.str("scalar", str(default)) or str(default)
    value = node.attrs.float("scalar", default) if ctx.np_dtype(x).kind == "f" else float(text)
    return ctx.scalar(value, x, f"{node.name}__scalar")


@translator(*_LOGICAL_SCALAR)
def _logical_and_scalar(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    x = inputs[0]
    return _logical(ctx, node, _LOGICAL_SCALAR[node.op], x, _scalar(ctx, node, x), x)


def _hypot(ctx: ConversionContext, node: MXNode, a: str, b: str) -> list[str]:
    # sqrt(a^2 + b^2) (mshadow_op.h hypot)
    n = node.name
    s = ctx.emit("Add", [ctx.emit("Mul", [a, a], 1, name=f"{n}__a2")[0], ctx.emit("Mul", [b, b], 1, name=f"{n}__b2")[0]],
                 1, name=f"{n}__sum")[0]
    return ctx.emit("Sqrt", [s], [out(ctx, node)], name=n)


@translator("_hypot", "_Hypot", "broadcast_hypot")
def _hypot_op(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    return _hypot(ctx, node, inputs[0], inputs[1])


@translator("_hypot_scalar", "_HypotScalar")
def _hypot_scalar(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    return _hypot(ctx, node, inputs[0], _scalar(ctx, node, inputs[0]))


@translator("cbrt", "rcbrt")
def cbrt(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # real cube root: sign(x) * |x|^(1/3) (Pow of a negative base to 1/3 is NaN); rcbrt = 1 / cbrt
    x = inputs[0]
    n = node.name
    p = ctx.emit("Pow", [ctx.emit("Abs", [x], 1, name=f"{n}__abs")[0], ctx.scalar(1.0 / 3.0, x, f"{n}__third")], 1,
                 name=f"{n}__pow")[0]
    last = node.op == "cbrt"
    r = ctx.emit("Mul", [ctx.emit("Sign", [x], 1, name=f"{n}__sign")[0], p], [out(ctx, node)] if last else 1,
                 name=n if last else f"{n}__cbrt")
    return r if last else ctx.emit("Reciprocal", r, [out(ctx, node)], name=n)


@translator("smooth_l1")
def smooth_l1(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # mshadow_op.h smooth_l1_loss with s2 = sigma^2: |x| - 0.5/s2 where |x| > 1/s2, else 0.5 * x^2 * s2
    x = inputs[0]
    n = node.name
    sigma = float(node.attrs.float("scalar", 1.0) or 0.0)
    s2 = np.float32(sigma) * np.float32(sigma)
    ab = ctx.emit("Abs", [x], 1, name=f"{n}__abs")[0]
    big = ctx.emit("Greater", [ab, ctx.scalar(np.float32(1.0) / s2, x, f"{n}__bound")], 1, name=f"{n}__big")[0]
    lin = ctx.emit("Sub", [ab, ctx.scalar(np.float32(0.5) / s2, x, f"{n}__half")], 1, name=f"{n}__lin")[0]
    sq = ctx.emit("Mul", [ctx.emit("Mul", [x, x], 1, name=f"{n}__x2")[0], ctx.scalar(np.float32(0.5) * s2, x, f"{n}__k")],
                  1, name=f"{n}__quad")[0]
    return ctx.emit("Where", [big, lin, sq], [out(ctx, node)], name=n)


@translator("_contrib_quadratic")
def _contrib_quadratic(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # src/operator/contrib/quadratic_op-inl.h: a * x^2 + b * x + c, coefficients cast to DType
    x = inputs[0]
    n = node.name
    a, b, c = (float(node.attrs.float(k, 0.0) or 0.0) for k in ("a", "b", "c"))
    ax = ctx.emit("Mul", [x, ctx.scalar(a, x, f"{n}__a")], 1, name=f"{n}__ax")[0]
    axb = ctx.emit("Add", [ax, ctx.scalar(b, x, f"{n}__b")], 1, name=f"{n}__axb")[0]  # Horner: (a x + b) x + c
    return ctx.emit("Add", [ctx.emit("Mul", [axb, x], 1, name=f"{n}__axbx")[0], ctx.scalar(c, x, f"{n}__c")],
                    [out(ctx, node)], name=n)


@translator("softmin")
def softmin(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # softmin(x) = softmax(-x) with the same axis / temperature / dtype / use_length (nn/softmax.cc)
    neg = ctx.emit("Neg", inputs[:1], 1, name=f"{node.name}__neg")[0]
    return TRANSLATORS["softmax"](ctx, dataclasses.replace(node, op="softmax"), [neg, *inputs[1:]])


@translator("softmax_cross_entropy")
def softmax_cross_entropy(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # loss_binary_op-inl.h: sum over the batch of -log softmax(data)[n, label[n]], shape (1,)
    data, label = inputs[:2]
    n = node.name
    logp = ctx.emit("LogSoftmax", [data], 1, name=f"{n}__logp", axis=1)[0]
    idx = ctx.unsqueeze(_int64(ctx, label, f"{n}__label"), [1], name=f"{n}__label_col")
    picked = ctx.emit("GatherElements", [logp, idx], 1, name=f"{n}__pick", axis=1)[0]
    total = ctx.reduce("ReduceSum", picked, None, False, name=f"{n}__sum")
    neg = ctx.emit("Neg", [total], 1, name=f"{n}__neg")[0]
    return ctx.emit("Reshape", [neg, ctx.i64([1], f"{n}__shape")], [out(ctx, node)], name=n)


@translator("_contrib_allclose")
def _contrib_allclose(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # contrib/allclose_op-inl.h: 1 when every |a - b| <= atol + rtol * |b| (NaNs equal when equal_nan), else 0;
    # a 0-d uint8
    a, b = inputs[:2]
    n = node.name
    at = node.attrs
    rtol, atol = float(at.float("rtol", 1e-5) or 0.0), float(at.float("atol", 1e-8) or 0.0)
    diff = ctx.emit("Abs", [ctx.emit("Sub", [a, b], 1, name=f"{n}__sub")[0]], 1, name=f"{n}__diff")[0]
    bound = ctx.emit("Add", [ctx.emit("Mul", [ctx.emit("Abs", [b], 1, name=f"{n}__absb")[0],
                                              ctx.scalar(rtol, b, f"{n}__rtol")], 1, name=f"{n}__rel")[0],
                             ctx.scalar(atol, b, f"{n}__atol")], 1, name=f"{n}__bound")[0]
    close = ctx.emit("LessOrEqual", [diff, bound], 1, name=f"{n}__close")[0]
    if at.bool("equal_nan", True) and ctx.np_dtype(a).kind == "f":
        both = ctx.emit("And", [ctx.emit("IsNaN", [a], 1, name=f"{n}__nana")[0],
                                ctx.emit("IsNaN", [b], 1, name=f"{n}__nanb")[0]], 1, name=f"{n}__nans")[0]
        close = ctx.emit("Or", [close, both], 1, name=f"{n}__close_nan")[0]
    as_int = ctx.emit("Cast", [close], 1, name=f"{n}__int", to=TensorProto.INT32)[0]
    every = ctx.reduce("ReduceMin", as_int, None, False, name=f"{n}__all")
    return ctx.emit("Cast", [every], [out(ctx, node)], name=n, to=TensorProto.UINT8)


# ---- reductions / normalisation ---------------------------------------------------------------------------
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
    return sorted(a % rank for a in node.attrs.ints("axes")) if "axes" in node.attrs else list(range(rank))


@translator("moments")
def moments(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # src/operator/nn/moments-inl.h: mean and population variance mean((x - mean)^2) over ``axes``
    x = inputs[0]
    axes = _axes(ctx, node, x)
    keep = node.attrs.bool("keepdims", False)
    mean = ctx.reduce("ReduceMean", x, axes, True, name=f"{node.name}__mean")
    d = ctx.emit("Sub", [x, mean], 1, name=f"{node.name}__center")[0]
    var = ctx.reduce("ReduceMean", ctx.emit("Mul", [d, d], 1, name=f"{node.name}__sq")[0], axes, keep,
                     name=f"{node.name}__var", output=out(ctx, node, 1, 2))
    m = (ctx.emit("Identity", [mean], [out(ctx, node, 0, 2)], name=f"{node.name}__m")[0] if keep
         else ctx.squeeze(mean, axes, name=f"{node.name}__m", output=out(ctx, node, 0, 2)))
    return [m, var]


@translator("GroupNorm")
def GroupNorm(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # src/operator/nn/group_norm-inl.h: x (N, C, ...) viewed as (N, G, C/G * ...), normalised per group with
    # population variance, eps default 1e-5; gamma / beta have one value per group in MXNet 1.9.1 (per
    # channel when their length is C); output_mean_var adds mean and std (N, G)
    x, gamma, beta = inputs[:3]
    a = node.attrs
    n = node.name
    groups = a.int("num_groups", 1) or 1
    eps = float(a.float("eps", 1e-5) or 0.0)
    rank = ctx.rank(x, n)
    grouped = ctx.emit("Reshape", [x, ctx.i64([0, groups, -1], f"{n}__gshape")], 1, name=f"{n}__grouped")[0]
    mean = ctx.reduce("ReduceMean", grouped, [2], True, name=f"{n}__mean")
    d = ctx.emit("Sub", [grouped, mean], 1, name=f"{n}__center")[0]
    var = ctx.reduce("ReduceMean", ctx.emit("Mul", [d, d], 1, name=f"{n}__sq")[0], [2], True, name=f"{n}__var")
    std = ctx.emit("Sqrt", [ctx.emit("Add", [var, ctx.scalar(eps, x, f"{n}__eps")], 1, name=f"{n}__ve")[0]], 1,
                   name=f"{n}__std")[0]
    nrm = ctx.emit("Div", [d, std], 1, name=f"{n}__norm")[0]
    glen = ctx.static_dims(gamma, n, [0])[0]
    if glen == groups:
        col = ctx.i64([groups, 1], f"{n}__col")
        g = ctx.emit("Reshape", [gamma, col], 1, name=f"{n}__gamma")[0]
        b = ctx.emit("Reshape", [beta, col], 1, name=f"{n}__beta")[0]
        y = ctx.emit("Add", [ctx.emit("Mul", [nrm, g], 1, name=f"{n}__scale")[0], b], 1, name=f"{n}__shift")[0]
        y = ctx.emit("Reshape", [y, ctx.emit("Shape", [x], 1, name=f"{n}__shape")[0]], [out(ctx, node)], name=n)[0]
    else:
        y = ctx.emit("Reshape", [nrm, ctx.emit("Shape", [x], 1, name=f"{n}__shape")[0]], 1, name=f"{n}__back")[0]
        bshape = ctx.i64([-1] + [1] * (rank - 2), f"{n}__bshape")
        g = ctx.emit("Reshape", [gamma, bshape], 1, name=f"{n}__gamma")[0]
        b = ctx.emit("Reshape", [beta, bshape], 1, name=f"{n}__beta")[0]
        y = ctx.emit("Add", [ctx.emit("Mul", [y, g], 1, name=f"{n}__scale")[0], b], [out(ctx, node)], name=n)[0]
    if not a.bool("output_mean_var", False):
        return [y]
    m = ctx.squeeze(mean, [2], name=f"{n}__mean_out", output=ctx.reserve(f"{n}_mean"))
    s = ctx.squeeze(std, [2], name=f"{n}__std_out", output=ctx.reserve(f"{n}_std"))
    return [y, m, s]


@translator("_contrib_BatchNormWithReLU")
def _contrib_BatchNormWithReLU(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # BatchNorm (same attributes) followed by ReLU on its first output (src/operator/contrib/batch_norm_relu.cc)
    inner = dataclasses.replace(node, op="BatchNorm", name=f"{node.name}__bn")
    bn = TRANSLATORS["BatchNorm"](ctx, inner, inputs)
    return [*ctx.emit("Relu", [bn[0]], [out(ctx, node)], name=node.name), *bn[1:]]


@translator("cumsum")
def cumsum(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # np_cumsum-inl.h: along ``axis`` (flattened when None), accumulated in ``dtype`` when given
    x = inputs[0]
    n = node.name
    dtype = node.attrs.str("dtype")
    if dtype is not None and DTYPES[dtype] != ctx.elem(x):
        x = ctx.emit("Cast", [x], 1, name=f"{n}__cast", to=DTYPES[dtype])[0]
    axis = node.attrs.int("axis", None)
    if axis is None:
        x = ctx.emit("Reshape", [x, ctx.i64([-1], f"{n}__flat")], 1, name=f"{n}__flatten")[0]
        axis = 0
    return ctx.emit("CumSum", [x, ctx.const(np.asarray(axis, np.int64), f"{n}__axis")], [out(ctx, node)], name=n)


@translator("SequenceLast")
def SequenceLast(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # sequence_last-inl.h: the step length[n] - 1 (or the last one) of each sample along ``axis`` (0 or 1)
    a = node.attrs
    x = inputs[0]
    n = node.name
    axis = a.int("axis", 0) or 0
    if not a.bool("use_sequence_length", False):
        return ctx.emit("Gather", [x, ctx.const(np.asarray(-1, np.int64), f"{n}__last")], [out(ctx, node)], name=n,
                        axis=axis)
    rank = ctx.rank(x, n)
    lens = ctx.emit("Cast", [inputs[1]], 1, name=f"{n}__len", to=TensorProto.INT64)[0]
    idx = ctx.emit("Sub", [lens, ctx.const(np.asarray(1, np.int64), f"{n}__one")], 1, name=f"{n}__idx")[0]
    batch_axis = 1 - axis
    idx = ctx.unsqueeze(idx, [d for d in range(rank) if d != batch_axis], name=f"{n}__idx_b")
    one_step = ctx.emit("Slice", [x, ctx.i64([0], f"{n}__s0"), ctx.i64([1], f"{n}__s1"), ctx.i64([axis], f"{n}__sax")],
                        1, name=f"{n}__step")[0]
    idx = ctx.emit("Expand", [idx, ctx.emit("Shape", [one_step], 1, name=f"{n}__step_shape")[0]], 1,
                   name=f"{n}__idx_e")[0]
    picked = ctx.emit("GatherElements", [x, idx], 1, name=f"{n}__pick", axis=axis)[0]
    return [ctx.squeeze(picked, [axis], name=n, output=out(ctx, node))]


# ---- boxes / attention ------------------------------------------------------------------------------------
def _coords(ctx: ConversionContext, t: str, name: str, fmt: str) -> list[str]:
    """x1, y1, x2, y2 columns (keeping the last axis) of boxes in corner or center format."""
    cols = ctx.emit("Split", [t, ctx.i64([1, 1, 1, 1], f"{name}__split")], 4, name=f"{name}__split", axis=-1)
    if fmt == "corner":
        return cols
    cx, cy, w, h = cols
    hw = ctx.emit("Mul", [w, ctx.scalar(0.5, t, f"{name}__half")], 1, name=f"{name}__hw")[0]
    hh = ctx.emit("Mul", [h, ctx.scalar(0.5, t, f"{name}__half")], 1, name=f"{name}__hh")[0]
    return [ctx.emit("Sub", [cx, hw], 1, name=f"{name}__x1")[0], ctx.emit("Sub", [cy, hh], 1, name=f"{name}__y1")[0],
            ctx.emit("Add", [cx, hw], 1, name=f"{name}__x2")[0], ctx.emit("Add", [cy, hh], 1, name=f"{name}__y2")[0]]


@translator("_contrib_box_iou")
def _contrib_box_iou(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # bounding_box-inl.h box_overlap: inter / (area_l + area_r - inter), output lhs.shape[:-1] + rhs.shape[:-1]
    lhs, rhs = inputs[:2]
    n = node.name
    fmt = node.attrs.str("format", "corner") or "corner"
    flat = ctx.i64([-1, 4], f"{n}__flat")
    left = ctx.emit("Reshape", [lhs, flat], 1, name=f"{n}__l")[0]  # (L, 4)
    right = ctx.emit("Reshape", [rhs, flat], 1, name=f"{n}__r")[0]
    lx1, ly1, lx2, ly2 = _coords(ctx, left, f"{n}__lc", fmt)  # (L, 1) each
    rx1, ry1, rx2, ry2 = (ctx.emit("Transpose", [c], 1, name=f"{n}__rc{i}", perm=[1, 0])[0]  # (1, R) each
                          for i, c in enumerate(_coords(ctx, right, f"{n}__rc", fmt)))
    zero = ctx.scalar(0, lhs, f"{n}__zero")

    def extent(lo1: str, hi1: str, lo2: str, hi2: str, tag: str) -> str:
        lo = ctx.emit("Max", [lo1, lo2], 1, name=f"{n}__{tag}lo")[0]
        hi = ctx.emit("Min", [hi1, hi2], 1, name=f"{n}__{tag}hi")[0]
        return ctx.emit("Max", [ctx.emit("Sub", [hi, lo], 1, name=f"{n}__{tag}d")[0], zero], 1, name=f"{n}__{tag}")[0]

    inter = ctx.emit("Mul", [extent(lx1, lx2, rx1, rx2, "w"), extent(ly1, ly2, ry1, ry2, "h")], 1, name=f"{n}__inter")[0]

    def area(x1: str, y1: str, x2: str, y2: str, tag: str) -> str:
        w = ctx.emit("Sub", [x2, x1], 1, name=f"{n}__{tag}w")[0]
        h = ctx.emit("Sub", [y2, y1], 1, name=f"{n}__{tag}h")[0]
        return ctx.emit("Mul", [w, h], 1, name=f"{n}__{tag}area")[0]

    union = ctx.emit("Sub", [ctx.emit("Add", [area(lx1, ly1, lx2, ly2, "l"), area(rx1, ry1, rx2, ry2, "r")], 1,
                                      name=f"{n}__areas")[0], inter], 1, name=f"{n}__union")[0]
    iou = ctx.emit("Div", [inter, union], 1, name=f"{n}__iou")[0]
    lead = [ctx.emit("Slice", [ctx.emit("Shape", [t], 1, name=f"{n}__shape{i}")[0], ctx.i64([0], f"{n}__b"),
                               ctx.i64([-1], f"{n}__e")], 1, name=f"{n}__lead{i}")[0] for i, t in enumerate((lhs, rhs))]
    shape = ctx.emit("Concat", lead, 1, name=f"{n}__oshape", axis=0)[0]
    return ctx.emit("Reshape", [iou, shape], [out(ctx, node)], name=n)


@translator("_contrib_box_encode")
def _contrib_box_encode(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # bounding_box-inl.h box_encode: for anchor i matched to ref matches[i] (corner boxes), with mask
    # samples > 0.5: ((ref_c - a_c) / a_size - means) / stds for centers, (log(ref_size / a_size) - means) /
    # stds for sizes, 0 where unmasked; second output is the mask repeated over the 4 coordinates
    samples, matches, anchors, refs, means, stds = inputs[:6]
    n = node.name
    idx = ctx.emit("Cast", [matches], 1, name=f"{n}__idx", to=TensorProto.INT64)[0]
    idx = ctx.unsqueeze(idx, [2], name=f"{n}__idx3")
    idx = ctx.emit("Expand", [idx, ctx.i64([1, 1, 4], f"{n}__four")], 1, name=f"{n}__idx4")[0]
    ref = ctx.emit("GatherElements", [refs, idx], 1, name=f"{n}__ref", axis=1)[0]  # (B, N, 4)

    def center_size(t: str, tag: str) -> tuple[str, str, str, str]:
        x1, y1, x2, y2 = ctx.emit("Split", [t, ctx.i64([1, 1, 1, 1], f"{n}__{tag}s")], 4, name=f"{n}__{tag}s", axis=-1)
        w = ctx.emit("Sub", [x2, x1], 1, name=f"{n}__{tag}w")[0]
        h = ctx.emit("Sub", [y2, y1], 1, name=f"{n}__{tag}h")[0]
        half = ctx.scalar(0.5, t, f"{n}__half")
        cx = ctx.emit("Add", [x1, ctx.emit("Mul", [w, half], 1, name=f"{n}__{tag}hw")[0]], 1, name=f"{n}__{tag}cx")[0]
        cy = ctx.emit("Add", [y1, ctx.emit("Mul", [h, half], 1, name=f"{n}__{tag}hh")[0]], 1, name=f"{n}__{tag}cy")[0]
        return cx, cy, w, h

    rx, ry, rw, rh = center_size(ref, "r")
    ax, ay, aw, ah = center_size(anchors, "a")
    tx = ctx.emit("Div", [ctx.emit("Sub", [rx, ax], 1, name=f"{n}__dx")[0], aw], 1, name=f"{n}__tx")[0]
    ty = ctx.emit("Div", [ctx.emit("Sub", [ry, ay], 1, name=f"{n}__dy")[0], ah], 1, name=f"{n}__ty")[0]
    tw = ctx.emit("Log", [ctx.emit("Div", [rw, aw], 1, name=f"{n}__rw")[0]], 1, name=f"{n}__tw")[0]
    th = ctx.emit("Log", [ctx.emit("Div", [rh, ah], 1, name=f"{n}__rh")[0]], 1, name=f"{n}__th")[0]
    t = ctx.emit("Concat", [tx, ty, tw, th], 1, name=f"{n}__t", axis=-1)[0]
    t = ctx.emit("Div", [ctx.emit("Sub", [t, means], 1, name=f"{n}__sub_mean")[0], stds], 1, name=f"{n}__norm")[0]
    valid = ctx.emit("Greater", [samples, ctx.scalar(0.5, samples, f"{n}__thresh")], 1, name=f"{n}__valid")[0]
    valid = ctx.unsqueeze(valid, [2], name=f"{n}__valid3")
    zero = ctx.scalar(0, anchors, f"{n}__zero")
    targets = ctx.emit("Where", [valid, t, zero], [out(ctx, node, 0, 2)], name=n)[0]
    mask = ctx.emit("Cast", [valid], 1, name=f"{n}__maskf", to=ctx.elem(anchors))[0]
    masks = ctx.emit("Expand", [mask, ctx.i64([1, 1, 4], f"{n}__four4")], [out(ctx, node, 1, 2)], name=f"{n}__mask")[0]
    return [targets, masks]


def _heads_split(ctx: ConversionContext, node: MXNode, t: str, slots: int, which: int | None, tag: str) -> str:
    """[L, B, heads * slots * D] -> [B*heads, L, D] (slot ``which`` of interleaved k/v, transformer.cc)."""
    heads = node.attrs.require_int("heads")
    last = ctx.static_dims(t, node.name, [-1])[0]
    d = last // (heads * slots)
    n = node.name
    if slots == 1:
        r = ctx.emit("Reshape", [t, ctx.i64([0, -1, d], f"{n}__{tag}shape")], 1, name=f"{n}__{tag}r")[0]
    else:
        r = ctx.emit("Reshape", [t, ctx.i64([0, -1, slots, d], f"{n}__{tag}shape")], 1, name=f"{n}__{tag}r")[0]
        r = ctx.emit("Gather", [r, ctx.const(np.asarray(which, np.int64), f"{n}__{tag}slot")], 1,
                     name=f"{n}__{tag}slot", axis=2)[0]
    return ctx.emit("Transpose", [r], 1, name=f"{n}__{tag}t", perm=[1, 0, 2])[0]


@translator("_contrib_interleaved_matmul_encdec_qk")
def _contrib_interleaved_matmul_encdec_qk(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # transformer.cc: (q / sqrt(head_dim)) @ k^T per batch*head, k the first slot of interleaved (k, v)
    q_in, kv = inputs[:2]
    d = ctx.static_dims(q_in, node.name, [-1])[0] // node.attrs.require_int("heads")
    q = _heads_split(ctx, node, q_in, 1, None, "q")
    k = _heads_split(ctx, node, kv, 2, 0, "k")
    q = ctx.emit("Mul", [q, ctx.scalar(1.0 / math.sqrt(d), q_in, f"{node.name}__scale")], 1, name=f"{node.name}__qs")[0]
    kt = ctx.emit("Transpose", [k], 1, name=f"{node.name}__kT", perm=[0, 2, 1])[0]
    return ctx.emit("MatMul", [q, kt], [out(ctx, node)], name=node.name)


@translator("_contrib_interleaved_matmul_encdec_valatt")
def _contrib_interleaved_matmul_encdec_valatt(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # transformer.cc: attention @ v per batch*head (v the second slot), back to [Lq, B, heads * head_dim]
    kv, att = inputs[:2]
    heads = node.attrs.require_int("heads")
    e = ctx.static_dims(kv, node.name, [-1])[0] // 2
    v = _heads_split(ctx, node, kv, 2, 1, "v")
    r = ctx.emit("MatMul", [att, v], 1, name=f"{node.name}__mm")[0]
    tb = ctx.emit("Transpose", [r], 1, name=f"{node.name}__tb", perm=[1, 0, 2])[0]
    if e % heads:
        raise ExportError(f"node '{node.name}': the last dim of '{kv}' is not 2 * heads * head_dim")
    return ctx.emit("Reshape", [tb, ctx.i64([0, -1, e], f"{node.name}__oshape")], [out(ctx, node)], name=node.name)


# ---- scatter / index ---------------------------------------------------------------------------------------
def _int64(ctx: ConversionContext, t: str, name: str) -> str:
    return t if ctx.elem(t) == TensorProto.INT64 else ctx.emit("Cast", [t], 1, name=name, to=TensorProto.INT64)[0]


def _nd_indices(ctx: ConversionContext, node: MXNode, indices: str) -> str:
    """MXNet's (M, ...) index tensors (first axis = coordinate) as ONNX's (..., M)."""
    idx = _int64(ctx, indices, f"{node.name}__idx")
    rank = ctx.rank(idx, node.name)
    if rank == 1:  # one index of M coordinates
        return idx
    return ctx.emit("Transpose", [idx], 1, name=f"{node.name}__idx_t", perm=[*range(1, rank), 0])[0]


@translator("scatter_nd")
def scatter_nd(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # indexing_op.h ScatterNDForward: zeros of ``shape`` with out[indices[:, i]] = data[i] (indices unique)
    data, indices = inputs[:2]
    shape = list(node.attrs.ints("shape"))
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
    idx = ctx.unsqueeze(_int64(ctx, index, f"{node.name}__idx"), [1], name=f"{node.name}__idx_col")
    return ctx.emit("ScatterND", [old, idx, new], [out(ctx, node)], name=node.name)


@translator("_contrib_boolean_mask")
def _contrib_boolean_mask(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # contrib/boolean_mask.cc: the slices along ``axis`` where index is nonzero (a data-dependent length)
    data, index = inputs[:2]
    keep = _as_bool(ctx, index, f"{node.name}__keep")
    return ctx.emit("Compress", [data, keep], [out(ctx, node)], name=node.name, axis=node.attrs.int("axis", 0) or 0)


def _strides(shape: list[int]) -> list[int]:
    return [int(np.prod(shape[i + 1:], dtype=np.int64)) for i in range(len(shape))]


@translator("_ravel_multi_index", "ravel_multi_index")
def ravel_multi_index(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # tensor/ravel.h: data (ndim, N) of coordinates (truncated to int) -> flat row-major index, in data's dtype
    x = inputs[0]
    n = node.name
    shape = list(node.attrs.ints("shape"))
    idx = _int64(ctx, x, f"{n}__int")
    strides = ctx.const(np.asarray(_strides(shape), np.int64).reshape(-1, 1), f"{n}__strides")
    flat = ctx.reduce("ReduceSum", ctx.emit("Mul", [idx, strides], 1, name=f"{n}__scaled")[0], [0], False,
                      name=f"{n}__sum")
    return ctx.emit("Cast", [flat], [out(ctx, node)], name=n, to=ctx.elem(x))


@translator("_unravel_index", "unravel_index")
def unravel_index(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # tensor/ravel.h: flat index (truncated to int) -> coordinates (ndim, N): (i // stride_j) % shape_j
    x = inputs[0]
    n = node.name
    shape = list(node.attrs.ints("shape"))
    if ctx.rank(x, n) != 1:  # MXNet reads the first dim's count of values from any other rank
        raise ExportError(f"node '{n}': unravel_index takes a 1-d index vector (got rank {ctx.rank(x, n)})")
    idx = ctx.unsqueeze(_int64(ctx, x, f"{n}__int"), [0], name=f"{n}__row")
    rank = ctx.rank(x, n)
    col = (-1,) + (1,) * rank
    strides = ctx.const(np.asarray(_strides(shape), np.int64).reshape(col), f"{n}__strides")
    dims = ctx.const(np.asarray(shape, np.int64).reshape(col), f"{n}__dims")
    q = ctx.emit("Div", [idx, strides], 1, name=f"{n}__div")[0]
    r = ctx.emit("Mod", [q, dims], 1, name=f"{n}__mod")[0]
    return ctx.emit("Cast", [r], [out(ctx, node)], name=n, to=ctx.elem(x))


@translator("khatri_rao")
def khatri_rao(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # contrib/krprod.h: column-wise Kronecker product of (M_i, K) matrices -> (prod M_i, K), row-major in order
    n = node.name
    k = ctx.static_dims(inputs[0], n, [-1])[0]
    acc = inputs[0]
    for i, b in enumerate(inputs[1:]):
        prod = ctx.emit("Mul", [ctx.unsqueeze(acc, [1], name=f"{n}__a{i}"), ctx.unsqueeze(b, [0], name=f"{n}__b{i}")], 1,
                        name=f"{n}__outer{i}")[0]
        acc = ctx.emit("Reshape", [prod, ctx.i64([-1, k], f"{n}__shape{i}")], 1, name=f"{n}__kr{i}")[0]
    return ctx.emit("Identity", [acc], [out(ctx, node)], name=n)


# ---- linear algebra ------------------------------------------------------------------------------------------
@translator("_linalg_gemm", "linalg_gemm")
def linalg_gemm(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # la_op.h: alpha * op(A) op(B) + beta * C, matrices in axes (axis, -1) like gemm2 (whose translator runs)
    inner = dataclasses.replace(node, op="_linalg_gemm2", name=f"{node.name}__ab")
    ab = TRANSLATORS["_linalg_gemm2"](ctx, inner, inputs[:2])[0]
    c = inputs[2]
    beta = float(node.attrs.float("beta", 1.0) or 0.0)
    if beta != 1.0:
        c = ctx.emit("Mul", [c, ctx.scalar(beta, c, f"{node.name}__beta")], 1, name=f"{node.name}__bc")[0]
    return ctx.emit("Add", [ab, c], [out(ctx, node)], name=node.name)


@translator("_linalg_det", "linalg_det")
def linalg_det(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # la_op.h det over the last two axes (LU in MXNet, ONNX Det); one matrix gives shape (1,) in MXNet
    det = ctx.emit("Det", inputs[:1], 1, name=f"{node.name}__det")[0]
    return [_batch_or_one(ctx, node, inputs[0], det, out(ctx, node))]


def _batch_or_one(ctx: ConversionContext, node: MXNode, a: str, value: str, output: str) -> str:
    """A per-matrix result: shape (1,) for a single matrix (MXNet's la_op shape rule), else the batch shape."""
    if ctx.rank(a, node.name) == 2:
        return ctx.emit("Reshape", [value, ctx.i64([1], f"{node.name}__one")], [output], name=f"{node.name}__r")[0]
    return ctx.emit("Identity", [value], [output], name=f"{node.name}__r")[0]


@translator("_linalg_slogdet", "linalg_slogdet")
def linalg_slogdet(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # la_op.h slogdet: sign(det) and log|det|
    det = ctx.emit("Det", inputs[:1], 1, name=f"{node.name}__det")[0]
    sign = ctx.emit("Sign", [det], 1, name=f"{node.name}__sign")[0]
    log = ctx.emit("Log", [ctx.emit("Abs", [det], 1, name=f"{node.name}__abs")[0]], 1, name=node.name)[0]
    return [_batch_or_one(ctx, node, inputs[0], sign, out(ctx, node, 0, 2)),
            _batch_or_one(ctx, node, inputs[0], log, out(ctx, node, 1, 2))]


def _square(ctx: ConversionContext, node: MXNode, a: str) -> int:
    shape = ctx.static_shape(a, node.name)
    return shape[-1]


@translator("_linalg_sumlogdiag", "linalg_sumlogdiag")
def linalg_sumlogdiag(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # la_op.h: sum(log(diag(A))) over the last two axes
    a = inputs[0]
    n = node.name
    eye = ctx.const(np.eye(_square(ctx, node, a), dtype=ctx.np_dtype(a)), f"{n}__eye")
    diag = ctx.reduce("ReduceSum", ctx.emit("Mul", [a, eye], 1, name=f"{n}__masked")[0], [-1], False, name=f"{n}__diag")
    total = ctx.reduce("ReduceSum", ctx.emit("Log", [diag], 1, name=f"{n}__log")[0], [-1], False, name=n)
    return [_batch_or_one(ctx, node, a, total, out(ctx, node))]


def _selection(ctx: ConversionContext, node: MXNode, x: str, matrix: np.ndarray, out_dims: list[int]) -> list[str]:
    """x's last ``matrix.shape[0]`` elements (flattened trailing dims) times a 0/1 matrix, reshaped to out_dims:
    an exact gather/scatter of fixed positions (each output is one input, or 0)."""
    n = node.name
    lead = ctx.rank(x, n) - (1 if matrix.shape[0] == ctx.static_dims(x, n, [-1])[0] else 2)
    flat = ctx.emit("Reshape", [x, ctx.i64([0] * lead + [-1], f"{n}__flat")], 1, name=f"{n}__flat")[0]
    sel = ctx.emit("MatMul", [flat, ctx.const(matrix.astype(ctx.np_dtype(x)), f"{n}__sel")], 1, name=f"{n}__sel")[0]
    return ctx.emit("Reshape", [sel, ctx.i64([0] * lead + out_dims, f"{n}__oshape")], [out(ctx, node)], name=n)


def _tri_positions(size: int, offset: int, lower: bool) -> list[tuple[int, int]]:
    # la_op.h copytrian: row-major positions of the triangle; offset > 0 selects the upper triangle above
    # that diagonal, offset < 0 the lower one below it, offset 0 the triangle ``lower`` names
    # (MXNet walks the lower triangle row by row and the upper one column by column)
    if offset < 0 or (offset == 0 and lower):
        return [(i, j) for i in range(size) for j in range(size) if j - i <= offset]
    return [(i, j) for j in range(size) for i in range(size) if j - i >= offset]


@translator("_linalg_extractdiag", "linalg_extractdiag")
def linalg_extractdiag(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    a = inputs[0]
    size = _square(ctx, node, a)
    k = node.attrs.int("offset", 0) or 0
    return _extract(ctx, node, a, size, [(i, i + k) for i in range(size) if 0 <= i + k < size])


@translator("_linalg_makediag", "linalg_makediag")
def linalg_makediag(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    a = inputs[0]
    m_len = ctx.static_dims(a, node.name, [-1])[0]
    k = node.attrs.int("offset", 0) or 0
    size = m_len + abs(k)
    m = np.zeros((m_len, size * size))
    for i in range(m_len):
        r, c = (i, i + k) if k >= 0 else (i - k, i)
        m[i, r * size + c] = 1
    return _selection(ctx, node, a, m, [size, size])


@translator("_linalg_extracttrian", "linalg_extracttrian")
def linalg_extracttrian(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    a = inputs[0]
    size = _square(ctx, node, a)
    return _extract(ctx, node, a, size, _tri_positions(size, node.attrs.int("offset", 0) or 0,
                                                       node.attrs.bool("lower", True)))


def _extract(ctx: ConversionContext, node: MXNode, a: str, size: int, pos: list[tuple[int, int]]) -> list[str]:
    """The elements of the trailing size x size matrices at ``pos`` (row, column), as a vector."""
    m = np.zeros((size * size, len(pos)))
    for c, (i, j) in enumerate(pos):
        m[i * size + j, c] = 1
    return _selection(ctx, node, a, m, [len(pos)])


@translator("_linalg_maketrian", "linalg_maketrian")
def linalg_maketrian(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    a = inputs[0]
    length = ctx.static_dims(a, node.name, [-1])[0]
    k = node.attrs.int("offset", 0) or 0
    # the triangle of an n x n matrix with |k| diagonals left out holds length elements: n = n0 + |k|
    n0 = round((math.sqrt(8 * length + 1) - 1) / 2)
    size = n0 + abs(k)
    pos = _tri_positions(size, k, node.attrs.bool("lower", True))
    if len(pos) != length:
        raise ExportError(f"node '{node.name}': {length} elements do not fill a triangle (offset {k})")
    m = np.zeros((length, size * size))
    for c, (i, j) in enumerate(pos):
        m[c, i * size + j] = 1
    return _selection(ctx, node, a, m, [size, size])


@translator("_linalg_syrk", "linalg_syrk")
def linalg_syrk(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # la_op.h: alpha * A A^T (A^T A with transpose)
    a = inputs[0]
    n = node.name
    rank = ctx.rank(a, n)
    at = ctx.emit("Transpose", [a], 1, name=f"{n}__aT", perm=[*range(rank - 2), rank - 1, rank - 2])[0]
    left, right = (at, a) if node.attrs.bool("transpose", False) else (a, at)
    mm = ctx.emit("MatMul", [left, right], 1, name=f"{n}__mm")[0]
    alpha = float(node.attrs.float("alpha", 1.0) or 0.0)
    return ctx.emit("Mul", [mm, ctx.scalar(alpha, a, f"{n}__alpha")], [out(ctx, node)], name=n)


@translator("_linalg_trmm", "linalg_trmm")
def linalg_trmm(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # la_op.h: alpha * op(tri(A)) B, or alpha * B op(tri(A)) with rightside; tri = lower (default) or upper
    a, b = inputs[:2]
    n = node.name
    at = node.attrs
    size = _square(ctx, node, a)
    tri = np.tril(np.ones((size, size))) if at.bool("lower", True) else np.triu(np.ones((size, size)))
    a = ctx.emit("Mul", [a, ctx.const(tri.astype(ctx.np_dtype(a)), f"{n}__tri")], 1, name=f"{n}__masked")[0]
    if at.bool("transpose", False):
        rank = ctx.rank(a, n)
        a = ctx.emit("Transpose", [a], 1, name=f"{n}__aT", perm=[*range(rank - 2), rank - 1, rank - 2])[0]
    pair = [b, a] if at.bool("rightside", False) else [a, b]
    mm = ctx.emit("MatMul", pair, 1, name=f"{n}__mm")[0]
    alpha = float(at.float("alpha", 1.0) or 0.0)
    return ctx.emit("Mul", [mm, ctx.scalar(alpha, mm, f"{n}__alpha")], [out(ctx, node)], name=n)


# ---- sampling grids (ONNX GridSample, opset 16+) --------------------------------------------------------------
def _need_grid_sample(ctx: ConversionContext, node: MXNode) -> None:
    if ctx.opset < 16:
        raise ExportError(f"node '{node.name}' ({node.op}): bilinear sampling needs ONNX GridSample, which exists "
                          f"from opset 16 (converting at opset {ctx.opset}); pass --opset 16 or higher")


def _grid_sample(ctx: ConversionContext, node: MXNode, data: str, grid: str, output: str) -> str:
    # bilinear_sampler-inl.h: grid (N, 2, H, W) of (x, y) in [-1, 1], x_src = (x + 1) * (W - 1) / 2 (corners
    # aligned), taps outside the image read 0: GridSample(align_corners=1, padding zeros) on (N, H, W, 2)
    g = ctx.emit("Transpose", [grid], 1, name=f"{node.name}__grid_nhwc", perm=[0, 2, 3, 1])[0]
    mode = "linear" if ctx.opset >= 20 else "bilinear"
    return ctx.emit("GridSample", [data, g], [output], name=node.name, mode=mode, padding_mode="zeros",
                    align_corners=1)[0]


def _affine_grid(ctx: ConversionContext, node: MXNode, theta: str, h: int, w: int, output: str | None) -> str:
    # grid_generator-inl.h: target pixel (i, j) at x = -1 + 2j/(W-1), y = -1 + 2i/(H-1); grid = theta (2x3) [x y 1]
    n = node.name
    ys, xs = np.meshgrid(np.linspace(-1, 1, h) if h > 1 else np.asarray([-1.0]),
                         np.linspace(-1, 1, w) if w > 1 else np.asarray([-1.0]), indexing="ij")
    base = np.stack([xs.ravel(), ys.ravel(), np.ones(h * w)]).astype(ctx.np_dtype(theta))
    t = ctx.emit("Reshape", [theta, ctx.i64([-1, 2, 3], f"{n}__theta_shape")], 1, name=f"{n}__theta")[0]
    g = ctx.emit("MatMul", [t, ctx.const(base, f"{n}__base")], 1, name=f"{n}__grid_flat")[0]
    return ctx.emit("Reshape", [g, ctx.i64([-1, 2, h, w], f"{n}__grid_shape")], [output] if output else 1,
                    name=f"{n}__grid")[0]


@translator("GridGenerator")
def GridGenerator(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    x = inputs[0]
    n = node.name
    kind = node.attrs.str("transform_type", "affine")
    if kind == "affine":
        h, w = node.attrs.ints("target_shape", (0, 0))
        return [_affine_grid(ctx, node, x, h, w, out(ctx, node))]
    # warp: flow (N, 2, H, W) in pixels; grid = (flow + pixel) / ((size - 1) / 2) - 1
    h, w = ctx.static_dims(x, n, slice(2, 4))
    ys, xs = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    dt = ctx.np_dtype(x)
    base = np.stack([xs, ys])[None].astype(dt)
    scale = np.asarray([(w - 1) / 2.0, (h - 1) / 2.0], dt).reshape(1, 2, 1, 1)
    moved = ctx.emit("Add", [x, ctx.const(base, f"{n}__pixels")], 1, name=f"{n}__moved")[0]
    g = ctx.emit("Div", [moved, ctx.const(scale, f"{n}__half_size")], 1, name=f"{n}__scaled")[0]
    return ctx.emit("Sub", [g, ctx.scalar(1, x, f"{n}__one")], [out(ctx, node)], name=n)


@translator("BilinearSampler")
def BilinearSampler(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    _need_grid_sample(ctx, node)
    return [_grid_sample(ctx, node, inputs[0], inputs[1], out(ctx, node))]


@translator("SpatialTransformer")
def SpatialTransformer(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # spatial_transformer-inl.h: affine grid of target_shape from loc (N, 6), then bilinear sampling
    _need_grid_sample(ctx, node)
    if (node.attrs.str("transform_type", "affine"), node.attrs.str("sampler_type", "bilinear")) != ("affine", "bilinear"):
        raise ExportError(f"node '{node.name}': SpatialTransformer supports affine / bilinear only (as MXNet)")
    h, w = node.attrs.ints("target_shape", (0, 0))
    grid = _affine_grid(ctx, node, inputs[1], h, w, None)
    return [_grid_sample(ctx, node, inputs[0], grid, out(ctx, node))]


# ---- im2col / col2im -----------------------------------------------------------------------------------------
def _patch_kernel(ctx: ConversionContext, node: MXNode, channels: int,
                  like: str) -> tuple[str, list[int], dict[str, Any]]:
    """A 0/1 convolution weight (C*kh*kw, C, kh, kw) copying each patch element to its own channel, in
    im2col's (c, ki, kj) order (src/operator/nn/im2col.h), and the conv attributes."""
    a = node.attrs
    kernel = list(a.ints("kernel"))
    nd = len(kernel)
    k = int(np.prod(kernel))
    w = np.zeros((channels * k, channels, k), ctx.np_dtype(like))
    for c in range(channels):
        w[c * k + np.arange(k), c, np.arange(k)] = 1
    attrs = {"kernel_shape": kernel, "strides": list(a.ints("stride", (1,) * nd)) or [1] * nd,
             "dilations": list(a.ints("dilate", (1,) * nd)) or [1] * nd,
             "pads": list(a.ints("pad", (0,) * nd)) * 2 or [0] * 2 * nd}
    return ctx.const(w.reshape(channels * k, channels, *kernel), f"{node.name}__patch"), kernel, attrs


@translator("im2col")
def im2col(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    x = inputs[0]
    n = node.name
    channels = ctx.static_dims(x, n, [1])[0]
    w, _, attrs = _patch_kernel(ctx, node, channels, x)
    cols = ctx.emit("Conv", [x, w], 1, name=f"{n}__conv", **attrs)[0]
    return ctx.emit("Reshape", [cols, ctx.i64([0, 0, -1], f"{n}__shape")], [out(ctx, node)], name=n)


@translator("col2im")
def col2im(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # the adjoint of im2col: every column element is added back at its pixel (a transposed conv, same kernel)
    x = inputs[0]
    n = node.name
    size = list(node.attrs.ints("output_size"))
    kernel = list(node.attrs.ints("kernel"))
    (ck,) = ctx.static_dims(x, n, [1])
    channels = ck // int(np.prod(kernel))
    w, _, attrs = _patch_kernel(ctx, node, channels, x)
    nd = len(kernel)
    grid = [(size[i] + 2 * attrs["pads"][i] - attrs["dilations"][i] * (kernel[i] - 1) - 1) // attrs["strides"][i] + 1
            for i in range(nd)]
    img = ctx.emit("Reshape", [x, ctx.i64([0, ck, *grid], f"{n}__grid")], 1, name=f"{n}__cols")[0]
    full = [(grid[i] - 1) * attrs["strides"][i] - 2 * attrs["pads"][i] + attrs["dilations"][i] * (kernel[i] - 1) + 1
            for i in range(nd)]
    return ctx.emit("ConvTranspose", [img, w], [out(ctx, node)], name=n,
                    output_padding=[size[i] - full[i] for i in range(nd)], **attrs)


# ---- per-row and extra samplers (same distribution, other values) ---------------------------------------------
def _random_warn(ctx: ConversionContext, node: MXNode, how: str) -> None:
    ctx.warn(f"node '{node.name}' ({node.op}) samples random numbers: converted to {how} (same distribution, "
             "shape and dtype, different values); validation compares this output's shape and dtype only")


def _out_dtype(node: MXNode, default: int = TensorProto.FLOAT) -> int:
    name = node.attrs.str("dtype")
    if name is None:
        return default
    if name not in ("float16", "float32", "float64"):
        raise ExportError(f"node '{node.name}': {node.op} dtype='{name}' is not supported")
    return DTYPES[name]


def _row_params(ctx: ConversionContext, node: MXNode, params: list[str], elem: int) -> tuple[list[str], str]:
    """Parameters (batch shape S) cast to the sample dtype and unsqueezed over ``shape``, and zeros of S + shape."""
    n = node.name
    extra = list(node.attrs.ints("shape"))
    rank = ctx.rank(params[0], n)
    cast = [p if ctx.elem(p) == elem else ctx.emit("Cast", [p], 1, name=f"{n}__p{i}", to=elem)[0]
            for i, p in enumerate(params)]
    if extra:
        cast = [ctx.unsqueeze(p, list(range(rank, rank + len(extra))), name=f"{n}__p{i}_u") for i, p in enumerate(cast)]
        shape = ctx.emit("Concat", [ctx.emit("Shape", [params[0]], 1, name=f"{n}__pshape")[0],
                                    ctx.i64(extra, f"{n}__extra")], 1, name=f"{n}__shape", axis=0)[0]
    else:
        shape = ctx.emit("Shape", [params[0]], 1, name=f"{n}__shape")[0]
    zeros = ctx.emit("Expand", [ctx.const(np.zeros((), np.float32), f"{n}__zero"), shape], 1, name=f"{n}__zeros")[0]
    return cast, zeros


def _sample_elem(elem: int) -> int:
    return TensorProto.FLOAT if elem == TensorProto.FLOAT16 else elem  # onnxruntime samples float / double


def _finish(ctx: ConversionContext, node: MXNode, value: str, elem: int, op: str, inputs: list[str]) -> list[str]:
    outs = [out(ctx, node)]
    if ctx.elem(value) == elem:
        return ctx.emit(op, inputs, outs, name=node.name)
    r = ctx.emit(op, inputs, 1, name=f"{node.name}__wide")[0]
    return ctx.emit("Cast", [r], outs, name=f"{node.name}__cast", to=elem)


@translator("_sample_normal", "sample_normal")
def _sample_normal(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # random/multisample_op.h: out[i, ...] ~ N(mu[i], sigma[i]), shape mu.shape + shape, dtype (float32 default)
    elem = _out_dtype(node)
    se = _sample_elem(elem)
    _random_warn(ctx, node, "ONNX RandomNormalLike scaled by sigma and shifted by mu")
    (mu, sigma), zeros = _row_params(ctx, node, inputs[:2], se)
    z = ctx.emit("RandomNormalLike", [zeros], 1, name=f"{node.name}__z", dtype=se)[0]
    scaled = ctx.emit("Mul", [z, sigma], 1, name=f"{node.name}__scaled")[0]
    return _finish(ctx, node, scaled, elem, "Add", [scaled, mu])


@translator("_sample_uniform", "sample_uniform")
def _sample_uniform(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # out[i, ...] ~ U(low[i], high[i]) = low + U(0, 1) * (high - low)
    elem = _out_dtype(node)
    se = _sample_elem(elem)
    _random_warn(ctx, node, "ONNX RandomUniformLike scaled to [low, high)")
    (low, high), zeros = _row_params(ctx, node, inputs[:2], se)
    u = ctx.emit("RandomUniformLike", [zeros], 1, name=f"{node.name}__u", dtype=se)[0]
    width = ctx.emit("Sub", [high, low], 1, name=f"{node.name}__width")[0]
    scaled = ctx.emit("Mul", [u, width], 1, name=f"{node.name}__scaled")[0]
    return _finish(ctx, node, scaled, elem, "Add", [scaled, low])


def _exponential(ctx: ConversionContext, node: MXNode, zeros: str, lam: str, elem: int) -> list[str]:
    # inverse CDF: -log(1 - U) / lambda with U ~ U[0, 1) (1 - U in (0, 1], so the log is finite)
    se = _sample_elem(elem)
    _random_warn(ctx, node, "-log(1 - RandomUniformLike) / lambda (inverse CDF)")
    u = ctx.emit("RandomUniformLike", [zeros], 1, name=f"{node.name}__u", dtype=se)[0]
    one_minus = ctx.emit("Sub", [ctx.const(np.ones((), np.dtype(_np(se))), f"{node.name}__one"), u], 1,
                         name=f"{node.name}__1mu")[0]
    e = ctx.emit("Neg", [ctx.emit("Log", [one_minus], 1, name=f"{node.name}__log")[0]], 1, name=f"{node.name}__e")[0]
    return _finish(ctx, node, e, elem, "Div", [e, lam])


def _np(elem: int) -> type:
    return np.float64 if elem == TensorProto.DOUBLE else np.float32


@translator("_sample_exponential", "sample_exponential")
def _sample_exponential(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    elem = _out_dtype(node)
    (lam,), zeros = _row_params(ctx, node, inputs[:1], _sample_elem(elem))
    return _exponential(ctx, node, zeros, lam, elem)


@translator("_random_exponential", "random_exponential")
def _random_exponential(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # random/sample_op.h: ``shape`` draws of Exp(lam), lam an attribute (default 1)
    elem = _out_dtype(node)
    se = _sample_elem(elem)
    shape = list(node.attrs.ints("shape"))
    if any(d <= 0 for d in shape):
        raise ExportError(f"node '{node.name}': {node.op} shape {tuple(shape)} has unknown (0) dims")
    zeros = ctx.emit("Expand", [ctx.const(np.zeros((), np.float32), f"{node.name}__zero"),
                                ctx.i64(shape or [1], f"{node.name}__shape")], 1, name=f"{node.name}__zeros")[0]
    lam = ctx.const(np.asarray(node.attrs.float("lam", 1.0), _np(se)), f"{node.name}__lam")
    return _exponential(ctx, node, zeros, lam, elem)


@translator("_random_exponential_like")
def _random_exponential_like(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    x = inputs[0]
    elem = ctx.elem(x)
    se = _sample_elem(elem)
    lam = ctx.const(np.asarray(node.attrs.float("lam", 1.0), _np(se)), f"{node.name}__lam")
    return _exponential(ctx, node, x, lam, elem)



@translator("_random_randint", "random_randint")
def _random_randint(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # random/sample_op.h: integers uniform on [low, high): low + floor(U * (high - low)) with U ~ U[0, 1) in double
    # (exactly uniform over the high - low values up to double rounding), in dtype int32 (default) or int64
    a = node.attrs
    name = a.str("dtype", "int32") or "int32"
    if name not in ("int32", "int64"):
        raise ExportError(f"node '{node.name}': {node.op} dtype='{name}' is not supported")
    shape = list(a.ints("shape"))
    if not shape or any(d <= 0 for d in shape):
        raise ExportError(f"node '{node.name}': {node.op} shape {tuple(shape)} has unknown (0) dims")
    low, high = float(a.str("low", "0") or 0), float(a.str("high", "1") or 1)
    _random_warn(ctx, node, "low + floor(RandomUniform * (high - low))")
    u = ctx.emit("RandomUniform", [], 1, name=f"{node.name}__u", dtype=TensorProto.DOUBLE, shape=shape)[0]
    scaled = ctx.emit("Mul", [u, ctx.const(np.asarray(high - low), f"{node.name}__width")], 1,
                      name=f"{node.name}__scaled")[0]
    k = ctx.emit("Floor", [scaled], 1, name=f"{node.name}__floor")[0]
    v = ctx.emit("Add", [k, ctx.const(np.asarray(low), f"{node.name}__low")], 1, name=f"{node.name}__shift")[0]
    return ctx.emit("Cast", [v], [out(ctx, node)], name=node.name, to=DTYPES[name])


@translator("_shuffle", "shuffle")
def _shuffle(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # random/shuffle_op.cc: a uniformly random permutation of the first axis; here the order of i.i.d. uniform
    # keys (TopK over all of them), which is uniform over permutations (ties have probability 0)
    x = inputs[0]
    n = node.name
    _random_warn(ctx, node, "Gather by the TopK order of RandomUniformLike keys")
    rows = ctx.emit("Slice", [ctx.emit("Shape", [x], 1, name=f"{n}__shape")[0], ctx.i64([0], f"{n}__s0"),
                              ctx.i64([1], f"{n}__s1")], 1, name=f"{n}__rows")[0]
    zeros = ctx.emit("ConstantOfShape", [rows], 1, name=f"{n}__zeros")[0]
    keys = ctx.emit("RandomUniformLike", [zeros], 1, name=f"{n}__keys", dtype=TensorProto.FLOAT)[0]
    _, order = ctx.emit("TopK", [keys, rows], 2, name=f"{n}__order", axis=0)
    return ctx.emit("Gather", [x, order], [out(ctx, node)], name=n, axis=0)


# ---- special functions: published approximations accurate to float32 precision ---------------------
_GILES_SMALL = (2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503,
                -0.00417768164, 0.246640727, 1.50140941)
_GILES_LARGE = (-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613,
                0.00943887047, 1.00167406, 2.83297682)


def _horner(ctx: ConversionContext, w: str, coeffs: tuple[float, ...], like: str, name: str) -> str:
    p = ctx.scalar(coeffs[0], like, f"{name}_c0")
    for i, c in enumerate(coeffs[1:], 1):
        p = ctx.emit("Add", [ctx.emit("Mul", [p, w], 1, name=f"{name}_m{i}")[0], ctx.scalar(c, like, f"{name}_c{i}")], 1,
                     name=f"{name}_a{i}")[0]
    return p


@translator("erfinv")
def erfinv(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # M. Giles, "Approximating the erfinv function" (GPU Gems 4, 2010): single-precision polynomials in
    # w = -log((1 - x)(1 + x)), relative error below 4e-7, evaluated in double and cast back; |x| = 1 gives
    # +-inf and |x| > 1 NaN, as erfinv does. (A Newton step on ONNX Erf would need double Erf, which
    # onnxruntime lacks; in float32 it loses more than it gains near |x| = 1.)
    x = inputs[0]
    n = node.name
    elem = ctx.elem(x)
    if elem == TensorProto.DOUBLE:
        ctx.warn(f"node '{n}' (erfinv) on float64 data is accurate to ~4e-7 relative (Giles' single-precision "
                 "approximation; ONNX has no erfinv); MXNet computes it in double")
    xd = ctx.emit("Cast", [x], 1, name=f"{n}__d", to=TensorProto.DOUBLE)[0]
    one = ctx.const(np.asarray(1.0), f"{n}__one")
    prod = ctx.emit("Mul", [ctx.emit("Sub", [one, xd], 1, name=f"{n}__1mx")[0],
                            ctx.emit("Add", [one, xd], 1, name=f"{n}__1px")[0]], 1, name=f"{n}__prod")[0]
    w = ctx.emit("Neg", [ctx.emit("Log", [prod], 1, name=f"{n}__log")[0]], 1, name=f"{n}__w")[0]
    small = _horner(ctx, ctx.emit("Sub", [w, ctx.const(np.asarray(2.5), f"{n}__2_5")], 1, name=f"{n}__ws")[0],
                    _GILES_SMALL, xd, f"{n}__ps")
    large = _horner(ctx, ctx.emit("Sub", [ctx.emit("Sqrt", [w], 1, name=f"{n}__sqrtw")[0],
                                          ctx.const(np.asarray(3.0), f"{n}__3")], 1, name=f"{n}__wl")[0],
                    _GILES_LARGE, xd, f"{n}__pl")
    is_small = ctx.emit("Less", [w, ctx.const(np.asarray(5.0), f"{n}__5")], 1, name=f"{n}__is_small")[0]
    y = ctx.emit("Mul", [ctx.emit("Where", [is_small, small, large], 1, name=f"{n}__p")[0], xd], 1, name=f"{n}__y0")[0]
    return ctx.emit("Cast", [y], [out(ctx, node)], name=n, to=elem)


# Lanczos approximation, g = 7, n = 9 (Godfrey's coefficients, as in Numerical Recipes 3rd ed. 6.1): relative
# error ~1e-15 for x >= 0.5; reflection gamma(x) gamma(1 - x) = pi / sin(pi x) below
_LANCZOS = (0.99999999999980993, 676.5203681218851, -1259.1392167224028, 771.32342877765313, -176.61502916214059,
            12.507343278686905, -0.13857109526572012, 9.9843695780195716e-6, 1.5056327351493116e-7)


def _lgamma_right(ctx: ConversionContext, z: str, name: str) -> str:
    """log(gamma(z)) for z >= 0.5, in double."""
    zm1 = ctx.emit("Sub", [z, ctx.const(np.asarray(1.0), f"{name}_one")], 1, name=f"{name}_zm1")[0]
    acc = ctx.const(np.asarray(_LANCZOS[0]), f"{name}_c0")
    for i, c in enumerate(_LANCZOS[1:], 1):
        term = ctx.emit("Div", [ctx.const(np.asarray(c), f"{name}_c{i}"),
                                ctx.emit("Add", [zm1, ctx.const(np.asarray(float(i)), f"{name}_i{i}")], 1,
                                         name=f"{name}_d{i}")[0]], 1, name=f"{name}_t{i}")[0]
        acc = ctx.emit("Add", [acc, term], 1, name=f"{name}_acc{i}")[0]
    t = ctx.emit("Add", [zm1, ctx.const(np.asarray(7.5), f"{name}_g")], 1, name=f"{name}_tt")[0]
    first = ctx.emit("Mul", [ctx.emit("Add", [zm1, ctx.const(np.asarray(0.5), f"{name}_h")], 1, name=f"{name}_zh")[0],
                             ctx.emit("Log", [t], 1, name=f"{name}_logt")[0]], 1, name=f"{name}_first")[0]
    r = ctx.emit("Sub", [first, t], 1, name=f"{name}_mt")[0]
    r = ctx.emit("Add", [r, ctx.emit("Log", [acc], 1, name=f"{name}_loga")[0]], 1, name=f"{name}_la")[0]
    return ctx.emit("Add", [r, ctx.const(np.asarray(0.5 * math.log(2 * math.pi)), f"{name}_l2pi")], 1,
                    name=f"{name}_lg")[0]


def _gamma_parts(ctx: ConversionContext, n: str, x: str) -> tuple[str, str]:
    """(log|gamma(x)|, sign of gamma(x)) in double, through the reflection formula for x < 0.5; ``n`` prefixes
    the node names."""
    xd = x if ctx.elem(x) == TensorProto.DOUBLE else ctx.emit("Cast", [x], 1, name=f"{n}__d", to=TensorProto.DOUBLE)[0]
    left = ctx.emit("Less", [xd, ctx.const(np.asarray(0.5), f"{n}__half")], 1, name=f"{n}__left")[0]
    z = ctx.emit("Where", [left, ctx.emit("Sub", [ctx.const(np.asarray(1.0), f"{n}__one"), xd], 1, name=f"{n}__1mx")[0],
                           xd], 1, name=f"{n}__z")[0]
    lg = _lgamma_right(ctx, z, f"{n}__lz")
    s = ctx.emit("Sin", [ctx.emit("Mul", [xd, ctx.const(np.asarray(math.pi), f"{n}__pi")], 1, name=f"{n}__pix")[0]], 1,
                 name=f"{n}__sin")[0]
    reflected = ctx.emit("Sub", [ctx.emit("Log", [ctx.emit("Div", [ctx.const(np.asarray(math.pi), f"{n}__pi2"),
                                                                   ctx.emit("Abs", [s], 1, name=f"{n}__abs")[0]], 1,
                                                          name=f"{n}__ratio")[0]], 1, name=f"{n}__logr")[0], lg], 1,
                         name=f"{n}__refl")[0]
    log_abs = ctx.emit("Where", [left, reflected, lg], 1, name=f"{n}__lgamma")[0]
    sign = ctx.emit("Where", [left, ctx.emit("Sign", [s], 1, name=f"{n}__sgn")[0],
                              ctx.const(np.asarray(1.0), f"{n}__pos")], 1, name=f"{n}__sign")[0]
    return log_abs, sign


@translator("gammaln")
def gammaln(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # mshadow_op.h gammaln = lgamma (log |gamma(x)|), here the Lanczos form in double cast to DType
    log_abs, _ = _gamma_parts(ctx, node.name, inputs[0])
    return ctx.emit("Cast", [log_abs], [out(ctx, node)], name=node.name, to=ctx.elem(inputs[0]))


@translator("gamma")
def gamma(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # mshadow_op.h gamma = tgamma: sign * exp(log |gamma(x)|) in double, cast to DType (overflow gives inf)
    log_abs, sign = _gamma_parts(ctx, node.name, inputs[0])
    g = ctx.emit("Mul", [sign, ctx.emit("Exp", [log_abs], 1, name=f"{node.name}__exp")[0]], 1,
                 name=f"{node.name}__signed")[0]
    return ctx.emit("Cast", [g], [out(ctx, node)], name=node.name, to=ctx.elem(inputs[0]))


# ---- histogram, correlation --------------------------------------------------------------------------------
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
    count = a.int("bin_cnt", None)
    if count is not None:
        lo, hi = (float(v) for v in (a.str("range", "(0, 1)") or "(0, 1)").strip("()[] ").split(","))
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


@translator("Correlation")
def Correlation(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # src/operator/correlation.cc (FlowNet): both inputs zero-padded by pad_size; output channel
    # (p, o) (p the row displacement index, o the column one, each in -r..r with r = max_displacement // stride2)
    # at (i, j) is the sum over a kernel_size window at (i*stride1 + max_disp, j*stride1 + max_disp) and all
    # channels of data1 * data2 shifted by (p, o) * stride2 (|data1 - data2| without is_multiply), divided by
    # kernel_size^2 * channels. Written as one shifted product per displacement, a channel mean and an
    # average pool (kernel_size, stride1): (2r + 1)^2 small branches.
    d1, d2 = inputs[:2]
    n = node.name
    a = node.attrs
    k = a.int("kernel_size", 1) or 1
    disp = a.int("max_displacement", 1) or 0
    s1, s2 = a.int("stride1", 1) or 1, a.int("stride2", 1) or 1
    pad = a.int("pad_size", 0) or 0
    multiply = a.bool("is_multiply", True)
    h, w = ctx.static_dims(d1, n, slice(2, 4))
    border = disp + (k - 1) // 2
    top_h = math.ceil((h + 2 * pad - 2 * border) / s1)
    top_w = math.ceil((w + 2 * pad - 2 * border) / s1)
    if top_h < 1 or top_w < 1:
        raise ExportError(f"node '{n}': Correlation output would be empty for input {h}x{w}")
    r = disp // s2
    p1 = ctx.emit("Pad", [d1, ctx.i64([0, 0, pad, pad, 0, 0, pad, pad], f"{n}__pads1")], 1, name=f"{n}__pad1")[0]
    # data2 padded by max_displacement more: the window of any displacement stays inside (those taps are 0)
    extra = pad + disp
    p2 = ctx.emit("Pad", [d2, ctx.i64([0, 0, extra, extra, 0, 0, extra, extra], f"{n}__pads2")], 1, name=f"{n}__pad2")[0]
    rows, cols = (top_h - 1) * s1 + k, (top_w - 1) * s1 + k
    win1 = ctx.emit("Slice", [p1, ctx.i64([disp, disp], f"{n}__w1b"), ctx.i64([disp + rows, disp + cols], f"{n}__w1e"),
                              ctx.i64([2, 3], f"{n}__axes")], 1, name=f"{n}__win1")[0]
    branches = []
    for p in range(-r, r + 1):
        for o in range(-r, r + 1):
            y0, x0 = disp + p * s2 + disp, disp + o * s2 + disp  # in p2's coordinates (shifted by disp more)
            tag = f"{p + r}_{o + r}"
            win2 = ctx.emit("Slice", [p2, ctx.i64([y0, x0], f"{n}__b{tag}"), ctx.i64([y0 + rows, x0 + cols], f"{n}__e{tag}"),
                                      ctx.i64([2, 3], f"{n}__axes{tag}")], 1, name=f"{n}__win{tag}")[0]
            if multiply:
                v = ctx.emit("Mul", [win1, win2], 1, name=f"{n}__prod{tag}")[0]
            else:
                v = ctx.emit("Abs", [ctx.emit("Sub", [win1, win2], 1, name=f"{n}__diff{tag}")[0]], 1,
                             name=f"{n}__absdiff{tag}")[0]
            m = ctx.reduce("ReduceMean", v, [1], True, name=f"{n}__cmean{tag}")
            if k > 1 or s1 > 1:
                m = ctx.emit("AveragePool", [m], 1, name=f"{n}__pool{tag}", kernel_shape=[k, k], strides=[s1, s1])[0]
            branches.append(m)
    cat = ctx.emit("Concat", branches, 1, name=f"{n}__concat", axis=1)[0]
    return ctx.emit("Identity", [cat], [out(ctx, node)], name=n)


# ---- densities of the sampler families (random/pdf_op.h), evaluated in double and cast to the sample dtype ----
_PDF_LAWS = ("normal", "uniform", "exponential", "gamma", "poisson", "negative_binomial",
             "generalized_negative_binomial", "dirichlet")


@translator(*(f"{p}random_pdf_{law}" for p in ("", "_") for law in _PDF_LAWS))
def random_pdf(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # sample has the parameters' shape plus trailing sample dims (dirichlet: plus the trailing k);
    # is_log gives the log-density
    law = node.op.lstrip("_")[len("random_pdf_"):]
    n = node.name
    sample, params = inputs[0], inputs[1:]
    rs, rp = ctx.rank(sample, n), ctx.rank(params[0], n)

    def d(t: str, tag: str) -> str:
        return ctx.emit("Cast", [t], 1, name=f"{n}__{tag}", to=TensorProto.DOUBLE)[0]

    def c(v: float, tag: str) -> str:
        return ctx.const(np.asarray(v), f"{n}__{tag}")

    def op(kind: str, *args: str, tag: str) -> str:
        return ctx.emit(kind, list(args), 1, name=f"{n}__{tag}")[0]

    def lgamma(t: str, tag: str) -> str:
        return _gamma_parts(ctx, f"{n}__{tag}", t)[0]

    x = d(sample, "x")
    if law == "dirichlet":
        axes = list(range(rp - 1, rs - 1))
        alpha = d(params[0], "p0")
        alpha = ctx.unsqueeze(alpha, axes, name=f"{n}__alpha_u") if axes else alpha
        terms = op("Mul", op("Sub", alpha, c(1.0, "one"), tag="am1"), op("Log", x, tag="logx"), tag="terms")
        total = ctx.reduce("ReduceSum", terms, [-1], False, name=f"{n}__sum_terms")
        sum_alpha = ctx.reduce("ReduceSum", alpha, [-1], False, name=f"{n}__sum_alpha")
        sum_lg = ctx.reduce("ReduceSum", lgamma(alpha, "lga"), [-1], False, name=f"{n}__sum_lgamma")
        lpdf = op("Add", total, op("Sub", lgamma(sum_alpha, "lgs"), sum_lg, tag="norm"), tag="lpdf")
    else:
        axes = list(range(rp, rs))
        ps = [d(p, f"p{i}") for i, p in enumerate(params)]
        ps = [ctx.unsqueeze(p, axes, name=f"{n}__p{i}_u") if axes else p for i, p in enumerate(ps)]
        if law == "normal":  # exponent - log(sqrt(2 pi) sigma)
            u, s = ps
            z = op("Div", op("Sub", x, u, tag="xu"), s, tag="z")
            lpdf = op("Sub", op("Mul", op("Mul", z, z, tag="z2"), c(-0.5, "mhalf"), tag="expo"),
                      op("Log", op("Mul", s, c(math.sqrt(2 * math.pi), "s2pi"), tag="normalizer"), tag="lognorm"),
                      tag="lpdf")
        elif law == "uniform":  # 1 / (high - low) everywhere (no support check, nor of the sign of the width)
            lo, hi = ps
            width = op("Sub", hi, lo, tag="width")
            value = (op("Neg", op("Log", width, tag="logw"), tag="lw") if node.attrs.bool("is_log", False)
                     else op("Reciprocal", width, tag="inv"))
            value = op("Expand", value, op("Shape", sample, tag="shape"), tag="pdf")
            return ctx.emit("Cast", [value], [out(ctx, node)], name=n, to=ctx.elem(sample))
        elif law == "exponential":
            (lam,) = ps
            lpdf = op("Sub", op("Log", lam, tag="loglam"), op("Mul", lam, x, tag="lx"), tag="lpdf")
        elif law == "gamma":  # alpha log(beta) + (alpha - 1) log x - beta x - lgamma(alpha) (beta is a rate)
            a, b = ps
            lpdf = op("Sub", op("Sub", op("Add", op("Mul", a, op("Log", b, tag="logb"), tag="alogb"),
                                          op("Mul", op("Sub", a, c(1.0, "one"), tag="am1"), op("Log", x, tag="logx"),
                                             tag="xterm"), tag="s1"),
                                op("Mul", b, x, tag="bx"), tag="s2"), lgamma(a, "lga"), tag="lpdf")
        elif law == "poisson":  # x log(lam) - lgamma(x + 1) - lam
            (lam,) = ps
            lpdf = op("Sub", op("Sub", op("Mul", x, op("Log", lam, tag="loglam"), tag="xl"),
                                lgamma(op("Add", x, c(1.0, "one"), tag="x1"), "lgx1"), tag="s1"), lam, tag="lpdf")
        else:  # negative binomial (limit, failure prob p); generalized: limit = 1/alpha, p = 1/(mu alpha + 1)
            if law == "negative_binomial":
                lim, p = ps
            else:
                mu, al = ps
                lim = op("Div", c(1.0, "one_l"), al, tag="limit")
                p = op("Div", c(1.0, "one_p"), op("Add", op("Mul", mu, al, tag="mual"), c(1.0, "one_d"), tag="den"),
                       tag="prob")
            comb = op("Sub", op("Sub", lgamma(op("Add", x, lim, tag="xl"), "lgxl"),
                                lgamma(op("Add", x, c(1.0, "one"), tag="x1"), "lgx1"), tag="c1"),
                      lgamma(lim, "lgl"), tag="comb")
            lpdf = op("Add", op("Add", comb, op("Mul", lim, op("Log", p, tag="logp"), tag="llp"), tag="s1"),
                      op("Mul", x, op("Log", op("Sub", c(1.0, "one_q"), p, tag="q"), tag="logq"), tag="xlq"),
                      tag="lpdf")
    value = lpdf if node.attrs.bool("is_log", False) else op("Exp", lpdf, tag="pdf")
    return ctx.emit("Cast", [value], [out(ctx, node)], name=n, to=ctx.elem(sample))
