"""``bridge debug`` judges a tensor by the error its own node makes, not by a flat tolerance.

A stack of wide 3x3 convolutions on unit-scale inputs is computed correctly by both sides, yet float32
accumulation order alone takes the deep convolutions (and the Relu after them) past ``atol`` on some
elements. Those must not be blamed (they agree when computed from the reference's inputs); a tampered
weight or a swapped op must still be named exactly, also downstream of such noise. Twice: an ONNX
source against an equivalent ONNX model with another accumulation order, and an MXNet symbol (built
with mx.sym) against its conversion, where MXNet's and onnxruntime's kernels differ.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from debug_models import conv_stack
from onnx import numpy_helper

from bridge import api
from bridge.config import Tolerance
from bridge.debug.localize import compare_tensors
from bridge.validation.graph import OnnxTaps

CHANNELS, DEPTH = 64, 4
# no tampering; a wrong weight before, at and after the first noisy conv; a swapped op after the noise
TAMPERS = [None, ("weight", 1), ("weight", 2), ("weight", 3), ("op", 2)]
MXNET_TAMPERS = [None, ("weight", 3), ("op", 2)]  # each MXNet debug run takes seconds: the telling cases


def _weights() -> list[np.ndarray]:
    rng = np.random.default_rng(1)
    return [rng.standard_normal((CHANNELS, CHANNELS if i else 8, 3, 3)).astype(np.float32) for i in range(DEPTH)]


def _image() -> np.ndarray:
    return np.random.default_rng(2).standard_normal((1, 8, 24, 24)).astype(np.float32)


def _noisy_but_correct(divergence: object) -> None:
    rows = divergence.rows  # type: ignore[attr-defined]
    assert divergence.culprit is None and divergence.first_divergent is None  # type: ignore[attr-defined]
    inherited = [r for r in rows if r.diverges]
    assert inherited and all(r.propagated for r in inherited), "the model must be noisy beyond atol for this test"
    assert "propagated from their inputs" in divergence.summary()  # type: ignore[attr-defined]


@pytest.mark.parametrize("tamper", TAMPERS, ids=str)
def test_onnx_accumulation_noise_is_not_blamed(tamper: tuple[str, int] | None) -> None:
    weights = _weights()
    reference, candidate = OnnxTaps(conv_stack(weights)), OnnxTaps(conv_stack(weights, split=True, tamper=tamper))
    names = sorted(set(reference.index.order) & set(candidate.index.order))
    d = compare_tensors(candidate.index, names, reference.run, candidate.run, {"x": _image()}, Tolerance(),
                        reference="plain", candidate="split")
    if tamper is None:
        _noisy_but_correct(d)
        return
    kind, i = tamper
    culprit = d.culprit
    assert culprit is not None and culprit.tensor == f"{'conv' if kind == 'weight' else 'relu'}{i}"
    assert culprit.local is not None and culprit.local.own_error
    # before it, every differing tensor only inherits float error
    before = d.rows[:d.rows.index(culprit)]
    assert all(r.propagated for r in before if r.diverges)


def test_onnx_source_debug_end_to_end(tmp_path: Path) -> None:
    """Through ``api.debug`` with an ONNX source and a given converted model."""
    source, converted, feeds = tmp_path / "src.onnx", tmp_path / "cand.onnx", tmp_path / "feeds.npz"
    onnx.save(conv_stack(_weights()), source)
    onnx.save(conv_stack(_weights(), split=True), converted)
    np.savez(feeds, x=_image())
    result = api.debug(source, model=converted, feeds=feeds)
    assert result.culprit() is None
    assert result.divergence is not None
    _noisy_but_correct(result.divergence)


@pytest.fixture(scope="module")
def mxnet_stack(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """The conv stack as an MXNet checkpoint, its conversion and the feeds."""
    from adapters.mxnet.reference import import_mxnet
    from bridge.errors import AdapterUnavailableError

    try:
        mx = import_mxnet()
    except AdapterUnavailableError:
        pytest.skip("mxnet not installed (pip install 'bridge[mxnet]')")
    tmp = tmp_path_factory.mktemp("mx_stack")
    x = mx.sym.var("data")
    params = {}
    for i, w in enumerate(_weights()):
        x = mx.sym.Convolution(x, num_filter=CHANNELS, kernel=(3, 3), pad=(1, 1), no_bias=True, name=f"conv{i}")
        x = mx.sym.Activation(x, act_type="relu", name=f"relu{i}")
        params[f"arg:conv{i}_weight"] = mx.nd.array(w)
    mx.sym.mean(x, axis=(1, 2, 3), name="score").save(str(tmp / "net-symbol.json"))
    mx.nd.save(str(tmp / "net-0000.params"), params)
    np.savez(tmp / "feeds.npz", data=_image())
    api.convert(tmp / "net-symbol.json", tmp / "net.onnx", inputs=["data:1,8,24,24"], feeds=tmp / "feeds.npz")
    return tmp / "net-symbol.json", tmp / "net.onnx", tmp / "feeds.npz"


def _tampered(path: Path, tamper: tuple[str, int], out: Path) -> Path:
    model = onnx.load(path)
    kind, i = tamper
    if kind == "weight":
        init = next(t for t in model.graph.initializer if t.name == f"conv{i}_weight")
        w = numpy_helper.to_array(init).copy()
        w[0, 0, 0, 0] *= 1.5
        init.CopyFrom(numpy_helper.from_array(w, init.name))
    else:
        node = next(n for n in model.graph.node if f"relu{i}_output" in n.output)
        node.op_type = "Abs"
    onnx.save(model, out)
    return out


@pytest.mark.parametrize("tamper", MXNET_TAMPERS, ids=str)
def test_mxnet_accumulation_noise_is_not_blamed(mxnet_stack: tuple[Path, Path, Path], tmp_path: Path,
                                                tamper: tuple[str, int] | None) -> None:
    symbol, converted, feeds = mxnet_stack
    model = converted if tamper is None else _tampered(converted, tamper, tmp_path / "tampered.onnx")
    result = api.debug(symbol, model=model, feeds=feeds)
    assert result.divergence is not None
    if tamper is None:
        assert result.passed and result.culprit() is None
        _noisy_but_correct(result.divergence)
        return
    kind, i = tamper
    culprit = result.culprit()
    assert not result.passed and culprit is not None
    expected = (f"conv{i}", "Convolution") if kind == "weight" else (f"relu{i}", "Activation")
    assert (culprit["node"], culprit["op"]) == expected
