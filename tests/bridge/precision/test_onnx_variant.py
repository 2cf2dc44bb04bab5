"""``convert --precision int8`` to ONNX: the int8 QDQ variant of the trained example SSD is judged on 300 images
(agreement with the source, mAP drop) beside the fp32 artefact; a model int8 breaks (an outlier channel)
FAILs naming the layers around the outlier, and the fallback rescues it by keeping them float."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from dataset_models import SYMBOL
from precision_models.outlier import BROKEN_LAYERS, outlier_ssd
from support import run_cli

from bridge import api
from bridge.errors import ValidationMismatch
from bridge.precision.regions import split_region
from bridge.report import write_report

ARGS = {"inputs": ["data:8,3,64,64"], "dynamic": ["data:0=batch"]}


def _convert(source: Path, out: Path, shapes: dict[str, Path], **options: object) -> api.ConvertResult:
    return api.convert(str(source), out, feeds=shapes["feeds"], dataset=shapes["images"], labels=shapes["labels"],
                       precision="int8", calibration=shapes["calibration"], **ARGS, **options)  # type: ignore[arg-type]


def test_int8_ssd_passes_beside_fp32_with_the_float_region_float(shapes: dict[str, Path], tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    result = _convert(SYMBOL, tmp_path / "ssd.onnx", shapes, report=report)
    variant = result.precision
    assert result.passed and result.written and variant.passed and variant.written
    assert variant.destination == tmp_path / "ssd.int8.onnx" and variant.destination.is_file()
    data = json.loads(report.read_text())["precision"]
    fp32, int8 = data["side_by_side"]
    assert (fp32["precision"], int8["precision"]) == ("fp32", "int8")
    assert int8["agreement_ap50"] >= 0.98 and int8["map50_drop"] <= 0.01  # the default budget, met
    assert fp32["agreement_ap50"] == 1.0 and fp32["map50_drop"] == 0.0
    assert int8["size_bytes"] < fp32["size_bytes"] / 3  # int8 weights
    assert int8["latency_b1_ms"] > 0 and int8["latency_b4_ms"] > 0 and data["speed"]["speedup"]
    assert data["settings"]["budget"] == {"min_agreement": 0.98, "max_map_drop": 0.01,
                                          "origin": "reduced-precision defaults"}
    assert data["dataset"]["source"]["map50"] > 0.99 and data["dataset_run"]["images"] == 300
    # the float region is float: no tensor of it is quantized (every QuantizeLinear reads a quantized-region
    # tensor or the input), and NMS / TopK / the decode read no dequantized tensor
    model = onnx.load(str(variant.destination))
    region = split_region(onnx.load(str(tmp_path / "ssd.onnx")))
    producer = {o: n for n in model.graph.node for o in n.output}
    for node in model.graph.node:
        if node.op_type == "QuantizeLinear":
            source = producer.get(node.input[0])
            assert source is None or source.name in region.quantized or source.op_type == "DequantizeLinear", source
    dequantized = {o for n in model.graph.node if n.op_type == "DequantizeLinear" for o in n.output}
    for node in model.graph.node:
        if node.op_type in ("NonMaxSuppression", "TopK", "Exp", "Softmax", "ReduceMax"):
            assert not dequantized & set(node.input), node.name
    assert sum(n.op_type == "QuantizeLinear" for n in model.graph.node) >= 10
    for suffix, marker in ((".md", "## Precision int8 (onnx): PASS"), (".html", 'id="precision"')):
        write_report(json.loads(report.read_text()), tmp_path / f"report{suffix}")
        text = (tmp_path / f"report{suffix}").read_text()
        assert marker in text and "latency_b1_ms" in text and "agreement_ap50" in text


@pytest.fixture(scope="module")
def outlier(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return outlier_ssd(tmp_path_factory.mktemp("outlier"))


def test_a_model_int8_breaks_fails_naming_its_worst_layers(outlier: Path, shapes: dict[str, Path],
                                                           tmp_path: Path) -> None:
    out = tmp_path / "outlier.onnx"
    report = tmp_path / "report.json"
    proc = run_cli("convert", str(outlier), "-o", str(out), "--input", "data:8,3,64,64", "--dynamic", "data:0=batch",
                   "--feeds", str(shapes["feeds"]), "--dataset", str(shapes["images"]), "--labels",
                   str(shapes["labels"]), "--precision", "int8", "--calibration", str(shapes["calibration"]),
                   "--fallback-rounds", "0", "--report", str(report))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "precision: FAIL" in proc.stdout and "worst layers" in proc.stdout
    assert not out.exists() and not out.with_name("outlier.int8.onnx").exists()  # nothing written
    data = json.loads(report.read_text())
    precision = data["precision"]
    assert data["passed"] is False and precision["passed"] is False and precision["rounds"][0]["failures"]
    assert precision["side_by_side"][1]["agreement_ap50"] < 0.5  # badly broken, in the numbers
    assert {c["node"] for c in precision["layer_costs"][:2]} == set(BROKEN_LAYERS)  # measured, named
    assert all(name in precision["failure"] for name in BROKEN_LAYERS)
    assert precision["layer_costs"][1]["cost"] > 100 * precision["layer_costs"][2]["cost"]
    # the fp32 model itself is fine: the elementwise validation passed
    assert all(c["passed"] for c in data["validation"])


def test_the_fallback_keeps_the_costliest_layers_float_and_rescues_it(outlier: Path, shapes: dict[str, Path],
                                                                      tmp_path: Path) -> None:
    result = _convert(outlier, tmp_path / "outlier.onnx", shapes)
    variant = result.precision
    assert variant.passed and variant.written
    rounds = variant.rounds
    assert 2 <= len(rounds) <= 3  # round 0 fails, a fallback round passes
    assert not rounds[0].passed and rounds[-1].passed
    assert set(BROKEN_LAYERS) <= set(rounds[-1].kept_float)
    assert rounds[1].kept_float == [variant.costs[0].node]  # round 1 keeps the single costliest layer
    assert rounds[-1].figures["agreement_ap50"] >= 0.98
    model = onnx.load(str(variant.destination))
    dequantized = {o for n in model.graph.node if n.op_type == "DequantizeLinear" for o in n.output}
    quantized_tensors = {n.input[0] for n in model.graph.node if n.op_type == "QuantizeLinear"}
    nodes = {n.name: n for n in model.graph.node}
    for name in BROKEN_LAYERS:  # kept float: float weights, and the outlier tensor between them is not quantized
        assert nodes[name].input[1] not in dequantized, name
    outlier = set(nodes["stage2b_conv"].output)  # its output and what its relu makes of it
    outlier |= {o for n in model.graph.node if outlier & set(n.input) and n.op_type == "Relu" for o in n.output}
    assert len(outlier) == 2 and not outlier & quantized_tensors


def test_given_rounds_that_cannot_rescue_it_fail_clearly(outlier: Path, shapes: dict[str, Path],
                                                         tmp_path: Path) -> None:
    """One fallback round keeps one layer float: not enough here; the failure says so with the rounds."""
    with pytest.raises(ValidationMismatch, match=r"still breaks the budget after 1 fallback round"):
        _convert(outlier, tmp_path / "outlier.onnx", shapes, fallback_rounds=1, dataset_limit=100)
