"""Each model runs in its own worker process: an abort, a memory hog and a hang fail only their model."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from bridge.migrate import ModelResult, run


def test_crash_memory_and_hang_fail_only_their_model(tmp_path: Path, hook_convert: Callable[..., Any],
                                                     onnx_zoo: Callable[..., Path]) -> None:
    zoo = onnx_zoo("ok_a", "abort_me", "hog_me", "hang_me", "ok_b")
    entries = [{"name": n, "source": f"{n}.onnx", "inputs": ["x:1,3,8,8"]} for n in
               ("ok_a", "abort_me", "hog_me", "hang_me", "ok_b")]
    entries[2]["max_memory"] = "1GiB"
    entries[3]["timeout"] = 4
    seen: list[ModelResult] = []

    batch = run(entries, convert=hook_convert, out=tmp_path / "out", jobs=2, on_result=seen.append, base_dir=zoo)

    assert sorted(m.name for m in seen) == sorted(e["name"] for e in entries)  # one callback per model
    by = {m.name: m for m in batch.models}
    assert [m.name for m in batch.models] == [e["name"] for e in entries]  # manifest order, not finish order
    for name in ("ok_a", "ok_b"):
        assert by[name].status == "passed", by[name].reason
        assert (tmp_path / "out" / by[name].outputs["onnx"]).is_file()
        assert by[name].parity and by[name].parity[0].runtime == "onnxruntime" and by[name].parity[0].passed
    crash = by["abort_me"]
    assert (crash.status, crash.kind) == ("failed", "crash") and "SIGABRT" in (crash.reason or "")
    hog = by["hog_me"]
    assert (hog.status, hog.kind) == ("failed", "memory") and "1024 MiB" in (hog.reason or "")
    hang = by["hang_me"]
    assert (hang.status, hang.kind) == ("failed", "timeout") and "timed out after 4 s" in (hang.reason or "")
    assert hang.elapsed_s is not None and 4 <= hang.elapsed_s < 30
    for failed in (crash, hog, hang):
        assert "onnx" not in failed.outputs  # nothing half-written for a failed model
    assert batch.exit_code == 1 and batch.counts == {"passed": 2, "failed": 3, "disabled": 0}
    for report in ("report.json", "report.md", "report.html"):
        assert (tmp_path / "out" / report).is_file()
