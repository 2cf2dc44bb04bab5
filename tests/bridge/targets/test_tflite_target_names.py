"""``--to tflite`` keeps the model's input and output names and their order: apps read a .tflite's tensors by
index or by name, and the converter would call them ``serving_default_*`` / ``PartitionedCall:N`` in an order
of its own. Checked on ONNX models whose outputs are out of alphabetical order and need signature-safe keys, and
end to end from a .tflite source named and ordered as MediaPipe's files are."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from deploy_models import require_litert
from onnx import TensorProto, helper
from support import make_model

import bridge
from bridge.runtimes import activated
from bridge.runtimes.litert import LiteRtRuntime
from bridge.targets.tflite import export_tflite

require_litert()

OUTPUTS = ["zeta", "regressors:0", "alpha", "StatefulPartitionedCall:1"]


def _model() -> onnx.ModelProto:
    """x [1, 6] -> four outputs, each a different function of x, in an order no sorting gives."""
    nodes = [helper.make_node("Mul", ["input:0", f"k{i}"], [name], name=f"mul{i}") for i, name in enumerate(OUTPUTS)]
    inits = [onnx.numpy_helper.from_array(np.full((1, 6), i + 2, np.float32), f"k{i}") for i in range(len(OUTPUTS))]
    return make_model(nodes, [helper.make_tensor_value_info("input:0", TensorProto.FLOAT, [1, 6])],
                      [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 6]) for n in OUTPUTS], initializers=inits)


def _details(path: Path) -> tuple[list[str], list[tuple[str, int]]]:
    from ai_edge_litert.interpreter import Interpreter

    interp = Interpreter(model_path=str(path))
    return ([d["name"] for d in interp.get_input_details()],
            [(d["name"], int(d["index"])) for d in interp.get_output_details()])


def test_names_and_order_are_the_onnx_models(tmp_path: Path) -> None:
    path = export_tflite(_model(), tmp_path / "m.tflite").path
    inputs, outputs = _details(path)
    assert inputs == ["input:0"] and [n for n, _ in outputs] == OUTPUTS
    from ai_edge_litert.interpreter import Interpreter

    interp = Interpreter(model_path=str(path))
    interp.allocate_tensors()
    x = np.arange(6, dtype=np.float32).reshape(1, 6) + 1
    interp.set_tensor(interp.get_input_details()[0]["index"], x)
    interp.invoke()
    for i, detail in enumerate(interp.get_output_details()):  # by index, as apps read them
        np.testing.assert_array_equal(interp.get_tensor(detail["index"]), x * (i + 2))
    with activated(LiteRtRuntime(path)) as rt:  # bridge's own runtime still finds every output by its ONNX name
        got = rt.infer({"input:0": x})
    assert list(got) == OUTPUTS and all(np.array_equal(got[n], x * (i + 2)) for i, n in enumerate(OUTPUTS))


def test_a_tflite_source_converted_to_tflite_keeps_its_signature(tmp_path: Path) -> None:
    pytest.importorskip("tf2onnx")
    from blazeface_models import detector_tflite

    source = detector_tflite(tmp_path / "face.tflite")
    result = bridge.convert(source, tmp_path / "out" / "face.tflite", to="tflite", isolated=False)
    assert result.passed
    assert _details(tmp_path / "out" / "face.tflite")[0] == _details(source)[0] == ["input"]
    assert [n for n, _ in _details(tmp_path / "out" / "face.tflite")[1]] == ["regressors", "classificators"]
