"""A real, short ``bridge bench`` of the bundled MXNet SSD (converted with a dynamic batch) in every installed
runtime against MXNet, a batch sweep 1,4, each runner in its own child process; its reports; the CLI."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from support import REPO, mxnet_available, run_cli

from bridge import api
from bridge.bench.report import write_bench_report
from bridge.runtimes import available_runtimes

SSD = REPO / "examples" / "mxnet_ssd"
pytestmark = pytest.mark.skipif(not mxnet_available(), reason="the source framework of the bundled SSD, mxnet, "
                                                              "is not installed")


@pytest.fixture(scope="module")
def ssd(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ssd") / "ssd.onnx"
    api.convert(str(SSD / "model-symbol.json"), out, inputs=["data:4,3,64,64"], dynamic=["data:0=batch"], validate=[])
    return out


@pytest.fixture(scope="module")
def result(ssd: Path) -> Any:
    return api.bench(ssd, source=str(SSD / "model-symbol.json"), batch=[1, 4], iterations=3, rounds=3, warmup=1)


def test_every_installed_runtime_and_mxnet_run_each_batch_size(result: Any) -> None:
    assert result.source_runner == "mxnet"
    ran = {r.name for r in result.runners if r.error is None}
    for name in available_runtimes():  # each one ran, or is named as not installed
        runner = next(r for r in result.runners if r.name == name)
        assert name in ran or (runner.error or "").startswith("not installed"), runner.error
    assert "onnxruntime" in ran and "mxnet" in ran
    for name in ran:
        runner = next(r for r in result.runners if r.name == name)
        assert runner.load_s is not None and runner.load_s > 0 and runner.peak_rss and runner.peak_rss > 2**20
        for batch in (1, 4):
            cell = result.cell(name, batch)
            assert cell.error is None and cell.latency is not None and len(cell.latency.samples) == 3
            assert 0 < cell.latency.min <= cell.latency.p50 <= cell.latency.p90 <= cell.latency.max
            assert cell.first_run_s > 0 and cell.rounds == [1, 1, 1]
            if name != "mxnet":
                assert result.ratio(name, batch) == pytest.approx(
                    result.cell("mxnet", batch).latency.p50 / cell.latency.p50)
    assert result.inputs == {1: {"data": [1, 3, 64, 64]}, 4: {"data": [4, 3, 64, 64]}}
    assert result.machine["cores"] and len(result.machine["load_avg"]) == len(result.machine["load_avg_end"]) == 3


def test_reports_json_markdown_and_self_contained_html(result: Any, tmp_path: Path) -> None:
    data = result.to_dict()
    for suffix in ("json", "md", "html"):
        write_bench_report(data, tmp_path / f"r.{suffix}")
    saved = json.loads((tmp_path / "r.json").read_text())
    assert {"model", "source", "reference", "settings", "machine", "runners", "results", "ratios_vs_source"} <= set(saved)
    cell = saved["results"][0]
    assert {"p50_ms", "p90_ms", "p99_ms", "min_ms", "max_ms"} <= set(cell["latency"])
    assert {"throughput_per_s", "first_run_s", "peak_rss_bytes", "samples_ms"} <= set(cell)
    assert "onnxruntime@4" in saved["ratios_vs_source"]
    md = (tmp_path / "r.md").read_text()
    assert "| runner | batch | p50 ms |" in md and re.search(r"\| onnxruntime \| 4 \| [\d.]+ .*\| [\d.]+x \|", md)
    page = (tmp_path / "r.html").read_text()
    assert page.count("<svg") == 2 and "batch 1: latency per call" in page and "batch 4: latency per call" in page
    assert page.count("<circle") == 3 * 2 * len([r for r in data["runners"] if not r["error"]])  # every call a dot
    assert not re.search(r"(src|href)=['\"]?(https?:)?//", page), "the page must not fetch anything"


def test_cli_prints_latency_and_the_ratio_to_mxnet(ssd: Path, tmp_path: Path) -> None:
    proc = run_cli("bench", str(ssd), "--source", str(SSD / "model-symbol.json"), "--runtime", "onnxruntime",
                   "--batch", "1,4", "--iterations", "2", "--rounds", "2", "--warmup", "0", "--threads", "1",
                   "--report", str(tmp_path / "r.md"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.search(r"runner onnxruntime, batch 4, p50 ms [\d.]+.*vs source [\d.]+x", proc.stdout), proc.stdout
    assert "runner mxnet, batch 1" in proc.stdout and "load average" in proc.stdout
    assert "| onnxruntime | 1 |" in (tmp_path / "r.md").read_text()
    assert json.loads(run_cli("bench", str(ssd), "--runtime", "onnxruntime", "--iterations", "1", "--json").stdout
                      )["settings"]["batches"] == [1]  # a dynamic batch without --batch: 1
