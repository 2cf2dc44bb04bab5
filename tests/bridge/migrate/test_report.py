"""Batch reports: JSON round-trips, Markdown table, self-contained HTML with one page per model."""

from __future__ import annotations

import json
from pathlib import Path

from bridge.migrate.report import write_reports
from bridge.migrate.results import BatchResult, ModelResult, Parity, comparable


def _batch() -> BatchResult:
    ok = ModelResult(name="ssd", status="passed", source="/z/ssd-symbol.json", framework="mxnet", exporter="reader",
                     opset=17, passes_applied=["LowerMultiBoxPriorPass"], convert_s=1.5, validate_s=2.0,
                     elapsed_s=4.0, peak_memory_mb=300.0, outputs={"onnx": "models/ssd/model.onnx"},
                     parity=[Parity("onnxruntime", "mxnet", True, 1e-6, 2e-6, 0.0)],
                     conversion={"exporter": "reader", "opset": 17, "output": "models/ssd/model.onnx", "written": True,
                                 "timings": {"export_s": 1.5}, "inputs": [{"name": "data", "shape": [1, 3], "dtype": "float32"}],
                                 "outputs": [], "passes": [{"name": "LowerMultiBoxPriorPass", "modified": True,
                                                            "seconds": 0.1, "reason": "why"}], "validation": []})
    bad = ModelResult(name="odd", status="failed", kind="crash", reason="worker killed by SIGSEGV <native>",
                      source="/z/odd.onnx", elapsed_s=1.0)
    off = ModelResult(name="off", status="disabled", reason="disabled in the manifest", source="/z/off.onnx")
    return BatchResult([ok, bad, off], run={"manifest": "zoo.yaml", "executor": "local (-j 2)", "wall_s": 5.0,
                                             "reused": ["ssd"]})


def test_reports_written_and_readable(tmp_path: Path) -> None:
    batch = _batch()
    paths = write_reports(batch, tmp_path)
    assert [p.name for p in paths] == ["report.json", "report.md", "report.html"]
    data = json.loads(paths[0].read_text(encoding="utf-8"))
    assert data["counts"] == {"passed": 1, "failed": 1, "disabled": 1} and data["passed"] is False
    assert [ModelResult.from_dict(m) for m in data["models"]] == batch.models  # round-trips (resume reuses it)
    md = paths[1].read_text(encoding="utf-8")
    assert "**1 passed, 1 failed, 1 disabled of 3 models in 5.0 s (local (-j 2))**" in md
    assert "| odd | FAILED | crash: worker killed by SIGSEGV <native> |" in md
    html = paths[2].read_text(encoding="utf-8")
    assert html.count('<section class="model"') == 3 and 'id="model-ssd"' in html and 'href="#model-odd"' in html
    assert "SIGSEGV &lt;native&gt;" in html and "<native>" not in html  # escaped
    assert 'class="sortable"' in html and "<script>" in html and "src=" not in html  # self-contained


def test_comparable_drops_only_run_dependent_fields() -> None:
    a, b = _batch().to_dict(), _batch().to_dict()
    b["models"][0]["elapsed_s"] = 99.0
    b["models"][0]["conversion"]["timings"] = {"export_s": 9.0}
    b["run"]["wall_s"] = 1.0
    assert comparable(a) == comparable(b)
    b["models"][1]["reason"] = "other"
    assert comparable(a) != comparable(b)


def test_a_model_whose_validation_could_not_run_is_not_a_pass() -> None:
    entry = {"name": "m", "source": "/z/m-symbol.json", "convert": {"framework": "mxnet", "to": "onnx", "opset": 17}}
    conv = {"written": True, "validation": [], "validation_skipped": "source reference unavailable: MXNet is not installed"}
    result = ModelResult.from_outcome(entry, {"status": "passed", "conversion": conv}, [])
    assert result.status == "failed" and result.kind == "unvalidated" and "MXNet is not installed" in (result.reason or "")
    asked_none = {**conv, "validation_skipped": "validation disabled (--validate none)"}
    assert ModelResult.from_outcome(entry, {"status": "passed", "conversion": asked_none}, []).status == "passed"
