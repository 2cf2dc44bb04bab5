"""`bridge migrate`: the example zoo, resume after kill -9 of the whole run, usage errors."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import onnx
import pytest
import yaml
from support import REPO, fcn_model, run_cli

from bridge.cli.main import main
from bridge.migrate.results import comparable

EXAMPLE = REPO / "examples" / "migration"


def _report(out: Path) -> dict[str, Any]:
    return json.loads((out / "report.json").read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def _state(out: Path) -> dict[str, str]:
    """name -> run id of every model recorded in the resume state (read-only: the run may be writing it)."""
    try:
        with sqlite3.connect(f"file:{out / 'state.sqlite'}?mode=ro", uri=True) as db:
            return dict(db.execute("SELECT name, run_id FROM outcomes").fetchall())
    except sqlite3.OperationalError:  # not created yet, or the run is still creating its table
        return {}


def _need(*modules: str) -> None:
    import importlib.util

    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"the example migration needs {', '.join(missing)} (not installed)")


def test_example_migration_reports_the_broken_model_and_passes_the_rest(tmp_path: Path) -> None:
    _need("torch", "tensorflow", "tf2onnx", "mxnet")
    build = subprocess.run([sys.executable, str(EXAMPLE / "build_models.py")], capture_output=True, text=True,
                           timeout=300)
    assert build.returncode == 0, build.stderr
    out = tmp_path / "out"
    proc = run_cli("migrate", str(EXAMPLE / "manifest.yaml"), "-j", "2", "--out", str(out))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    report = _report(out)
    status = {m["name"]: m["status"] for m in report["models"]}
    assert status == {"mxnet_ssd": "passed", "gluon_nms": "passed", "cls_small": "passed", "cls_wide": "passed",
                      "tiny_detector": "passed", "keras_cnn": "passed", "old_upsample": "passed",
                      "broken_custom_ops": "failed", "tiny_detector_tf": "disabled"}, proc.stdout
    broken = next(m for m in report["models"] if m["name"] == "broken_custom_ops")
    assert broken["kind"] == "conversion" and "UnsupportedOpError" in broken["reason"]
    assert "_contrib_PSROIPooling x1: psroipool" in broken["reason"]  # (its _contrib_Proposal converts now)
    for m in report["models"]:
        if m["status"] == "passed":
            assert (out / m["outputs"]["onnx"]).is_file() and m["parity"] and all(p["passed"] for p in m["parity"])
    old = next(m for m in report["models"] if m["name"] == "old_upsample")
    assert "ConvertOpsetPass" in old["passes_applied"] and old["opset"] == 17
    html = (out / "report.html").read_text(encoding="utf-8")
    assert 'class="sortable"' in html and all(f'id="model-{name}"' in html for name in status)
    assert "http" not in html.replace("http-equiv", "")  # self-contained: no external assets
    assert "| broken_custom_ops | FAILED |" in (out / "report.md").read_text(encoding="utf-8")
    # not a terminal: plain progress lines, one per finished model
    assert "passed mxnet_ssd" in proc.stdout + proc.stderr and "FAILED broken_custom_ops" in proc.stderr


def _tiny_zoo(tmp_path: Path, n: int) -> Path:
    zoo = tmp_path / "zoo"
    zoo.mkdir()
    for i in range(n):
        onnx.save(fcn_model(), str(zoo / f"m{i}.onnx"))
    manifest = tmp_path / "manifest.yaml"
    manifest.write_text(yaml.safe_dump({
        "defaults": {"inputs": ["x:1,3,8,8"], "timeout": 120},
        "models": [{"source": "zoo/*.onnx", "name": "{stem}"}],
    }), encoding="utf-8")
    return manifest


def test_resume_after_kill_redoes_only_unfinished_models(tmp_path: Path) -> None:
    manifest = _tiny_zoo(tmp_path, 3)
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "bridge", "migrate", str(manifest), "-j", "1", "--out", str(out)],
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if (out / "state.sqlite").exists() and _state(out):
                break
            time.sleep(0.1)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the whole run: bridge migrate and its worker children
        proc.wait()
    finished = _state(out)
    assert 1 <= len(finished) < 3, f"kill came too late to test resume: {finished}"
    assert not (out / "report.json").exists()  # the report is written at the end, never half

    resumed = run_cli("migrate", str(manifest), "-j", "1", "--out", str(out), "--resume")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    after = _state(out)
    assert {n: after[n] for n in finished} == finished  # finished models were not redone
    assert len(set(after.values())) == 2 and len(after) == 3
    report = _report(out)
    assert sorted(report["run"]["reused"]) == sorted(finished)
    assert f"{len(finished)} reused from the last run" in resumed.stderr

    fresh = tmp_path / "fresh"
    assert run_cli("migrate", str(manifest), "-j", "2", "--out", str(fresh)).returncode == 0
    assert comparable(report) == comparable(_report(fresh))  # equal to an uninterrupted run, timings aside

    # a model whose source file changed is redone on --resume, the others are not
    # (entry changes: tests/bridge/migrate/test_manifest.py::test_fingerprint_follows_entry_and_file_content)
    model = onnx.load(str(tmp_path / "zoo" / "m0.onnx"))
    model.producer_name = "changed"
    onnx.save(model, str(tmp_path / "zoo" / "m0.onnx"))
    again = run_cli("migrate", str(manifest), "--out", str(out), "--resume")
    assert again.returncode == 0, again.stdout + again.stderr
    assert sorted(_report(out)["run"]["reused"]) == ["m1", "m2"]


@pytest.mark.parametrize("args, message", [
    (["--only", "nope"], "no model named 'nope'"),
    (["-j", "0"], "need at least one worker"),
    (["--executor", "ray://x"], "use 'local' or 'dask://HOST:PORT'"),
])
def test_usage_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str],
                             message: str) -> None:
    manifest = _tiny_zoo(tmp_path, 1)
    assert main(["migrate", str(manifest), "--out", str(tmp_path / "out"), *args]) == 2
    assert message in " ".join(capsys.readouterr().err.split())


def test_bad_manifest_lists_every_problem_and_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = tmp_path / "bad.yaml"
    manifest.write_text("models:\n  - {name: a, source: x.onnx, opset: 3}\n  - {name: b, sorce: y.onnx}\n", encoding="utf-8")
    assert main(["migrate", str(manifest)]) == 2
    text = " ".join(capsys.readouterr().err.split())
    assert "3 problem(s)" in text and "models[0] 'a'.opset" in text and "models[1] 'b'.sorce: unknown field" in text
    assert "models[1] 'b'.source: Field required" in text
