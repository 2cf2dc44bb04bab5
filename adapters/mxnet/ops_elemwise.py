"""Translators for MXNet elementwise ops ONNX has no single op for: mod with MXNet's sign rule,
logical_not (0/1 in the input dtype), log2, hard_sigmoid, rint / fix, log1p / expm1 (accurate near 0),
log10, degrees / radians, and the trigonometric / hyperbolic ops with an ONNX counterpart.

MXNet's mod (src/operator/mshadow_op.h, ``struct mod``) returns 0 when the divisor is 0 and otherwise
takes the sign of the divisor (Python's %): for floats that is C fmod plus the divisor when the signs
of remainder and divisor differ; for integers ONNX Mod(fmod=0) already follows the divisor's sign,
only the division by zero (undefined in ONNX, a crash in onnxruntime) is kept away by dividing by 1.
"""

from __future__ import annotations

import math

import numpy as np
from onnx import TensorProto

from adapters.mxnet.context import ConversionContext
from adapters.mxnet.registry import out, translator
from adapters.mxnet.symbol import MXNode

_MOD_SCALAR = {"_mod_scalar": False, "_ModScalar": False, "_rmod_scalar": True, "_RModScalar": True}


def _mxnet_mod(ctx: ConversionContext, node: MXNode, a: str, b: str) -> list[str]:
    n = node.name
    zero = ctx.scalar(0, a, f"{n}__zero")
    b_zero = ctx.emit("Equal", [b, zero], 1, name=f"{n}__b_zero")[0]
    if ctx.np_dtype(a).kind != "f":
        safe = ctx.emit("Where", [b_zero, ctx.scalar(1, a, f"{n}__one"), b], 1, name=f"{n}__safe")[0]
        r = ctx.emit("Mod", [a, safe], 1, name=f"{n}__mod", fmod=0)[0]
    else:
        r = ctx.emit("Mod", [a, b], 1, name=f"{n}__fmod", fmod=1)[0]
        nonzero = ctx.emit("Not", [ctx.emit("Equal", [r, zero], 1, name=f"{n}__r_zero")[0]], 1, name=f"{n}__nz")[0]
        signs = ctx.emit("Xor", [ctx.emit("Less", [r, zero], 1, name=f"{n}__r_neg")[0],
                                 ctx.emit("Less", [b, zero], 1, name=f"{n}__b_neg")[0]], 1, name=f"{n}__signs")[0]
        fix = ctx.emit("And", [nonzero, signs], 1, name=f"{n}__fix")[0]
        shifted = ctx.emit("Add", [r, b], 1, name=f"{n}__shift")[0]
        r = ctx.emit("Where", [fix, shifted, r], 1, name=f"{n}__python")[0]
    return ctx.emit("Where", [b_zero, zero, r], [out(ctx, node)], name=n)


@translator("broadcast_mod", "_mod", "_Mod")
def broadcast_mod(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    return _mxnet_mod(ctx, node, inputs[0], inputs[1])


@translator(*_MOD_SCALAR)
def _mod_scalar(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # the scalar is a double parameter cast to DType (elemwise_binary_scalar_op.h)
    x = inputs[0]
    s = ctx.scalar(float(node.attrs.optional_str("scalar", "0") or 0), x, f"{node.name}__scalar")
    a, b = (s, x) if _MOD_SCALAR[node.op] else (x, s)
    return _mxnet_mod(ctx, node, a, b)


@translator("logical_not")
def logical_not(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # mshadow_op.h nt: 1 where x == 0 (a NaN is nonzero), in the input dtype
    x = inputs[0]
    z = ctx.emit("Equal", [x, ctx.scalar(0, x, f"{node.name}__zero")], 1, name=f"{node.name}__eq")[0]
    return ctx.emit("Cast", [z], [out(ctx, node)], name=node.name, to=ctx.elem(x) or TensorProto.FLOAT)


def _log2_thresholds(bits: int, ftype: type[np.floating]) -> np.ndarray:
    """For k = 1..bits-1, the smallest ``ftype`` t with log2(t) >= k in that precision (just below 2^k for
    large k, where log2 rounds up to k), found by bisection over the float's bit patterns."""
    itype = np.int32 if ftype is np.float32 else np.int64
    out = []
    for k in range(1, bits):
        lo, hi = (int(np.asarray(2.0**e, ftype).view(itype)) for e in (k - 1, k))
        while lo < hi:
            mid = (lo + hi) // 2
            if np.log2(itype(mid).view(ftype)) >= k:
                hi = mid
            else:
                lo = mid + 1
        out.append(itype(lo).view(ftype))
    return np.asarray(out, ftype)


@translator("log2")
def log2(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # MXNet computes log2f(float(x)) for every type but double and int64 (log2 in double there), cast back
    # to DType: floats as log(x) / log(2) in float32 (within an ulp or two of log2f); integers truncate it,
    # so the result is the number of thresholds ~2^k (as log2 rounds in that precision) that x (converted
    # as MXNet converts it) reaches - exact; x <= 0, whose -inf / NaN MXNet casts to an undefined
    # integer, gives 0
    x = inputs[0]
    dtype = ctx.np_dtype(x)
    if dtype.kind in "iu":
        wide = dtype == np.int64
        xf = ctx.emit("Cast", [x], 1, name=f"{node.name}__float", to=TensorProto.DOUBLE if wide else TensorProto.FLOAT)[0]
        col = ctx.unsqueeze(xf, [-1], name=f"{node.name}__col")
        pow2 = ctx.const(_log2_thresholds(8 * dtype.itemsize, np.float64 if wide else np.float32), f"{node.name}__pow2")
        ge = ctx.emit("GreaterOrEqual", [col, pow2], 1, name=f"{node.name}__ge")[0]
        n = ctx.emit("Cast", [ge], 1, name=f"{node.name}__count", to=TensorProto.INT64)[0]
        r = ctx.reduce("ReduceSum", n, [-1], False, name=f"{node.name}__sum")
        return ctx.emit("Cast", [r], [out(ctx, node)], name=node.name, to=ctx.elem(x))
    y = x if dtype != np.float16 else ctx.emit("Cast", [x], 1, name=f"{node.name}__float", to=TensorProto.FLOAT)[0]
    ln = ctx.emit("Log", [y], 1, name=f"{node.name}__log")[0]
    ratio = [out(ctx, node)] if y == x else 1
    r = ctx.emit("Div", [ln, ctx.scalar(math.log(2.0), y, f"{node.name}__ln2")], ratio, name=node.name)[0]
    return [r] if y == x else ctx.emit("Cast", [r], [out(ctx, node)], name=f"{node.name}__half", to=ctx.elem(x))


@translator("hard_sigmoid")
def hard_sigmoid(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # max(0, min(1, alpha * x + beta)), alpha=0.2, beta=0.5 (elemwise_unary_op_basic.cc), as ONNX HardSigmoid
    # onnxruntime implements HardSigmoid for float only: other dtypes as Mul/Add/Clip with alpha, beta
    # rounded to float32 (MXNet's params are floats) and cast to DType, as MXNet does
    a = node.attrs
    x = inputs[0]
    alpha, beta = a.optional_float("alpha", 0.2) or np.float32(0), a.optional_float("beta", 0.5) or np.float32(0)
    if ctx.elem(x) == TensorProto.FLOAT:
        return ctx.emit("HardSigmoid", [x], [out(ctx, node)], name=node.name, alpha=float(alpha), beta=float(beta))
    y = ctx.emit("Mul", [x, ctx.scalar(alpha, x, f"{node.name}__alpha")], 1, name=f"{node.name}__mul")[0]
    y = ctx.emit("Add", [y, ctx.scalar(beta, x, f"{node.name}__beta")], 1, name=f"{node.name}__add")[0]
    return ctx.emit("Clip", [y, ctx.scalar(0, x, f"{node.name}__lo"), ctx.scalar(1, x, f"{node.name}__hi")],
                    [out(ctx, node)], name=node.name)


# ---- unary math without a translator elsewhere: one ONNX op each, or a short exact formula ----------
# (float inputs; MXNet computes these in float for float16/float32, in double for float64)
UNARY_MATH: dict[str, str] = {
    "tan": "Tan", "arcsin": "Asin", "arccos": "Acos", "arctan": "Atan", "sinh": "Sinh", "cosh": "Cosh",
    "arcsinh": "Asinh", "arccosh": "Acosh", "arctanh": "Atanh",
}


@translator(*UNARY_MATH)
def tan(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # onnxruntime implements these for float and float16 only: float64 data is computed in float32 (and the
    # export says so; ONNX itself allows double, so another runtime could do better)
    x = inputs[0]
    op = UNARY_MATH[node.op]
    if ctx.elem(x) != TensorProto.DOUBLE:
        return ctx.emit(op, [x], [out(ctx, node)], name=node.name)
    ctx.warn(f"node '{node.name}' ({node.op}) on float64 data is computed in float32 precision (onnxruntime has no "
             f"float64 {op}); MXNet computes it in double")
    y = ctx.emit("Cast", [x], 1, name=f"{node.name}__float", to=TensorProto.FLOAT)[0]
    y = ctx.emit(op, [y], 1, name=f"{node.name}__{op.lower()}")[0]
    return ctx.emit("Cast", [y], [out(ctx, node)], name=node.name, to=TensorProto.DOUBLE)


@translator("rint")
def rint(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # MXNet's rint (mshadow_op.h) is not C rint: floor if x - floor(x) <= ceil(x) - x else ceil, so exact
    # halves round down (2.5 -> 2, -2.5 -> -3), unlike ONNX Round's half-to-even
    x = inputs[0]
    n = node.name
    f = ctx.emit("Floor", [x], 1, name=f"{n}__floor")[0]
    c = ctx.emit("Ceil", [x], 1, name=f"{n}__ceil")[0]
    lower = ctx.emit("LessOrEqual", [ctx.emit("Sub", [x, f], 1, name=f"{n}__below")[0],
                                     ctx.emit("Sub", [c, x], 1, name=f"{n}__above")[0]], 1, name=f"{n}__nearer")[0]
    return ctx.emit("Where", [lower, f, c], [out(ctx, node)], name=n)


@translator("fix", "trunc")
def fix(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # round toward zero: sign(x) * floor(|x|)
    x = inputs[0]
    f = ctx.emit("Floor", [ctx.emit("Abs", [x], 1, name=f"{node.name}__abs")[0]], 1, name=f"{node.name}__floor")[0]
    return ctx.emit("Mul", [ctx.emit("Sign", [x], 1, name=f"{node.name}__sign")[0], f], [out(ctx, node)],
                    name=node.name)


@translator("log10")
def log10(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    x = inputs[0]
    ln = ctx.emit("Log", [x], 1, name=f"{node.name}__log")[0]
    return ctx.emit("Div", [ln, ctx.scalar(math.log(10.0), x, f"{node.name}__ln10")], [out(ctx, node)], name=node.name)


@translator("degrees", "radians")
def degrees(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    x = inputs[0]
    factor = 180.0 / math.pi if node.op == "degrees" else math.pi / 180.0
    return ctx.emit("Mul", [x, ctx.scalar(factor, x, f"{node.name}__factor")], [out(ctx, node)], name=node.name)


@translator("log1p")
def log1p(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # log(1 + x) loses x's digits for small x; with u = 1 + x rounded, log(u) * x / (u - 1) is accurate
    # to a few ulps (Goldberg, "What every computer scientist should know about floating-point", thm. 4)
    x = inputs[0]
    n = node.name
    u = ctx.emit("Add", [x, ctx.scalar(1, x, f"{n}__one")], 1, name=f"{n}__u")[0]
    d = ctx.emit("Sub", [u, ctx.scalar(1, x, f"{n}__one")], 1, name=f"{n}__d")[0]
    ratio = ctx.emit("Div", [x, d], 1, name=f"{n}__ratio")[0]
    r = ctx.emit("Mul", [ctx.emit("Log", [u], 1, name=f"{n}__log")[0], ratio], 1, name=f"{n}__scaled")[0]
    tiny = ctx.emit("Equal", [d, ctx.scalar(0, x, f"{n}__zero")], 1, name=f"{n}__tiny")[0]
    return ctx.emit("Where", [tiny, x, r], [out(ctx, node)], name=n)


@translator("expm1")
def expm1(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # exp(x) - 1 loses x's digits for small x; with u = exp(x), (u - 1) * x / log(u) is accurate (Kahan);
    # u == 1 gives x, and u - 1 == -1 (x very negative) gives -1
    x = inputs[0]
    n = node.name
    u = ctx.emit("Exp", [x], 1, name=f"{n}__exp")[0]
    d = ctx.emit("Sub", [u, ctx.scalar(1, x, f"{n}__one")], 1, name=f"{n}__d")[0]
    r = ctx.emit("Div", [ctx.emit("Mul", [d, x], 1, name=f"{n}__dx")[0],
                         ctx.emit("Log", [u], 1, name=f"{n}__log")[0]], 1, name=f"{n}__scaled")[0]
    r = ctx.emit("Where", [ctx.emit("Equal", [d, ctx.scalar(-1, x, f"{n}__m1")], 1, name=f"{n}__sat")[0], d, r], 1,
                 name=f"{n}__saturate")[0]
    tiny = ctx.emit("Equal", [d, ctx.scalar(0, x, f"{n}__zero")], 1, name=f"{n}__tiny")[0]
    return ctx.emit("Where", [tiny, x, r], [out(ctx, node)], name=n)
