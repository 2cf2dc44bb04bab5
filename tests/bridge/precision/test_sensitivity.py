"""The per-layer cost of quantization: one layer quantized at a time (its own QDQ copied from the int8 model), the
relative error at the heads; on a net with an outlier channel the two layers around it cost most by far."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from support import make_model

from bridge.precision.calibration import Calibration
from bridge.precision.onnx_int8 import quantize_qdq, quantized_nodes
from bridge.precision.regions import split_region
from bridge.precision.run import fallback_keep
from bridge.precision.sensitivity import LayerCost, layer_costs, only_node_quantized


def _outlier_net(factor: float) -> onnx.ModelProto:
    """x -> conv1 -> relu -> conv2 -> relu -> conv3 (head); conv1's channel 0 scaled by ``factor`` and conv2's
    weights reading it divided by ``factor`` (the same function; an outlier channel between conv1 and conv2)."""
    rng = np.random.default_rng(0)
    w1 = rng.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32)
    w2 = rng.normal(0, 0.3, (8, 8, 3, 3)).astype(np.float32)
    w3 = rng.normal(0, 0.3, (4, 8, 1, 1)).astype(np.float32)
    w1[0] *= factor
    w2[:, 0] /= factor
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
             helper.make_node("Conv", ["r2", "w3"], ["head"], name="conv3"),
             helper.make_node("Sigmoid", ["head"], ["y"], name="scores")]
    inits = [numpy_helper.from_array(w, n) for n, w in (("w1", w1), ("w2", w2), ("w3", w3))]
    return make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 16, 16])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], opset=17, initializers=inits)


def _calibration(count: int = 16) -> Calibration:
    rng = np.random.default_rng(1)
    return Calibration("noise", count, [{"x": rng.normal(0, 1, (8, 3, 16, 16)).astype(np.float32)}
                                        for _ in range(count // 8)])


@pytest.fixture
def quantized(tmp_path: Path) -> tuple[onnx.ModelProto, onnx.ModelProto]:
    fp32 = _outlier_net(1000.0)
    onnx.save(fp32, tmp_path / "fp32.onnx")
    region = split_region(fp32)
    quantize_qdq(tmp_path / "fp32.onnx", tmp_path / "qdq.onnx", _calibration(), region.float, tmp_path / "ranges")
    return fp32, onnx.load(str(tmp_path / "qdq.onnx"))


def test_one_node_quantized_carries_only_that_nodes_qdq(quantized: tuple[onnx.ModelProto, onnx.ModelProto]) -> None:
    fp32, qdq = quantized
    model, mapping = only_node_quantized(fp32, qdq, "conv2", ["head"])
    dq_out = {o for n in model.graph.node if n.op_type == "DequantizeLinear" for o in n.output}
    takers = {n.name for n in model.graph.node if n.op_type != "QuantizeLinear" and any(i in dq_out for i in n.input)}
    # conv2 reads its quantized activation and weight; its output's pair (after the relu onnxruntime folds into
    # it) is read by conv3; conv1 and conv3's own inputs stay float
    assert takers == {"conv2", "conv3"}
    assert sum(n.op_type == "QuantizeLinear" for n in model.graph.node) == 2
    assert mapping == {"head": "head"}
    import onnxruntime as ort

    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert session.run(["head"], {"x": np.zeros((1, 3, 16, 16), np.float32)})[0].shape == (1, 4, 16, 16)


def test_the_layers_around_the_outlier_cost_most(quantized: tuple[onnx.ModelProto, onnx.ModelProto]) -> None:
    fp32, qdq = quantized
    costs = layer_costs(fp32, qdq, ["head"], _calibration(8).samples(8))
    by_node = {c.node: c.cost for c in costs}
    assert set(by_node) == {"conv1", "conv2", "conv3"}  # the quantized region (the float Sigmoid is not a layer)
    assert "scores" in quantized_nodes(qdq)  # though it reads a dequantized tensor
    assert [c.node for c in costs[:2]] == ["conv2", "conv1"] or [c.node for c in costs[:2]] == ["conv1", "conv2"]
    assert min(by_node["conv1"], by_node["conv2"]) > 20 * by_node["conv3"]  # far apart, not a close call


def test_without_the_outlier_no_layer_stands_out(tmp_path: Path) -> None:
    """The same net unscaled: the costs are small and none dominates (the measure does not invent culprits)."""
    fp32 = _outlier_net(1.0)
    onnx.save(fp32, tmp_path / "fp32.onnx")
    quantize_qdq(tmp_path / "fp32.onnx", tmp_path / "qdq.onnx", _calibration(), split_region(fp32).float,
                 tmp_path / "ranges")
    costs = layer_costs(fp32, onnx.load(str(tmp_path / "qdq.onnx")), ["head"], _calibration(8).samples(8))
    assert max(c.cost for c in costs) < 1e-2


def test_fallback_rounds_keep_the_costliest_layers_float() -> None:
    costs = [LayerCost(n, "Conv", c) for n, c in (("a", 0.5), ("b", 0.4), ("c", 0.1), ("d", 0.01))]
    assert fallback_keep(costs, 1, []) == ["a"]
    assert fallback_keep(costs, 2, []) == ["a", "b", "c"]
    assert fallback_keep(costs, 2, ["b"]) == ["b", "a", "c", "d"]  # the user's --keep-float first, then the costliest
