"""``dataset:`` in shards (``bridge.migrate.shards``): a dataset larger than ``shard_size`` runs as one executor
task per shard after the model's conversion, and the merged figures equal an unsharded run's exactly; a
``kill -9`` during the shards loses only the shards still running - ``--resume`` neither converts again nor
reruns a saved shard; merged shards outside the budget fail their model and remove its files."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import yaml
from dataset_models import colour_classifier, colour_weights, write_colour_images
from support import REPO

from bridge import api
from bridge.migrate.manifest import load_manifest
from bridge.migrate.shards import plan

pytest.importorskip("PIL")
TIMES = ("seconds", "images_per_s", "metric_seconds")


def _without_times(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_times(v) for k, v in value.items() if k not in TIMES}
    if isinstance(value, list):
        return [_without_times(v) for v in value]
    return value


@pytest.fixture
def classifier(tmp_path: Path) -> dict[str, Path]:
    """A nearest-colour classifier (ONNX source: the reference is onnxruntime on it), 40 colour images with
    labels, and a copy of the classifier with perturbed weights (as a second model: it fails its budget)."""
    images, labels = write_colour_images(tmp_path / "images")
    w = colour_weights()
    onnx.save(colour_classifier(w), tmp_path / "good.onnx")
    onnx.save(colour_classifier(w + np.random.default_rng(1).normal(0, 0.5, w.shape)), tmp_path / "bad.onnx")
    return {"images": images, "labels": labels, "good": tmp_path / "good.onnx", "bad": tmp_path / "bad.onnx"}


def _manifest(tmp_path: Path, data: dict[str, Path], shard_size: int, models: tuple[str, ...] = ("good",)) -> Path:
    path = tmp_path / f"manifest-{shard_size}.yaml"
    path.write_text(yaml.safe_dump({
        "defaults": {"inputs": ["x:8,3,8,8"], "dynamic": ["x:0=N"], "timeout": 900,
                     "dataset": {"path": str(data["images"]), "labels": str(data["labels"]), "classes": "id",
                                 "batch": 4, "shard_size": shard_size, "preprocessing": {"scale": "1/255"}}},
        "models": [{"name": m, "source": str(data[m])} for m in models]}), encoding="utf-8")
    return path


def test_the_plan_cuts_only_datasets_larger_than_the_shard_size(classifier: dict[str, Path], tmp_path: Path) -> None:
    plans = {size: plan(load_manifest(_manifest(tmp_path, classifier, size))[0].to_dict()) for size in (0, 40, 12)}
    assert plans[0] is None and plans[40] is None  # 0: never; 40 images are not more than 40
    assert plans[12] == [(0, 12), (12, 24), (24, 36), (36, 40)]  # whole batches of 4


def test_sharded_migration_equals_unsharded(classifier: dict[str, Path], tmp_path: Path) -> None:
    runs = {}
    for size in (0, 12):
        out = tmp_path / f"out-{size}"
        runs[size] = api.migrate(_manifest(tmp_path, classifier, size, ("good", "bad")), out=out, jobs=2)
    whole, sharded = runs[0], runs[12]
    for name in ("good", "bad"):
        a, b = whole[name].conversion, sharded[name].conversion
        assert _without_times(b["dataset"]) == _without_times(a["dataset"])
        notes = b["dataset_run"].pop("notes")
        assert notes == [*a["dataset_run"].pop("notes"), "run in 4 shards of up to 12 images (bridge migrate, "
                         "dataset.shard_size); its times are the shards' sums"]
        assert _without_times(b["dataset_run"]) == _without_times(a["dataset_run"])
        assert (whole[name].status, sharded[name].status) == ("passed", "passed")
        assert [f["verdict"] for f in b["files"]] == [f["verdict"] for f in a["files"]] == ["pass"]
        on_disk = json.loads((tmp_path / "out-12" / "models" / name / "conversion.json").read_text())
        assert _without_times(on_disk["dataset"]) == _without_times(b["dataset"])
    figures = sharded["bad"].conversion["dataset"]
    assert figures["source"]["top1_accuracy"] < sharded["good"].conversion["dataset"]["source"]["top1_accuracy"]
    assert len({p.name for p in (tmp_path / "out-12" / "models" / "good" / ".dataset").glob("shard-*.npz")}) == 4


def test_merged_shards_outside_the_budget_fail_the_model_and_remove_its_files(classifier: dict[str, Path],
                                                                              tmp_path: Path) -> None:
    """The merge step alone (the shards' states made here, in-process): a candidate disagreeing with the source
    on some images fails its budget once merged; the model's written files go, its report says why."""
    from bridge.migrate.shards import merge_into, shard_path
    from bridge.runtimes.onnxruntime import OnnxRuntime
    from bridge.validation.dataset import dataset_settings, validate_with_settings
    from bridge.validation.dataset.shards import save_shard

    [entry] = [e.to_dict() for e in load_manifest(_manifest(tmp_path, classifier, 12))]
    out = tmp_path / "out"
    folder = out / "models" / "good"
    folder.mkdir(parents=True)
    good, bad = onnx.load(classifier["good"]), onnx.load(classifier["bad"])
    api.convert(classifier["good"], folder / "model.onnx", inputs=["x:8,3,8,8"], dynamic=["x:0=N"],
                report=folder / "conversion.json")  # phase 1, as the worker runs it
    report = json.loads((folder / "conversion.json").read_text())
    report["files"] = [{**f, "path": "models/good/model.onnx"} for f in report["files"]]  # as the worker reports
    settings = dataset_settings(entry["convert"])
    assert settings is not None
    ranges = plan(entry)
    assert ranges is not None
    for start, stop in ranges:
        shard = replace(settings, spec=replace(settings.spec, start=start, limit=stop))
        result = validate_with_settings(shard, OnnxRuntime(good), {"onnxruntime": OnnxRuntime(bad)}, good, [])
        save_shard(result, shard_path(out, "good", start, stop), "key")
    outcome = merge_into({"name": "good", "status": "passed", "conversion": report}, entry, out, ranges)
    assert outcome["status"] == "failed" and outcome["kind"] == "mismatch"
    assert "top1_agreement" in outcome["reason"] and "removed" in outcome["reason"]
    assert not (folder / "model.onnx").exists()
    on_disk = json.loads((folder / "conversion.json").read_text())
    assert not on_disk["dataset_run"]["passed"] and on_disk["files"][0]["verdict"] == "fail"
    assert not on_disk["written"] and on_disk["dataset"]["onnxruntime"]["images"] == 40


def test_a_killed_run_resumes_its_missing_shards_only(classifier: dict[str, Path], tmp_path: Path) -> None:
    manifest = _manifest(tmp_path, classifier, 8)  # 5 shards
    out = tmp_path / "out"
    shard_dir = out / "models" / "good" / ".dataset"
    proc = subprocess.Popen([sys.executable, "-m", "bridge", "migrate", str(manifest), "-j", "1", "--out", str(out)],
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    deadline = time.monotonic() + 600
    try:
        while time.monotonic() < deadline and proc.poll() is None and not list(shard_dir.glob("shard-*.npz")):
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # bridge migrate, its workers and their runtimes
        proc.wait()
    saved = {p.name: p.stat().st_mtime_ns for p in shard_dir.glob("shard-*.npz")}
    assert 1 <= len(saved) < 5, f"the kill came too late to test resuming: {sorted(saved)}"
    model = out / "models" / "good" / "model.onnx"
    converted = model.stat().st_mtime_ns
    result = api.migrate(manifest, out=out, jobs=2, resume=True)
    good = result["good"]
    assert good.passed and result.run["reused"] == []  # the model was not finished: it is not reused whole ...
    assert model.stat().st_mtime_ns == converted  # ... but its conversion is, and the shards saved before the kill
    assert {p.name: p.stat().st_mtime_ns for p in shard_dir.glob("shard-*.npz") if p.name in saved} == saved
    assert len(list(shard_dir.glob("shard-*.npz"))) == 5
    unsharded = api.migrate(_manifest(tmp_path, classifier, 0), out=tmp_path / "whole")["good"]
    assert _without_times(good.conversion["dataset"]) == _without_times(unsharded.conversion["dataset"])


def test_shards_run_on_a_dask_cluster_too(classifier: dict[str, Path], tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed", reason="dask distributed is not installed (extra 'distributed')")
    manifest = _manifest(tmp_path, classifier, 16)  # 3 shards
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        address = cluster.scheduler_address.removeprefix("tcp://")
        dask = api.migrate(manifest, out=tmp_path / "dask", executor=f"dask://{address}")["good"]
    local = api.migrate(_manifest(tmp_path, classifier, 0), out=tmp_path / "local")["good"]
    assert dask.passed and len(list((tmp_path / "dask" / "models" / "good" / ".dataset").glob("shard-*.npz"))) == 3
    assert _without_times(dask.conversion["dataset"]) == _without_times(local.conversion["dataset"])
