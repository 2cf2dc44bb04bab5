"""MXNet's own int8 graphs (``mxnet.contrib.quantization``) convert to ONNX QDQ and match MXNet's int8 run.

Models are quantized here with ``quantize_model_mkldnn`` (what MXNet 1.9.1's CPU build runs): the bundled
trained SSD (Conv+BatchNorm+relu fused, ``smart`` and ``full`` modes - ``full`` also quantizes the heads'
Flatten/Concat and the anchors), a small net with max and average pooling, a quantized relu and a
Concat of int8 tensors of different ranges, and a small net of quantized adds (uint8 + uint8, int8 + int8,
uint8 + int8) and multiplies (int8 out, and float out fused with its dequantize). Tolerance, stated: every int8 / uint8 tensor of the converted
model equals MXNet's element for element, except for at most one quantization step on at most 0.1% of a
tensor's elements (a value at an exact half rounded the other way: MXNet multiplies by a scale where ONNX
divides by its inverse); measured: no difference at all. The float detections then match within the
default detection-aware tolerance. Mutants - the translator with MXNet's ranges as 127 / 255 instead of
127.5 / 255.5, BatchNorm folded in float32, average pooling through float, a uint8 + int8 add rounded once
(oneDNN rounds the uint8 addend into int8 first), a multiply rounded to nearest instead of truncated, and one
saturating instead of wrapping past the int8 range - fail that tolerance.
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
               "_contrib_quantized_concat", "_contrib_quantized_pooling", "_contrib_quantized_act",
               "_contrib_quantized_elemwise_add", "_contrib_quantized_elemwise_mul")
SHAPES = {"pooling": "data:8,3,32,32", "elemwise": "data:8,3,16,16"}  # the SSD's is data:8,3,64,64
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
    found["elemwise"] = (_elemwise_net(mx, out), out / "elemwise_feeds.npz")
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


def _elemwise_net(mx: Any, out: Path) -> Path:
    """Quantized adds and multiplies of pooled branches (not convolutions, which MXNet would fuse with a sum):
    uint8 + uint8, int8 + int8, uint8 + int8 (oneDNN's reorder-then-sum path), int8 x int8 into a concat
    (int8 out) and int8 x int8 before a sigmoid (fused with its dequantize: float out)."""
    d = mx.sym.Variable("data")

    def branch(name: str, relu: bool) -> Any:
        x = mx.sym.Convolution(d, num_filter=8, kernel=(3, 3), pad=(1, 1), name=name)
        x = mx.sym.Activation(x, act_type="relu", name=f"{name}_relu") if relu else x
        return mx.sym.Pooling(x, kernel=(2, 2), stride=(2, 2), pool_type="max", name=f"{name}_pool")

    a, b, c, e = branch("ca", True), branch("cb", True), branch("cc", False), branch("cd", False)
    mixed = mx.sym.elemwise_add(mx.sym.elemwise_add(a, b, name="add_uu"), mx.sym.elemwise_add(c, e, name="add_ss"),
                                name="add_us")
    x = mx.sym.Concat(mixed, mx.sym.elemwise_mul(c, e, name="mul_ss"), dim=1, name="cat")
    x = mx.sym.flatten(mx.sym.Convolution(x, num_filter=8, kernel=(3, 3), pad=(1, 1), name="cz"), name="fl")
    gate = mx.sym.flatten(mx.sym.sigmoid(mx.sym.elemwise_mul(c, e, name="mul_float"), name="gate"), name="gfl")
    x = mx.sym.elemwise_add(x, gate, name="add_out")
    mod = mx.mod.Module(x, data_names=["data"], label_names=None)
    mod.bind(data_shapes=[("data", (8, 3, 16, 16))], for_training=False)
    mx.random.seed(0)
    mod.init_params(mx.init.Xavier())
    args, aux = mod.get_params()
    data = np.random.default_rng(0).normal(0, 1, (8, 3, 16, 16)).astype(np.float32)
    np.savez(out / "elemwise_feeds.npz", data=data)
    symbol = _quantize(mx, x, args, aux, data, "full", out / "elemwise")
    # MXNet's calibration leaves the requantize between mul_float and its dequantize without a range
    # (MXNET_QUANTIZATION_VERBOSE: "Can't find calibration result for requantize_mul_float"), so its own
    # MKLDNN_QUANTIZE pass does not fuse them; given any range, that pass fuses the three into one
    # _contrib_quantized_elemwise_mul with enable_float_output (which ignores the range)
    qsym, qargs, qaux = mx.model.load_checkpoint(str(out / "elemwise"), 0)
    graph = json.loads(qsym.tojson())
    for node in graph["nodes"]:
        if node["name"] == "requantize_mul_float":
            node["attrs"].update(min_calib_range="-1.0", max_calib_range="1.0")
    qsym = mx.sym.load_json(json.dumps(graph)).get_backend_symbol("MKLDNN_QUANTIZE")
    mx.model.save_checkpoint(str(out / "elemwise"), 0, qsym, qargs, qaux)
    return symbol


def _tensors(symbol: Path, feeds: Path, onnx_path: Path, names: list[str]) -> list[tuple[np.ndarray, np.ndarray]]:
    """(MXNet's, onnxruntime's) value of each named tensor of the quantized symbol and its converted model."""
    import onnxruntime as ort

    mx = need_mxnet()
    sym, args, aux = mx.model.load_checkpoint(str(symbol).removesuffix("-symbol.json"), 0)
    data = np.load(feeds)["data"]
    internals = sym.get_internals()
    executor = mx.sym.Group([internals[n] for n in names]).bind(mx.cpu(), {**args, "data": mx.nd.array(data)},
                                                               aux_states=aux)
    theirs = [o.asnumpy() for o in executor.forward(is_train=False)]
    model = onnx.load(str(onnx_path))
    for n in names:
        model.graph.output.append(onnx.helper.make_empty_tensor_value_info(n))
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return list(zip(theirs, session.run(names, {"data": data}), strict=True))


def _int8_outputs(symbol: Path) -> set[str]:
    """The name of every int8 / uint8 tensor the quantized symbol's nodes compute (MXNet's output names)."""
    return {n["name"] + ("_output0" if n["op"] == "_contrib_quantize_v2" else "_output")
            for n in json.loads(symbol.read_text())["nodes"]
            if n["op"] in COVERED_OPS and n["op"] != "_contrib_dequantize"
            and n.get("attrs", {}).get("enable_float_output") != "True"}


def _quantized_tensors(symbol: Path, feeds: Path, onnx_path: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Every int8/uint8 tensor MXNet computes that the converted model has by name: (MXNet's, onnxruntime's)."""
    mx = need_mxnet()
    internals = mx.sym.load(str(symbol)).get_internals()
    produced = {o for n in onnx.load(str(onnx_path)).graph.node for o in n.output}
    names = [n for n in internals.list_outputs() if n in produced]
    pairs = dict(zip(names, _tensors(symbol, feeds, onnx_path, names), strict=True))
    return {n: pair for n, pair in pairs.items() if pair[0].dtype in (np.int8, np.uint8)}


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


@pytest.mark.parametrize("name", ["ssd_smart", "ssd_full", "pooling", "elemwise"])
def test_mxnet_int8_graph_matches_mxnet(name: str, quantized: dict[str, tuple[Path, Path]], tmp_path: Path) -> None:
    symbol, feeds = quantized[name]
    ops = {n["op"] for n in json.loads(symbol.read_text())["nodes"]}
    assert "_sg_mkldnn_conv" in ops and "_contrib_quantize_v2" in ops
    shape = SHAPES.get(name, "data:8,3,64,64")
    result = _convert(symbol, feeds, tmp_path / "model.onnx", shape)  # validated against MXNet's int8 run
    assert result.written and result.passed
    model = onnx.load(str(tmp_path / "model.onnx"))
    assert sum(n.op_type == "QuantizeLinear" for n in model.graph.node) >= 3
    pairs = _quantized_tensors(symbol, feeds, tmp_path / "model.onnx")
    assert len(pairs) >= (6 if name == "pooling" else 10)
    assert _int8_outputs(symbol) <= set(pairs)  # every quantized layer's int8 output compared by name
    assert not _within_tolerance(pairs)
    if name != "ssd_smart":  # full mode and the pooling net carry the quantized concat / flatten / pooling / act
        assert {"_contrib_quantized_concat", "_contrib_quantized_flatten"} <= ops
    if name == "pooling":
        assert {"_contrib_quantized_pooling", "_contrib_quantized_act"} <= ops
    if name == "elemwise":  # every add / int8-out multiply compared, and the float-out multiply
        nodes = json.loads(symbol.read_text())["nodes"]
        assert {"_contrib_quantized_elemwise_add", "_contrib_quantized_elemwise_mul"} <= ops
        assert {f"quantized_{n}_output" for n in ("add_uu", "add_ss", "add_us", "mul_ss", "add_out")} <= set(pairs)
        assert [n["attrs"].get("enable_float_output") for n in nodes if n["name"] == "quantized_mul_float"] == ["True"]
        theirs, ours = _tensors(symbol, feeds, tmp_path / "model.onnx", ["quantized_mul_float_output"])[0]
        # one float32 product times one float32 scale on both sides (measured: equal); rtol for a runtime's FMA
        assert ours.dtype == theirs.dtype == np.float32
        np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=0)


def _rounded_to_nearest(ctx: Any, x: str, hint: str, output: str) -> str:
    """A wrong multiply: MXNet's product rounded to nearest and saturated (it truncates and wraps)."""
    return ctx.emit("QuantizeLinear", [x, ctx.const(np.float32(1), f"{hint}__one"),
                                       ctx.const(np.zeros((), np.int8), f"{hint}__zero")], [output], name=hint)[0]


def _saturated(ctx: Any, x: str, hint: str, output: str) -> str:
    """A wrong multiply: truncated like MXNet's but saturated to int8 where MXNet wraps."""
    clipped = ctx.emit("Clip", [x, ctx.const(np.float32(-128), f"{hint}__low"),
                                ctx.const(np.float32(127), f"{hint}__high")], 1, name=f"{hint}__clip")[0]
    return ctx.emit("Cast", [clipped], [output], name=hint, to=onnx.TensorProto.INT8)[0]


@pytest.mark.parametrize("mutant", ["ranges_127", "bn_float32", "avg_pool_float", "add_rounded_once", "mul_rounded"])
def test_tolerance_fails_wrong_translations(mutant: str, quantized: dict[str, tuple[Path, Path]], tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Translations that are wrong by a rounding detail break the stated tolerance (it is not vacuous)."""
    import adapters.mxnet.ops_quantized as ops

    name = {"avg_pool_float": "pooling", "add_rounded_once": "elemwise", "mul_rounded": "elemwise"}.get(mutant, "ssd_full")
    if mutant == "add_rounded_once":  # the uint8 addend of a uint8 + int8 sum not rounded into int8 first
        monkeypatch.setattr(ops, "reorder_to_output", lambda ctx, x, scale, zero, hint: x)
    elif mutant == "mul_rounded":
        monkeypatch.setattr(ops, "truncate_to_int8", _rounded_to_nearest)
    elif mutant == "ranges_127":
        monkeypatch.setattr(ops, "INT8_RANGE", 127.0)
        monkeypatch.setattr(ops, "UINT8_RANGE", 255.0)
    elif mutant == "bn_float32":  # alpha computed in float32 throughout
        monkeypatch.setattr(ops, "bn_alpha", lambda gamma, var, eps: (gamma / np.sqrt(var + np.float32(eps)))
                            .astype(np.float32))
    else:  # dequantize, average in float, quantize again: halves land on either side

        def float_average(ctx: Any, node: Any, shadow: Any, q: str, lo: float, hi: float, output: str) -> str:
            from adapters.mxnet.ops_nn import Pooling

            x = ops._dequantized(ctx, node, q, lo, hi, f"{node.name}__in")
            scale, zero = ops._qparams(ctx, node.name, lo, hi, False)
            return ctx.emit("QuantizeLinear", [Pooling(ctx, shadow, [x])[0], scale, zero], [output],
                            name=f"{node.name}__requantize")[0]

        monkeypatch.setattr(ops, "average_pool", float_average)
    symbol, feeds = quantized[name]
    _convert(symbol, feeds, tmp_path / "model.onnx", SHAPES.get(name, "data:8,3,64,64"), validate=[])
    assert _within_tolerance(_quantized_tensors(symbol, feeds, tmp_path / "model.onnx"))


@pytest.mark.parametrize("mutant", [None, "saturated"])
def test_multiply_past_its_range_wraps_like_mxnet(mutant: str | None, quantized: dict[str, tuple[Path, Path]],
                                                  tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A multiply whose calibrated range is too small: MXNet's int8 cast wraps modulo 256; so does bridge's
    (equal element for element), and a saturating translation fails the tolerance."""
    import adapters.mxnet.ops_quantized as ops

    symbol, feeds = quantized["elemwise"]
    graph = json.loads(symbol.read_text())
    (node,) = [n for n in graph["nodes"] if n["name"] == "quantized_mul_ss"]
    node["attrs"].update(min_calib_range="-0.01", max_calib_range="0.05")  # products reach ~4.5
    narrow = tmp_path / "narrow-symbol.json"
    narrow.write_text(json.dumps(graph))
    (tmp_path / "narrow-0000.params").write_bytes(Path(str(symbol).replace("-symbol.json", "-0000.params")).read_bytes())
    if mutant:
        monkeypatch.setattr(ops, "truncate_to_int8", _saturated)
    _convert(narrow, feeds, tmp_path / "model.onnx", SHAPES["elemwise"], validate=[])
    pairs = _quantized_tensors(narrow, feeds, tmp_path / "model.onnx")
    theirs = pairs["quantized_mul_ss_output"][0].astype(np.int32)
    if mutant:
        assert _within_tolerance(pairs)
    else:
        assert (np.abs(theirs) > 64).mean() > 0.1  # wrapped values all over the int8 range: the case is real
        assert not _within_tolerance(pairs)
        np.testing.assert_array_equal(*pairs["quantized_mul_ss_output"])


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


@pytest.mark.parametrize("case", ["uncalibrated_add", "uint8_multiply"])
def test_elemwise_graphs_mxnet_cannot_run_as_given_are_refused(case: str, quantized: dict[str, tuple[Path, Path]],
                                                               tmp_path: Path) -> None:
    """An add without a calibrated output range (int32 out, its range found at run time for a requantize) and a
    multiply of a uint8 tensor (MXNet's loop reads int8 only) are refused, naming the node."""
    symbol, feeds = quantized["elemwise"]
    graph = json.loads(symbol.read_text())
    names = [n["name"] for n in graph["nodes"]]
    if case == "uncalibrated_add":
        graph["nodes"][names.index("quantized_add_ss")]["attrs"] = {}
        expected = r"quantized_add_ss.*no calibrated output range"
    else:  # lhs from the uint8 sum of the relu branches (same shape as the int8 pooled branch)
        mul = graph["nodes"][names.index("quantized_mul_ss")]
        uu = names.index("quantized_add_uu")
        mul["inputs"][0], mul["inputs"][2], mul["inputs"][3] = [uu, 0, 0], [uu, 1, 0], [uu, 2, 0]
        expected = r"quantized_mul_ss.*uint8 input.*int8 inputs only"
    edited = tmp_path / "edited-symbol.json"
    edited.write_text(json.dumps(graph))
    (tmp_path / "edited-0000.params").write_bytes(Path(str(symbol).replace("-symbol.json", "-0000.params")).read_bytes())
    with pytest.raises(BridgeError, match=expected):
        _convert(edited, feeds, tmp_path / "m.onnx", SHAPES["elemwise"], validate=[])
