"""Every MXNet op translator: a one-op symbol (built with mx.sym when MXNet is present, else written as
JSON), converted, run in onnxruntime and compared with MXNet (or with a numpy reference of the op)."""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from mxnet_testlib import (
    Model,
    assert_close,
    export,
    hand_json,
    mx_op,
    run_mxnet,
    run_onnx,
    try_mxnet,
    write_params,
)

from adapters.mxnet.ops_math import BINARY, SCALAR, UNARY

NAME = "op0"


@dataclass
class Case:
    """One op with its attributes. inputs: (name, shape, kind) with kind data | arg | aux | label."""

    id: str
    op: str
    attrs: dict[str, Any]
    inputs: list[tuple[str, tuple[int, ...], str]]
    ref: Callable[..., Any] | None = None  # numpy reference on the data+arg arrays (in input order)
    gen: str = "normal"  # normal | positive | int | binary
    rtol: float = 1e-4
    atol: float = 1e-5
    mx_op: str | None = None  # the op to build in MXNet when ``op`` is a legacy alias MXNet lacks
    mx_attrs: dict[str, Any] | None = None  # attributes for the MXNet reference when they must differ
    outputs: str | None = None  # cut at these outputs (ops with hidden extra outputs, e.g. rrelu's mask)


def D(shape: tuple[int, ...], name: str = "data") -> tuple[str, tuple[int, ...], str]:
    return (name, shape, "data")


def A(name: str, shape: tuple[int, ...]) -> tuple[str, tuple[int, ...], str]:
    return (name, shape, "arg")


def X(name: str, shape: tuple[int, ...]) -> tuple[str, tuple[int, ...], str]:
    return (name, shape, "aux")


def _np_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


W = lambda *s: s  # noqa: E731 - shape shorthand

CASES: list[Case] = [
    # Convolution
    Case("conv_basic", "Convolution", {"kernel": (3, 3), "num_filter": 4, "pad": (1, 1)},
         [D((1, 3, 8, 8)), A("w", (4, 3, 3, 3)), A("b", (4,))]),
    Case("conv_stride_dilate_nobias", "Convolution",
         {"kernel": (3, 3), "stride": (2, 2), "dilate": (2, 2), "num_filter": 4, "no_bias": True},
         [D((1, 3, 9, 9)), A("w", (4, 3, 3, 3))]),
    Case("conv_depthwise_groups", "Convolution", {"kernel": (3, 3), "num_filter": 6, "num_group": 3, "pad": (1, 1)},
         [D((1, 3, 6, 6)), A("w", (6, 1, 3, 3)), A("b", (6,))]),
    Case("conv_1d", "Convolution", {"kernel": (3,), "num_filter": 2}, [D((1, 3, 10)), A("w", (2, 3, 3)), A("b", (2,))]),
    # Deconvolution
    Case("deconv_basic", "Deconvolution", {"kernel": (4, 4), "stride": (2, 2), "pad": (1, 1), "num_filter": 3},
         [D((1, 4, 5, 5)), A("w", (4, 3, 4, 4))]),
    Case("deconv_bias_adj", "Deconvolution",
         {"kernel": (3, 3), "stride": (2, 2), "adj": (1, 1), "num_filter": 2, "no_bias": False},
         [D((1, 4, 4, 4)), A("w", (4, 2, 3, 3)), A("b", (2,))]),
    Case("deconv_target_shape", "Deconvolution",
         {"kernel": (3, 3), "stride": (2, 2), "target_shape": (11, 11), "num_filter": 2},
         [D((1, 4, 5, 5)), A("w", (4, 2, 3, 3))]),
    # MXNet 1.9.1's MKLDNN deconvolution fails when target_shape implies padding; the reference is the
    # same layer with the pad/adj MXNet's InferPad derives (total 2 -> pad 1; total 3 -> pad 2, adj 1)
    Case("deconv_target_shape_pad", "Deconvolution",
         {"kernel": (4, 4), "stride": (2, 2), "target_shape": (10, 10), "num_filter": 2},
         [D((1, 4, 5, 5)), A("w", (4, 2, 4, 4))],
         mx_attrs={"kernel": (4, 4), "stride": (2, 2), "pad": (1, 1), "num_filter": 2}),
    Case("deconv_target_shape_adj", "Deconvolution",
         {"kernel": (4, 4), "stride": (2, 2), "target_shape": (9, 9), "num_filter": 2},
         [D((1, 4, 5, 5)), A("w", (4, 2, 4, 4))],
         mx_attrs={"kernel": (4, 4), "stride": (2, 2), "pad": (2, 2), "adj": (1, 1), "num_filter": 2}),
    Case("deconv_groups", "Deconvolution", {"kernel": (3, 3), "num_filter": 4, "num_group": 2},
         [D((1, 4, 4, 4)), A("w", (4, 2, 3, 3))]),
    # BatchNorm
    Case("bn_fix_gamma_default", "BatchNorm", {},
         [D((2, 3, 4, 4)), A("gamma", (3,)), A("beta", (3,)), X("mean", (3,)), X("var", (3,))], gen="positive"),
    Case("bn_gamma_eps", "BatchNorm", {"fix_gamma": False, "eps": 1e-5},
         [D((2, 3, 4, 4)), A("gamma", (3,)), A("beta", (3,)), X("mean", (3,)), X("var", (3,))], gen="positive"),
    Case("bn_use_global_stats", "BatchNorm", {"fix_gamma": False, "use_global_stats": True},
         [D((2, 3, 4, 4)), A("gamma", (3,)), A("beta", (3,)), X("mean", (3,)), X("var", (3,))], gen="positive"),
    Case("bn_axis_last", "BatchNorm", {"fix_gamma": False, "axis": -1},
         [D((2, 4, 4, 3)), A("gamma", (3,)), A("beta", (3,)), X("mean", (3,)), X("var", (3,))], gen="positive"),
    # Activation / LeakyReLU
    *[Case(f"act_{t}", "Activation", {"act_type": t}, [D((2, 3, 4))])
      for t in ("relu", "sigmoid", "tanh", "softrelu", "softsign")],
    Case("leaky", "LeakyReLU", {"act_type": "leaky", "slope": 0.1}, [D((2, 3, 4))],
         ref=lambda x: np.where(x > 0, x, 0.1 * x)),
    Case("prelu", "LeakyReLU", {"act_type": "prelu"}, [D((2, 3, 4, 4)), A("gamma", (3,))]),
    Case("elu", "LeakyReLU", {"act_type": "elu", "slope": 0.5}, [D((2, 3, 4))]),
    Case("selu", "LeakyReLU", {"act_type": "selu"}, [D((2, 3, 4))]),
    Case("gelu", "LeakyReLU", {"act_type": "gelu"}, [D((2, 3, 4))]),
    Case("rrelu", "LeakyReLU", {"act_type": "rrelu"}, [D((2, 3, 4))], outputs="op0_output"),
    # Pooling
    Case("pool_max_valid", "Pooling", {"kernel": (3, 3), "stride": (2, 2)}, [D((1, 2, 8, 8))]),
    Case("pool_max_full", "Pooling", {"kernel": (3, 3), "stride": (2, 2), "pooling_convention": "full"},
         [D((1, 2, 8, 8))]),
    Case("pool_max_full_pad", "Pooling",
         {"kernel": (2, 2), "stride": (2, 2), "pad": (1, 1), "pooling_convention": "full"}, [D((1, 2, 5, 5))]),
    Case("pool_avg_valid_pad", "Pooling", {"kernel": (3, 3), "pad": (1, 1), "pool_type": "avg"}, [D((1, 2, 6, 6))]),
    Case("pool_avg_valid_exclude_pad", "Pooling",
         {"kernel": (3, 3), "pad": (1, 1), "pool_type": "avg", "count_include_pad": False}, [D((1, 2, 6, 6))]),
    Case("pool_avg_full_include_pad", "Pooling",
         {"kernel": (3, 3), "stride": (2, 2), "pad": (1, 1), "pool_type": "avg", "pooling_convention": "full"},
         [D((1, 2, 8, 8))]),
    Case("pool_avg_full_exclude_pad", "Pooling",
         {"kernel": (3, 3), "stride": (2, 2), "pad": (1, 1), "pool_type": "avg", "pooling_convention": "full",
          "count_include_pad": False}, [D((1, 2, 8, 8))]),
    Case("pool_avg_full_pad_empty_window", "Pooling",
         {"kernel": (2, 2), "stride": (2, 2), "pad": (1, 1), "pool_type": "avg", "pooling_convention": "full"},
         [D((1, 2, 5, 5))]),
    Case("pool_avg_full_pad_empty_window_exclude", "Pooling",
         {"kernel": (2, 2), "stride": (2, 2), "pad": (1, 1), "pool_type": "avg", "pooling_convention": "full",
          "count_include_pad": False}, [D((1, 2, 5, 5))]),
    # 3-D: MXNet's pool_sum_3d kernels write NaN for a window holding nothing to count (1-D/2-D write 0)
    *[Case(f"pool3d_avg_full_empty_window_{'include' if inc else 'exclude'}", "Pooling",
           {"kernel": (2, 2, 1), "stride": (3, 2, 3), "pad": (1, 1, 0), "pool_type": "avg",
            "pooling_convention": "full", "count_include_pad": inc}, [D((1, 2, 4, 5, 4))]) for inc in (True, False)],
    Case("pool_sum", "Pooling", {"kernel": (2, 2), "stride": (2, 2), "pool_type": "sum"}, [D((1, 2, 6, 6))]),
    Case("pool_global_max", "Pooling", {"kernel": (1, 1), "global_pool": True}, [D((1, 3, 5, 5))],
         ref=lambda x: x.max(axis=(2, 3), keepdims=True)),
    Case("pool_global_avg", "Pooling", {"kernel": (1, 1), "global_pool": True, "pool_type": "avg"},
         [D((1, 3, 5, 5))], ref=lambda x: x.mean(axis=(2, 3), keepdims=True)),
    # FullyConnected / Flatten / Dropout
    Case("fc_flatten", "FullyConnected", {"num_hidden": 5}, [D((2, 3, 4)), A("w", (5, 12)), A("b", (5,))],
         ref=lambda x, w, b: x.reshape(2, -1) @ w.T + b),
    Case("fc_no_flatten", "FullyConnected", {"num_hidden": 5, "flatten": False},
         [D((2, 3, 4)), A("w", (5, 4)), A("b", (5,))], ref=lambda x, w, b: x @ w.T + b),
    Case("fc_no_bias", "FullyConnected", {"num_hidden": 5, "no_bias": True}, [D((2, 6)), A("w", (5, 6))],
         ref=lambda x, w: x @ w.T),
    Case("flatten", "Flatten", {}, [D((2, 3, 4, 5))], ref=lambda x: x.reshape(2, -1)),
    Case("dropout", "Dropout", {"p": 0.5}, [D((2, 3))], ref=lambda x: x),
    # Reshape codes
    Case("reshape_plain", "Reshape", {"shape": (4, 6)}, [D((2, 3, 4))], ref=lambda x: x.reshape(4, 6)),
    Case("reshape_0_m1", "Reshape", {"shape": (0, -1)}, [D((2, 3, 4))], ref=lambda x: x.reshape(2, 12)),
    Case("reshape_m2", "Reshape", {"shape": (-2, 1)}, [D((2, 3, 4))], ref=lambda x: x.reshape(2, 3, 4, 1)),
    Case("reshape_m3", "Reshape", {"shape": (-3, -2)}, [D((2, 3, 4))], ref=lambda x: x.reshape(6, 4)),
    Case("reshape_m4", "Reshape", {"shape": (-4, 1, 2, -2)}, [D((2, 3, 4))], ref=lambda x: x.reshape(1, 2, 3, 4)),
    Case("reshape_m4_infer", "Reshape", {"shape": (0, -4, -1, 2, 0)}, [D((2, 6, 4))],
         ref=lambda x: x.reshape(2, 3, 2, 4)),
    Case("reshape_reverse", "Reshape", {"shape": (-1, 0), "reverse": True}, [D((10, 5, 4))],
         ref=lambda x: x.reshape(50, 4)),
    # layout ops
    Case("transpose_axes", "transpose", {"axes": (0, 2, 3, 1)}, [D((1, 2, 3, 4))],
         ref=lambda x: x.transpose(0, 2, 3, 1)),
    Case("transpose_default", "transpose", {}, [D((2, 3, 4))], ref=lambda x: x.transpose()),
    Case("concat_dim1", "Concat", {"dim": 1}, [D((1, 2, 3, 3), "a"), D((1, 3, 3, 3), "b")],
         ref=lambda a, b: np.concatenate([a, b], 1)),
    Case("concat_alias_dim0", "concat", {"dim": 0}, [D((1, 2, 3), "a"), D((2, 2, 3), "b")],
         ref=lambda a, b: np.concatenate([a, b], 0)),
    Case("slicechannel", "SliceChannel", {"num_outputs": 3}, [D((1, 6, 2, 2))],
         ref=lambda x: tuple(np.split(x, 3, 1))),
    Case("slicechannel_squeeze", "SliceChannel", {"num_outputs": 4, "axis": 2, "squeeze_axis": True},
         [D((1, 3, 4, 2))], ref=lambda x: tuple(p.squeeze(2) for p in np.split(x, 4, 2))),
    Case("split_alias", "split", {"num_outputs": 2, "axis": -1}, [D((2, 3, 4))],
         ref=lambda x: tuple(np.split(x, 2, -1))),
    Case("slice_axis", "slice_axis", {"axis": 1, "begin": 1, "end": 3}, [D((2, 4, 5))], ref=lambda x: x[:, 1:3]),
    Case("slice_axis_neg_none", "slice_axis", {"axis": -1, "begin": -3, "end": None}, [D((2, 4, 5))],
         ref=lambda x: x[..., -3:]),
    Case("slice_steps", "slice", {"begin": (0, 1), "end": (None, 4), "step": (1, 2)}, [D((2, 5, 3))],
         ref=lambda x: x[:, 1:4:2]),
    Case("slice_like_axes", "slice_like", {"axes": (2, 3)}, [D((1, 3, 8, 8)), D((1, 3, 5, 6), "like")],
         ref=lambda x, like: x[:, :, :5, :6]),
    Case("slice_like_all", "slice_like", {}, [D((4, 5)), D((2, 3), "like")], ref=lambda x, like: x[:2, :3]),
    Case("expand_dims", "expand_dims", {"axis": 1}, [D((2, 3))], ref=lambda x: x[:, None]),
    Case("expand_dims_neg", "expand_dims", {"axis": -1}, [D((2, 3))], ref=lambda x: x[..., None]),
    Case("squeeze", "squeeze", {"axis": (1,)}, [D((2, 1, 3))], ref=lambda x: x[:, 0]),
    # every axis squeezed: MXNet gives shape (1,), never 0-d (bridge gave [] before; shapes are compared)
    Case("squeeze_all_ones", "squeeze", {}, [D((1, 1, 1))]),
    Case("squeeze_every_axis", "squeeze", {"axis": (0, -1)}, [D((1, 1))]),
    Case("squeeze_none_of_size_one", "squeeze", {}, [D((2, 3))]),
    Case("tile_promote", "tile", {"reps": (2, 1, 3)}, [D((2, 3))], ref=lambda x: np.tile(x, (2, 1, 3))),
    Case("tile_short_reps", "tile", {"reps": (2,)}, [D((2, 3))], ref=lambda x: np.tile(x, (2,))),
    Case("repeat_axis", "repeat", {"repeats": 2, "axis": 1}, [D((2, 3, 2))], ref=lambda x: np.repeat(x, 2, 1)),
    Case("repeat_flat", "repeat", {"repeats": 3}, [D((2, 3))], ref=lambda x: np.repeat(x, 3)),
    Case("where", "where", {}, [D((2, 3), "cond"), D((2, 3), "x"), D((2, 3), "y")], gen="binary",
         ref=lambda c, x, y: np.where(c != 0, x, y)),
    Case("where_rows", "where", {}, [D((2,), "cond"), D((2, 3), "x"), D((2, 3), "y")], gen="binary",
         ref=lambda c, x, y: np.where(c[:, None] != 0, x, y)),
    Case("zeros_like", "zeros_like", {}, [D((2, 3))], ref=np.zeros_like),
    Case("ones_like", "ones_like", {}, [D((2, 3))], ref=np.ones_like),
    Case("arange", "_arange", {"start": 0, "stop": 5}, [], ref=lambda: np.arange(5, dtype=np.float32)),
    Case("arange_step_repeat", "_arange", {"start": 2, "stop": 11, "step": 3, "repeat": 2},
         [], ref=lambda: np.repeat(np.arange(2, 11, 3, dtype=np.float32), 2)),
    Case("arange_stop_none", "_arange", {"start": 4, "dtype": "int32"}, [], ref=lambda: np.arange(4, dtype=np.int32)),
    Case("clip", "clip", {"a_min": -0.5, "a_max": 0.5}, [D((2, 3, 4))], ref=lambda x: np.clip(x, -0.5, 0.5)),
    Case("crop_hw_offset", "Crop", {"num_args": 1, "h_w": (3, 4), "offset": (1, 2)}, [D((1, 2, 6, 7))],
         ref=lambda x: x[:, :, 1:4, 2:6]),
    Case("crop_like_center", "Crop", {"num_args": 2, "center_crop": True}, [D((1, 2, 7, 8)), D((1, 2, 4, 5), "like")],
         ref=lambda x, like: x[:, :, 1:5, 1:6]),
    Case("cast_int32", "Cast", {"dtype": "int32"}, [D((2, 3))], gen="int", ref=lambda x: x.astype(np.int32)),
    Case("cast_float64", "Cast", {"dtype": "float64"}, [D((2, 3))], ref=lambda x: x.astype(np.float64)),
    Case("amp_cast_f16", "amp_cast", {"dtype": "float16"}, [D((2, 3))], ref=lambda x: x.astype(np.float16)),
    *[Case(f"identity_{op}", op, {}, [D((2, 3))], ref=lambda x: x)
      for op in ("_copy", "identity", "BlockGrad", "stop_gradient")],
    # reductions
    Case("sum_axis1", "sum", {"axis": (1,)}, [D((2, 3, 4))], ref=lambda x: x.sum(1)),
    Case("sum_all", "sum", {}, [D((2, 3, 4))], ref=lambda x: np.asarray(x.sum(), np.float32).reshape(1)),
    Case("mean_keepdims", "mean", {"axis": (1, 2), "keepdims": True}, [D((2, 3, 4))],
         ref=lambda x: x.mean((1, 2), keepdims=True)),
    Case("max_exclude", "max", {"axis": (1,), "exclude": True}, [D((2, 3, 4))], ref=lambda x: x.max((0, 2))),
    Case("min_neg_axis", "min", {"axis": (-1,)}, [D((2, 3, 4))], ref=lambda x: x.min(-1)),
    Case("prod", "prod", {"axis": (2,)}, [D((2, 3, 4))], ref=lambda x: x.prod(2)),
    Case("sum_axis_legacy", "sum_axis", {"axis": 1}, [D((2, 3, 4))], ref=lambda x: x.sum(1)),
    Case("max_axis_legacy", "max_axis", {"axis": 1}, [D((2, 3, 4))], ref=lambda x: x.max(1)),
    Case("min_axis_legacy", "min_axis", {"axis": 0}, [D((2, 3, 4))], ref=lambda x: x.min(0)),
    # normalisation / softmax
    *[Case(f"l2norm_{m}", "L2Normalization", {"mode": m}, [D((2, 3, 4, 4))]) for m in ("instance", "channel", "spatial")],
    Case("l2norm_channel_eps", "L2Normalization", {"mode": "channel", "eps": 0.5}, [D((2, 3, 4, 4))],
         ref=lambda x: x / np.sqrt((x * x).sum(1, keepdims=True) + 0.5)),
    Case("softmax_last", "softmax", {}, [D((2, 3, 4))], ref=lambda x: _np_softmax(x, -1)),
    Case("softmax_axis1_temperature", "softmax", {"axis": 1, "temperature": 2.0}, [D((2, 3, 4))],
         ref=lambda x: _np_softmax(x / 2, 1)),
    Case("log_softmax", "log_softmax", {}, [D((2, 5))], ref=lambda x: np.log(_np_softmax(x, -1))),
    Case("softmax_activation_instance", "SoftmaxActivation", {}, [D((2, 3, 4))],
         ref=lambda x: _np_softmax(x.reshape(2, -1), 1).reshape(2, 3, 4)),
    Case("softmax_activation_channel", "SoftmaxActivation", {"mode": "channel"}, [D((2, 4, 3))],
         ref=lambda x: _np_softmax(x, 1)),
    Case("softmax_output", "SoftmaxOutput", {}, [D((2, 5)), ("label", (2,), "label")],
         ref=lambda x: _np_softmax(x, 1)),
    Case("softmax_output_multi", "SoftmaxOutput", {"multi_output": True}, [D((2, 5, 3)), ("label", (2, 3), "label")],
         ref=lambda x: _np_softmax(x, 1)),
    # UpSampling
    Case("upsample_nearest", "UpSampling", {"scale": 2, "sample_type": "nearest", "num_args": 1}, [D((1, 2, 3, 3))],
         ref=lambda x: x.repeat(2, 2).repeat(2, 3)),
    Case("upsample_nearest_multi", "UpSampling", {"scale": 2, "sample_type": "nearest", "num_args": 2},
         [D((1, 2, 4, 4), "a"), D((1, 3, 2, 2), "b")],
         ref=lambda a, b: np.concatenate([a.repeat(2, 2).repeat(2, 3), b.repeat(4, 2).repeat(4, 3)], 1)),
    Case("upsample_bilinear", "UpSampling",
         {"scale": 2, "sample_type": "bilinear", "num_filter": 2, "num_args": 2}, [D((1, 2, 4, 4)), A("w", (2, 1, 4, 4))]),
    # math
    Case("square", "square", {}, [D((2, 3))], ref=np.square),
    Case("rsqrt", "rsqrt", {}, [D((2, 3))], gen="positive", ref=lambda x: 1 / np.sqrt(x)),
    Case("round_half_away", "round", {}, [D((2, 4))], gen="halves", ref=lambda x: np.sign(x) * np.floor(np.abs(x) + 0.5)),
    Case("elementwise_sum", "ElementWiseSum", {"num_args": 3}, [D((2, 3), "a"), D((2, 3), "b"), D((2, 3), "c")],
         ref=lambda a, b, c: a + b + c),
    Case("add_n", "add_n", {"num_args": 2}, [D((2, 3), "a"), D((2, 3), "b")], ref=lambda a, b: a + b),
]

_NP_BINARY = {
    "Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide, "Max": np.maximum, "Min": np.minimum,
    "Pow": np.power, "Equal": np.equal, "Greater": np.greater, "GreaterOrEqual": np.greater_equal, "Less": np.less,
    "LessOrEqual": np.less_equal, "And": np.logical_and, "Or": np.logical_or, "Xor": np.logical_xor,
}
# legacy spellings MXNet 1.9 still registers are built in MXNet as-is; anything else via its modern name
_MODERN = {"_Plus": "_plus", "_Minus": "_minus", "_Mul": "_mul", "_Div": "_div", "_Maximum": "_maximum",
           "_Minimum": "_minimum", "_Power": "_power", "_PlusScalar": "_plus_scalar",
           "_MinusScalar": "_minus_scalar", "_RMinusScalar": "_rminus_scalar", "_MulScalar": "_mul_scalar",
           "_DivScalar": "_div_scalar", "_RDivScalar": "_rdiv_scalar"}


def _binary_ref(op: str, negate: bool) -> Callable[..., Any]:
    f = _NP_BINARY[op]

    def ref(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        r = f(a, b) if op not in ("And", "Or", "Xor") else f(a != 0, b != 0)
        return (np.logical_not(r) if negate else r).astype(a.dtype)

    return ref


for name, (onnx_op, neg) in BINARY.items():
    broadcast = name.startswith("broadcast_")
    gen = "positive" if onnx_op in ("Div", "Pow") else "int" if onnx_op in _NP_BINARY and onnx_op not in (
        "Add", "Sub", "Mul", "Max", "Min") else "normal"
    CASES.append(Case(f"binary_{name}", name, {}, [D((2, 3, 4), "a"), D((1, 3, 1) if broadcast else (2, 3, 4), "b")],
                      ref=_binary_ref(onnx_op, neg), gen=gen, mx_op=_MODERN.get(name)))

def _scalar_ref(f: Callable[..., Any], s: np.float32, left: bool) -> Callable[..., Any]:
    return (lambda x: f(np.full_like(x, s), x)) if left else (lambda x: f(x, np.full_like(x, s)))


_SCALAR_VALUE = {"Pow": 2.0}
for name, (onnx_op, left) in SCALAR.items():
    op_ = "Equal" if onnx_op == "NotEqual" else onnx_op
    s = np.float32(_SCALAR_VALUE.get(onnx_op, 1.0 if op_ in _NP_BINARY and op_ not in ("Add", "Sub", "Mul", "Div",
                                                                                       "Max", "Min") else 2.5))
    ref = _scalar_ref(_binary_ref(op_, onnx_op == "NotEqual"), s, left)
    gen = "positive" if onnx_op in ("Div", "Pow") else "int" if op_ not in ("Add", "Sub", "Mul", "Max", "Min") else "normal"
    CASES.append(Case(f"scalar_{name}", name, {"scalar": float(s)}, [D((2, 3, 4))], ref=ref, gen=gen,
                      mx_op=_MODERN.get(name)))

_NP_UNARY = {"Exp": np.exp, "Log": np.log, "Sqrt": np.sqrt, "Abs": np.abs, "Neg": np.negative,
             "Reciprocal": np.reciprocal, "Sigmoid": lambda x: 1 / (1 + np.exp(-x)), "Tanh": np.tanh,
             "Relu": lambda x: np.maximum(x, 0), "Floor": np.floor, "Ceil": np.ceil, "Sin": np.sin, "Cos": np.cos,
             "Sign": np.sign, "Softsign": lambda x: x / (1 + np.abs(x)), "Erf": None}
for name, onnx_op in UNARY.items():
    CASES.append(Case(f"unary_{name}", name, {}, [D((2, 3, 4))], ref=_NP_UNARY[onnx_op],
                      gen="positive" if onnx_op in ("Log", "Sqrt", "Reciprocal") else "normal"))


def _arrays(case: Case, rng: np.random.Generator) -> dict[str, np.ndarray]:
    out = {}
    for name, shape, kind in case.inputs:
        if kind == "label":
            continue
        if case.gen == "positive" or (kind == "aux" and name == "var"):
            a = rng.uniform(0.5, 2.0, shape)
        elif case.gen == "int":
            a = rng.integers(-2, 3, shape).astype(np.float64)
        elif case.gen == "binary":
            a = rng.integers(0, 2, shape).astype(np.float64) if name == "cond" else rng.normal(size=shape)
        elif case.gen == "halves":
            a = rng.integers(-6, 7, shape) / 2.0
        else:
            a = rng.normal(size=shape)
        out[name] = a.astype(np.float32)
    return out


def build(case: Case, tmp: Path, mx: Any) -> Model:
    rng = np.random.default_rng(zlib.crc32(case.id.encode()))
    arrays = _arrays(case, rng)
    feeds = {n: arrays[n] for n, _, k in case.inputs if k == "data"}
    params = {f"{'aux' if k == 'aux' else 'arg'}:{n}": arrays[n] for n, _, k in case.inputs if k in ("arg", "aux")}
    sym_path = tmp / "case-symbol.json"
    params_path = tmp / "case-0000.params" if params else None
    fn = mx_op(mx, case.op) if mx is not None else None
    if fn is not None:
        args = [mx.sym.var(n) for n, _, _ in case.inputs]
        sym = fn(*args, name=NAME, **case.attrs)
        sym.save(str(sym_path))
        if params_path:
            mx.nd.save(str(params_path), {k: mx.nd.array(v) for k, v in params.items()})
    else:
        sym_path.write_text(hand_json(case.op, NAME, [n for n, _, _ in case.inputs], case.attrs))
        if params_path:
            write_params(params_path, params)
    return Model(sym_path, params_path, feeds, case.outputs)


def _reference(case: Case, model: Model, result: Any, tmp: Path, mx: Any) -> dict[str, np.ndarray]:
    if mx is not None:
        if mx_op(mx, case.op) is None or case.mx_attrs is not None:
            op = case.op if mx_op(mx, case.op) is not None else case.mx_op
            assert op, f"{case.op} is not an MXNet op and the case names no modern equivalent"
            alt = build(Case(case.id, op, case.mx_attrs or case.attrs, case.inputs, gen=case.gen), tmp / "alt", mx)
            alt.feeds = model.feeds
            return run_mxnet(alt, result)
        return run_mxnet(model, result)
    if case.ref is None:
        pytest.skip("mxnet not installed")
    args = [model.feeds.get(n) if k == "data" else None for n, _, k in case.inputs if k != "label"]
    if model.params:
        from adapters.mxnet.params import load_params

        p = {k.split(":", 1)[1]: v for k, v in load_params(model.params).items()}
        args = [a if a is not None else p[n] for a, (n, _, k) in zip(args, [i for i in case.inputs if i[2] != "label"],
                                                                     strict=True)]
    r = case.ref(*args)
    outs = r if isinstance(r, tuple) else (r,)
    return dict(zip(result.output_names, [np.asarray(o) for o in outs], strict=True))


@pytest.mark.parametrize("opset", [13, 17, 18])  # Reduce*/Split change their signatures at 13 and 18
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_translator_matches_reference(case: Case, opset: int, tmp_path: Path) -> None:
    mx = try_mxnet()
    (tmp_path / "alt").mkdir()
    model = build(case, tmp_path, mx)
    result = export(model, opset)
    assert result.model.opset_import[0].version == opset
    got = run_onnx(result.model, model.feeds)
    expected = _reference(case, model, result, tmp_path, mx)
    assert_close(got, expected, case.rtol, case.atol)
    for name in result.output_names:
        assert got[name].dtype == expected[name].dtype, name
