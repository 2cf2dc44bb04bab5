"""Ctrl-C: the command ends with exit code 130, says "interrupted", leaves no half-written file, and the
``--report`` it was given is written, naming the stage it stopped in.

The source is a PyTorch factory that writes a marker file and then sleeps, so SIGINT arrives (as a terminal sends
it: to the whole process group) while the export - or the reference run - is under way."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import REPO

pytest.importorskip("torch", reason="PyTorch is not installed (the slow source is a PyTorch factory)")

FACTORY = """\
import time
from pathlib import Path

import torch


def build():
    Path("started").write_text("now")  # the test's cue: the slow part is under way
    time.sleep(120)
    return torch.nn.Identity()
"""


def _interrupt(argv: list[str], folder: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200"}
    proc = subprocess.Popen([sys.executable, "-m", "bridge", *argv], cwd=folder, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 240
    while not (folder / "started").exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.2)
    time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
    out, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def test_ctrl_c_during_convert_exits_130_and_reports_the_stage(tmp_path: Path) -> None:
    (tmp_path / "slow.py").write_text(FACTORY, encoding="utf-8")
    (tmp_path / "out").mkdir()
    proc = _interrupt(["convert", "slow.py:build", "--input", "x:1,4", "-o", "out/m.onnx",
                       "--report", "out/report.json"], tmp_path)
    assert proc.returncode == 130, proc.stdout + proc.stderr
    assert "interrupted" in proc.stderr and "Traceback" not in proc.stderr
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["interrupted"] == "export" and report["error"]["exit_code"] == 130
    assert report["stages"]["export"]["status"] == "interrupted" and report["stages"]["write"]["status"] == "not run"
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["report.json"]  # nothing half-written


def test_ctrl_c_during_validate_exits_130_and_reports_the_step(tmp_path: Path) -> None:
    import onnx
    from onnx import TensorProto, helper

    (tmp_path / "slow.py").write_text(FACTORY, encoding="utf-8")
    node = helper.make_node("Identity", ["x"], ["y"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "m.onnx")
    proc = _interrupt(["validate", "m.onnx", "--source", "slow.py:build", "--report", "report.md"], tmp_path)
    assert proc.returncode == 130, proc.stdout + proc.stderr
    assert "interrupted" in proc.stderr
    text = (tmp_path / "report.md").read_text()
    assert "KeyboardInterrupt (exit code 130): interrupted (Ctrl-C) while" in text
