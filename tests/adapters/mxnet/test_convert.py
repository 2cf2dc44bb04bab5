"""convert.py: symbols MXNet writes with several nodes of one name (a Gluon block called more than once)
convert with unique ONNX names, keep MXNet's name in provenance, and validate against MXNet."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from mxnet_testlib import Model, export, need_mxnet, run_mxnet, run_onnx

from adapters.mxnet import MXNetAdapter
from bridge import provenance
from bridge.config import DynamicAxis, ExportSpec, InputSpec


def _gluon_export(mx: Any, tmp: Path, net: Any, feeds: dict[str, np.ndarray]) -> Model:
    net.initialize(mx.init.Uniform(0.5))
    net.hybridize()
    net(*[mx.nd.array(v) for v in feeds.values()])
    net.export(str(tmp / "net"))
    return Model(tmp / "net-symbol.json", tmp / "net-0000.params", feeds)


def _twice_net(mx: Any, heads: str) -> Any:
    gluon = mx.gluon

    class Twice(gluon.HybridBlock):
        """One Dense and one BatchNorm, each called twice (MXNet names both calls alike)."""

        def __init__(self) -> None:
            super().__init__()
            with self.name_scope():
                self.dense = gluon.nn.Dense(6, in_units=6)
                self.bn = gluon.nn.BatchNorm(in_channels=6)

        def hybrid_forward(self, F: Any, x: Any) -> Any:
            a = self.bn(self.dense(x))
            b = self.bn(self.dense(F.relu(a)))
            return (a, b) if heads == "both" else b

    return Twice()


@pytest.mark.parametrize("heads", ["last", "both"])
def test_block_called_twice_converts_and_matches_mxnet(tmp_path: Path, heads: str) -> None:
    mx = need_mxnet()
    feeds = {"data": np.random.default_rng(0).standard_normal((3, 6)).astype(np.float32)}
    model = _gluon_export(mx, tmp_path, _twice_net(mx, heads), feeds)
    names = [n["name"] for n in json.loads(model.symbol.read_text())["nodes"] if n["op"] != "null"]
    assert len(names) > len(set(names)), "the fixture must hold duplicate node names"

    result = export(model)
    onnx_names = [n.name for n in result.model.graph.node]
    assert len(onnx_names) == len(set(onnx_names))
    sources = {p.node for p in map(provenance.read, result.model.graph.node) if p is not None}
    assert set(names) <= sources  # every MXNet name, the repeated ones included, is kept as the source
    assert all(not s.endswith("_1") for s in sources)

    got = run_onnx(result.model, feeds)
    ref = run_mxnet(model, result)
    assert list(ref) == list(result.output_names) and len(ref) == (2 if heads == "both" else 1)
    for name, value in ref.items():
        np.testing.assert_allclose(got[name], value, rtol=1e-4, atol=1e-5, err_msg=name)
    if heads == "both":  # the two outputs are different tensors of the same MXNet name
        a, b = ref.values()
        assert not np.allclose(a, b)


@pytest.mark.parametrize(("cell", "layout", "bidirectional"),
                         [("LSTM", "NTC", True), ("GRU", "TNC", False), ("RNN", "NTC", False)])
def test_rnn_layer_called_without_states(tmp_path: Path, cell: str, layout: str, bidirectional: bool) -> None:
    """Inside a hybridized block a Gluon RNN layer called without states makes them as
    ``_zeros(shape=(L*D, 0, H))``; the 0 is the batch of the RNN's data, also at other batch sizes."""
    mx = need_mxnet()
    gluon = mx.gluon

    class Encoder(gluon.HybridBlock):
        def __init__(self) -> None:
            super().__init__()
            with self.name_scope():
                self.rnn = getattr(gluon.rnn, cell)(5, num_layers=2, bidirectional=bidirectional, layout=layout,
                                                    input_size=3)

        def hybrid_forward(self, F: Any, x: Any) -> Any:
            return self.rnn(x)

    rng = np.random.default_rng(4)
    model = _gluon_export(mx, tmp_path, Encoder(), {"data": rng.standard_normal((2, 4, 3)).astype(np.float32)})
    nodes = json.loads(model.symbol.read_text())["nodes"]
    assert any(n["op"] == "_zeros" and ", 0," in n["attrs"]["shape"] for n in nodes)
    batch_axis = layout.index("N")
    spec = ExportSpec(inputs=(InputSpec("data", (2, 4, 3), "float32"),), dynamic=(DynamicAxis("data", batch_axis, "n"),))
    result = MXNetAdapter().export(model.source(), spec)
    for batch in (2, 5):
        shape = [2, 4, 3]
        shape[batch_axis] = batch
        model.feeds = {"data": rng.standard_normal(shape).astype(np.float32)}
        got, ref = run_onnx(result.model, model.feeds), run_mxnet(model, result)
        for name, value in ref.items():
            np.testing.assert_allclose(got[name], value, rtol=1e-4, atol=1e-5, err_msg=f"{name} at batch {batch}")
