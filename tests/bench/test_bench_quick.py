"""``python -m bench --quick``: the performance suite runs end to end on tiny models and produces every row
(conversion vs floor, onnxruntime vs MXNet per batch, decode+NMS vs MXNet's operator and its share,
a GluonCV-style SSD end to end, box_nms / graft-nms vs MXNet's box_nms, single conv layers, validation, buckets, migration) with a finite positive value. Timings are not asserted: the numbers
depend on the machine; the full run's table lives in the README."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support import REPO, mxnet_available

EXPECTED = {  # section -> row-name fragments that must be present
    "conversion": ["convert --validate none, wall", "convert --validate none, peak RSS added",
                   "convert with validation"],
    "latency": ["b1: onnxruntime vs MXNet", "b4: onnxruntime vs MXNet", "b1: dynamic-batch vs static",
                "b4: dynamic-batch vs static"],
    "nms": ["b1: lowered decode+NMS vs MXNet", "b4: lowered decode+NMS vs MXNet",
            "b1: boxes-scores-classes format (100 per image): lowered decode+NMS vs MXNet", "b1: decode+NMS share",
            "b4: decode+NMS share", "b1: decode+NMS share of onnxruntime latency, whole vs cut model",
            "b4: decode+NMS share of onnxruntime latency, whole vs cut model"],
    "gluoncv": ["gluoncv_tiny b1 (", "gluoncv_tiny b4 (", "box_nms): onnxruntime vs MXNet"],
    "nms_ops": ["b1 (500 x 4): lowered box_nms vs MXNet", "b1 (500 x 4): graft-nms graph vs MXNet",
                "b4 (500 x 4): lowered box_nms vs MXNet", "b4 (500 x 4): graft-nms graph vs MXNet"],
    "kernels": ["3x3 16->16 @32: onnxruntime vs MXNet", "3x3 depthwise 16 @32: onnxruntime vs MXNet"],
    "validation": ["compare_detections"],
    "buckets": ["buckets: images/s", "per-batch: images/s", "max static: images/s", "dynamic: images/s"],
    "migration": ["-j 1 / -j 2 wall"],
}




@pytest.mark.skipif(not mxnet_available(), reason="the suite compares against MXNet: mxnet not installed")
def test_quick_bench_produces_every_row(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "bench", "--quick", "--out", str(tmp_path / "results"),
                           "--cache", str(tmp_path / "cache")], capture_output=True, text=True, cwd=REPO,
                          timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (result,) = (tmp_path / "results").glob("*-quick.json")
    data = json.loads(result.read_text())
    assert data["quick"] and data["threads"] == 2 and data["machine"]["cores"]
    rows = data["rows"]
    for section, fragments in EXPECTED.items():
        names = [r["name"] for r in rows if r["section"] == section]
        for fragment in fragments:
            assert any(fragment in n for n in names), (section, fragment, names)
    for row in rows:
        assert math.isfinite(row["value"]) and row["value"] > 0, row
        assert row["met"] in (True, False, None)
        if row["target"]:
            assert row["met"] is not None, row
    latency = [r for r in rows if r["section"] == "latency" and "onnxruntime vs MXNet" in r["name"]]
    assert all(r["extra"]["parity"] for r in latency), "the converted tiny SSD's detections differ from MXNet's"
    gluon = [r for r in rows if r["section"] == "gluoncv"]
    assert all(r["extra"]["parity"] for r in gluon), "the converted GluonCV-style SSD's detections differ from MXNet's"
    nms_ops = [r for r in rows if r["section"] == "nms_ops"]
    assert all(r["extra"]["parity"] for r in nms_ops), "box_nms / graft-nms results differ from MXNet's box_nms"
    markdown = result.with_suffix(".md").read_text()
    assert markdown.count("\n| ") == len(rows) + 1  # header + one line per row
    for line in markdown.splitlines():  # six cells a line: a "|" inside a cell ("max |diff|") is escaped
        if line.startswith("| "):
            assert len(re.split(r"(?<!\\)\|", line)) == 8, line


@pytest.mark.skipif(not mxnet_available(), reason="the suite compares against MXNet: mxnet not installed")
def test_runs_in_the_same_minute_keep_both_results(tmp_path: Path) -> None:
    for _ in range(2):
        proc = subprocess.run([sys.executable, "-m", "bench", "--quick", "--sections", "validation", "--out",
                               str(tmp_path)], capture_output=True, text=True, cwd=REPO, timeout=300, check=False)
        assert proc.returncode == 0, proc.stderr[-3000:]
    results = sorted(tmp_path.glob("*.json"))
    assert len(results) == 2 and len(list(tmp_path.glob("*.md"))) == 2, results
    assert all(json.loads(r.read_text())["rows"] for r in results)
