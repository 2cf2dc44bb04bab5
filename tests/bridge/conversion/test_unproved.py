"""A conversion whose validation could not run is never a plain success: the result and report say so (stage
``validation`` skipped, with its cause), ``--strict`` or an explicit ``--validate`` fail it (exit 1, nothing
written), and a written model that no runtime can load - bridge's own output - is a conversion error (exit 3)."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper
from support import make_model, run_cli


@pytest.fixture
def unrunnable_source(tmp_path: Path, clip_int64_opset11: onnx.ModelProto) -> Path:
    """onnxruntime cannot load this source (int64 Clip before opset 12), so no reference can run; bridge's
    output (converted to opset 13) loads."""
    onnx.save(clip_int64_opset11, tmp_path / "clip.onnx")
    return tmp_path / "clip.onnx"


@pytest.mark.parametrize("flags, code", [([], 0), (["--strict"], 1), (["--validate", "onnxruntime"], 1),
                                         (["--validate", "none", "--strict"], 0)])
def test_skipped_validation_is_reported_and_fails_when_required(unrunnable_source: Path, tmp_path: Path,
                                                                flags: list[str], code: int) -> None:
    out, report = tmp_path / "out.onnx", tmp_path / "r.json"
    proc = run_cli("convert", str(unrunnable_source), "-o", str(out), "--opset", "13", "--report", str(report), *flags)
    assert proc.returncode == code, proc.stderr
    data = json.loads(report.read_text())
    stage = data["stages"]["validation"]
    assert stage["status"] == "skipped"
    assert out.exists() == (code == 0) and data["written"] == (code == 0)
    if "none" in flags:
        assert stage["cause"] == "disabled"
    else:
        assert stage["cause"] == "source" and "nothing was proved" in proc.stdout
        assert code == 0 or "validation could not run" in proc.stderr


def test_output_no_runtime_loads_is_a_conversion_error(tmp_path: Path) -> None:
    """With no reference, bridge still loads what it would write: a model onnxruntime refuses (an op of a domain
    it has no kernels for) fails with exit 3 instead of a skipped validation and exit 0."""
    model = make_model([helper.make_node("Relu", ["x"], ["r"], name="relu"),
                        helper.make_node("Frob", ["r"], ["y"], name="frob", domain="com.example")],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])])
    model.opset_import.append(helper.make_opsetid("com.example", 1))
    onnx.save(model, tmp_path / "m.onnx")
    proc = run_cli("convert", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "o.onnx"))
    assert proc.returncode == 3, (proc.stdout, proc.stderr)
    assert "cannot be loaded by onnxruntime" in proc.stderr and not (tmp_path / "o.onnx").exists()
