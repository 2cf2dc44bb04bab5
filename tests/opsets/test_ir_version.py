"""The IR version follows the opset: a model converted to another opset gets the lowest IR version that holds
its opset imports and features, so an opset-21 or opset-28 model (IR 10 / 14) taken down to 17 loads in an
onnxruntime that reads IR 13 at most."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from bridge import api
from bridge.model import min_ir_version
from opsets.conversion import convert_opset


def _model(opset: int) -> onnx.ModelProto:
    """Gemm + Softmax + ReduceMean (axes as an input from 18): ops whose schemas change between 17 and 28."""
    w = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    nodes = [helper.make_node("Gemm", ["x", "w"], ["h"]), helper.make_node("Softmax", ["h"], ["s"], axis=-1),
             helper.make_node("ReduceMean", ["s", "axes"], ["y"], keepdims=1)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 1])],
                              initializer=[numpy_helper.from_array(w, "w"),
                                           numpy_helper.from_array(np.array([1], np.int64), "axes")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])  # helper's newest IR


def _load(model: onnx.ModelProto | Path) -> ort.InferenceSession:
    data = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    return ort.InferenceSession(data, providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("opset", [21, 28])
def test_converted_down_to_17_loads_in_onnxruntime(opset: int) -> None:
    source = _model(opset)
    assert source.ir_version > 13  # what onnx writes today: newer than onnxruntime reads
    converted = ir.serde.serialize_model(convert_opset(ir.serde.deserialize_model(source), 17))
    assert converted.ir_version == 8 == onnx.helper.find_min_ir_version_for(list(converted.opset_import))
    x = np.random.default_rng(1).standard_normal((2, 4)).astype(np.float32)
    out = _load(converted).run(None, {"x": x})[0]
    assert out.shape == (2, 1)


@pytest.mark.parametrize("opset", [21, 28])
def test_convert_writes_a_model_onnxruntime_loads(tmp_path: Path, opset: int) -> None:
    source = _model(opset)
    source.ir_version = 10  # the source itself must load for validation to run
    onnx.save(source, tmp_path / "new.onnx")
    if opset > 21:  # onnxruntime cannot run the source: the conversion is still checked by loading the result
        result = api.convert(tmp_path / "new.onnx", tmp_path / "old.onnx", opset=17, validate=[])
    else:
        result = api.convert(tmp_path / "new.onnx", tmp_path / "old.onnx", opset=17)
        assert result.validation and result.passed
    written = onnx.load(tmp_path / "old.onnx")
    assert written.ir_version <= 10 and written.opset_import[0].version == 17
    _load(tmp_path / "old.onnx")


def _features(**kind: bool) -> onnx.ModelProto:
    inputs = [helper.make_tensor_value_info("x", TensorProto.BFLOAT16 if kind.get("bf16") else TensorProto.FLOAT, [2])]
    node = helper.make_node("Identity", ["x"], ["y"])
    if kind.get("node_metadata"):
        node.metadata_props.add(key="bridge.source", value="layer1")
    inits = [numpy_helper.from_array(np.ones(2, np.float32), "c")] if kind.get("initializer") else []
    if kind.get("listed"):
        inputs.append(helper.make_tensor_value_info("c", TensorProto.FLOAT, [2]))
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
                              initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 8)], ir_version=3)


@pytest.mark.parametrize(("kind", "want"), [
    ({}, 3),
    ({"initializer": True, "listed": True}, 3),  # IR 3: every initializer is a graph input
    ({"initializer": True}, 4),  # an initializer that is not an input needs IR 4
    ({"bf16": True}, 4),
    ({"node_metadata": True}, 3),  # provenance annotations: skipped by older readers, no IR 10 needed
])
def test_min_ir_version_counts_features(kind: dict[str, bool], want: int) -> None:
    assert min_ir_version(ir.serde.deserialize_model(_features(**kind))) == want
