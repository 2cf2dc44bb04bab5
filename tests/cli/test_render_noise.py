"""Output that stays readable: comparison rows on one line each when piped, a heartbeat during long
stages, and repeated framework warnings grouped one line per message with a count."""

from __future__ import annotations

import io
import time

import pytest
from rich.console import Console

from bridge.chatter import group_warnings
from bridge.cli import render
from bridge.validation.compare import Comparison, OutputComparison


def _capture(monkeypatch: pytest.MonkeyPatch, name: str) -> io.StringIO:
    sink = io.StringIO()
    monkeypatch.setattr(render, name, Console(file=sink, width=80, force_terminal=False))
    return sink


def test_piped_comparisons_are_one_line_per_output(monkeypatch: pytest.MonkeyPatch) -> None:
    sink = _capture(monkeypatch, "out")
    note = "detection-aware (boxes-scores-labels): 36 matched, 0 only in reference, 0 only in candidate, min IoU 0.999962"
    comp = Comparison("torch", "onnxruntime", [OutputComparison("a_rather_long_output_name/boxes", True, True, True,
                                                                cand_shape=[36, 4], max_abs=1e-6, note=note)])
    render.print_comparisons([comp])
    lines = sink.getvalue().splitlines()
    assert lines[0].startswith("onnxruntime vs torch: PASS")
    assert lines[1].startswith("  a_rather_long_output_name/boxes: ok shape [36, 4] max_abs 1e-06") and note in lines[1]
    assert len(lines) == 2


def test_a_long_stage_says_it_is_still_running(monkeypatch: pytest.MonkeyPatch) -> None:
    sink = _capture(monkeypatch, "err")
    with render.progress("converting m.pt", heartbeat=0.05) as progress:
        progress("exporting with the torch adapter")
        time.sleep(0.3)
    assert "converting m.pt: still exporting with the torch adapter (" in sink.getvalue()


def test_quick_stages_stay_silent(monkeypatch: pytest.MonkeyPatch) -> None:
    sink = _capture(monkeypatch, "err")
    with render.progress("converting m.pt", heartbeat=5.0) as progress:
        progress("exporting")
    assert sink.getvalue() == ""


def test_repeated_warnings_are_grouped_with_a_count() -> None:
    tracer = "TracerWarning: Converting a tensor to a Python boolean might cause the trace to be incorrect."
    collected = [f"{tracer} (model.py:{line})" for line in (10, 20, 30)] + ["UserWarning: once (model.py:5)"]
    assert group_warnings(collected) == [f"{tracer} (x3, first at model.py:10)", "UserWarning: once (model.py:5)"]
