"""Translators of ops_spatial (resizing, ROI and adaptive pooling), ops_norm, ops_attention, ops_sequence and
LogisticRegressionOutput, and the lp / 'same' / use_length / output_mean_var forms of
ops_nn: each case is a one-op symbol built with mx.sym (or written as JSON when MXNet is absent),
converted, run in onnxruntime and compared with MXNet's own forward (numpy reference without MXNet).
Cases with ``refuse`` assert the documented ExportError instead (no exact ONNX form)."""

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
    need_mxnet,
    run_mxnet,
    run_onnx,
    try_mxnet,
    write_params,
)

from bridge.errors import ExportError

NAME = "op0"
Gen = Callable[[np.random.Generator, tuple[int, ...]], np.ndarray]


@dataclass
class In:
    """One input: kind data (fed) | arg / aux (in .params) | label (unused at inference)."""

    name: str
    shape: tuple[int, ...]
    kind: str = "data"
    gen: Gen | None = None  # default: standard normal
    dtype: str = "float32"


@dataclass
class Case:
    id: str
    op: str
    attrs: dict[str, Any]
    inputs: list[In]
    opsets: tuple[int, ...] = (13, 17)
    ref: Callable[..., Any] | None = None  # numpy reference (used when MXNet is absent or ``numpy_only``)
    numpy_only: str | None = None  # why MXNet cannot be the reference for this case
    refuse: str | None = None  # expected ExportError message (regex)
    rtol: float = 1e-4
    atol: float = 1e-5
    outputs: str | None = None


def positive(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.uniform(0.5, 2.0, shape)


def lengths(top: int, low: int = 0) -> Gen:
    return lambda rng, shape: rng.integers(low, top + 1, shape).astype(np.float64)


def indices(rows: int) -> Gen:  # includes out-of-range ids (-1, rows, rows+1): MXNet clips them
    return lambda rng, shape: rng.integers(-1, rows + 2, shape).astype(np.float64)


def rois(batch: int, extent: float, padded: int = 0) -> Gen:
    """(batch_index, x1, y1, x2, y2) rows inside [0, extent) in image coordinates, some tiny or degenerate;
    ``padded`` rows (every other one from the second) get batch index -1, GluonCV's padding rows."""
    def gen(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        r = shape[0]
        xy = rng.uniform(0, extent * 0.7, (r, 2))
        wh = rng.uniform(0.2, extent * 0.5, (r, 2))
        wh[0] = 0.3  # a box smaller than one pixel: the ROI size clamp matters
        idx = rng.integers(0, batch, (r, 1))
        idx[1:1 + 2 * padded:2] = -1
        return np.concatenate([idx, xy, xy + wh], 1)
    return gen


def rnn_param_size(mode: str, hidden: int, layers: int, dirs: int, in_size: int) -> int:
    gates = {"lstm": 4, "gru": 3}.get(mode, 1)
    size = 0
    for layer in range(layers):
        width = in_size if layer == 0 else dirs * hidden
        size += dirs * gates * hidden * (width + hidden + 2)
    return size


def rnn_case(id_: str, mode: str, hidden: int, layers: int, bidir: bool, state_outputs: bool,
             t: int = 5, n: int = 2, i: int = 3) -> Case:
    dirs = 2 if bidir else 1
    ins = [In("data", (t, n, i)), In("params", (rnn_param_size(mode, hidden, layers, dirs, i),), "arg",
                                    lambda rng, s: rng.uniform(-0.5, 0.5, s)),
           In("state", (layers * dirs, n, hidden))]
    if mode == "lstm":
        ins.append(In("state_cell", (layers * dirs, n, hidden)))
    return Case(id_, "RNN", {"mode": mode, "state_size": hidden, "num_layers": layers, "bidirectional": bidir,
                             "state_outputs": state_outputs}, ins, rtol=1e-4, atol=1e-5)


def _np_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _np_same_max_1d(x: np.ndarray, k: int, s: int) -> np.ndarray:
    n = -(-x.shape[-1] // s)
    return np.stack([x[..., i * s:i * s + k].max(-1) for i in range(n)], -1)


BN_INPUTS = [In("data", (2, 3, 4, 4)), In("gamma", (3,), "arg"), In("beta", (3,), "arg"), In("mean", (3,), "aux"),
             In("var", (3,), "aux", positive)]

CASES: list[Case] = [
    # BilinearResize2D: every mode, both corner conventions, 'like'
    *[Case(f"resize_size_{ac}", "_contrib_BilinearResize2D", {"height": 7, "width": 10, "align_corners": ac},
           [In("data", (1, 2, 4, 5))]) for ac in (True, False)],
    Case("resize_size_down_to_1", "_contrib_BilinearResize2D", {"height": 1, "width": 3, "align_corners": False},
         [In("data", (1, 2, 4, 5))]),
    Case("resize_scale", "_contrib_BilinearResize2D", {"scale_height": 1.5, "scale_width": 0.6},
         [In("data", (2, 2, 4, 5))]),
    *[Case(f"resize_odd_scale_{h}", "_contrib_BilinearResize2D",
           {"mode": "odd_scale", "scale_height": 2.0, "scale_width": 0.5, "align_corners": False},
           [In("data", (1, 2, h, 6))]) for h in (4, 5)],
    *[Case(f"resize_{m}_{h}", "_contrib_BilinearResize2D", {"mode": m}, [In("data", (1, 2, h, h + 1))])
      for m in ("to_even_down", "to_even_up", "to_odd_down", "to_odd_up") for h in (4, 5)],
    *[Case(f"resize_like_{ac}", "_contrib_BilinearResize2D", {"mode": "like", "align_corners": ac},
           [In("data", (1, 3, 4, 4)), In("like", (1, 1, 9, 6))]) for ac in (True, False)],
    # ROI layers (Faster R-CNN heads)
    *[Case(f"roialign_{'aligned' if al else 'legacy'}_r{sr}", "_contrib_ROIAlign",
           {"pooled_size": (3, 2), "spatial_scale": 0.5, "sample_ratio": sr, "aligned": al},
           [In("data", (2, 3, 8, 8)), In("rois", (5, 5), gen=rois(2, 16.0))],
           opsets=(16, 18) if al else (13, 16, 18), atol=1e-4) for al in (False, True) for sr in (-1, 2)],
    Case("roialign_aligned_opset13_refused", "_contrib_ROIAlign", {"pooled_size": (2, 2), "spatial_scale": 1.0, "aligned": True},
         [In("data", (1, 2, 6, 6)), In("rois", (2, 5), gen=rois(1, 6.0))], opsets=(13,), refuse=r"opset 16"),
    Case("roialign_position_sensitive_refused", "_contrib_ROIAlign",
         {"pooled_size": (2, 2), "spatial_scale": 1.0, "position_sensitive": True},
         [In("data", (1, 8, 6, 6)), In("rois", (2, 5), gen=rois(1, 6.0))], opsets=(17,), refuse=r"position_sensitive"),
    Case("roipooling", "ROIPooling", {"pooled_size": (3, 3), "spatial_scale": 0.5},
         [In("data", (2, 3, 8, 8)), In("rois", (6, 5), gen=rois(2, 16.0))]),
    # rows with batch index -1 are padding: MXNet writes zeros for them (ROIAlign: test_roialign_padded_rois)
    Case("roipooling_padded_rois", "ROIPooling", {"pooled_size": (3, 3), "spatial_scale": 0.5},
         [In("data", (2, 3, 8, 8)), In("rois", (6, 5), gen=rois(2, 16.0, padded=2))]),
    # normalisation
    Case("lrn", "LRN", {"nsize": 3}, [In("data", (2, 5, 4, 4))]),
    Case("lrn_attrs", "LRN", {"nsize": 5, "alpha": 0.01, "beta": 0.5, "knorm": 1.0}, [In("data", (1, 7, 3, 3))]),
    *[Case(f"layernorm_axis{ax}", "LayerNorm", {"axis": ax}, [In("data", (2, 3, 4)), In("gamma", (dim,), "arg"),
                                                              In("beta", (dim,), "arg")], opsets=(13, 17, 18))
      for ax, dim in ((-1, 4), (1, 3), (0, 2))],
    Case("layernorm_eps_f64", "LayerNorm", {"eps": 1e-3}, [In("data", (2, 5), dtype="float64"),
                                                          In("gamma", (5,), "arg", dtype="float64"),
                                                          In("beta", (5,), "arg", dtype="float64")], opsets=(13, 17)),
    Case("layernorm_mean_var", "LayerNorm", {"output_mean_var": True},
         [In("data", (2, 3, 4)), In("gamma", (4,), "arg"), In("beta", (4,), "arg")], opsets=(13, 17, 18)),
    Case("instancenorm", "InstanceNorm", {}, [In("data", (2, 3, 4, 5)), In("gamma", (3,), "arg"),
                                              In("beta", (3,), "arg")]),
    Case("instancenorm_eps_1d", "InstanceNorm", {"eps": 1e-5}, [In("data", (2, 3, 6)), In("gamma", (3,), "arg"),
                                                                In("beta", (3,), "arg")]),
    Case("bn_output_mean_var", "BatchNorm", {"fix_gamma": False, "output_mean_var": True}, BN_INPUTS),
    Case("bn_output_mean_var_fix_gamma_axis_last", "BatchNorm", {"output_mean_var": True, "axis": -1, "eps": 1e-5},
         [In("data", (2, 4, 3)), *BN_INPUTS[1:]]),
    Case("logistic_regression_output", "LogisticRegressionOutput", {},
         [In("data", (4, 3)), In("label", (4, 3), "label")]),
    # pooling: lp, 'same', adaptive
    *[Case(f"pool_lp{p}", "Pooling", {"kernel": (2, 2), "stride": (2, 2), "pool_type": "lp", "p_value": p},
           [In("data", (1, 2, 6, 6))], opsets=(13, 18)) for p in (1, 2, 3)],
    Case("pool_lp2_full_pad", "Pooling", {"kernel": (3, 3), "stride": (2, 2), "pad": (1, 1), "pool_type": "lp",
                                          "p_value": 2, "pooling_convention": "full"}, [In("data", (1, 2, 6, 6))]),
    Case("pool_lp3_global", "Pooling", {"kernel": (1, 1), "global_pool": True, "pool_type": "lp", "p_value": 3},
         [In("data", (1, 3, 4, 4))]),
    # MXNet 1.9.1 accepts 'same' for 1-D input only and only with pad written as (0, 0, 0)
    *[Case(f"pool_same_{pt}_{h}", "Pooling", {"kernel": (k,), "stride": (2,), "pad": (0, 0, 0), "pool_type": pt,
                                             "pooling_convention": "same"}, [In("data", (1, 2, h))])
      for pt, h, k in (("avg", 8, 3), ("sum", 7, 3), ("avg", 7, 2), ("sum", 8, 3))],
    Case("pool_same_max", "Pooling", {"kernel": (3,), "stride": (2,), "pad": (0, 0, 0), "pooling_convention": "same"},
         [In("data", (1, 2, 7))], ref=lambda x: _np_same_max_1d(x, 3, 2),
         numpy_only="MXNet 1.9.1's MKLDNN max pooling rejects 'same' ('could not create a descriptor')"),
    *[Case(f"adaptive_avg_{'x'.join(map(str, s)) or 'default'}", "_contrib_AdaptiveAvgPooling2D",
           {"output_size": s} if s else {}, [In("data", (2, 3, 7, 10))]) for s in ((), (1,), (3,), (3, 4), (7, 5))],
    # softmax with lengths
    Case("softmax_use_length", "softmax", {"use_length": True},
         [In("data", (3, 6)), In("length", (3,), gen=lengths(6, 1), dtype="int32")], opsets=(13, 17, 18)),
    Case("softmax_use_length_axis1_zero_len", "softmax", {"use_length": True, "axis": 1, "temperature": 2.0},
         [In("data", (2, 5, 3)), In("length", (2, 3), gen=lambda r, s: np.array([[0, 2, 5], [1, 3, 4]]),
                                    dtype="int32")]),
    # attention helpers (BERT exports)
    Case("div_sqrt_dim", "_contrib_div_sqrt_dim", {}, [In("data", (2, 3, 16))]),
    Case("selfatt_qk", "_contrib_interleaved_matmul_selfatt_qk", {"heads": 2}, [In("qkv", (5, 3, 24))],
         opsets=(13,)),
    Case("selfatt_valatt", "_contrib_interleaved_matmul_selfatt_valatt", {"heads": 3},
         [In("qkv", (5, 2, 18)), In("att", (6, 5, 5), gen=lambda r, s: _np_softmax(r.normal(size=s), -1))],
         opsets=(13,)),
    # sequences
    Case("sequence_reverse", "SequenceReverse", {}, [In("data", (5, 2, 3))]),
    Case("sequence_reverse_lengths", "SequenceReverse", {"use_sequence_length": True},
         [In("data", (5, 3, 2)), In("sequence_length", (3,), gen=lengths(5, 1))]),
    Case("sequence_reverse_zero_length", "SequenceReverse", {"use_sequence_length": True},
         [In("data", (4, 3)), In("sequence_length", (3,), gen=lambda r, s: np.array([0, 4, 2]))]),
    Case("sequence_mask_off", "SequenceMask", {}, [In("data", (4, 2, 3))]),
    Case("sequence_mask_fractional_lengths", "SequenceMask", {"use_sequence_length": True, "axis": 1},
         [In("data", (3, 4, 2)), In("sequence_length", (3,), gen=lambda r, s: np.array([0.5, 2.7, 4.0]))]),
    Case("sequence_mask_axis0", "SequenceMask", {"use_sequence_length": True, "value": -1.5},
         [In("data", (4, 3, 2)), In("sequence_length", (3,), gen=lengths(4))]),
    Case("sequence_mask_axis1", "SequenceMask", {"use_sequence_length": True, "axis": 1},
         [In("data", (3, 5)), In("sequence_length", (3,), gen=lengths(5))]),
    Case("embedding", "Embedding", {"input_dim": 6, "output_dim": 4},
         [In("data", (2, 5), gen=indices(6)), In("weight", (6, 4), "arg")]),
    Case("embedding_f64", "Embedding", {"input_dim": 5, "output_dim": 3, "dtype": "float64"},
         [In("data", (7,), gen=indices(5)), In("weight", (5, 3), "arg", dtype="float64")]),
    Case("rnn_param_concat", "_rnn_param_concat", {"num_args": 3, "dim": 0},
         [In("a", (6,)), In("b", (4,)), In("c", (3,))], ref=lambda a, b, c: np.concatenate([a, b, c])),
    # the fused RNN op: every mode, stacked, bidirectional, with and without state outputs
    rnn_case("rnn_lstm", "lstm", 4, 1, False, False),
    rnn_case("rnn_lstm_2l_bi_states", "lstm", 4, 2, True, True),
    rnn_case("rnn_gru", "gru", 5, 1, False, True),
    rnn_case("rnn_gru_2l_bi", "gru", 3, 2, True, True),
    rnn_case("rnn_tanh_bi", "rnn_tanh", 4, 1, True, True),
    rnn_case("rnn_relu_3l", "rnn_relu", 3, 3, False, True),
    Case("rnn_projection_refused", "RNN", {"mode": "lstm", "state_size": 4, "num_layers": 1, "projection_size": 2},
         [In("data", (3, 1, 2)), In("params", (100,), "arg"), In("state", (1, 1, 2)), In("state_cell", (1, 1, 4))],
         opsets=(17,), refuse="projection_size"),
    Case("rnn_state_clip_refused", "RNN", {"mode": "lstm", "state_size": 4, "num_layers": 1, "lstm_state_clip_min": -1.0,
                                           "lstm_state_clip_max": 1.0},
         [In("data", (3, 1, 2)), In("params", (112,), "arg"), In("state", (1, 1, 4)), In("state_cell", (1, 1, 4))],
         opsets=(17,), refuse="lstm_state_clip"),
]


def _arrays(case: Case) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(zlib.crc32(case.id.encode()))
    out = {}
    for i in case.inputs:
        if i.kind == "label":
            continue
        a = i.gen(rng, i.shape) if i.gen else rng.normal(size=i.shape)
        out[i.name] = np.asarray(a).astype(i.dtype)
    return out


def build(case: Case, tmp: Path, mx: Any) -> Model:
    arrays = _arrays(case)
    feeds = {i.name: arrays[i.name] for i in case.inputs if i.kind == "data"}
    params = {f"{'aux' if i.kind == 'aux' else 'arg'}:{i.name}": arrays[i.name] for i in case.inputs
              if i.kind in ("arg", "aux")}
    sym_path = tmp / "case-symbol.json"
    params_path = tmp / "case-0000.params" if params else None
    fn = mx_op(mx, case.op) if mx is not None else None
    if fn is not None:
        args = [mx.sym.var(i.name) for i in case.inputs]
        sym = fn(*args, name=NAME, **case.attrs)
        sym.save(str(sym_path))
        if params_path:
            mx.nd.save(str(params_path), {k: mx.nd.array(v, dtype=v.dtype) for k, v in params.items()})
    else:
        sym_path.write_text(hand_json(case.op, NAME, [i.name for i in case.inputs], case.attrs))
        if params_path:
            write_params(params_path, params)
    return Model(sym_path, params_path, feeds, case.outputs)


def _numpy_reference(case: Case, model: Model, names: tuple[str, ...]) -> dict[str, np.ndarray]:
    if case.ref is None:
        pytest.skip("mxnet not installed and the case has no numpy reference")
    arrays = _arrays(case)
    r = case.ref(*[arrays[i.name] for i in case.inputs if i.kind != "label"])
    outs = r if isinstance(r, tuple) else (r,)
    return dict(zip(names, [np.asarray(o) for o in outs], strict=True))


PARAMS = [(c, o) for c in CASES for o in c.opsets]


@pytest.mark.parametrize(("case", "opset"), PARAMS, ids=[f"{c.id}-opset{o}" for c, o in PARAMS])
def test_translator_matches_mxnet(case: Case, opset: int, tmp_path: Path) -> None:
    mx = try_mxnet()
    model = build(case, tmp_path, mx)
    if case.refuse:
        with pytest.raises(ExportError, match=case.refuse):
            export(model, opset)
        return
    result = export(model, opset)
    assert result.model.opset_import[0].version == opset
    got = run_onnx(result.model, model.feeds)
    if mx is None or case.numpy_only:
        expected = _numpy_reference(case, model, result.output_names)
    else:
        expected = run_mxnet(model, result)
    assert set(result.output_names) == set(expected)
    assert_close(got, expected, case.rtol, case.atol)
    for name in result.output_names:
        assert got[name].dtype == expected[name].dtype, name


def test_numpy_only_cases_state_why() -> None:
    """A case compared with numpy instead of MXNet must say why MXNet cannot be its reference."""
    for c in CASES:
        if c.numpy_only is not None:
            assert c.ref is not None and len(c.numpy_only) > 20, c.id


# ---- other dtypes -------------------------------------------------------------------------------
# float64 / float16 versions of one case per op. Outcomes other than "exact" are documented limits:
# "ort: <op>"  - the ONNX model is valid (checker passes) but onnxruntime's CPU provider has no kernel
#                for <op> in that dtype (bridge keeps MXNet's dtype rather than computing in another);
# "mxnet"      - MXNet 1.9.1 itself cannot run the op in that dtype on CPU, so there is nothing to match.
DTYPE_CASES = ["resize_size_True", "roialign_legacy_r-1", "roipooling", "lrn", "layernorm_axis-1",
               "layernorm_axis1", "instancenorm", "bn_output_mean_var", "logistic_regression_output", "pool_lp2",
               "pool_same_avg_8", "adaptive_avg_3x4", "adaptive_avg_default", "softmax_use_length", "div_sqrt_dim",
               "selfatt_qk", "selfatt_valatt", "sequence_reverse_lengths", "sequence_mask_axis0", "embedding",
               "rnn_param_concat", "rnn_lstm", "rnn_gru", "rnn_tanh_bi"]
DTYPE_LIMITS: dict[tuple[str, str], str] = {
    ("resize_size_True", "float64"): "ort: Resize",
    ("roipooling", "float64"): "ort: MaxRoiPool",
    ("pool_lp2", "float64"): "ort: AveragePool",
    ("pool_same_avg_8", "float64"): "ort: AveragePool",
    ("adaptive_avg_default", "float64"): "ort: GlobalAveragePool",
    ("rnn_lstm", "float64"): "ort: LSTM",
    ("rnn_gru", "float64"): "ort: GRU",
    ("rnn_tanh_bi", "float64"): "ort: RNN",
    # MXNet 1.9.1 CPU: LRN is float32-only (TBlob type check), InstanceNorm float32-only (InferType),
    # the interleaved attention ops go through MKLDNN ("unknown type for MKLDNN"), RNN has no FP16 gemm
    ("lrn", "float64"): "mxnet", ("lrn", "float16"): "mxnet",
    ("instancenorm", "float64"): "mxnet", ("instancenorm", "float16"): "mxnet",
    ("selfatt_qk", "float64"): "mxnet", ("selfatt_qk", "float16"): "mxnet",
    ("selfatt_valatt", "float64"): "mxnet", ("selfatt_valatt", "float16"): "mxnet",
    ("rnn_lstm", "float16"): "mxnet", ("rnn_gru", "float16"): "mxnet", ("rnn_tanh_bi", "float16"): "mxnet",
}


def _with_dtype(case: Case, dtype: str) -> Case:
    # float16 BatchNorm takes float32 parameters in MXNet (batch_norm.cc InferType)
    keep = ("arg", "aux", "label") if case.op == "BatchNorm" and dtype == "float16" else ("label",)
    ins = [In(i.name, i.shape, i.kind, i.gen, dtype if i.dtype == "float32" and i.kind not in keep else i.dtype)
           for i in case.inputs]
    return Case(f"{case.id}_{dtype}", case.op, case.attrs, ins, (17,), rtol=1e-2 if dtype == "float16" else 1e-6,
                atol=1e-2 if dtype == "float16" else 1e-9)


DTYPE_PARAMS = [(c, d) for c in CASES if c.id in DTYPE_CASES for d in ("float64", "float16")]


@pytest.mark.parametrize(("case", "dtype"), DTYPE_PARAMS, ids=[f"{c.id}-{d}" for c, d in DTYPE_PARAMS])
def test_other_dtypes(case: Case, dtype: str, tmp_path: Path) -> None:
    import onnx

    mx = try_mxnet()
    if mx is None:
        pytest.skip("mxnet not installed (the reference for other dtypes)")
    limit = DTYPE_LIMITS.get((case.id, dtype), "exact")
    c = _with_dtype(case, dtype)
    model = build(c, tmp_path, mx)
    if limit == "mxnet":
        with pytest.raises(Exception, match=r"MXNetError|simple_bind"):  # MXNet's own failure
            run_mxnet(model, export(model, 17))
        return
    result = export(model, 17)
    onnx.checker.check_model(result.model, full_check=True)
    if limit.startswith("ort: "):
        with pytest.raises(Exception, match=r"NOT_IMPLEMENTED|does not support double") as err:
            run_onnx(result.model, model.feeds)
        assert limit[5:] in str(err.value)
        return
    got = run_onnx(result.model, model.feeds)
    expected = run_mxnet(model, result)
    assert_close(got, expected, c.rtol, c.atol)
    for name in result.output_names:
        assert got[name].dtype == expected[name].dtype, name


@pytest.mark.parametrize(("aligned", "opset"), [(False, 13), (False, 17), (True, 16), (True, 18)])
def test_roialign_padded_rois(aligned: bool, opset: int, tmp_path: Path) -> None:
    """GluonCV pads its rois with batch index -1 rows. MXNet 1.9.1's CPU ROIAlign skips those rows, leaving
    their output (and, through its shared sample buffer, parts of other rows) undefined, so the converted
    layer is held to the defined meaning: zeros on padding rows, MXNet's own values (on the real rows
    alone) elsewhere."""
    mx = need_mxnet()
    attrs = {"pooled_size": (3, 2), "spatial_scale": 0.5, "sample_ratio": 2, "aligned": aligned}
    case = Case("roialign_padded", "_contrib_ROIAlign", attrs,
                [In("data", (2, 3, 8, 8)), In("rois", (7, 5), gen=rois(2, 16.0, padded=3))])
    model = build(case, tmp_path, mx)
    padding = model.feeds["rois"][:, 0] < 0
    assert 0 < padding.sum() < len(padding)
    result = export(model, opset)
    got = run_onnx(result.model, model.feeds)[result.output_names[0]]
    real = mx.nd.contrib.ROIAlign(mx.nd.array(model.feeds["data"]), mx.nd.array(model.feeds["rois"][~padding]),
                                  **attrs).asnumpy()
    np.testing.assert_array_equal(got[padding], 0)
    np.testing.assert_allclose(got[~padding], real, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("second", [{"scale_height": 2.0, "scale_width": 2.0}, {"height": 9, "width": 5},
                                    {"mode": "to_odd_up"}, {"mode": "odd_scale", "scale_height": 2.0, "scale_width": 0.5}],
                         ids=["scale", "size", "to_odd_up", "odd_scale"])
@pytest.mark.parametrize("opset", [13, 17])
def test_chained_resizes_on_a_static_input(second: dict[str, Any], opset: int, tmp_path: Path) -> None:
    """ICNet resizes a resized map: the second BilinearResize2D reads the first one's H, W, which the
    converter knows from the static input."""
    mx = need_mxnet()
    first = mx.sym.contrib.BilinearResize2D(mx.sym.var("data"), scale_height=0.5, scale_width=0.5, name="r1")
    mx.sym.contrib.BilinearResize2D(first, name="r2", **second).save(str(tmp_path / "net-symbol.json"))
    model = Model(tmp_path / "net-symbol.json", None,
                  {"data": np.random.default_rng(1).standard_normal((2, 3, 12, 10)).astype(np.float32)})
    result = export(model, opset)
    assert_close(run_onnx(result.model, model.feeds), run_mxnet(model, result))
