"""Translators of adapters/mxnet's legacy, special-function, reduction, box, scatter, linalg, random and
spatial-sampling modules against MXNet's own forward, and the refusal of operators bridge does not convert.

Each case is a one-op symbol built with MXNet's symbol API (the op name patched in the saved JSON when
the case is a legacy alias, which MXNet writes under its canonical name but still loads), converted,
run in onnxruntime and compared with MXNet on the same inputs: values for deterministic ops, shape,
dtype, metadata and the law's support for random ones.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from mxnet_testlib import (
    Model,
    assert_same_as_mxnet,
    export,
    hand_json,
    mx_op,
    need_mxnet,
    run_mxnet,
    run_onnx,
)

from adapters.mxnet import ops_boxes, ops_legacy, ops_linalg, ops_random, ops_reduce, ops_scatter, ops_special
from adapters.mxnet.nondeterministic import read_nondeterministic_outputs
from adapters.mxnet.registry import NOT_TRANSLATED, TRANSLATORS
from bridge.errors import ExportError, UnsupportedOpError

NAME = "op0"
Gen = Callable[[np.random.Generator, tuple[int, ...]], np.ndarray]


@dataclass
class In:
    """One input: kind data (fed) | arg / aux (stored in .params) | label (unused at inference)."""

    name: str
    shape: tuple[int, ...]
    gen: str | Gen = "normal"  # normal | positive | int:LO:HI | nan | boxes | callable
    dtype: str = "float32"
    kind: str = "data"
    positional: bool = True  # passed to the mx.sym function (aux states MXNet creates itself are not)


@dataclass
class Case:
    id: str
    op: str
    attrs: dict[str, Any]
    inputs: list[In]
    opsets: tuple[int, ...] = (17,)
    check: str = "close"  # close | random
    rtol: float = 1e-5
    atol: float = 1e-6
    ref: Callable[..., Any] | None = None  # numpy reference on the fed arrays, when MXNet cannot run the case
    why_numpy: str = ""  # why MXNet cannot be the reference


def boxes(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    xy = rng.uniform(0, 6, (*shape[:-1], 2))
    wh = rng.uniform(0.5, 4, (*shape[:-1], 2))
    return np.concatenate([xy, xy + wh], -1)


def unique_rows(rows: int, count: int, coords: int = 1, cols: int = 0) -> Gen:
    """``coords`` x ``count`` distinct index tuples into a (rows, cols) grid (cols 0: one coordinate)."""
    def gen(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        flat = rng.permutation(rows * max(cols, 1))[:count]
        if coords == 1:
            return flat.reshape(shape).astype(np.float64)
        return np.stack([flat // cols, flat % cols]).astype(np.float64)
    return gen


def off_integers(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Values in (k + 0.05, k + 0.95) for k in -5..8: away from gamma's poles."""
    return rng.integers(-5, 9, shape) + rng.uniform(0.05, 0.95, shape)


def spd(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.normal(size=shape) * 0.3 + 3 * np.eye(shape[-1])


def mask01(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    m = rng.integers(0, 2, shape)
    m[0] = 1
    return m.astype(np.float64)


def near_identity(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return np.tile([0.9, 0.1, 0.05, -0.1, 0.8, -0.05], (shape[0], 1)) + rng.normal(size=shape) * 0.05


def same_with_nans(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """The same values (NaNs at the same places) for every input that uses it."""
    g = np.random.default_rng(7)
    return np.where(g.uniform(size=shape) < 0.3, np.nan, g.normal(size=shape))


MKLDNN_F16 = "MXNet 1.9.1's CPU amp_multicast fails on float16 ('unknown type for MKLDNN')"


def _set_nd(lhs: np.ndarray, rhs: np.ndarray, indices: np.ndarray) -> np.ndarray:
    out = lhs.copy()
    out[tuple(indices.astype(np.int64))] = rhs
    return out


BN = [In("data", (2, 3, 4, 4)), In("gamma", (3,), kind="arg"), In("beta", (3,), kind="arg"),
      In("mean", (3,), kind="aux"), In("var", (3,), "positive", kind="aux")]


def _cases() -> list[Case]:
    c: list[Case] = []
    two = [In("a", (2, 3, 4), "int:-1:2"), In("b", (2, 3, 4), "int:-1:2")]
    for alias, canonical in ops_legacy.ALIASES.items():
        if canonical in ("_equal", "_not_equal", "_greater", "_greater_equal", "_lesser", "_lesser_equal"):
            c.append(Case(f"alias_{alias}", alias, {}, two))
        elif canonical.endswith("_scalar"):
            c.append(Case(f"alias_{alias}", alias, {"scalar": 2.0 if "power" in canonical else 1.0},
                          [In("data", (2, 3, 4), "positive" if "power" in canonical else "int:-1:3")]))
    c += [Case("alias_cast", "cast", {"dtype": "int32"}, [In("data", (2, 3), "int:-3:3")]),
          Case("alias_flatten", "flatten", {}, [In("data", (2, 3, 4))]),
          Case("alias_reshape", "reshape", {"shape": (0, -1)}, [In("data", (2, 3, 4))]),
          Case("alias_Softmax", "Softmax", {}, [In("data", (2, 5)), In("label", (2,), kind="label")]),
          Case("alias_crop", "crop", {"begin": (0, 1), "end": (2, 3)}, [In("data", (3, 4))]),
          Case("alias_choose_element_0index", "choose_element_0index", {},
               [In("data", (3, 4)), In("index", (3,), "int:0:4")]),
          Case("round_ste", "_contrib_round_ste", {}, [In("data", (2, 6), lambda r, s: r.integers(-6, 7, s) / 2.0)]),
          Case("sync_batch_norm", "_contrib_SyncBatchNorm", {"key": "k", "fix_gamma": False, "eps": 1e-4}, BN),
          Case("convolution_v1", "Convolution_v1", {"kernel": (3, 3), "num_filter": 4, "pad": (1, 1)},
               [In("data", (1, 3, 6, 6)), In("w", (4, 3, 3, 3), kind="arg"), In("b", (4,), kind="arg")], rtol=1e-4),
          Case("pooling_v1", "Pooling_v1", {"kernel": (3, 3), "stride": (2, 2), "pool_type": "avg",
                                            "pooling_convention": "full"}, [In("data", (1, 2, 7, 7))]),
          Case("batch_norm_v1", "BatchNorm_v1", {"fix_gamma": False},
               [*BN[:3], In("op0_moving_mean", (3,), kind="aux", positional=False),
                In("op0_moving_var", (3,), "positive", kind="aux", positional=False)], rtol=1e-4, atol=1e-5)]
    c += [Case("sparse_embedding", "_contrib_SparseEmbedding", {"input_dim": 5, "output_dim": 4},
               [In("data", (2, 3), "int:0:5"), In("weight", (5, 4), kind="arg")]),
          Case("softmax_cross_entropy", "softmax_cross_entropy", {},
               [In("data", (3, 4)), In("label", (3,), "int:0:4")], rtol=1e-5, atol=1e-5),
          *[Case(f"allclose_same_nans_{eq}", "_contrib_allclose", {"equal_nan": eq},
                 [In("a", (2, 3), same_with_nans), In("b", (2, 3), same_with_nans)]) for eq in (True, False)],
          Case("allclose_near", "_contrib_allclose", {"rtol": 1e-3},
               [In("a", (2, 3), same_with_nans), In("b", (2, 3), lambda r, s: same_with_nans(r, s) * 1.0005)]),
          Case("allclose_different", "_contrib_allclose", {}, [In("a", (2, 3)), In("b", (2, 3))])]
    # identity at inference, straight-through estimators, AMP casts
    for op in ops_legacy.IDENTITY:
        ins = [In("data", (2, 5))]
        if op in ("LinearRegressionOutput", "MAERegressionOutput", "SVMOutput"):
            ins.append(In("label", (2, 5) if op != "SVMOutput" else (2,), kind="label"))
        c.append(Case(f"identity_{op}", op, {"scalar": 3.0} if "gradient" in op else {}, ins))
    c += [Case("sign_ste", "_contrib_sign_ste", {}, [In("data", (2, 5), "int:-2:3")]),
          Case("amp_multicast_wide", "amp_multicast", {"num_outputs": 3},
               [In("a", (2, 3), dtype="float16"), In("b", (3,)), In("c", (2,), "int:0:5", "int32")],
               ref=lambda a, b, c: (a.astype(np.float32), b, c), why_numpy=MKLDNN_F16),
          Case("amp_multicast_narrow", "amp_multicast", {"num_outputs": 2, "cast_narrow": True},
               [In("a", (2, 3), dtype="float16"), In("b", (3,))], ref=lambda a, b: (a, b.astype(np.float16)),
               why_numpy=MKLDNN_F16),
          Case("amp_multicast_float32", "amp_multicast", {"num_outputs": 2}, [In("a", (2, 3)), In("b", (3,))])]
    # elementwise
    for op in ("_logical_and", "_Logical_And", "_logical_or", "_Logical_Or", "_logical_xor", "_Logical_Xor"):
        c.append(Case(f"logical_{op}", op, {}, two))
    for op in ("_logical_and_scalar", "_LogicalAndScalar", "_logical_or_scalar", "_LogicalOrScalar",
               "_logical_xor_scalar", "_LogicalXorScalar"):
        for s in (0.0, 2.0):
            c.append(Case(f"logical_{op}_{s:g}", op, {"scalar": s}, [In("data", (2, 3, 4), "int:-1:2")]))
    c += [Case("hypot", "_hypot", {}, [In("a", (2, 3)), In("b", (2, 3))]),
          Case("hypot_legacy", "_Hypot", {}, [In("a", (2, 3)), In("b", (2, 3))]),
          Case("broadcast_hypot", "broadcast_hypot", {}, [In("a", (2, 3)), In("b", (1, 3))]),
          Case("hypot_scalar", "_hypot_scalar", {"scalar": 1.5}, [In("data", (2, 3))]),
          Case("hypot_scalar_legacy", "_HypotScalar", {"scalar": -2.0}, [In("data", (2, 3))]),
          Case("cbrt", "cbrt", {}, [In("data", (3, 4), lambda r, s: r.normal(size=s) * 10)], rtol=1e-6),
          Case("rcbrt", "rcbrt", {}, [In("data", (3, 4), "positive")], rtol=1e-6),
          Case("smooth_l1", "smooth_l1", {"scalar": 1.5}, [In("data", (4, 5), lambda r, s: r.normal(size=s) * 0.8)]),
          Case("smooth_l1_default", "smooth_l1", {}, [In("data", (4, 5))]),
          Case("quadratic", "_contrib_quadratic", {"a": 0.5, "b": -2.0, "c": 1.25}, [In("data", (3, 4))]),
          Case("softmin", "softmin", {}, [In("data", (2, 3, 4))]),
          Case("softmin_axis_temperature", "softmin", {"axis": 1, "temperature": 2.0}, [In("data", (2, 3, 4))]),
          # reductions / normalisation
          Case("nansum", "nansum", {"axis": (1,)}, [In("data", (2, 3, 4), "nan")]),
          Case("nansum_all_keep", "nansum", {"keepdims": True}, [In("data", (2, 3), "nan")]),
          Case("nanprod", "nanprod", {"axis": (0, 2)}, [In("data", (2, 3, 4), "nan")]),
          Case("nanprod_exclude", "nanprod", {"axis": (1,), "exclude": True}, [In("data", (2, 3, 2), "nan")]),
          Case("moments", "moments", {"axes": (1, 2)}, [In("data", (2, 3, 4))]),
          Case("moments_keepdims", "moments", {"axes": (0,), "keepdims": True}, [In("data", (3, 4))]),
          Case("group_norm", "GroupNorm", {"num_groups": 2},
               [In("data", (2, 4, 3, 3)), In("gamma", (2,), kind="arg"), In("beta", (2,), kind="arg")], rtol=1e-4,
               atol=1e-5),
          Case("group_norm_mean_var", "GroupNorm", {"num_groups": 3, "eps": 1e-3, "output_mean_var": True},
               [In("data", (2, 6, 4)), In("gamma", (3,), kind="arg"), In("beta", (3,), kind="arg")], rtol=1e-4,
               atol=1e-5),
          Case("batch_norm_relu", "_contrib_BatchNormWithReLU", {"fix_gamma": False}, BN, rtol=1e-4, atol=1e-5),
          Case("cumsum_axis", "cumsum", {"axis": 1}, [In("data", (2, 4, 3))]),
          Case("cumsum_flat_dtype", "cumsum", {"dtype": "float64"}, [In("data", (2, 3))], opsets=(13, 17)),
          Case("sequence_last", "SequenceLast", {}, [In("data", (4, 2, 3))]),
          Case("sequence_last_lengths", "SequenceLast", {"use_sequence_length": True},
               [In("data", (4, 3, 2)), In("sequence_length", (3,), "int:1:5")]),
          Case("sequence_last_axis1", "SequenceLast", {"use_sequence_length": True, "axis": 1},
               [In("data", (3, 5, 2)), In("sequence_length", (3,), "int:1:6")]),
          # boxes and attention
          Case("box_iou_corner", "_contrib_box_iou", {}, [In("lhs", (2, 3, 4), "boxes"), In("rhs", (5, 4), "boxes")]),
          Case("box_iou_center", "_contrib_box_iou", {"format": "center"},
               [In("lhs", (3, 4), "boxes"), In("rhs", (2, 2, 4), "boxes")]),
          Case("box_encode", "_contrib_box_encode", {},
               [In("samples", (2, 6), "int:-1:2"), In("matches", (2, 6), "int:0:4"), In("anchors", (2, 6, 4), "boxes"),
                In("refs", (2, 4, 4), "boxes"), In("means", (4,)), In("stds", (4,), "positive")], rtol=1e-5, atol=1e-5),
          Case("encdec_qk", "_contrib_interleaved_matmul_encdec_qk", {"heads": 2},
               [In("queries", (3, 2, 8)), In("keys_values", (5, 2, 16))], rtol=1e-5, atol=1e-5),
          Case("encdec_valatt", "_contrib_interleaved_matmul_encdec_valatt", {"heads": 2},
               [In("keys_values", (5, 2, 16)), In("attention", (4, 3, 5))], rtol=1e-5, atol=1e-5),
          # scatter / index
          Case("scatter_nd", "scatter_nd", {"shape": (4, 5)},
               [In("data", (3,)), In("indices", (2, 3), unique_rows(4, 3, 2, 5))]),
          Case("scatter_nd_rows", "scatter_nd", {"shape": (5, 3)},
               [In("data", (2, 3)), In("indices", (1, 2), unique_rows(5, 2))]),
          Case("scatter_set_nd", "_scatter_set_nd", {"shape": (4, 5)},
               [In("lhs", (4, 5)), In("rhs", (3,)), In("indices", (2, 3), unique_rows(4, 3, 2, 5))],
               ref=_set_nd, why_numpy="MXNet runs _scatter_set_nd only in place (its output is its lhs), as "
                                      "NDArray.__setitem__ calls it; a bound symbol fails its dptr check"),
          Case("index_copy", "_contrib_index_copy", {},
               [In("old_tensor", (5, 3)), In("index_vector", (3,), unique_rows(5, 3)), In("new_tensor", (3, 3))]),
          Case("boolean_mask", "_contrib_boolean_mask", {}, [In("data", (5, 3)), In("index", (5,), mask01)],
               ref=lambda d, i: d[i != 0], why_numpy="MXNet's simple_bind cannot infer a data-dependent output "
                                                     "shape; its imperative result is the numpy one"),
          Case("boolean_mask_axis1", "_contrib_boolean_mask", {"axis": 1},
               [In("data", (2, 4, 3)), In("index", (4,), mask01)], opsets=(13,),
               ref=lambda d, i: d[:, i != 0], why_numpy="as boolean_mask"),
          Case("ravel_multi_index", "ravel_multi_index", {"shape": (3, 4)},
               [In("data", (2, 6), lambda r, s: np.stack([r.integers(0, 3, 6), r.integers(0, 4, 6)]))]),
          Case("ravel_multi_index_internal", "_ravel_multi_index", {"shape": (2, 3, 4)},
               [In("data", (3, 5), lambda r, s: np.stack([r.integers(0, d, 5) for d in (2, 3, 4)]))]),
          Case("unravel_index", "unravel_index", {"shape": (3, 4)}, [In("data", (7,), "int:0:12")]),
          Case("unravel_index_internal", "_unravel_index", {"shape": (2, 3, 4)}, [In("data", (5,), "int:0:24")]),
          Case("khatri_rao", "khatri_rao", {}, [In("a", (2, 3)), In("b", (4, 3)), In("c", (2, 3))]),
          Case("khatri_rao_one", "khatri_rao", {}, [In("a", (3, 2))]),
          # linear algebra
          Case("gemm", "linalg_gemm", {"alpha": 0.5, "beta": 2.0},
               [In("A", (2, 3, 4)), In("B", (2, 4, 5)), In("C", (2, 3, 5))], rtol=1e-5, atol=1e-5),
          Case("gemm_transposed_axis", "_linalg_gemm", {"transpose_a": True, "axis": -3},
               [In("A", (4, 3, 2)), In("B", (4, 3, 5)), In("C", (2, 3, 5))], rtol=1e-5, atol=1e-5),
          Case("det", "linalg_det", {}, [In("A", (2, 3, 3), spd)], rtol=1e-5, atol=1e-5),
          Case("det_internal", "_linalg_det", {}, [In("A", (4, 4))], rtol=1e-4, atol=1e-5),
          Case("slogdet", "linalg_slogdet", {}, [In("A", (3, 3, 3))], rtol=1e-4, atol=1e-5),
          Case("slogdet_internal", "_linalg_slogdet", {}, [In("A", (2, 2))], rtol=1e-4, atol=1e-5),
          Case("sumlogdiag", "linalg_sumlogdiag", {}, [In("A", (2, 3, 3), spd)]),
          Case("sumlogdiag_internal", "_linalg_sumlogdiag", {}, [In("A", (3, 3), spd)]),
          *[Case(f"extractdiag_{k}", "linalg_extractdiag", {"offset": k}, [In("A", (2, 4, 4))]) for k in (0, 1, -2)],
          Case("extractdiag_internal", "_linalg_extractdiag", {}, [In("A", (3, 3))]),
          *[Case(f"makediag_{k}", "linalg_makediag", {"offset": k}, [In("A", (2, 3))]) for k in (0, 2, -1)],
          Case("makediag_internal", "_linalg_makediag", {}, [In("A", (3,))]),
          *[Case(f"extracttrian_{k}_{lo}", "linalg_extracttrian", {"offset": k, "lower": lo}, [In("A", (2, 4, 4))])
            for k, lo in ((0, True), (0, False), (1, True), (-1, True))],
          Case("extracttrian_internal", "_linalg_extracttrian", {}, [In("A", (3, 3))]),
          *[Case(f"maketrian_{k}_{lo}", "linalg_maketrian", {"offset": k, "lower": lo}, [In("A", (2, 6))])
            for k, lo in ((0, True), (0, False), (1, True), (-2, True))],
          Case("maketrian_internal", "_linalg_maketrian", {}, [In("A", (3,))]),
          Case("syrk", "linalg_syrk", {"alpha": 2.0}, [In("A", (2, 3, 4))], rtol=1e-5, atol=1e-5),
          Case("syrk_transpose", "_linalg_syrk", {"transpose": True}, [In("A", (3, 4))], rtol=1e-5, atol=1e-5),
          Case("trmm", "linalg_trmm", {"alpha": 1.5}, [In("A", (2, 3, 3)), In("B", (2, 3, 4))], rtol=1e-5, atol=1e-5),
          Case("trmm_right_upper_t", "_linalg_trmm", {"rightside": True, "lower": False, "transpose": True},
               [In("A", (3, 3)), In("B", (4, 3))], rtol=1e-5, atol=1e-5),
          # sampling grids (GridSample from opset 16)
          Case("grid_affine", "GridGenerator", {"transform_type": "affine", "target_shape": (4, 5)},
               [In("data", (2, 6))], opsets=(13, 17)),
          Case("grid_warp", "GridGenerator", {"transform_type": "warp"}, [In("data", (2, 2, 4, 5))], opsets=(13, 17)),
          Case("bilinear_sampler", "BilinearSampler", {},
               [In("data", (2, 3, 5, 6)), In("grid", (2, 2, 4, 5), lambda r, s: r.uniform(-1.2, 1.2, s))],
               opsets=(16, 17, 20), rtol=1e-5, atol=1e-5),
          Case("spatial_transformer", "SpatialTransformer",
               {"target_shape": (4, 5), "transform_type": "affine", "sampler_type": "bilinear"},
               [In("data", (2, 3, 6, 7)), In("loc", (2, 6), near_identity)], opsets=(16, 17), rtol=1e-5, atol=1e-5),
          Case("im2col", "im2col", {"kernel": (2, 3), "stride": (1, 2), "pad": (1, 1)}, [In("data", (2, 3, 5, 6))]),
          Case("im2col_dilate", "im2col", {"kernel": (2, 2), "dilate": (2, 1)}, [In("data", (1, 2, 5, 4))]),
          Case("col2im", "col2im", {"output_size": (5, 6), "kernel": (2, 3), "stride": (1, 2), "pad": (1, 1)},
               [In("data", (2, 18, 18))], rtol=1e-5, atol=1e-5),
          Case("col2im_stride_remainder", "col2im", {"output_size": (6, 5), "kernel": (2, 2), "stride": (2, 2)},
               [In("data", (1, 8, 6))], rtol=1e-5, atol=1e-5),
          # samplers: shape / dtype / support only
          Case("sample_normal", "_sample_normal", {"shape": (3,)}, [In("mu", (2,)), In("sigma", (2,), "positive")],
               opsets=(13, 17), check="random"),
          Case("sample_normal_alias_f64", "sample_normal", {"dtype": "float64"},
               [In("mu", (2, 2)), In("sigma", (2, 2), "positive")], check="random"),
          Case("sample_uniform", "_sample_uniform", {"shape": (2, 3)},
               [In("low", (2,)), In("high", (2,), lambda r, s: r.uniform(3, 4, s))], check="random"),
          Case("sample_uniform_alias_f16", "sample_uniform", {"dtype": "float16"},
               [In("low", (3,)), In("high", (3,), lambda r, s: r.uniform(3, 4, s))], check="random"),
          Case("sample_exponential", "_sample_exponential", {"shape": (4,)}, [In("lam", (3,), "positive")],
               check="random"),
          Case("sample_exponential_alias", "sample_exponential", {}, [In("lam", (3,), "positive")], check="random"),
          Case("random_exponential", "_random_exponential", {"lam": 2.0, "shape": (2, 3)}, [], check="random"),
          Case("random_exponential_alias", "random_exponential", {"shape": (4,), "dtype": "float64"}, [],
               check="random"),
          Case("random_exponential_like", "_random_exponential_like", {"lam": 0.5}, [In("data", (3, 2))],
               check="random"),
          Case("randint", "_random_randint", {"low": -2, "high": 5, "shape": (3, 4)}, [], check="random"),
          Case("randint_alias_int64", "random_randint", {"low": 3, "high": 4, "shape": (6,), "dtype": "int64"}, [],
               check="random"),
          Case("shuffle", "_shuffle", {}, [In("data", (6, 3))], opsets=(13, 17), check="random"),
          Case("shuffle_alias", "shuffle", {}, [In("data", (5,))], check="random"),
          # histogram (counts int64, edges in the data dtype), correlation
          Case("histogram_uniform", "_histogram", {"bin_cnt": 5, "range": (-1.0, 1.5)}, [In("data", (3, 10))]),
          Case("histogram_degenerate_range", "_histogram", {"bin_cnt": 3, "range": (0.0, 0.0)},
               [In("data", (12,), lambda r, s: r.integers(-1, 2, s) * 0.25)]),
          Case("histogram_edges", "_histogram", {},
               [In("data", (20,)), In("bins", (4,), lambda r, s: np.sort(r.uniform(-1.5, 1.5, s)))]),
          Case("correlation_flownet", "Correlation",
               {"kernel_size": 1, "max_displacement": 4, "stride1": 1, "stride2": 2, "pad_size": 4},
               [In("data1", (1, 3, 7, 8)), In("data2", (1, 3, 7, 8))], opsets=(13, 17)),
          Case("correlation_kernel3_stride2", "Correlation",
               {"kernel_size": 3, "max_displacement": 2, "stride1": 2, "stride2": 1, "pad_size": 1},
               [In("data1", (2, 2, 9, 8)), In("data2", (2, 2, 9, 8))], rtol=1e-5, atol=1e-6),
          Case("correlation_absdiff", "Correlation",
               {"kernel_size": 1, "max_displacement": 1, "is_multiply": False},
               [In("data1", (1, 2, 5, 6)), In("data2", (1, 2, 5, 6))]),
          # densities (MXNet computes in float32 with lgammaf; bridge in double)
          Case("pdf_normal", "random_pdf_normal", {},
               [In("sample", (2, 5)), In("mu", (2,)), In("sigma", (2,), "positive")], rtol=1e-5, atol=1e-6),
          Case("pdf_normal_log", "_random_pdf_normal", {"is_log": True},
               [In("sample", (2, 3, 4)), In("mu", (2, 3)), In("sigma", (2, 3), "positive")], rtol=1e-5, atol=1e-6),
          Case("pdf_uniform", "random_pdf_uniform", {},
               [In("sample", (3, 4), "positive"), In("low", (3,)), In("high", (3,), lambda r, s: r.uniform(3, 4, s))]),
          Case("pdf_exponential_log", "random_pdf_exponential", {"is_log": True},
               [In("sample", (2, 6), "positive"), In("lam", (2,), "positive")]),
          Case("pdf_gamma", "random_pdf_gamma", {},
               [In("sample", (2, 6), "positive"), In("alpha", (2,), "positive"), In("beta", (2,), "positive")],
               rtol=1e-5, atol=1e-6),
          Case("pdf_poisson", "random_pdf_poisson", {},
               [In("sample", (3, 5), "int:0:8"), In("lam", (3,), lambda r, s: r.uniform(0.5, 5, s))], rtol=1e-5,
               atol=1e-6),
          Case("pdf_negative_binomial_log", "random_pdf_negative_binomial", {"is_log": True},
               [In("sample", (2, 5), "int:0:9"), In("k", (2,), lambda r, s: r.uniform(1, 6, s)),
                In("p", (2,), lambda r, s: r.uniform(0.2, 0.8, s))], rtol=1e-5, atol=1e-5),
          Case("pdf_generalized_negative_binomial", "random_pdf_generalized_negative_binomial", {},
               [In("sample", (2, 5), "int:0:9"), In("mu", (2,), lambda r, s: r.uniform(1, 4, s)),
                In("alpha", (2,), lambda r, s: r.uniform(0.2, 1.5, s))], rtol=1e-5, atol=1e-6),
          Case("pdf_dirichlet", "random_pdf_dirichlet", {},
               [In("sample", (2, 4, 3), lambda r, s: r.dirichlet([1.0, 2.0, 3.0], s[:-1])),
                In("alpha", (2, 3), lambda r, s: r.uniform(0.5, 3, s))], rtol=1e-5, atol=1e-6),
          *[Case(f"pdf_internal_{law}", f"_random_pdf_{law}", {},
                 [In("sample", (2, 3), "positive"), In("p1", (2,), "positive")]
                 + ([In("p2", (2,), lambda r, s: r.uniform(0.2, 0.8, s))] if law not in ("exponential", "poisson")
                    else []), rtol=1e-4, atol=1e-5)
            for law in ("uniform", "exponential", "gamma", "poisson", "negative_binomial",
                        "generalized_negative_binomial")],
          Case("pdf_internal_dirichlet", "_random_pdf_dirichlet", {"is_log": True},
               [In("sample", (3, 2), lambda r, s: r.dirichlet([2.0, 1.0], s[:-1])), In("alpha", (2,), "positive")]),
          # special functions
          Case("erfinv", "erfinv", {}, [In("data", (4, 50), lambda r, s: r.uniform(-0.999, 0.999, s))], rtol=2e-6,
               atol=1e-7),
          Case("erfinv_float64", "erfinv", {}, [In("data", (2, 30), lambda r, s: r.uniform(-0.99999, 0.99999, s),
                                                    "float64")], rtol=1e-6, atol=1e-9),
          Case("gammaln", "gammaln", {}, [In("data", (4, 40), off_integers)], rtol=1e-5, atol=1e-6),
          Case("gamma", "gamma", {}, [In("data", (4, 40), off_integers)], rtol=1e-5, atol=1e-7),
          Case("gamma_float64", "gamma", {}, [In("data", (2, 40), off_integers, "float64")], rtol=1e-12, atol=0)]
    return c


CASES = _cases()
RUNS = [(c, o) for c in CASES for o in c.opsets]


def _array(spec: In, rng: np.random.Generator) -> np.ndarray:
    g = spec.gen
    if callable(g):
        a = g(rng, spec.shape)
    elif g == "positive":
        a = rng.uniform(0.5, 2.0, spec.shape)
    elif g.startswith("int:"):
        lo, hi = (int(v) for v in g.split(":")[1:])
        a = rng.integers(lo, hi, spec.shape)
    elif g == "nan":
        a = rng.normal(size=spec.shape)
        a[rng.uniform(size=spec.shape) < 0.3] = np.nan
    elif g == "boxes":
        a = boxes(rng, spec.shape)
    else:
        a = rng.normal(size=spec.shape)
    return np.asarray(a).astype(spec.dtype)


def build(case: Case, tmp: Path, mx: Any) -> Model:
    rng = np.random.default_rng(zlib.crc32(case.id.encode()))
    arrays = {s.name: _array(s, rng) for s in case.inputs if s.kind != "label"}
    sym_path = tmp / "case-symbol.json"
    fn = mx_op(mx, case.op)
    if fn is not None:
        args = [mx.sym.var(s.name) for s in case.inputs if s.positional]
        fn(*args, name=NAME, **case.attrs).save(str(sym_path))
        doc = json.loads(sym_path.read_text())
        (node,) = [n for n in doc["nodes"] if n["name"] == NAME]
        node["op"] = case.op  # MXNet writes an alias under its canonical name; it loads both
        sym_path.write_text(json.dumps(doc))
    else:
        sym_path.write_text(hand_json(case.op, NAME, [s.name for s in case.inputs], case.attrs))
    params = {f"{s.kind}:{s.name}": arrays[s.name] for s in case.inputs if s.kind in ("arg", "aux")}
    params_path = tmp / "case-0000.params"
    mx.nd.save(str(params_path), {k: mx.nd.array(v, dtype=v.dtype) for k, v in params.items()})
    feeds = {s.name: arrays[s.name] for s in case.inputs if s.kind == "data"}
    return Model(sym_path, params_path, feeds)


def _compare(case: Case, got: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> None:
    assert_same_as_mxnet(got, expected, case.rtol, case.atol)


def _check_samples(case: Case, model: Model, got: dict[str, np.ndarray]) -> None:
    (value,) = got.values()
    v = value.astype(np.float64)
    assert np.isfinite(v).all()
    if "uniform" in case.op:
        low, high = model.feeds["low"], model.feeds["high"]
        extra = (1,) * (v.ndim - low.ndim)
        assert ((v >= low.reshape(low.shape + extra) - 1e-3) & (v <= high.reshape(high.shape + extra) + 1e-3)).all()
    elif "exponential" in case.op:
        assert (v >= 0).all()
    elif "randint" in case.op:
        lo, hi = case.attrs["low"], case.attrs["high"]
        assert ((v >= lo) & (v < hi)).all() and value.dtype.kind == "i"
    elif "shuffle" in case.op:
        x = model.feeds["data"]
        assert sorted(map(tuple, v.reshape(len(v), -1))) == sorted(map(tuple, x.reshape(len(x), -1).astype(np.float64)))


@pytest.mark.parametrize(("case", "opset"), RUNS, ids=[f"{c.id}-{o}" for c, o in RUNS])
def test_translator_matches_mxnet(case: Case, opset: int, tmp_path: Path) -> None:
    mx = need_mxnet()
    model = build(case, tmp_path, mx)
    if case.op in ("BilinearSampler", "SpatialTransformer") and opset < 16:
        pytest.fail("sampling cases run at opset 16+ (the refusal below is tested separately)")
    result = export(model, opset)
    assert result.model.opset_import[0].version == opset
    got = run_onnx(result.model, model.feeds)
    if case.ref is not None:
        r = case.ref(*model.feeds.values())
        expected = dict(zip(result.output_names, [np.asarray(v) for v in (r if isinstance(r, tuple) else (r,))],
                            strict=True))
    else:
        expected = run_mxnet(model, result)
    assert set(result.output_names) == set(expected)
    random_outputs = read_nondeterministic_outputs(result.model)
    if case.check == "random":
        assert sorted(random_outputs) == sorted(result.output_names)
        assert any("samples random numbers" in w for w in result.warnings)
        for name, ref in expected.items():
            assert (got[name].shape, got[name].dtype) == (ref.shape, ref.dtype), name
        _check_samples(case, model, got)
        return
    assert random_outputs == []
    _compare(case, got, expected)


def test_numpy_references_say_why() -> None:
    for c in CASES:
        assert (c.ref is None) == (not c.why_numpy), c.id


def test_sampled_laws_have_the_right_moments(tmp_path: Path) -> None:
    # many draws per row: the per-row mean of _sample_normal / _sample_exponential matches its parameters
    mx = need_mxnet()
    for op, ins, mean in (("_sample_normal", [In("mu", (2,)), In("sigma", (2,), "positive")], lambda f: f["mu"]),
                          ("_sample_exponential", [In("lam", (2,), "positive")], lambda f: 1 / f["lam"])):
        case = Case(op, op, {"shape": (20000,)}, ins)
        model = build(case, tmp_path, mx)
        (v,) = run_onnx(export(model).model, model.feeds).values()
        np.testing.assert_allclose(v.mean(-1), mean(model.feeds), atol=0.05)


@pytest.mark.parametrize("op", ["BilinearSampler", "SpatialTransformer"])
def test_grid_sample_below_opset_16_is_refused(op: str, tmp_path: Path) -> None:
    mx = need_mxnet()
    case = next(c for c in CASES if c.op == op)
    with pytest.raises(ExportError, match=rf"node 'op0' \({op}\).*GridSample.*opset 16"):
        export(build(case, tmp_path, mx), 13)


REFUSED = [("_contrib_quantized_conv", {"num_filter": "4", "kernel": "(3, 3)"}, ["data"]),
           ("_cvimdecode", {}, ["buf"]),
           ("_random_gamma", {"shape": "(2,)"}, []), ("CTCLoss", {}, ["data", "label"]),
           ("_contrib_dgl_subgraph", {}, ["graph"]),
           ("_linalg_inverse", {}, ["A"])]


@pytest.mark.parametrize(("op", "attrs", "args"), REFUSED, ids=[r[0] for r in REFUSED])
def test_refused_op_names_node_and_reason(op: str, attrs: dict[str, str], args: list[str], tmp_path: Path) -> None:
    path = tmp_path / "r-symbol.json"
    path.write_text(hand_json(op, "refused0", args, attrs))
    with pytest.raises(UnsupportedOpError) as err:
        export(Model(path, None, {a: np.zeros((2, 3), np.float32) for a in args}))
    assert err.value.unsupported == {op: ["refused0"]}
    assert NOT_TRANSLATED[op] in str(err.value) and "refused0" in str(err.value)


def test_a_fused_mkldnn_conv_without_its_subgraph_is_refused_naming_the_node(tmp_path: Path) -> None:
    """_sg_mkldnn_conv is translated (MXNet int8 / fused graphs: adapters/mxnet/ops_quantized.py) from the subgraph
    it carries; one without it is refused, the node named."""
    from bridge.errors import ExportError

    path = tmp_path / "r-symbol.json"
    path.write_text(hand_json("_sg_mkldnn_conv", "refused0", ["data"], {}))
    with pytest.raises(ExportError, match=r"node 'refused0' \(_sg_mkldnn_conv\): expected one subgraph"):
        export(Model(path, None, {"data": np.zeros((2, 3), np.float32)}))


MODULES = {m.__name__ for m in (ops_boxes, ops_legacy, ops_linalg, ops_random, ops_reduce, ops_scatter, ops_special)}
ELSEWHERE = {"LogisticRegressionOutput"}  # ops_legacy, with its case among the nn cases (test_translators_nn_extra)


def test_every_translator_of_these_modules_has_a_case() -> None:
    mine = {op for op, fn in TRANSLATORS.items() if fn.__module__ in MODULES} - ELSEWHERE
    missing = sorted(mine - {c.op for c in CASES})
    assert not missing, f"translators without a test case: {missing}"


# ---- other dtypes: one case per op family in float64 and float16. "ort: <op>" marks a valid ONNX model for
# which onnxruntime's CPU provider has no kernel in that dtype (bridge keeps MXNet's dtype rather than
# computing in another); every other pair must match MXNet
DTYPE_CASES = ["hypot", "cbrt", "smooth_l1", "quadratic", "softmin", "nansum", "moments", "group_norm", "cumsum_axis",
               "sequence_last_lengths", "box_iou_corner", "box_encode", "scatter_nd", "index_copy", "bilinear_sampler",
               "det", "correlation_flownet", "histogram_uniform", "erfinv", "gammaln", "pdf_gamma", "im2col",
               "logical__logical_xor", "ravel_multi_index"]
# (bilinear_sampler runs at opset 20, where onnxruntime's GridSample has a float64 kernel; "mxnet": MXNet 1.9.1
# itself refuses the dtype, so there is nothing to match)
DTYPE_LIMITS = {("det", "float64"): "ort: Det", ("im2col", "float64"): "ort: Conv", ("det", "float16"): "mxnet"}
DTYPE_PARAMS = [(c, d) for c in CASES if c.id in DTYPE_CASES for d in ("float64", "float16")]


@pytest.mark.parametrize(("case", "dtype"), DTYPE_PARAMS, ids=[f"{c.id}-{d}" for c, d in DTYPE_PARAMS])
def test_other_dtypes(case: Case, dtype: str, tmp_path: Path) -> None:
    import dataclasses

    mx = need_mxnet()
    ins = [dataclasses.replace(i, dtype=dtype) if i.dtype == "float32" and i.kind != "label" else i
           for i in case.inputs]
    c = dataclasses.replace(case, inputs=ins, rtol=1e-2 if dtype == "float16" else 1e-6,
                            atol=1e-2 if dtype == "float16" else 1e-9)
    model = build(c, tmp_path, mx)
    opset = max(c.opsets)
    result = export(model, opset)
    limit = DTYPE_LIMITS.get((case.id, dtype), "exact")
    if limit == "mxnet":
        with pytest.raises(Exception, match="only supports 32-bit and 64-bit"):
            run_mxnet(model, result)
        return
    if limit.startswith("ort: "):
        with pytest.raises(Exception, match="NOT_IMPLEMENTED") as err:
            run_onnx(result.model, model.feeds)
        assert limit[5:] in str(err.value)
        return
    _compare(c, run_onnx(result.model, model.feeds), run_mxnet(model, result))
