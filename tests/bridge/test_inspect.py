"""bridge.inspect: signature with symbolic dims flagged, op histogram, parameter size, problems."""

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper
from support import make_model

from bridge import api


def test_reports_signature_ops_and_parameters(tmp_path: Path, relu_model: onnx.ModelProto) -> None:
    onnx.save(relu_model, tmp_path / "m.onnx")
    rep = api.inspect(tmp_path / "m.onnx")
    assert rep.opset_imports == {"ai.onnx": 13} and rep.ir_version == 8
    assert rep.op_histogram == {"Mul": 1, "Relu": 1}
    assert (rep.parameter_count, rep.parameter_bytes) == (4, 16)
    assert rep.symbolic == ["x[0]=N", "y[0]=N"]
    assert rep.problems == []
    assert rep.to_dict()["symbolic_dims"] == ["x[0]=N", "y[0]=N"]


def test_finds_clip_int64_trap_and_runtime_refusal(tmp_path: Path, clip_int64_opset11: onnx.ModelProto) -> None:
    onnx.save(clip_int64_opset11, tmp_path / "clip.onnx")
    kinds = {p.kind: p for p in api.inspect(tmp_path / "clip.onnx").problems}
    assert kinds["opset-trap"].node == "clip_ids" and "opset 12" in kinds["opset-trap"].message
    assert "runtime-load" in kinds


def test_lists_custom_ops_as_needing_lowering(tmp_path: Path) -> None:
    model = make_model(
        [helper.make_node("MultiBoxPrior", ["x"], ["anchors"], domain="bridge.contrib", name="prior1",
                          sizes=[0.5], ratios=[1.0])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 4, 4])],
        [helper.make_tensor_value_info("anchors", TensorProto.FLOAT, [1, 16, 4])],
    )
    model.opset_import.append(helper.make_opsetid("bridge.contrib", 1))
    onnx.save(model, tmp_path / "contrib.onnx")
    rep = api.inspect(tmp_path / "contrib.onnx")
    (problem,) = rep.problems
    assert problem.kind == "needs-lowering" and problem.op == "MultiBoxPrior" and problem.node == "prior1"
    assert rep.op_histogram == {"bridge.contrib::MultiBoxPrior": 1}


def test_checker_errors_are_problems(tmp_path: Path) -> None:
    model = make_model(
        [helper.make_node("Relu", ["missing"], ["y"], name="r")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    onnx.save(model, tmp_path / "bad.onnx")
    kinds = [p.kind for p in api.inspect(tmp_path / "bad.onnx").problems]
    assert "checker" in kinds


def test_weights_as_float16_count_two_bytes(tmp_path: Path) -> None:
    w = onnx.numpy_helper.from_array(np.zeros((3, 5), np.float16), "w")
    model = make_model([helper.make_node("Add", ["x", "w"], ["y"])],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [3, 5])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [3, 5])], initializers=[w])
    onnx.save(model, tmp_path / "h.onnx")
    rep = api.inspect(tmp_path / "h.onnx")
    assert (rep.parameter_count, rep.parameter_bytes) == (15, 30)
