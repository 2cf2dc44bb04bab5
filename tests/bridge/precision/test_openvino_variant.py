"""``convert --to openvino --precision int8|fp16``: NNCF's int8 IR and the fp16-weight IR of the trained example
SSD, judged in OpenVINO on the dataset beside the fp32 IR; the float region is in NNCF's ignored scope."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from dataset_models import SYMBOL

from bridge import api

pytest.importorskip("openvino", reason="OpenVINO is not installed")


@pytest.mark.parametrize("precision", ["int8", "fp16"])
def test_openvino_variant_passes_beside_the_fp32_ir(precision: str, shapes: dict[str, Path], tmp_path: Path) -> None:
    if precision == "int8":
        pytest.importorskip("nncf", reason="NNCF is not installed (the openvino extra)")
    report = tmp_path / "report.json"
    options = {"calibration": shapes["calibration"]} if precision == "int8" else {}
    result = api.convert(str(SYMBOL), tmp_path / "ssd.onnx", to="openvino", inputs=["data:8,3,64,64"],
                         dynamic=["data:0=batch"], feeds=shapes["feeds"], dataset=shapes["images"],
                         labels=shapes["labels"], dataset_limit=150, precision=precision, report=report, **options)
    variant = result.precision
    assert variant.passed and variant.written and variant.runtime == "openvino"
    assert variant.destination == tmp_path / f"ssd.{precision}.xml"
    assert variant.destination.is_file() and variant.destination.with_suffix(".bin").is_file()
    data = json.loads(report.read_text())["precision"]
    fp32, reduced = data["side_by_side"]
    assert reduced["agreement_ap50"] >= 0.98 and reduced["map50_drop"] <= 0.01
    assert reduced["size_bytes"] < fp32["size_bytes"] * (0.45 if precision == "int8" else 0.6)
    build = data["rounds"][-1]["build"]
    if precision == "int8":
        assert "NNCF" in build["method"] and "FakeQuantize" in build["method"]
        assert any("ignored scope" in n for n in build["notes"])
        import openvino as ov

        model = ov.Core().read_model(str(variant.destination))
        fq_inputs = {op.get_friendly_name() for op in model.get_ordered_ops()
                     if any(i.get_node().get_type_name() == "FakeQuantize" for i in op.inputs())}
        assert not any(name.startswith("detection/") for name in fq_inputs)  # decode and NMS read no int8
    else:
        assert "float16" in build["method"]
