"""``convert --to tflite --precision int8|fp16``: the TFLite converter's dynamic-range int8 and fp16-weight .tflite of
the trained example SSD, judged in LiteRT on the dataset beside the fp32 .tflite."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from dataset_models import SYMBOL

from bridge import api

pytest.importorskip("ai_edge_litert", reason="LiteRT (ai-edge-litert) is not installed")
# found, not imported: onnx-tf imports only through bridge.targets.onnx_tf_compat's shims (onnx.mapping is gone)
if importlib.util.find_spec("onnx_tf") is None or importlib.util.find_spec("tensorflow") is None:
    pytest.skip("onnx-tf / TensorFlow not installed", allow_module_level=True)


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["int8", "fp16"])
def test_tflite_variant_passes_beside_the_fp32_tflite(precision: str, shapes: dict[str, Path], tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    result = api.convert(str(SYMBOL), tmp_path / "ssd.onnx", to="tflite", validate=["litert"],
                         inputs=["data:8,3,64,64"], dynamic=["data:0=batch"], feeds=shapes["feeds"],
                         dataset=shapes["images"], labels=shapes["labels"], dataset_limit=150, precision=precision,
                         report=report)
    variant = result.precision
    assert variant.passed and variant.written and variant.runtime == "litert"
    assert variant.destination == tmp_path / f"ssd.{precision}.tflite" and variant.destination.is_file()
    data = json.loads(report.read_text())["precision"]
    fp32, reduced = data["side_by_side"]
    assert reduced["agreement_ap50"] >= 0.98 and reduced["map50_drop"] <= 0.01
    assert reduced["size_bytes"] < fp32["size_bytes"] * (0.45 if precision == "int8" else 0.6)
    assert ("dynamic-range" if precision == "int8" else "float16") in data["rounds"][-1]["build"]["method"]
    assert data["calibration"] is None  # dynamic range: nothing calibrated
