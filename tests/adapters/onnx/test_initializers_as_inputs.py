"""``bridge convert`` on ONNX files whose weights are also graph inputs (IR 3, ``keep_initializers_as_inputs``):
the written model, fed only the source's true inputs, runs in onnxruntime and reproduces the source; and a
conversion that loses a weight on the way is an error naming it (exit 3), never a PASS."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import opsets.conversion as conversion
from bridge import api
from bridge.config import InputSpec
from bridge.errors import EXIT_CONVERSION, UnexpectedInputError
from bridge.model import ModelContainer

RNG = np.random.default_rng(0)


def _conv_model(opset: int, ir_version: int) -> onnx.ModelProto:
    w = RNG.standard_normal((64, 3, 3, 3)).astype(np.float32)  # 6.9 KB: over the stand-in threshold
    b = RNG.standard_normal(64).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])],
        "old", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8]),
                helper.make_tensor_value_info("w", TensorProto.FLOAT, [64, 3, 3, 3]),
                helper.make_tensor_value_info("b", TensorProto.FLOAT, [64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, 8, 8])],
        initializer=[numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=ir_version)


def _run(path: Path, x: np.ndarray) -> np.ndarray:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


@pytest.mark.parametrize(("opset", "ir_version", "target"), [(8, 3, 13), (8, 3, 17), (9, 4, 17), (13, 7, 11),
                                                             (17, 8, 13)])
def test_written_model_runs_on_the_true_inputs(tmp_path: Path, opset: int, ir_version: int, target: int) -> None:
    onnx.save(_conv_model(opset, ir_version), tmp_path / "old.onnx")
    result = api.convert(tmp_path / "old.onnx", tmp_path / "new.onnx", opset=target)
    assert result.passed and set(result.validation_inputs) == {"x"}
    x = RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)
    np.testing.assert_allclose(_run(tmp_path / "new.onnx", x), _run(tmp_path / "old.onnx", x), rtol=1e-5, atol=1e-5)


def _losing_copy(model: ir.Model, func):  # type: ignore[no-untyped-def]
    """The conversion as it was when it lost weights listed as inputs (their values stood in, never restored)."""
    tensors = {v.name: v.const_value for v in model.graph.initializers.values()}
    inputs = {v.name for v in model.graph.inputs}
    result = ir.serde.deserialize_model(conversion.call_without_weights(func, model))
    for value in list(result.graph.inputs):
        if value.name in tensors and value.name not in inputs:
            result.graph.inputs.remove(value)
            if value.name not in result.graph.initializers:
                value.const_value = tensors[value.name]
                result.graph.register_initializer(value)
    return result


def test_a_lost_weight_is_an_error_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    onnx.save(_conv_model(8, 3), tmp_path / "old.onnx")
    monkeypatch.setattr(conversion, "_through_proto", _losing_copy)
    with pytest.raises(UnexpectedInputError, match="'w'") as caught:
        api.convert(tmp_path / "old.onnx", tmp_path / "new.onnx", opset=13)
    assert caught.value.exit_code == EXIT_CONVERSION and not (tmp_path / "new.onnx").exists()


def test_container_check_names_inputs_the_source_does_not_take() -> None:
    container = ModelContainer.from_proto(_conv_model(13, 7), source_framework="onnx", exporter="file",
                                          inputs=(InputSpec("x", (1, 3, 8, 8)),))
    container.check_inputs()  # w and b hold initializers: defaults, not inputs
    container.model.graph.initializers.pop("w")
    with pytest.raises(UnexpectedInputError, match="'w'"):
        container.check_inputs()
