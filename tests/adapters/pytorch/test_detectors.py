"""Torchvision-like detectors (tests/adapters/pytorch/detectors.py) through bridge.convert: detection-aware
verdicts for every output layout (recognised from NonMaxSuppression in the graph, or declared), with
well separated and with tied scores; a wrong conversion still fails; a traced graph that fixes the
batch is an ExportError with a report; ``--exporter auto`` skips dynamo on data-dependent control flow.

Conversions run the reference in-process (nn.Module objects) with the TorchScript exporter, so each
takes about a second.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from bridge import api
from bridge.config import DETECTION_META
from bridge.errors import ExportError, UsageError, ValidationMismatch

torch = pytest.importorskip("torch", reason="PyTorch not installed (pip install 'bridge[torch]')")
sys.path.insert(0, str(Path(__file__).parent))
import detectors  # noqa: E402  (registers the bridge_test::nms op)

HERE = Path(__file__).parent
EXPECTED_LAYOUT = {"torchvision": "boxes-scores-labels", "yolo": "yolo", "tf": "boxes-scores-classes",
                   "gluoncv": "boxes-scores-labels"}


def _convert(tmp_path: Path, model: torch.nn.Module, layout: str, **kw: object) -> api.ConvertResult:
    kw = {"inputs": ["images:1,3,32,32"], "exporter": "torchscript", "input_kind": "image", "isolated": False, **kw}
    return api.convert(model, tmp_path / f"{layout}.onnx", output_names=detectors.OUTPUT_NAMES[layout], **kw)


@pytest.mark.parametrize("scores", ["separated", "tied"])
@pytest.mark.parametrize("layout", detectors.LAYOUTS)
def test_every_layout_is_compared_detection_aware_and_written(tmp_path: Path, layout: str, scores: str) -> None:
    # elementwise, eager torch (rows by score) and onnxruntime (rows class by class) disagree on row order
    # alone, and with tied scores NMS may keep the other of two tied boxes: both failed before
    if scores == "tied" and layout in ("tf", "gluoncv"):
        # every score equal: on the second input onnxruntime's NMS keeps other boxes than torch's (16 of 20 rows),
        # far past what a tie may excuse (issue 32: 2%, at least 4 rows, each with evidence), and an eager torch
        # source has no tensor to pin the decision at - the verdict FAILs saying so rather than excuse the rows
        with pytest.raises(ValidationMismatch, match=r"on a second input.*pinning did not explain"):
            _convert(tmp_path, detectors.TinyDetector(layout, scores).eval(), layout)
        assert not (tmp_path / f"{layout}.onnx").exists()
        return
    result = _convert(tmp_path, detectors.TinyDetector(layout, scores).eval(), layout)
    assert result.passed and result.written, [c.summary() for c in result.validation]
    [group] = result.detections
    assert group["layout"] == EXPECTED_LAYOUT[layout]
    assert set(group["outputs"].values()) == set(detectors.OUTPUT_NAMES[layout])
    [entry] = [o for o in result.validation[0].outputs if o.detection is not None]
    assert entry.note.startswith("detection-aware") and entry.detection["matched"] > 0
    assert not result.vacuous
    # recorded in the model, so `bridge validate` compares the same way later
    meta = {p.key: p.value for p in onnx.load(tmp_path / f"{layout}.onnx").metadata_props}
    assert json.loads(meta[DETECTION_META])[0]["layout"] == EXPECTED_LAYOUT[layout]


@pytest.mark.parametrize("layout", ["yolo", "tf"])
def test_a_different_detector_still_fails_validation(tmp_path: Path, layout: str) -> None:
    _convert(tmp_path, detectors.TinyDetector(layout, seed=1).eval(), layout)
    with pytest.raises(ValidationMismatch) as info:  # untied detections must match: seed 0 is another model
        api.validate(tmp_path / f"{layout}.onnx", source=detectors.TinyDetector(layout, seed=0).eval(),
                     inputs=["images:1,3,32,32"], isolated=False)
    [entry] = [o for o in info.value.result.comparisons[0].outputs if o.detection is not None]
    assert not entry.passed and "detection-aware" in entry.note


def test_declared_detections_are_used_and_checked(tmp_path: Path) -> None:
    spec = "boxes=detection_boxes,scores=detection_scores,labels=detection_classes,num=num_detections,name=dets"
    result = _convert(tmp_path, detectors.TinyDetector("tf").eval(), "tf", detections=[spec])
    assert result.passed and [d.get("name") for d in result.detections] == ["dets"]
    assert [o.name for o in result.validation[0].outputs] == ["dets"]
    with pytest.raises(UsageError, match="detection_box"):
        _convert(tmp_path, detectors.TinyDetector("tf").eval(), "tf",
                 detections=["boxes=detection_box,scores=detection_scores"])


def test_traced_loop_over_a_dynamic_batch_is_an_export_error_with_a_report(tmp_path: Path) -> None:
    from support import run_cli

    report = tmp_path / "report.json"
    proc = run_cli("convert", "detectors.py:torchvision_separated", "-o", str(tmp_path / "m.onnx"),
                   "-i", "images:2,3,32,32", "-d", "images:0=batch", "--report", str(report), cwd=HERE)
    assert proc.returncode == 3, proc.stderr
    message = " ".join(proc.stderr.split())
    assert "fixes axis 0 of 'images' to 2: node Split" in message
    # auto tried dynamo first (it failed): the advice does not send the user back to it, it ends at a fixed size
    assert "--exporter dynamo" not in message and "remove --dynamic images:0=batch" in message
    assert "examples/batch_loop/run_batches.py" in message  # the way out, tested in tests/examples/test_batch_loop.py
    data = json.loads(report.read_text())
    assert data["passed"] is False and data["error"]["type"] == "ExportError"
    assert not (tmp_path / "m.onnx").exists()


def test_auto_goes_straight_to_torchscript_on_data_dependent_control_flow(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from adapters.pytorch import adapter

    def no_dynamo(*_a: object, **_k: object) -> None:
        raise AssertionError("the dynamo exporter must not run after torch.export found data-dependent control flow")

    monkeypatch.setattr(adapter, "_export_dynamo", no_dynamo)
    result = _convert(tmp_path, detectors.TinyDetector("torchvision").eval(), "torchvision", exporter="auto")
    assert result.exporter == adapter.TORCHSCRIPT and result.passed
    assert any("data-dependent control flow" in n and "TorchScript" in n for n in result.notes)


def test_the_advice_after_an_explicit_torchscript_export_offers_dynamo_and_a_fixed_size(tmp_path: Path) -> None:
    with pytest.raises(ExportError, match=r"--exporter dynamo\), or export at a fixed size: remove --dynamic"):
        api.convert(detectors.torchvision_separated(), tmp_path / "m.onnx", inputs=["images:2,3,32,32"],
                    dynamic=["images:0=batch"], exporter="torchscript", isolated=False)


def test_exporter_dynamo_alone_fails_cleanly(tmp_path: Path) -> None:
    with pytest.raises(ExportError, match=r"dynamo exporter failed.*--exporter torchscript"):
        _convert(tmp_path, detectors.TinyDetector("torchvision").eval(), "torchvision", exporter="dynamo")


def test_report_says_which_inputs_and_exporter(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    feeds = tmp_path / "feeds.npz"
    np.savez(feeds, images=detectors.images(1, 32, seed=3).numpy())
    _convert(tmp_path, detectors.TinyDetector("yolo").eval(), "yolo", feeds=feeds, report=report)
    data = json.loads(report.read_text())
    assert data["validation_feeds"]["images"]["source"] == f"--feeds {feeds}"
    assert data["export_inputs"] == f"--feeds {feeds}"
    assert data["notes"][0] == "exporter: TorchScript (--exporter torchscript)"
    assert any("no --opset asked" in n for n in data["notes"][1:])  # the opset the ONNX stage kept, and why
    assert 0.0 <= data["validation_feeds"]["images"]["min"] <= data["validation_feeds"]["images"]["max"] <= 1.0
