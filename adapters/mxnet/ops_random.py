"""MXNet's ``random`` / ``sample`` namespaces: per-row and extra samplers (``_sample_normal``,
``_sample_uniform``, exponential, randint, shuffle) as RandomUniformLike / RandomNormalLike scaled - same
distribution, other values, so validation compares their outputs by shape and dtype - and the densities
of the sampler families (``random_pdf_*``, random/pdf_op.h) evaluated in double."""

from __future__ import annotations

import math

import numpy as np
from onnx import TensorProto

from adapters.mxnet.context import ConversionContext
from adapters.mxnet.ops_special import gamma_parts
from adapters.mxnet.ops_tensor import DTYPES
from adapters.mxnet.registry import out, translator
from adapters.mxnet.symbol import MXNode
from bridge.errors import ExportError


# ---- per-row and extra samplers (same distribution, other values) ---------------------------------------------
def _random_warn(ctx: ConversionContext, node: MXNode, how: str) -> None:
    ctx.warn(f"node '{node.name}' ({node.op}) samples random numbers: converted to {how} (same distribution, "
             "shape and dtype, different values); validation compares this output's shape and dtype only")


def _out_dtype(node: MXNode, default: int = TensorProto.FLOAT) -> int:
    name = node.attrs.optional_str("dtype")
    if name is None:
        return default
    if name not in ("float16", "float32", "float64"):
        raise ExportError(f"node '{node.name}': {node.op} dtype='{name}' is not supported")
    return DTYPES[name]


def _row_params(ctx: ConversionContext, node: MXNode, params: list[str], elem: int) -> tuple[list[str], str]:
    """Parameters (batch shape S) cast to the sample dtype and unsqueezed over ``shape``, and zeros of S + shape."""
    n = node.name
    extra = list(node.attrs.optional_ints("shape"))
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
    shape = list(node.attrs.optional_ints("shape"))
    if any(d <= 0 for d in shape):
        raise ExportError(f"node '{node.name}': {node.op} shape {tuple(shape)} has unknown (0) dims")
    zeros = ctx.emit("Expand", [ctx.const(np.zeros((), np.float32), f"{node.name}__zero"),
                                ctx.i64(shape or [1], f"{node.name}__shape")], 1, name=f"{node.name}__zeros")[0]
    lam = ctx.const(np.asarray(node.attrs.optional_float("lam", 1.0), _np(se)), f"{node.name}__lam")
    return _exponential(ctx, node, zeros, lam, elem)


@translator("_random_exponential_like")
def _random_exponential_like(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    x = inputs[0]
    elem = ctx.elem(x)
    se = _sample_elem(elem)
    lam = ctx.const(np.asarray(node.attrs.optional_float("lam", 1.0), _np(se)), f"{node.name}__lam")
    return _exponential(ctx, node, x, lam, elem)



@translator("_random_randint", "random_randint")
def _random_randint(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # random/sample_op.h: integers uniform on [low, high): low + floor(U * (high - low)) with U ~ U[0, 1) in double
    # (exactly uniform over the high - low values up to double rounding), in dtype int32 (default) or int64
    a = node.attrs
    name = a.optional_str("dtype", "int32") or "int32"
    if name not in ("int32", "int64"):
        raise ExportError(f"node '{node.name}': {node.op} dtype='{name}' is not supported")
    shape = list(a.optional_ints("shape"))
    if not shape or any(d <= 0 for d in shape):
        raise ExportError(f"node '{node.name}': {node.op} shape {tuple(shape)} has unknown (0) dims")
    low, high = float(a.optional_str("low", "0") or 0), float(a.optional_str("high", "1") or 1)
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
        return gamma_parts(ctx, f"{n}__{tag}", t)[0]

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
            value = (op("Neg", op("Log", width, tag="logw"), tag="lw") if node.attrs.optional_bool("is_log", False)
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
    value = lpdf if node.attrs.optional_bool("is_log", False) else op("Exp", lpdf, tag="pdf")
    return ctx.emit("Cast", [value], [out(ctx, node)], name=n, to=ctx.elem(sample))
