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


def test_a_link_planted_at_any_output_is_replaced_never_followed(relu: Path, tmp_path: Path) -> None:
    """-o, its external data, --report and a target's artefact are written to a temp file and renamed over
    their path: a symlink there to a file outside is replaced, the file keeps its content (issue 38, 1)."""
    out = tmp_path / "out"
    out.mkdir()
    names = ["m.onnx", "r.json", "m.xml", "m.bin"]
    victims = {}
    for name in names:
        victims[name] = tmp_path / f"victim-{name}"
        victims[name].write_text("not bridge's")
        (out / name).symlink_to(victims[name])
    result = api.convert(relu, out / "m.onnx", report=out / "r.json", to="openvino", isolated=False)
    assert result.written
    for name, victim in victims.items():
        assert victim.read_text() == "not bridge's", name
        assert (out / name).is_file() and not (out / name).is_symlink(), name
