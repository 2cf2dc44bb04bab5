"""Scan-8 (batch axis, sequence_lens) to Scan-9 and later: a batch-1 Scan keeps the model's signature
(onnx's converter drops the batch axis from the graph's own inputs, so `bridge convert test_scan_sum --opset 13`
used to fail with "--input initial: rank 2 given" when no --input was given); what has no Scan-9 form is
refused naming the node and why; any converter changing the declared signature is an error naming the value."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx.version_converter
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from bridge import api
from opsets.conversion import OpsetConversionError, convert_opset


def _scan_sum(batch: int = 1, reverse: bool = False) -> onnx.ModelProto:
    """onnx's backend node test ``test_scan_sum`` (onnx/backend/test/case/node/scan.py), any batch, either
    direction: a running sum over the sequence axis, carried state and scan output."""
    body = helper.make_graph(
        [helper.make_node("Add", ["sum_in", "next"], ["sum_out"]), helper.make_node("Identity", ["sum_out"], ["scan_out"])],
        "scan_body",
        [helper.make_tensor_value_info("sum_in", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("next", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("sum_out", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("scan_out", TensorProto.FLOAT, [2])])
    attrs = {"directions": [1]} if reverse else {}
    node = helper.make_node("Scan", ["", "initial", "x"], ["y", "z"], num_scan_inputs=1, body=body, **attrs)
    graph = helper.make_graph([node], "test_scan_sum",
                              [helper.make_tensor_value_info("initial", TensorProto.FLOAT, [batch, 2]),
                               helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 2]),
                               helper.make_tensor_value_info("z", TensorProto.FLOAT, [batch, 3, 2])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 8)], ir_version=3)


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
@pytest.mark.parametrize("target", [9, 11, 13, 17])
def test_batch_one_scan_keeps_its_signature(target: int, reverse: bool) -> None:
    converted = ir.serde.serialize_model(convert_opset(ir.serde.deserialize_model(_scan_sum(reverse=reverse)), target))
    dims = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in converted.graph.input}
    assert dims == {"initial": [1, 2], "x": [1, 3, 2]}
    rng = np.random.default_rng(0)
    initial, x = rng.standard_normal((1, 2)).astype(np.float32), rng.standard_normal((1, 3, 2)).astype(np.float32)
    feeds = {"initial": initial, "x": x}
    y, z = _run(converted, feeds)
    want_y, want_z = _run(_scan_sum(reverse=reverse), feeds)  # onnxruntime's Scan-8 on the source
    np.testing.assert_allclose(y, want_y, rtol=1e-6)
    np.testing.assert_allclose(z, want_z, rtol=1e-6)
    if not reverse:  # and the backend test's own expectation: a running sum
        np.testing.assert_allclose(z, initial[:, None] + np.cumsum(x, axis=1), rtol=1e-6)


def test_convert_scan_sum_without_input_option(tmp_path: Path) -> None:
    onnx.save(_scan_sum(), tmp_path / "model.onnx")
    result = api.convert(tmp_path / "model.onnx", tmp_path / "out.onnx", opset=13)
    assert result.passed and result.validation_inputs == {"initial": [1, 2], "x": [1, 3, 2]}


def test_batch_two_scan_is_refused_naming_node_and_input() -> None:
    with pytest.raises(OpsetConversionError, match=r"Scan node .*scan_8_9.*'initial' has batch axis 2") as caught:
        convert_opset(ir.serde.deserialize_model(_scan_sum(batch=2)), 13)
    assert "--input" not in str(caught.value)


def test_a_converter_changing_the_signature_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any stock hop that changes what the graph declares (here a converter dropping an axis) is refused."""
    graph = helper.make_graph([helper.make_node("Softmax", ["x"], ["y"], axis=1)], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    source = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)], ir_version=6)
    stock = onnx.version_converter.convert_version

    def dropping(proto: onnx.ModelProto, to: int) -> onnx.ModelProto:
        out = stock(proto, to)
        del out.graph.input[0].type.tensor_type.shape.dim[0]
        return out

    monkeypatch.setattr(onnx.version_converter, "convert_version", dropping)
    with pytest.raises(OpsetConversionError, match=r"declared input 'x' from \[1, 4\] to \[4\]"):
        convert_opset(ir.serde.deserialize_model(source), 9)
