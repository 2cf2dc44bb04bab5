"""The mutation suite's base models: the ports carry the trained SSD (they detect what it detects), trained models
of ``tests/trained_models`` plug in through one provider line, and the full matrix is as large as issue 32 asks
(>= 150 mutants over >= 6 models in >= 4 layouts)."""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import ssd_ports
from mutation_bases import ConvertedBase
from mutation_models import PROVIDERS, images_as_feeds, trained
from mutation_operators import OPERATORS, NoSite, mutants

from bridge.validation.detection.layouts import DetectionSpec
from bridge.validation.detection.matching import compare_detections


def _mxnet_rows(converted: ConvertedBase) -> list:
    return DetectionSpec("mxnet", {"detections": "detection_output"}).read(converted.outputs[-1], "candidate")


def test_the_pytorch_port_detects_what_the_trained_mxnet_ssd_detects(
        converted_bases: Callable[[str], ConvertedBase]) -> None:
    torch = pytest.importorskip("torch")
    expected = _mxnet_rows(converted_bases("mxnet_ssd"))  # the bundled SSD, converted, on its sample images
    with torch.no_grad():
        rows = ssd_ports.ported_ssd("yolo")(torch.from_numpy(np.load(ssd_ports.FEEDS)["data"])).numpy()
    got = DetectionSpec("yolo", {"detections": "d"}).read({"d": rows}, "candidate")
    expected = [d.take(np.flatnonzero(d.scores > 0.5)) for d in expected]  # the port's head keeps scores over 0.5
    result = compare_detections(expected, got, score_tol=1e-4, box_atol=1e-4)
    assert result.passed and result.matched == sum(len(d) for d in expected) >= 7, result


@pytest.mark.slow
def test_the_keras_port_detects_what_the_trained_mxnet_ssd_detects(
        converted_bases: Callable[[str], ConvertedBase]) -> None:
    keras = converted_bases("keras_ssd")
    spec = keras.base.specs[0]
    got = spec.read(keras.outputs[-1], "candidate")
    expected = _mxnet_rows(converted_bases("mxnet_ssd"))
    # the Keras head keeps scores over 0.3 only (combined NMS's threshold); the trained SSD's are well above
    expected = [d.take(np.flatnonzero(d.scores > 0.3)) for d in expected]
    result = compare_detections(expected, got, score_tol=1e-4, box_atol=1e-4)
    assert result.passed and result.matched >= 7, result


def test_trained_models_plug_in_with_one_provider_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from PIL import Image

    images = tmp_path / "images"
    images.mkdir()
    raw = ssd_ports.equivalence_images(8) + np.asarray((123.0, 117.0, 104.0), np.float32).reshape(1, 3, 1, 1)
    for k, img in enumerate(raw):
        Image.fromarray(np.clip(np.rint(img), 0, 255).astype(np.uint8).transpose(1, 2, 0)).save(images / f"{k:03d}.png")
    fake = types.SimpleNamespace(
        name="mxnet_ssd", framework="mxnet", source=ssd_ports.SYMBOL, convert_args=("--input", "data:4,3,64,64"),
        feeds=ssd_ports.FEEDS, layout="mxnet", images=images, labels=tmp_path / "labels.json",
        preprocessing={"resize": [64, 64], "channel_order": "RGB", "layout": "NCHW", "mean": [123, 117, 104],
                       "std": [1, 1, 1]})
    module = types.ModuleType("trained_models")
    module.trained_model = lambda name: fake  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "trained_models", module)
    built = trained("mxnet_ssd")(tmp_path)
    assert built.source == str(ssd_ports.SYMBOL) and built.convert_cli == ("--input", "data:4,3,64,64")
    assert [list(i) for i in built.inputs] == [["data"], ["data"]] and built.inputs[0]["data"].shape == (4, 3, 64, 64)
    np.testing.assert_allclose(np.concatenate([i["data"] for i in built.inputs]), ssd_ports.equivalence_images(8),
                               atol=0.5)  # PNG round trip: whole pixel values
    assert images_as_feeds(images, fake.preprocessing, (4, 3, 64, 64)).shape == (8, 3, 64, 64)


@pytest.mark.slow
def test_the_full_matrix_is_as_large_as_the_issue_asks(converted_bases: Callable[[str], ConvertedBase]) -> None:
    counts: dict[str, int] = {}
    layouts: set[str] = set()
    for name, case in PROVIDERS.items():
        base = converted_bases(name).base
        for op in OPERATORS:
            try:
                made = len(mutants(base, op))
            except NoSite:
                continue
            counts[name] = counts.get(name, 0) + made
            layouts.add(case.layout)
    assert sum(counts.values()) >= 150 and len(counts) >= 6 and len(layouts) >= 4, (counts, layouts)
