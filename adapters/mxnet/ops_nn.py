"""Translators for MXNet's neural-network layers (convolution, normalisation, pooling, activations).

Each function turns one MXNet node into standard ONNX (default domain). Formulas follow the MXNet
1.9 operator sources cited at each translator; inference semantics only (is_train=False).
"""

from __future__ import annotations

import math

import numpy as np
from onnx import TensorProto

from adapters.mxnet.context import ConversionContext
from adapters.mxnet.registry import out, translator
from adapters.mxnet.symbol import MXNode
from bridge.errors import ExportError

_SPATIAL_LAYOUTS = {None, "NCW", "NCHW", "NCDHW"}


def _check_layout(node: MXNode) -> None:
    layout = node.attrs.optional_str("layout")
    if layout not in _SPATIAL_LAYOUTS:
        raise ExportError(f"node '{node.name}' ({node.op}): layout {layout} is not supported, only channels-first")


def _spatial(node: MXNode, key: str, n: int, default: int) -> list[int]:
    v = list(node.attrs.optional_ints(key))
    return v if v else [default] * n


@translator("Convolution")
def Convolution(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # as in MXNet src/operator/nn/convolution-inl.h: weight (F, C/group, *kernel), optional bias
    _check_layout(node)
    a = node.attrs
    kernel = list(a.optional_ints("kernel"))
    n = len(kernel)
    pad = _spatial(node, "pad", n, 0)
    args = inputs[:2] if a.optional_bool("no_bias", False) else inputs[:3]
    return ctx.emit(
        "Conv", args, [out(ctx, node)], name=node.name,
        kernel_shape=kernel, strides=_spatial(node, "stride", n, 1), dilations=_spatial(node, "dilate", n, 1),
        pads=pad + pad, group=a.optional_int("num_group", 1),
    )


@translator("Deconvolution")
def Deconvolution(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # as in MXNet src/operator/nn/deconvolution-inl.h (InferPad): no_bias defaults to True; with
    # target_shape, total = stride*(in-1) + dilated_kernel - target, pad = ceil(total/2), adj = total % 2
    _check_layout(node)
    a = node.attrs
    kernel = list(a.optional_ints("kernel"))
    n = len(kernel)
    stride = _spatial(node, "stride", n, 1)
    dilate = _spatial(node, "dilate", n, 1)
    pad = _spatial(node, "pad", n, 0)
    adj = _spatial(node, "adj", n, 0)
    target = [t for t in a.optional_ints("target_shape") if t > 0]
    if target:
        in_shape = ctx.static_dims(inputs[0], node.name, slice(2, None))
        pad, adj = [], []
        for i in range(n):
            total = stride[i] * (in_shape[i] - 1) + dilate[i] * (kernel[i] - 1) + 1 - target[i]
            adj.append(total % 2)
            pad.append((total + 1) // 2)
    args = inputs[:2] if a.optional_bool("no_bias", True) else inputs[:3]
    return ctx.emit(
        "ConvTranspose", args, [out(ctx, node)], name=node.name,
        kernel_shape=kernel, strides=stride, dilations=dilate, pads=pad + pad, output_padding=adj,
        group=a.optional_int("num_group", 1),
    )


@translator("BatchNorm")
def BatchNorm(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # as in MXNet src/operator/nn/batch_norm.cc (inference): y = (x - mean) / sqrt(var + eps) * gamma + beta,
    # gamma treated as 1 when fix_gamma (default True); eps defaults to 1e-3; axis defaults to 1.
    # output_mean_var=True adds two outputs; at inference MXNet's CPU kernel writes the moving mean and
    # 1/sqrt(moving_var + eps) (VARIANCE_TO_INVSTD in batch_norm.cc) into them, named <node>_mean, <node>_var.
    a = node.attrs
    x, gamma, beta, mean, var = inputs[:5]
    eps = float(a.optional_float("eps", 1e-3) or 0.0)
    if ctx.elem(x) == TensorProto.FLOAT16 and ctx.elem(mean) == TensorProto.FLOAT:
        # float16 data with float32 parameters (the only float16 form MXNet accepts): MXNet computes in
        # float32 (AccReal) and writes float16, so does this
        x32 = ctx.emit("Cast", [x], 1, name=f"{node.name}__to_f32", to=TensorProto.FLOAT)[0]
        y32 = _batch_norm(ctx, node, x32, gamma, beta, mean, var, eps, ctx.fresh(f"{node.name}__f32"))
        y = ctx.emit("Cast", [y32], [out(ctx, node)], name=node.name, to=TensorProto.FLOAT16)[0]
    else:
        y = _batch_norm(ctx, node, x, gamma, beta, mean, var, eps, out(ctx, node))
    if not a.optional_bool("output_mean_var", False):
        return [y]
    m = ctx.emit("Identity", [mean], [ctx.reserve(f"{node.name}_mean")], name=f"{node.name}__mean")[0]
    ve = ctx.emit("Add", [var, ctx.scalar(eps, var, f"{node.name}__eps")], 1, name=f"{node.name}__var_eps")[0]
    root = ctx.emit("Sqrt", [ve], 1, name=f"{node.name}__std")[0]
    inv = ctx.emit("Reciprocal", [root], [ctx.reserve(f"{node.name}_var")], name=f"{node.name}__invstd")[0]
    return [y, m, inv]


def _batch_norm(ctx: ConversionContext, node: MXNode, x: str, gamma: str, beta: str, mean: str, var: str,
                eps: float, output: str) -> str:
    a = node.attrs
    if a.optional_bool("fix_gamma", True):
        g = ctx.value(gamma)
        c = g.shape if g is not None else ctx.static_shape(gamma, node.name)
        gamma = ctx.const(np.ones(c, dtype=ctx.np_dtype(x)), f"{node.name}__fixed_gamma")
    axis = a.optional_int("axis", 1)
    axis = 1 if axis is None else axis
    rank = ctx.rank(x, node.name)
    if axis < 0:
        axis += rank
    if axis == 1:
        return ctx.emit("BatchNormalization", [x, gamma, beta, mean, var], [output], name=node.name,
                        epsilon=eps)[0]
    # channels elsewhere: explicit arithmetic with parameters broadcast along ``axis``
    bshape = ctx.i64([-1] + [1] * (rank - 1 - axis), f"{node.name}__bshape")
    def b(t: str) -> str:
        return ctx.emit("Reshape", [t, bshape], 1, name=f"{node.name}__reshape")[0]
    std = ctx.emit("Sqrt", [ctx.emit("Add", [b(var), ctx.scalar(eps, x, f"{node.name}__eps")], 1,
                                     name=f"{node.name}__add")[0]], 1, name=f"{node.name}__sqrt")[0]
    cen = ctx.emit("Sub", [x, b(mean)], 1, name=f"{node.name}__sub")[0]
    nrm = ctx.emit("Div", [cen, std], 1, name=f"{node.name}__div")[0]
    scaled = ctx.emit("Mul", [nrm, b(gamma)], 1, name=f"{node.name}__mul")[0]
    return ctx.emit("Add", [scaled, b(beta)], [output], name=node.name)[0]


_ACTIVATIONS = {"relu": "Relu", "sigmoid": "Sigmoid", "tanh": "Tanh", "softrelu": "Softplus", "softsign": "Softsign"}


@translator("Activation")
def Activation(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    act = node.attrs.optional_str("act_type", "relu") or "relu"
    if act not in _ACTIVATIONS:
        raise ExportError(f"node '{node.name}': Activation act_type={act} is not supported")
    return ctx.emit(_ACTIVATIONS[act], inputs[:1], [out(ctx, node)], name=node.name)


@translator("LeakyReLU")
def LeakyReLU(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # as in MXNet src/operator/leaky_relu-inl.h: slope default 0.25; rrelu at inference uses the
    # mean of lower_bound/upper_bound; selu uses the fixed SELU constants (same as ONNX Selu's defaults)
    a = node.attrs
    act = a.optional_str("act_type", "leaky") or "leaky"
    x = inputs[0]
    slope = float(a.optional_float("slope", 0.25) or 0.0)
    if act == "leaky":
        return ctx.emit("LeakyRelu", [x], [out(ctx, node)], name=node.name, alpha=slope)
    if act == "rrelu":
        lo = float(a.optional_float("lower_bound", 0.125) or 0.0)
        hi = float(a.optional_float("upper_bound", 0.334) or 0.0)
        return ctx.emit("LeakyRelu", [x], [out(ctx, node)], name=node.name, alpha=(lo + hi) / 2)
    if act == "elu":
        return ctx.emit("Elu", [x], [out(ctx, node)], name=node.name, alpha=slope)
    if act == "selu":
        return ctx.emit("Selu", [x], [out(ctx, node)], name=node.name)
    if act == "prelu":
        # gamma (C,) broadcasts along axis 1: reshape to (C, 1, ..., 1) for ONNX's trailing broadcast
        rank = ctx.rank(x, node.name)
        gamma = inputs[1]
        if rank > 2:
            gamma = ctx.emit("Reshape", [gamma, ctx.i64([-1] + [1] * (rank - 2), f"{node.name}__gshape")], 1,
                             name=f"{node.name}__gamma")[0]
        return ctx.emit("PRelu", [x, gamma], [out(ctx, node)], name=node.name)
    if act == "gelu":
        # erf form, as in MXNet mshadow_op.h gelu: 0.5 * x * (1 + erf(x / sqrt(2)))
        t = ctx.emit("Div", [x, ctx.scalar(math.sqrt(2.0), x, f"{node.name}__sqrt2")], 1, name=f"{node.name}__div")[0]
        e = ctx.emit("Erf", [t], 1, name=f"{node.name}__erf")[0]
        e1 = ctx.emit("Add", [e, ctx.scalar(1.0, x, f"{node.name}__one")], 1, name=f"{node.name}__add")[0]
        h = ctx.emit("Mul", [x, ctx.scalar(0.5, x, f"{node.name}__half")], 1, name=f"{node.name}__half")[0]
        return ctx.emit("Mul", [h, e1], [out(ctx, node)], name=node.name)
    raise ExportError(f"node '{node.name}': LeakyReLU act_type={act} is not supported")


def _pool_out(size: int, k: int, s: int, p: int, convention: str) -> int:
    # as in MXNet src/operator/nn/pooling.cc (PoolingShape): 'same' (1-D only, pad 0) gives ceil(in / s)
    if convention == "full":
        return 1 + math.ceil((size + 2 * p - k) / s)
    if convention == "same":
        return math.ceil(size / s)
    return 1 + (size + 2 * p - k) // s


def _lp_pool(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # MXNet src/operator/nn/pool.h (a_pow_p / a_root_p): lp pooling is (sum x^p)^(1/p) *without* absolute
    # values, p_value in {1, 2, 3}: p=1 is sum pooling, p=3 takes the (signed) cube root. ONNX LpPool uses
    # |x|^p, so it matches only for p=2; every p is written as sum pooling of x^p followed by the root.
    p = node.attrs.optional_int("p_value", None)
    if p not in (1, 2, 3):
        raise ExportError(f"node '{node.name}': Pooling(pool_type='lp') needs p_value 1, 2 or 3 (got {p}), as MXNet")
    x = inputs[0]
    xp = x
    for _ in range(p - 1):
        xp = ctx.emit("Mul", [xp, x], 1, name=f"{node.name}__pow")[0]
    if p == 1:
        return _pool(ctx, node, [xp], "sum", out(ctx, node))
    sums = _pool(ctx, node, [xp], "sum", ctx.fresh(f"{node.name}__sum"))[0]
    if p == 2:
        return ctx.emit("Sqrt", [sums], [out(ctx, node)], name=node.name)
    mag = ctx.emit("Pow", [ctx.emit("Abs", [sums], 1, name=f"{node.name}__abs")[0],
                           ctx.scalar(1.0 / 3.0, x, f"{node.name}__third")], 1, name=f"{node.name}__cbrt")[0]
    sign = ctx.emit("Sign", [sums], 1, name=f"{node.name}__sign")[0]
    return ctx.emit("Mul", [sign, mag], [out(ctx, node)], name=node.name)


@translator("Pooling")
def Pooling(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # as in MXNet src/operator/nn/pooling-inl.h and pool.h. 'full' convention: out = 1 + ceil((in+2p-k)/s)
    # with no "window must start inside" rule, so it is expressed with explicit extra end padding.
    # MXNet's averaging divisor with count_include_pad counts the window clipped to [-p, in+p).
    _check_layout(node)
    pool_type = node.attrs.optional_str("pool_type", "max") or "max"
    if pool_type == "lp":
        return _lp_pool(ctx, node, inputs)
    if pool_type not in ("max", "avg", "sum"):
        raise ExportError(f"node '{node.name}': Pooling pool_type={pool_type} is not supported")
    return _pool(ctx, node, inputs, pool_type, out(ctx, node))


def _pool(ctx: ConversionContext, node: MXNode, inputs: list[str], pool_type: str, output: str) -> list[str]:
    a = node.attrs
    x = inputs[0]
    if a.optional_bool("global_pool", False):
        op = "GlobalMaxPool" if pool_type == "max" else "GlobalAveragePool"
        if pool_type == "sum":
            avg = ctx.emit(op, [x], 1, name=f"{node.name}__avg")[0]
            hw = ctx.static_dims(x, node.name, slice(2, None))
            return ctx.emit("Mul", [avg, ctx.scalar(int(np.prod(hw)), x, f"{node.name}__n")], [output],
                            name=node.name)
        return ctx.emit(op, [x], [output], name=node.name)
    kernel = list(a.optional_ints("kernel"))
    n = len(kernel)
    stride = _spatial(node, "stride", n, 1)[:n]
    pad = _spatial(node, "pad", n, 0)[:n]  # MXNet 1.9's 1-D 'same' pooling only runs with pad=(0,0,0)
    convention = a.optional_str("pooling_convention", "valid") or "valid"
    if convention not in ("valid", "full", "same"):
        raise ExportError(f"node '{node.name}': Pooling pooling_convention={convention} is not supported")
    include_pad = a.optional_bool("count_include_pad", True)
    extra = [0] * n
    in_sp: tuple[int, ...] = ()
    if convention in ("full", "same"):  # 'same': windows start at i*s and are clipped at the end (pad is 0)
        in_sp = ctx.static_dims(x, node.name, slice(2, None))
        for i in range(n):
            o = _pool_out(in_sp[i], kernel[i], stride[i], pad[i], convention)
            extra[i] = max(0, (o - 1) * stride[i] + kernel[i] - (in_sp[i] + 2 * pad[i]))
    pads = pad + [p + e for p, e in zip(pad, extra, strict=True)]
    # onnxruntime needs every pad < kernel. MXNet yields the lowest float for a max window holding no
    # input element (pad explicitly with it) and 0 for an average one (window sums by a ones-kernel Conv,
    # which has no such limit; onnxruntime would fuse a zero Pad back into AveragePool)
    explicit = any(p >= k for p, k in zip(pads, kernel + kernel, strict=True))
    if pool_type == "max":
        if explicit:
            fill = ctx.scalar(np.finfo(ctx.np_dtype(x)).min, x, f"{node.name}__fill")
            x = ctx.emit("Pad", [x, ctx.i64([0, 0, *pads[:n], 0, 0, *pads[n:]], f"{node.name}__pads"), fill], 1,
                         name=f"{node.name}__pad")[0]
            pads = [0] * (2 * n)
        return ctx.emit("MaxPool", [x], [output], name=node.name, kernel_shape=kernel, strides=stride,
                        pads=pads)
    if pool_type == "avg" and not any(extra):
        return ctx.emit("AveragePool", [x], [output], name=node.name, kernel_shape=kernel, strides=stride,
                        pads=pads, count_include_pad=int(include_pad))
    # window sums, then MXNet's divisor (pool.h): include_pad -> window clipped to [-p, in+p), else to [0, in)
    ksize = float(np.prod(kernel))
    if explicit:
        channels = ctx.static_dims(x, node.name, [1])[0]
        ones = ctx.const(np.ones((channels, 1, *kernel), ctx.np_dtype(x)), f"{node.name}__ones")
        sums = ctx.emit("Conv", [x, ones], 1, name=f"{node.name}__sum", kernel_shape=kernel, strides=stride,
                        pads=pads, group=channels)[0]
        scale = 1.0
    else:  # every window lies inside the padded input, so AveragePool divides by the window size
        sums = ctx.emit("AveragePool", [x], 1, name=f"{node.name}__avg", kernel_shape=kernel, strides=stride,
                        pads=pads, count_include_pad=1)[0]
        scale = ksize
    if pool_type == "sum":
        if scale == 1.0:
            return ctx.emit("Identity", [sums], [output], name=node.name)
        factor: np.ndarray = np.asarray(scale)
    else:
        in_sp = in_sp or ctx.static_dims(x, node.name, slice(2, None))
        div = np.ones([1], dtype=np.float64)
        for i in range(n):
            o = _pool_out(in_sp[i], kernel[i], stride[i], pad[i], convention)
            start = np.arange(o) * stride[i] - pad[i]
            if include_pad:
                size = np.minimum(start + kernel[i], in_sp[i] + pad[i]) - start
            else:
                size = np.minimum(start + kernel[i], in_sp[i]) - np.maximum(start, 0)
            div = np.multiply.outer(div, size.astype(np.float64))
        div = div.reshape((1, 1, *div.shape[1:]))
        # pool.h's divisor is the product of the window's extents, each possibly <= 0 in the 'full' overhang
        # (then the window holds nothing and its sum is 0). The 1-D and 2-D kernels write that sum, 0; the 3-D
        # ones (pool_sum_3d_ncdhw_cpu / _ndhwc_cpu) write NaN where the product is exactly 0 ("pool_size == 0 ?
        # nanf"), and 0 where it is not (a negative extent)
        factor = np.where(div > 0, scale / np.where(div > 0, div, 1), 0.0)
        if n == 3:
            factor = np.where(div == 0, np.nan, factor)
    f = ctx.const(factor.astype(ctx.np_dtype(x)), f"{node.name}__factor")
    return ctx.emit("Mul", [sums, f], [output], name=node.name)


@translator("FullyConnected")
def FullyConnected(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # as in MXNet src/operator/nn/fully_connected-inl.h: y = x W^T + b; flatten (default True)
    # collapses all but the first axis, flatten=False applies W to the last axis only
    a = node.attrs
    x, w = inputs[0], inputs[1]
    bias = None if a.optional_bool("no_bias", False) else inputs[2]
    if a.optional_bool("flatten", True):
        if ctx.rank(x, node.name) != 2:
            x = ctx.emit("Flatten", [x], 1, name=f"{node.name}__flatten", axis=1)[0]
        return ctx.emit("Gemm", [x, w] + ([bias] if bias else []), [out(ctx, node)], name=node.name, transB=1)
    wt = ctx.emit("Transpose", [w], 1, name=f"{node.name}__wT", perm=[1, 0])[0]
    if bias is None:
        return ctx.emit("MatMul", [x, wt], [out(ctx, node)], name=node.name)
    y = ctx.emit("MatMul", [x, wt], 1, name=f"{node.name}__matmul")[0]
    return ctx.emit("Add", [y, bias], [out(ctx, node)], name=node.name)


@translator("Flatten")
def Flatten(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    return ctx.emit("Flatten", inputs[:1], [out(ctx, node)], name=node.name, axis=1)


@translator("Dropout")
def Dropout(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    if node.attrs.optional_str("mode", "training") == "always":
        ctx.warn(f"node '{node.name}': Dropout(mode='always') drops at inference in MXNet; exported as identity")
    return ctx.emit("Identity", inputs[:1], [out(ctx, node)], name=node.name)


@translator("L2Normalization")
def L2Normalization(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # as in MXNet src/operator/l2_normalization-inl.h: y = x / sqrt(sum(x^2) + eps), eps default 1e-10;
    # instance: over all axes but 0; channel: over axis 1; spatial: over axes 2..
    a = node.attrs
    x = inputs[0]
    mode = a.optional_str("mode", "instance") or "instance"
    rank = ctx.rank(x, node.name)
    axes = {"instance": list(range(1, rank)), "channel": [1], "spatial": list(range(2, rank))}.get(mode)
    if axes is None:
        raise ExportError(f"node '{node.name}': L2Normalization mode={mode} is not supported")
    eps = a.optional_float("eps", 1e-10)
    ss = ctx.reduce("ReduceSumSquare", x, axes, True, name=f"{node.name}__sumsq")
    ss = ctx.emit("Add", [ss, ctx.scalar(eps, x, f"{node.name}__eps")], 1, name=f"{node.name}__add")[0]
    norm = ctx.emit("Sqrt", [ss], 1, name=f"{node.name}__sqrt")[0]
    return ctx.emit("Div", [x, norm], [out(ctx, node)], name=node.name)


def _softmax_input(ctx: ConversionContext, node: MXNode, x: str) -> str:
    t = node.attrs.optional_float("temperature", None)
    if t is not None and float(t) != 1.0:
        return ctx.emit("Div", [x, ctx.scalar(t, x, f"{node.name}__t")], 1, name=f"{node.name}__temperature")[0]
    return x


@translator("softmax")
def softmax(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # as in MXNet src/operator/nn/softmax-inl.h: softmax(x / temperature) along axis (default -1)
    x = _softmax_input(ctx, node, inputs[0])
    axis = node.attrs.optional_int("axis", -1)
    if node.attrs.optional_bool("use_length", False):
        return _softmax_with_length(ctx, node, x, inputs[1], -1 if axis is None else axis)
    return ctx.emit("Softmax", [x], [out(ctx, node)], name=node.name, axis=axis)


def _softmax_with_length(ctx: ConversionContext, node: MXNode, x: str, length: str, axis: int) -> list[str]:
    # softmax-inl.h (SoftmaxWithLength): length has x's shape without ``axis``; only the first length
    # elements along ``axis`` take part, the others are 0 in the output (all 0 when length is 0)
    name = node.name
    rank = ctx.rank(x, name)
    axis = axis + rank if axis < 0 else axis
    steps = ctx.emit("Gather", [ctx.emit("Shape", [x], 1, name=f"{name}__shape")[0],
                                ctx.const(np.asarray(axis, np.int64), f"{name}__axis")], 1, name=f"{name}__n",
                     axis=0)[0]
    pos = ctx.emit("Range", [ctx.const(np.asarray(0, np.int64), f"{name}__zero"), steps,
                             ctx.const(np.asarray(1, np.int64), f"{name}__one")], 1, name=f"{name}__pos")[0]
    if axis != rank - 1:  # positions along ``axis``: shape (n, 1, ..., 1)
        pos = ctx.unsqueeze(pos, list(range(1, rank - axis)), name=f"{name}__pos_b")
    lens = ctx.emit("Cast", [length], 1, name=f"{name}__len", to=TensorProto.INT64)[0]
    keep = ctx.emit("Less", [pos, ctx.unsqueeze(lens, [axis], name=f"{name}__len_b")], 1, name=f"{name}__keep")[0]
    neg = ctx.scalar(-np.inf, x, f"{name}__neg_inf")
    masked = ctx.emit("Where", [keep, x, neg], 1, name=f"{name}__masked")[0]
    sm = ctx.emit("Softmax", [masked], 1, name=f"{name}__softmax", axis=axis)[0]
    return ctx.emit("Where", [keep, sm, ctx.scalar(0.0, x, f"{name}__zero_out")], [out(ctx, node)], name=name)


@translator("log_softmax")
def log_softmax(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    x = _softmax_input(ctx, node, inputs[0])
    return ctx.emit("LogSoftmax", [x], [out(ctx, node)], name=node.name, axis=node.attrs.optional_int("axis", -1))


@translator("SoftmaxActivation")
def SoftmaxActivation(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # as in MXNet src/operator/nn/softmax_activation-inl.h: 'instance' applies softmax to the input
    # viewed FlatTo2D, i.e. along the last axis; 'channel' = along axis 1 at every spatial position
    x = inputs[0]
    mode = node.attrs.optional_str("mode", "instance") or "instance"
    return ctx.emit("Softmax", [x], [out(ctx, node)], name=node.name, axis=1 if mode == "channel" else -1)


@translator("SoftmaxOutput")
def SoftmaxOutput(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # inference of MXNet src/operator/softmax_output-inl.h: the label input is ignored;
    # multi_output -> softmax along axis 1; preserve_shape -> along the last axis; else over (N, -1)
    a = node.attrs
    x = inputs[0]
    if a.optional_bool("multi_output", False):
        return ctx.emit("Softmax", [x], [out(ctx, node)], name=node.name, axis=1)
    if a.optional_bool("preserve_shape", False) or ctx.rank(x, node.name) == 2:
        return ctx.emit("Softmax", [x], [out(ctx, node)], name=node.name, axis=-1)
    flat = ctx.emit("Flatten", [x], 1, name=f"{node.name}__flatten", axis=1)[0]
    sm = ctx.emit("Softmax", [flat], 1, name=f"{node.name}__softmax", axis=1)[0]
    shp = ctx.emit("Shape", [x], 1, name=f"{node.name}__shape")[0]
    return ctx.emit("Reshape", [sm, shp], [out(ctx, node)], name=node.name)


@translator("UpSampling")
def UpSampling(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # as in MXNet src/operator/nn/upsampling-inl.h. nearest == Resize(nearest, asymmetric, floor),
    # bit-exact; with several inputs each is scaled to (H0*scale, W0*scale) then concatenated or summed.
    # bilinear is a grouped Deconvolution with the given weight: kernel 2s - s%2, stride s, pad ceil((s-1)/2).
    a = node.attrs
    scale = a.required_int("scale")
    kind = a.optional_str("sample_type", "nearest")
    if kind == "bilinear":
        c = a.optional_int("num_filter", 0) or ctx.static_dims(inputs[0], node.name, [1])[0]
        k = 2 * scale - scale % 2
        p = math.ceil((scale - 1) / 2)
        return ctx.emit("ConvTranspose", inputs[:2], [out(ctx, node)], name=node.name, kernel_shape=[k, k],
                        strides=[scale, scale], pads=[p, p, p, p], group=c)
    if kind != "nearest":
        raise ExportError(f"node '{node.name}': UpSampling sample_type={kind} is not supported")
    num = a.optional_int("num_args", 1) or 1
    data = inputs[:num]
    if num == 1:
        scales = ctx.const(np.asarray([1, 1, scale, scale], np.float32), f"{node.name}__scales")
        return ctx.emit("Resize", [data[0], "", scales], [out(ctx, node)], name=node.name, mode="nearest",
                        coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    h0 = ctx.static_dims(data[0], node.name, [2])[0] * scale
    parts = []
    for i, d in enumerate(data):
        s = h0 // ctx.static_dims(d, node.name, [2])[0]
        sc = ctx.const(np.asarray([1, 1, s, s], np.float32), f"{node.name}__scales{i}")
        parts.append(ctx.emit("Resize", [d, "", sc], 1, name=f"{node.name}__resize{i}", mode="nearest",
                              coordinate_transformation_mode="asymmetric", nearest_mode="floor")[0])
    if (a.optional_str("multi_input_mode", "concat") or "concat") == "sum":
        return ctx.emit("Sum", parts, [out(ctx, node)], name=node.name)
    return ctx.emit("Concat", parts, [out(ctx, node)], name=node.name, axis=1)

