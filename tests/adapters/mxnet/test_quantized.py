"""MXNet's own int8 graphs (``mxnet.contrib.quantization``) convert to ONNX QDQ and match MXNet's int8 run.

Models are quantized here with ``quantize_model_mkldnn`` (what MXNet 1.9.1's CPU build runs): the bundled
trained SSD (Conv+BatchNorm+relu fused, ``smart`` and ``full`` modes - ``full`` also quantizes the heads'
Flatten/Concat and the anchors) and a small net with max and average pooling, a quantized relu and a
Concat of int8 tensors of different ranges. Tolerance, stated: every int8 / uint8 tensor of the converted
model equals MXNet's element for element, except for at most one quantization step on at most 0.1% of a
tensor's elements (a value at an exact half rounded the other way: MXNet multiplies by a scale where ONNX
divides by its inverse); measured: no difference at all. The float detections then match within the
default detection-aware tolerance. Mutants - the translator with MXNet's ranges as 127 / 255 instead of
127.5 / 255.5, BatchNorm folded in float32, average pooling through float - fail that tolerance.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from mxnet_testlib import need_mxnet

from bridge.errors import BridgeError, UnsupportedOpError

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "mxnet_ssd"
# the ops these tests convert and compare with MXNet (test_contrib_and_errors' coverage check reads this)
COVERED_OPS = ("_sg_mkldnn_conv", "_contrib_quantize_v2", "_contrib_dequantize", "_contrib_quantized_flatten",
               "_contrib_quantized_concat", "_contrib_quantized_pooling", "_contrib_quantized_act")
ONE_STEP_SHARE = 1e-3  # elements allowed one quantization step apart (rounding at exact halves)


def _images(count: int, seed: int) -> np.ndarray:
    import sys

    sys.path.insert(0, str(EXAMPLE))
    from shapes import make_dataset, preprocess

    images, _b, _c = make_dataset(count, seed, 64)
    return preprocess(images)


def _quantize(mx: Any, sym: Any, args: Any, aux: Any, data: np.ndarray, mode: str, prefix: Path) -> Path:
    from mxnet.contrib import quantization

    calib = mx.io.NDArrayIter(data, batch_size=len(data), data_name="data")
    qsym, qargs, qaux = quantization.quantize_model_mkldnn(
        sym, args, aux, ctx=mx.cpu(), calib_mode="naive", calib_data=calib, num_calib_examples=len(data),
        quantized_dtype="auto", quantize_mode=mode)
    mx.model.save_checkpoint(str(prefix), 0, qsym, qargs, qaux)
    return prefix.with_name(prefix.name + "-symbol.json")


@pytest.fixture(scope="module")
def quantized(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    """name -> (symbol file, feeds .npz): the SSD in two modes and the pooling net, quantized by MXNet."""
    mx = need_mxnet()
    out = tmp_path_factory.mktemp("quantized")
    calibration, feeds = _images(16, 5), _images(8, 1)
    np.savez(out / "ssd_feeds.npz", data=feeds)
    sym, args, aux = mx.model.load_checkpoint(str(EXAMPLE / "model"), 0)
    found = {f"ssd_{mode}": (_quantize(mx, sym, args, aux, calibration, mode, out / f"ssd_{mode}"),
                             out / "ssd_feeds.npz") for mode in ("smart", "full")}
    found["pooling"] = (_pooling_net(mx, out), out / "pooling_feeds.npz")
    return found


def _pooling_net(mx: Any, out: Path) -> Path:
    """conv-relu-maxpool, two convs concatenated (int8 of different ranges), relu, avgpool, conv, flatten."""
    d = mx.sym.Variable("data")
    x = mx.sym.Activation(mx.sym.Convolution(d, num_filter=8, kernel=(3, 3), pad=(1, 1), name="c1"), act_type="relu",
                          name="r1")
    x = mx.sym.Pooling(x, kernel=(2, 2), stride=(2, 2), pool_type="max", name="p1")
    x = mx.sym.Concat(mx.sym.Convolution(x, num_filter=8, kernel=(3, 3), pad=(1, 1), name="c2"),
                      mx.sym.Convolution(x, num_filter=8, kernel=(1, 1), name="c3"), dim=1, name="cat")
    x = mx.sym.Pooling(mx.sym.Activation(x, act_type="relu", name="r2"), kernel=(2, 2), stride=(2, 2),
                       pool_type="avg", name="p2")
    x = mx.sym.flatten(mx.sym.Convolution(x, num_filter=4, kernel=(3, 3), pad=(1, 1), name="c4"), name="fl")
    mod = mx.mod.Module(x, data_names=["data"], label_names=None)
    mod.bind(data_shapes=[("data", (8, 3, 32, 32))], for_training=False)
    mx.random.seed(0)
    mod.init_params(mx.init.Xavier())
    args, aux = mod.get_params()
    data = np.random.default_rng(0).normal(0, 1, (8, 3, 32, 32)).astype(np.float32)
    np.savez(out / "pooling_feeds.npz", data=data)
    return _quantize(mx, x, args, aux, data, "full", out / "pooling")


def _quantized_tensors(symbol: Path, feeds: Path, onnx_path: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Every int8/uint8 tensor MXNet computes that the converted model has by name: (MXNet's, onnxruntime's)."""
    import onnxruntime as ort

    mx = need_mxnet()
    sym, args, aux = mx.model.load_checkpoint(str(symbol).removesuffix("-symbol.json"), 0)
    data = np.load(feeds)["data"]
    internals = sym.get_internals()
    model = onnx.load(str(onnx_path))
    produced = {o for n in model.graph.node for o in n.output}
    names = [n for n in internals.list_outputs() if n in produced]
    executor = mx.sym.Group([internals[n] for n in names]).bind(mx.cpu(), {**args, "data": mx.nd.array(data)},
                                                               aux_states=aux)
    theirs = {n: o.asnumpy() for n, o in zip(names, executor.forward(is_train=False), strict=True)}
    names = [n for n in names if theirs[n].dtype in (np.int8, np.uint8)]
    for n in names:
        model.graph.output.append(onnx.helper.make_empty_tensor_value_info(n))
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    ours = dict(zip(names, session.run(names, {"data": data}), strict=True))
    return {n: (theirs[n], ours[n]) for n in names}


def _within_tolerance(pairs: dict[str, tuple[np.ndarray, np.ndarray]]) -> list[str]:
    """The tensors outside the stated tolerance (module docstring), with how far."""
    bad = []
    for name, (theirs, ours) in pairs.items():
        diff = np.abs(theirs.astype(np.int32) - ours.astype(np.int32))
        if theirs.dtype != ours.dtype or diff.max() > 1 or (diff > 0).mean() > ONE_STEP_SHARE:
            bad.append(f"{name}: max {diff.max()} steps, {(diff > 0).mean():.2%} differ")
    return bad


def _convert(symbol: Path, feeds: Path, out: Path, shape: str, **options: Any) -> Any:
    from bridge import api

    return api.convert(str(symbol), out, inputs=[shape], feeds=feeds, **options)


@pytest.mark.parametrize("name", ["ssd_smart", "ssd_full", "pooling"])
def test_mxnet_int8_graph_matches_mxnet(name: str, quantized: dict[str, tuple[Path, Path]], tmp_path: Path) -> None:
    symbol, feeds = quantized[name]
    ops = {n["op"] for n in json.loads(symbol.read_text())["nodes"]}
    assert "_sg_mkldnn_conv" in ops and "_contrib_quantize_v2" in ops
    shape = "data:8,3,32,32" if name == "pooling" else "data:8,3,64,64"
    result = _convert(symbol, feeds, tmp_path / "model.onnx", shape)  # validated against MXNet's int8 run
    assert result.written and result.passed
    model = onnx.load(str(tmp_path / "model.onnx"))
    assert sum(n.op_type == "QuantizeLinear" for n in model.graph.node) >= 3
    pairs = _quantized_tensors(symbol, feeds, tmp_path / "model.onnx")
    assert len(pairs) >= (6 if name == "pooling" else 10)  # every quantized layer compared
    assert not _within_tolerance(pairs)
    if name != "ssd_smart":  # full mode and the pooling net carry the quantized concat / flatten / pooling / act
        assert {"_contrib_quantized_concat", "_contrib_quantized_flatten"} <= ops
    if name == "pooling":
        assert {"_contrib_quantized_pooling", "_contrib_quantized_act"} <= ops


@pytest.mark.parametrize("mutant", ["ranges_127", "bn_float32", "avg_pool_float"])
def test_tolerance_fails_wrong_translations(mutant: str, quantized: dict[str, tuple[Path, Path]], tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Translations that are wrong by a rounding detail break the stated tolerance (it is not vacuous)."""
    import adapters.mxnet.ops_quantized as ops

    name = "pooling" if mutant == "avg_pool_float" else "ssd_full"
    if mutant == "ranges_127":
        monkeypatch.setattr(ops, "INT8_RANGE", 127.0)
        monkeypatch.setattr(ops, "UINT8_RANGE", 255.0)
    elif mutant == "bn_float32":  # alpha computed in float32 throughout
        monkeypatch.setattr(ops, "bn_alpha", lambda gamma, var, eps: (gamma / np.sqrt(var + np.float32(eps)))
                            .astype(np.float32))
    else:  # dequantize, average in float, quantize again: halves land on either side

        def float_average(ctx: Any, node: Any, shadow: Any, q: str, lo: float, hi: float) -> str:
            from adapters.mxnet.ops_nn import Pooling

            x = ops._dequantized(ctx, node, q, lo, hi, f"{node.name}__in")
            scale, zero = ops._qparams(ctx, node.name, lo, hi, False)
            return ctx.emit("QuantizeLinear", [Pooling(ctx, shadow, [x])[0], scale, zero], 1,
                            name=f"{node.name}__requantize")[0]

        monkeypatch.setattr(ops, "average_pool", float_average)
    symbol, feeds = quantized[name]
    shape = "data:8,3,32,32" if name == "pooling" else "data:8,3,64,64"
    _convert(symbol, feeds, tmp_path / "model.onnx", shape, validate=[])
    assert _within_tolerance(_quantized_tensors(symbol, feeds, tmp_path / "model.onnx"))


def test_unfused_int8_graph_is_refused_with_why(tmp_path: Path) -> None:
    """quantize_model's unfused graph (_contrib_quantized_conv -> _contrib_requantize) does not run on this
    CPU build; bridge names the ops and says so instead of converting something it cannot check."""
    mx = need_mxnet()
    from mxnet.contrib import quantization

    sym, args, aux = mx.model.load_checkpoint(str(EXAMPLE / "model"), 0)
    data = _images(8, 5)
    qsym, qargs, qaux = quantization.quantize_model(
        sym, args, aux, ctx=mx.cpu(), calib_mode="naive", excluded_sym_names=["stage1_conv"],
        calib_data=mx.io.NDArrayIter(data, batch_size=8, data_name="data"), num_calib_examples=8,
        quantized_dtype="auto")
    mx.model.save_checkpoint(str(tmp_path / "unfused"), 0, qsym, qargs, qaux)
    np.savez(tmp_path / "feeds.npz", data=data)
    with pytest.raises(UnsupportedOpError, match=r"_contrib_quantized_conv[\s\S]*does not run on MXNet 1\.9\.1"):
        _convert(tmp_path / "unfused-symbol.json", tmp_path / "feeds.npz", tmp_path / "m.onnx", "data:8,3,64,64")


def test_uncalibrated_quantize_is_refused(quantized: dict[str, tuple[Path, Path]], tmp_path: Path) -> None:
    """Without calibrated ranges MXNet picks the output type per input at run time: refused, naming the node."""
    symbol, feeds = quantized["pooling"]
    graph = json.loads(symbol.read_text())
    for node in graph["nodes"]:
        if node["op"] == "_contrib_quantize_v2":
            node["attrs"] = {"out_type": "auto"}
    bare = tmp_path / "bare-symbol.json"
    bare.write_text(json.dumps(graph))
    (tmp_path / "bare-0000.params").write_bytes(Path(str(symbol).replace("-symbol.json", "-0000.params")).read_bytes())
    with pytest.raises(BridgeError, match=r"data_quantize.*no calibrated range"):
        _convert(bare, feeds, tmp_path / "m.onnx", "data:8,3,32,32", validate=[])
