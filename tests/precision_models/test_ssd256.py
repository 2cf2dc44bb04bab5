"""The done-when of ``--precision int8`` on a trained SSD larger than the bundled one: ``ssd256`` (1.03 GMAC at
256 x 256, trained on the procedural shapes) converts to int8 ONNX that agrees with MXNet at AP@0.5 >= 0.98 and
loses <= 0.01 mAP on its 400 held-out images, calibrated on 128 others, and runs faster than fp32 in the same
bench run. The speed figure of record (>= 1.5x at batch 1, 2 threads, with the load average) is
``python -m bench.precision`` in bench/results/; here, on a machine shared with other test runs, the timing
check only asserts that int8 is faster (the ratio is paired, but a loaded machine compresses it)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ssd256() -> object:
    from precision_models import precision_model

    return precision_model("ssd256")


def test_ssd256_is_larger_than_the_bundled_one_and_detects(ssd256: object) -> None:
    m = ssd256
    assert m.training["gmac_per_image"] >= 1.0  # type: ignore[attr-defined]
    assert m.quality["map50"] >= 0.95 and m.quality["images"] >= 300  # type: ignore[attr-defined]


def test_int8_onnx_meets_the_budget_on_the_held_out_images_and_is_faster(ssd256: object, tmp_path: Path) -> None:
    from bridge import api

    m = ssd256
    result = api.convert(str(m.source), tmp_path / "ssd256.onnx", inputs=["data:1,3,256,256"],  # type: ignore[attr-defined]
                         dynamic=["data:0=batch"], feeds=m.feeds, dataset=m.images, labels=m.labels,  # type: ignore[attr-defined]
                         precision="int8", calibration=m.calibration)  # type: ignore[attr-defined]
    variant = result.precision
    assert variant.passed and variant.written
    fp32, int8 = variant.side_by_side()
    assert (fp32["precision"], int8["precision"]) == ("fp32", "int8")
    assert int8["agreement_ap50"] >= 0.98 and int8["map50_drop"] <= 0.01
    assert variant.dataset.images >= 300
    assert variant.speed is not None and variant.speed["speedup"][1] > 1.0
