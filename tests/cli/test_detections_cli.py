"""``bridge convert`` with its detector and input options: ``--detections`` (declared detector outputs),
``--exporter``, ``--input-kind``; the piped output says which inputs were used and compares the
detector's outputs detection by detection."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import REPO, run_cli

pytest.importorskip("torch", reason="PyTorch not installed (pip install 'bridge[torch]')")
DETECTORS = REPO / "tests" / "adapters" / "pytorch"


def test_convert_a_detector_with_declared_detections(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    proc = run_cli("convert", "detectors.py:torchvision_separated", "-o", str(tmp_path / "d.onnx"),
                   "-i", "images:1,3,32,32", "--output-names", "boxes,scores,labels",
                   "--detections", "boxes=boxes,scores=scores,labels=labels", "--exporter", "torchscript",
                   "--input-kind", "image", "--report", str(report), "--no-isolate", cwd=DETECTORS)
    assert proc.returncode == 0, proc.stderr
    assert "validation inputs: generated (image-like" in proc.stdout
    assert "boxes: ok" in proc.stdout and "detection-aware (boxes-scores-labels)" in proc.stdout
    data = json.loads(report.read_text())
    assert data["exporter"].startswith("torch.onnx (TorchScript") and data["detections"][0]["outputs"]["labels"] == "labels"


@pytest.mark.parametrize(("args", "says"), [
    (["--exporter", "jit"], "--exporter 'jit'"),
    (["--input-range", "1"], "--input-range '1'"),
    (["--detections", "boxes=boxes,colour=x"], "unknown role 'colour'"),
])
def test_bad_options_are_usage_errors(tmp_path: Path, args: list[str], says: str) -> None:
    proc = run_cli("convert", "detectors.py:torchvision_separated", "-o", str(tmp_path / "d.onnx"),
                   "-i", "images:1,3,32,32", *args, cwd=DETECTORS)
    assert proc.returncode == 2, proc.stderr
    assert says in " ".join(proc.stderr.split())
