"""``dataset:`` in a migration manifest: the option group as one object (with preprocessing), paths from the
manifest's folder, the images and labels part of the resume fingerprint; three SSDs migrate with their
dataset figures in a mAP column of report.html, resumable after kill -9 of the whole run."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from dataset_models import SYMBOL, procedural_dataset
from support import REPO, run_cli

from bridge.migrate.manifest import ManifestError, load_manifest


def test_dataset_object_resolves_to_the_option_group(tmp_path: Path) -> None:
    (tmp_path / "imgs").mkdir()
    (tmp_path / "labels.json").write_text("{}")
    (tmp_path / "m.onnx").write_bytes(b"x")
    [entry] = load_manifest({"models": [{"name": "m", "source": "m.onnx", "dataset": {
        "path": "imgs", "labels": "labels.json", "limit": 50, "min_agreement": 0.98,
        "preprocessing": {"resize": "letterbox", "mean": [123, 117, 104], "scale": "1/255"}}}]}, base_dir=tmp_path)
    c = entry.convert
    assert c["dataset"] == str(tmp_path / "imgs") and c["labels"] == str(tmp_path / "labels.json")
    assert (c["dataset_limit"], c["min_agreement"], c["max_map_drop"]) == (50, 0.98, 0.005)
    assert (c["resize"], c["mean"], c["scale"], c["channel_order"]) == ("letterbox", "123.0,117.0,104.0", "1/255", None)
    before = entry.fingerprint()
    (tmp_path / "labels.json").write_text('{"images": []}')
    assert load_manifest({"models": [{"name": "m", "source": "m.onnx", "dataset": {
        "path": "imgs", "labels": "labels.json", "limit": 50, "min_agreement": 0.98, "preprocessing": {
            "resize": "letterbox", "mean": [123, 117, 104], "scale": "1/255"}}}]},
        base_dir=tmp_path)[0].fingerprint() != before  # new labels: --resume redoes the model
    [plain] = load_manifest({"models": [{"name": "m", "source": "m.onnx"}]}, base_dir=tmp_path)
    assert plain.convert["dataset"] is None and plain.convert["min_agreement"] == 0.99


def test_bad_dataset_fields_are_listed(tmp_path: Path) -> None:
    (tmp_path / "m.onnx").write_bytes(b"x")
    with pytest.raises(ManifestError) as err:
        load_manifest({"models": [{"name": "m", "source": "m.onnx", "dataset": {
            "labels": "x.json", "max_map_drop": 2, "preprocessing": {"resize": "squash", "gamma": 2}}}]},
            base_dir=tmp_path)
    text = str(err.value)
    for field in ("dataset.path", "dataset.max_map_drop", "dataset.preprocessing.resize", "dataset.preprocessing.gamma"):
        assert field in text


def _state(out: Path) -> dict[str, str]:
    try:
        with sqlite3.connect(f"file:{out / 'state.sqlite'}?mode=ro", uri=True) as db:
            return dict(db.execute("SELECT name, run_id FROM outcomes").fetchall())
    except sqlite3.OperationalError:
        return {}


@pytest.mark.skipif(importlib.util.find_spec("mxnet") is None or importlib.util.find_spec("pycocotools") is None,
                    reason="needs mxnet (the source) and pycocotools")
def test_three_ssds_migrate_with_a_map_column_and_resume_after_kill(tmp_path: Path) -> None:
    images, labels = procedural_dataset(tmp_path / "shapes", count=24)
    manifest = tmp_path / "manifest.yaml"
    manifest.write_text(yaml.safe_dump({
        "defaults": {"inputs": ["data:4,3,64,64"], "dynamic": ["data:0=batch"], "timeout": 900,
                     "dataset": {"path": str(images), "labels": str(labels), "batch": 8}},
        "models": [{"name": f"ssd_{fmt}", "source": str(SYMBOL), "detection_format": fmt}
                   for fmt in ("mxnet", "boxes-scores-classes", "indices")],
    }), encoding="utf-8")
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "bridge", "migrate", str(manifest), "-j", "1", "--out", str(out)],
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    deadline = time.monotonic() + 900
    try:
        while time.monotonic() < deadline and proc.poll() is None and not _state(out):
            time.sleep(0.2)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # bridge migrate, its workers and their runtimes
        proc.wait()
    finished = _state(out)
    assert 1 <= len(finished) < 3, f"kill came too late to test resume: {finished}"
    resumed = run_cli("migrate", str(manifest), "-j", "1", "--out", str(out), "--resume")
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert sorted(report["run"]["reused"]) == sorted(finished)
    for model in report["models"]:
        dataset = model["conversion"]["dataset"]
        assert dataset["source"]["images"] == 24 and dataset["onnxruntime"]["agreement_ap50"] == 1.0
        assert round(dataset["onnxruntime"]["map50"], 3) == round(dataset["source"]["map50"], 3)
    html = (out / "report.html").read_text(encoding="utf-8")
    assert "<th>mAP (dataset)</th>" in html and html.count("mAP@0.5 source ") == 3
    assert "| mAP (dataset) |" in (out / "report.md").read_text(encoding="utf-8")
