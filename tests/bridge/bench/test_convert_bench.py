"""``bridge convert --bench`` and the manifest field ``bench:``: the written model's speed against the source is
recorded in the conversion report, printed, and shown per model in a migration's report.html."""

from __future__ import annotations

import json
import re
from pathlib import Path

import onnx
from support import fcn_model, run_cli

from bridge import api
from bridge.migrate.report import write_reports
from bridge.migrate.results import comparable


def test_convert_bench_records_the_speed_of_the_written_model(tmp_path: Path) -> None:
    onnx.save(fcn_model(), tmp_path / "fcn.onnx")
    proc = run_cli("convert", str(tmp_path / "fcn.onnx"), "-i", "x:2,3,16,16", "-d", "x:0=batch",
                   "-o", str(tmp_path / "out.onnx"), "--bench", "--report", str(tmp_path / "r.json"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.search(r"bench \(median latency, vs source\): onnxruntime b2 [\d.]+ ms \([\d.]+x onnx\)", proc.stdout)
    bench = json.loads((tmp_path / "r.json").read_text())["bench"]
    assert bench["reference"] == "onnx" and bench["settings"]["batches"] == [2]  # the export's batch size
    assert [c["runner"] for c in bench["results"]] == ["onnx", "onnxruntime"]
    assert "samples_ms" not in bench["results"][0] and bench["results"][1]["latency"]["calls"] == 20
    plain = run_cli("convert", str(tmp_path / "fcn.onnx"), "-i", "x:2,3,16,16", "-o", str(tmp_path / "o2.onnx"),
                    "--report", str(tmp_path / "r2.json"))
    assert plain.returncode == 0 and json.loads((tmp_path / "r2.json").read_text())["bench"] is None


def test_a_manifest_asking_for_bench_gets_a_speed_column(tmp_path: Path) -> None:
    onnx.save(fcn_model(), tmp_path / "fcn.onnx")
    entries = [{"name": "fast", "source": str(tmp_path / "fcn.onnx"), "inputs": ["x:1,3,16,16"], "bench": True},
               {"name": "plain", "source": str(tmp_path / "fcn.onnx"), "inputs": ["x:1,3,16,16"]}]
    batch = api.migrate(entries, out=tmp_path / "out")
    fast, plain = batch.models
    assert fast.passed and re.fullmatch(r"onnxruntime b1 [\d.]+ ms \([\d.]+x onnx\)", fast.speed or "")
    assert plain.passed and plain.speed is None
    write_reports(batch, tmp_path / "out")
    html = (tmp_path / "out" / "report.html").read_text()
    assert "<th>speed (median, vs source)</th>" in html and fast.speed in html
    kept = comparable(batch.to_dict())["models"][0]  # speed is a fact of the run, like the timings
    assert "speed" not in kept and "bench" not in kept["conversion"] and kept["status"] == "passed"
