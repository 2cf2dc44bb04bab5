"""ShapeOracle: dims of values the model does not annotate, by onnx shape inference on a copy that leaves
the weights out (they stand in as typed inputs) - and the model itself unchanged."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

from bridge.passes.contrib.common import ShapeOracle


def _model() -> onnx.ModelProto:
    w = np.random.default_rng(0).standard_normal((64, 3, 3, 3)).astype(np.float32)  # 6.9 KB: a "weight"
    shape = numpy_helper.from_array(np.array([1, -1], np.int64), "shape")  # a small shape constant
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1]),
         helper.make_node("Reshape", ["y", "shape"], ["z"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(w, "w"), shape])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_dims_come_from_inference_without_the_weights(monkeypatch: pytest.MonkeyPatch) -> None:
    model = ir.serde.deserialize_model(_model())
    weight = model.graph.initializers["w"].const_value
    inputs = list(model.graph.inputs)
    seen: list[onnx.ModelProto] = []
    infer = onnx.shape_inference.infer_shapes

    def spy(proto: onnx.ModelProto, *args: Any, **kwargs: Any) -> onnx.ModelProto:
        seen.append(proto)
        return infer(proto, *args, **kwargs)

    monkeypatch.setattr(onnx.shape_inference, "infer_shapes", spy)
    values = {v.name: v for node in model.graph for v in node.outputs}
    oracle = ShapeOracle(model)
    assert oracle.dims(values["y"]) == [1, 64, 8, 8]
    assert oracle.dims(values["z"]) == [1, 4096]  # data propagation read the small shape constant
    (proto,) = seen  # one inference for every question
    assert [t.name for t in proto.graph.initializer] == ["shape"]  # the weight stood in as an input
    assert "w" in [i.name for i in proto.graph.input]
    # the model is as it was: the weight tensor in place, the inputs unchanged
    assert model.graph.initializers["w"].const_value is weight and list(model.graph.inputs) == inputs
