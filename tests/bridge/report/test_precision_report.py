"""The ``precision`` section of a report in Markdown, HTML and the CLI: fp32 and the variant side by side, the
speed-up with the load average, the fallback rounds and the per-layer costs, the verdict."""

from __future__ import annotations

import pytest

from bridge.report.html import precision_html
from bridge.report.precision import precision_markdown

SECTION = {
    "precision": "int8", "target": "onnx", "runtime": "onnxruntime", "passed": False, "written": False,
    "destination": "out/m.int8.onnx", "calibration": "128 images from calib/",
    "settings": {"budget": {"min_agreement": 0.98, "max_map_drop": 0.01, "origin": "reduced-precision defaults"}},
    "side_by_side": [
        {"precision": "fp32", "runtime": "onnxruntime", "agreement_ap50": 1.0, "map50": 0.998, "map50_drop": 0.0,
         "latency_b1_ms": 120.0, "latency_b4_ms": 300.0, "size_bytes": 6_500_000},
        {"precision": "int8", "runtime": "onnxruntime", "agreement_ap50": 0.41, "map50": 0.5, "map50_drop": 0.498,
         "latency_b1_ms": 60.0, "latency_b4_ms": 140.0, "size_bytes": 1_700_000}],
    "speed": {"speedup": {"1": 2.0, "4": 2.14}, "iterations": 20, "rounds": 5, "load_avg": [15.2, 14.9, 14.1]},
    "rounds": [{"round": 0, "kept_float": [], "passed": False, "figures": {"agreement_ap50": 0.41, "map50": 0.5},
                "failures": ["onnxruntime int8: agreement_ap50 0.41 < 0.98"], "error": None, "build": None},
               {"round": 1, "kept_float": ["stage3a_conv"], "passed": False,
                "figures": {"agreement_ap50": 0.43, "map50": 0.51}, "failures": ["still low"], "error": None,
                "build": {"method": "onnxruntime static quantization", "notes": ["1 node kept float"]}}],
    "layer_costs": [{"node": "stage3a_conv", "op": "Conv", "cost": 0.38}, {"node": "stage2b_conv", "op": "Conv",
                                                                           "cost": 0.37}],
    "costs_measured_on": "onnxruntime QDQ model, one layer at a time",
    "failure": "the int8 variant still breaks the budget after 1 fallback round(s); worst layers: stage3a_conv",
    "notes": [],
}


def test_markdown_puts_fp32_and_int8_side_by_side_with_rounds_and_costs() -> None:
    text = precision_markdown(SECTION)
    assert "## Precision int8 (onnx): FAIL: the int8 variant still breaks" in text
    assert "| fp32 | onnxruntime | 1 | 0.998 | 0 | 120 | 300 | 6.20 MiB |" in text
    assert "| int8 | onnxruntime | 0.41 | 0.5 | 0.498 | 60 | 140 | 1.62 MiB |" in text
    assert "2.00x at b1, 2.14x at b4" in text and "load average 15.2, 14.9, 14.1" in text
    assert "| 1 | stage3a_conv | 0.43 | 0.51 | fail: still low |" in text
    assert "| stage3a_conv | Conv | 0.38 |" in text and "(not written)" in text


def test_html_shows_the_same_section() -> None:
    page = precision_html(SECTION)
    assert 'id="precision"' in page and '<span class="fail">FAIL' in page
    for fragment in ("latency_b1_ms", "1.62 MiB", "stage3a_conv", "2.00x at b1", "reduced-precision defaults"):
        assert fragment in page


def test_the_cli_prints_one_line_per_precision(capsys: pytest.CaptureFixture[str]) -> None:
    from bridge.cli.render import print_precision

    class Result:
        def to_dict(self) -> dict[str, object]:
            return SECTION

    print_precision(Result())
    out = capsys.readouterr().out
    assert "fp32: agreement_ap50 1, map50 0.998" in out and "int8: agreement_ap50 0.41" in out
    assert "fallback round 1: kept float stage3a_conv" in out and "worst layers (cost): stage3a_conv 0.38" in out
    assert "precision: FAIL" in out
