"""Normalisation layers beyond BatchNorm: LRN, LayerNorm, InstanceNorm, GroupNorm and
``_contrib_BatchNormWithReLU``, each as standard ONNX at the target opset (formulas from the MXNet 1.9
operator sources cited at each translator; inference semantics only)."""

from __future__ import annotations

import dataclasses

from adapters.mxnet.context import ConversionContext
from adapters.mxnet.registry import TRANSLATORS, out, translator
from adapters.mxnet.symbol import MXNode

# ---- normalisation ----------------------------------------------------------------------------


@translator("LRN")
def LRN(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # MXNet src/operator/nn/lrn.cc: y = x / (knorm + alpha/nsize * sum_{window} x^2)^beta, ONNX LRN's formula
    a = node.attrs
    return ctx.emit("LRN", inputs[:1], [out(ctx, node)], name=node.name, size=a.required_int("nsize"),
                    alpha=float(a.optional_float("alpha", 1e-4) or 0.0), beta=float(a.optional_float("beta", 0.75) or 0.0),
                    bias=float(a.optional_float("knorm", 2.0) or 0.0))


def _along(ctx: ConversionContext, node: MXNode, t: str, axis: int, rank: int) -> str:
    """A per-channel vector reshaped to broadcast along ``axis`` of a rank-``rank`` tensor."""
    if axis == rank - 1:
        return t
    return ctx.emit("Reshape", [t, ctx.i64([-1] + [1] * (rank - 1 - axis), f"{node.name}__bshape")], 1,
                    name=f"{node.name}__bcast")[0]


@translator("LayerNorm")
def LayerNorm(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # MXNet src/operator/nn/layer_norm.cc: normalises over the single axis ``axis`` (default -1),
    # y = (x - mean) / sqrt(var + eps) * gamma + beta, eps default 1e-5; output_mean_var adds the mean and
    # std = sqrt(var + eps), both with ``axis`` kept as size 1. ONNX LayerNormalization (opset 17)
    # normalises over axis..last, so it is used for the last axis only; otherwise, and below 17, the
    # same formula is written out.
    a = node.attrs
    x, gamma, beta = inputs[:3]
    rank = ctx.rank(x, node.name)
    axis = a.optional_int("axis", -1) or 0
    axis = axis + rank if axis < 0 else axis
    eps = float(a.optional_float("eps", 1e-5) or 0.0)
    mean_var = a.optional_bool("output_mean_var", False)
    names = ["output", "mean", "std"] if mean_var else ["output"]
    outs = [ctx.reserve(f"{node.name}_{n}") for n in names]
    if ctx.opset >= 17 and axis == rank - 1 and not mean_var:
        return ctx.emit("LayerNormalization", [x, gamma, beta], outs, name=node.name, axis=-1, epsilon=eps)
    mean = ctx.reduce("ReduceMean", x, [axis], True, name=f"{node.name}__mean",
                      output=outs[1] if mean_var else None)
    d = ctx.emit("Sub", [x, mean], 1, name=f"{node.name}__center")[0]
    var = ctx.reduce("ReduceMean", ctx.emit("Mul", [d, d], 1, name=f"{node.name}__sq")[0], [axis], True,
                     name=f"{node.name}__var")
    ve = ctx.emit("Add", [var, ctx.scalar(eps, x, f"{node.name}__eps")], 1, name=f"{node.name}__var_eps")[0]
    std = ctx.emit("Sqrt", [ve], [outs[2]] if mean_var else 1, name=f"{node.name}__std")[0]
    nrm = ctx.emit("Div", [d, std], 1, name=f"{node.name}__norm")[0]
    scaled = ctx.emit("Mul", [nrm, _along(ctx, node, gamma, axis, rank)], 1, name=f"{node.name}__scale")[0]
    ctx.emit("Add", [scaled, _along(ctx, node, beta, axis, rank)], [outs[0]], name=node.name)
    return outs


@translator("InstanceNorm")
def InstanceNorm(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # MXNet src/operator/instance_norm-inl.h: per sample and channel over the spatial axes,
    # (x - mean) / sqrt(var + eps) * gamma + beta, eps default 1e-3: ONNX InstanceNormalization
    eps = float(node.attrs.optional_float("eps", 1e-3) or 0.0)
    return ctx.emit("InstanceNormalization", inputs[:3], [out(ctx, node)], name=node.name, epsilon=eps)


@translator("GroupNorm")
def GroupNorm(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # src/operator/nn/group_norm-inl.h: x (N, C, ...) viewed as (N, G, C/G * ...), normalised per group with
    # population variance, eps default 1e-5; gamma / beta have one value per group in MXNet 1.9.1 (per
    # channel when their length is C); output_mean_var adds mean and std (N, G)
    x, gamma, beta = inputs[:3]
    a = node.attrs
    n = node.name
    groups = a.optional_int("num_groups", 1) or 1
    eps = float(a.optional_float("eps", 1e-5) or 0.0)
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
    if not a.optional_bool("output_mean_var", False):
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
