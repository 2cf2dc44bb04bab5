"""Children die with bridge: ``kill -9`` of a command while an isolated child spins in native code leaves no
process behind (no child, no fork server, no resource tracker holding the caller's stdout)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

REPO = Path(__file__).resolve().parents[3]


def spinning_loop_model() -> onnx.ModelProto:
    """A Loop whose trip count is int64's max and whose condition stays true: runs (practically) forever."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]), helper.make_node("Add", ["v_in", "one"], ["v_out"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_in", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_out", TensorProto.FLOAT, [1])],
        [helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])])
    graph = helper.make_graph(
        [helper.make_node("Loop", ["trips", "cond", "x"], ["y"], body=body)], "spin",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
        [helper.make_tensor("trips", TensorProto.INT64, [], [2**63 - 1]),
         helper.make_tensor("cond", TensorProto.BOOL, [], [True])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _session_members(sid: int, *, busy: bool = False) -> list[int]:
    """Live processes of session ``sid`` (with ``busy``: only those that used over a second of CPU)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        # fields: state, ppid, pgrp, session, ..., utime (12th), stime (13th) in clock ticks
        cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        if fields[0] != "Z" and int(fields[3]) == sid and (not busy or cpu > 1.0):
            members.append(int(entry.name))
    return members


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc to find descendants")
@pytest.mark.parametrize("command", [["convert", "{model}", "-o", "{out}"], ["validate", "{model}", "--source", "{model}"]])
def test_kill_9_of_bridge_leaves_no_descendant(tmp_path: Path, command: list[str]) -> None:
    model = tmp_path / "spin.onnx"
    onnx.save(spinning_loop_model(), model)
    argv = [a.format(model=model, out=tmp_path / "out.onnx") for a in command]
    proc = subprocess.Popen([sys.executable, "-m", "bridge", *argv], cwd=tmp_path, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        deadline = time.monotonic() + 120
        while not set(_session_members(proc.pid, busy=True)) - {proc.pid}:  # a child spinning in onnxruntime
            assert proc.poll() is None, "bridge ended before its child started"
            assert time.monotonic() < deadline, "no isolated child started"
            time.sleep(0.2)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 5
        while _session_members(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _session_members(proc.pid) == []
    finally:
        for pid in _session_members(proc.pid):
            os.kill(pid, signal.SIGKILL)
