"""Elementwise formulas and special functions MXNet has as single ops and ONNX does not.

Logical and/or/xor (tensor and scalar forms), hypot, cbrt / rcbrt, smooth_l1, ``_contrib_quadratic``,
softmin, softmax_cross_entropy, ``_contrib_allclose``; erfinv, gammaln and gamma through published
approximations accurate to float32 precision (cited at each).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from onnx import TensorProto

from adapters.mxnet.context import ConversionContext
from adapters.mxnet.registry import TRANSLATORS, out, translator
from adapters.mxnet.symbol import MXNode

# ---- elementwise ---------------------------------------------------------------------------------------
_LOGICAL = {"_logical_and": "And", "_Logical_And": "And", "_logical_or": "Or", "_Logical_Or": "Or",
            "_logical_xor": "Xor", "_Logical_Xor": "Xor"}
_LOGICAL_SCALAR = {"_logical_and_scalar": "And", "_LogicalAndScalar": "And", "_logical_or_scalar": "Or",
                   "_LogicalOrScalar": "Or", "_logical_xor_scalar": "Xor", "_LogicalXorScalar": "Xor"}


def _logical(ctx: ConversionContext, node: MXNode, op: str, a: str, b: str, like: str) -> list[str]:
    r = ctx.emit(op, [ctx.as_bool(a, f"{node.name}__a"), ctx.as_bool(b, f"{node.name}__b")], 1,
                 name=f"{node.name}__{op.lower()}")[0]
    return ctx.emit("Cast", [r], [out(ctx, node)], name=node.name, to=ctx.elem(like) or TensorProto.FLOAT)


@translator(*_LOGICAL)
def _logical_and(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # mshadow_op.h logical_and / or / xor: 1 or 0 in the input dtype
    return _logical(ctx, node, _LOGICAL[node.op], inputs[0], inputs[1], inputs[0])


def _scalar(ctx: ConversionContext, node: MXNode, x: str, default: float = 0.0) -> str:
    """The op's ``scalar`` attribute cast to x's dtype (float32 of the decimal for floats, else the double)."""
    text = node.attrs.optional_str("scalar", str(default)) or str(default)
    value = node.attrs.optional_float("scalar", default) if ctx.np_dtype(x).kind == "f" else float(text)
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
    sigma = float(node.attrs.optional_float("scalar", 1.0) or 0.0)
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
    a, b, c = (float(node.attrs.optional_float(k, 0.0) or 0.0) for k in ("a", "b", "c"))
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
    idx = ctx.unsqueeze(ctx.as_int64(label, f"{n}__label"), [1], name=f"{n}__label_col")
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
    rtol, atol = float(at.optional_float("rtol", 1e-5) or 0.0), float(at.optional_float("atol", 1e-8) or 0.0)
    diff = ctx.emit("Abs", [ctx.emit("Sub", [a, b], 1, name=f"{n}__sub")[0]], 1, name=f"{n}__diff")[0]
    bound = ctx.emit("Add", [ctx.emit("Mul", [ctx.emit("Abs", [b], 1, name=f"{n}__absb")[0],
                                              ctx.scalar(rtol, b, f"{n}__rtol")], 1, name=f"{n}__rel")[0],
                             ctx.scalar(atol, b, f"{n}__atol")], 1, name=f"{n}__bound")[0]
    close = ctx.emit("LessOrEqual", [diff, bound], 1, name=f"{n}__close")[0]
    if at.optional_bool("equal_nan", True) and ctx.np_dtype(a).kind == "f":
        both = ctx.emit("And", [ctx.emit("IsNaN", [a], 1, name=f"{n}__nana")[0],
                                ctx.emit("IsNaN", [b], 1, name=f"{n}__nanb")[0]], 1, name=f"{n}__nans")[0]
        close = ctx.emit("Or", [close, both], 1, name=f"{n}__close_nan")[0]
    as_int = ctx.emit("Cast", [close], 1, name=f"{n}__int", to=TensorProto.INT32)[0]
    every = ctx.reduce("ReduceMin", as_int, None, False, name=f"{n}__all")
    return ctx.emit("Cast", [every], [out(ctx, node)], name=n, to=TensorProto.UINT8)


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


def gamma_parts(ctx: ConversionContext, n: str, x: str) -> tuple[str, str]:
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
    log_abs, _ = gamma_parts(ctx, node.name, inputs[0])
    return ctx.emit("Cast", [log_abs], [out(ctx, node)], name=node.name, to=ctx.elem(inputs[0]))


@translator("gamma")
def gamma(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # mshadow_op.h gamma = tgamma: sign * exp(log |gamma(x)|) in double, cast to DType (overflow gives inf)
    log_abs, sign = gamma_parts(ctx, node.name, inputs[0])
    g = ctx.emit("Mul", [sign, ctx.emit("Exp", [log_abs], 1, name=f"{node.name}__exp")[0]], 1,
                 name=f"{node.name}__signed")[0]
    return ctx.emit("Cast", [g], [out(ctx, node)], name=node.name, to=ctx.elem(inputs[0]))
