"""Delivery is the target's: it names its artefacts and their paths (``--artefact-dir``, its own options), each
written file is validated in the runtimes that run it, and the report says which file each verdict covers."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from bridge import api


def test_tensorflow_artefact_in_the_artefact_dir_with_its_own_verdict(relu: Path, tmp_path: Path) -> None:
    pytest.importorskip("tensorflow")
    if importlib.util.find_spec("onnx_tf") is None:  # importing it directly fails by design (see onnx_tf_compat)
        pytest.skip("onnx-tf is not installed (the TensorFlow target needs it)")
    out, report = tmp_path / "out" / "m.onnx", tmp_path / "r.json"
    result = api.convert(relu, out, to="tensorflow", artefact_dir=tmp_path / "art", report=report)
    files = {f["kind"]: f for f in json.loads(report.read_text())["files"]}
    assert files["onnx"] == {"kind": "onnx", "path": str(out), "validated_by": ["onnxruntime"], "verdict": "pass"}
    saved = tmp_path / "art" / "m_saved_model"
    assert files["saved_model"] == {"kind": "saved_model", "path": str(saved), "validated_by": ["tensorflow"],
                                    "verdict": "pass"}
    assert result.written and (saved / "saved_model.pb").is_file() and out.is_file()


def test_the_onnx_target_writes_nothing_beside_the_model(relu: Path, tmp_path: Path) -> None:
    result = api.convert(relu, tmp_path / "m.onnx", artefact_dir=tmp_path / "art")
    assert [f["kind"] for f in result.files] == ["onnx"] and result.stages["target"].status == "skipped"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "relu.onnx"]
    assert {k: v.status for k, v in result.stages.items()} == {
        "adapter": "ok", "export": "ok", "onnx_stage": "ok", "target": "skipped", "validation": "ok", "write": "ok"}
