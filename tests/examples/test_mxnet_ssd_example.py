"""Tests for the shipped legacy-format MXNet SSD example (examples/mxnet_ssd/).

The dataset generator and the mAP metric are tested with numpy alone; the trained checkpoint is
loaded with MXNet (skipped when it is not installed) and must keep its measured validation mAP@0.5.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "mxnet_ssd"
MAP_FLOOR = 0.97  # measured validation mAP@0.5 0.9990 (see README.md) minus a margin


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"mxnet_ssd_example_{name}", EXAMPLE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


shapes = _load("shapes")
metrics = _load("metrics")


@pytest.fixture(scope="module")
def mx() -> Iterator[ModuleType]:
    added = "bool" not in vars(np)
    if added:
        np.bool = bool  # type: ignore[attr-defined]  # mxnet 1.9.1 needs numpy.bool at import
    try:
        try:
            import mxnet
        except ImportError:
            pytest.skip("mxnet not installed")
        yield mxnet
    finally:
        if added and "bool" in vars(np):
            del np.bool


def test_dataset_is_deterministic_and_boxes_normalised() -> None:
    a = shapes.make_dataset(20, seed=3, size=64)
    b = shapes.make_dataset(20, seed=3, size=64)
    c = shapes.make_dataset(20, seed=4, size=64)
    assert a[0].shape == (20, 3, 64, 64) and a[0].dtype == np.uint8
    np.testing.assert_array_equal(a[0], b[0])
    assert not np.array_equal(a[0], c[0])
    for boxes, boxes_b, classes, classes_b in zip(a[1], b[1], a[2], b[2], strict=True):
        np.testing.assert_array_equal(boxes, boxes_b)
        np.testing.assert_array_equal(classes, classes_b)
        assert 1 <= len(boxes) <= 3 and boxes.shape == (len(classes), 4)
        assert np.all((boxes >= 0) & (boxes <= 1))
        assert np.all(boxes[:, 2] > boxes[:, 0]) and np.all(boxes[:, 3] > boxes[:, 1])
        assert set(classes.tolist()) <= {0, 1, 2}


def _as_detections(boxes: list[np.ndarray], classes: list[np.ndarray], pad: int = 5) -> np.ndarray:
    """Ground truth turned into perfect MultiBoxDetection rows [B, pad, 6], padded with class -1."""
    out = np.full((len(boxes), pad, 6), -1.0)
    for i, (b, c) in enumerate(zip(boxes, classes, strict=True)):
        out[i, : len(c), 0] = c
        out[i, : len(c), 1] = 0.9
        out[i, : len(c), 2:] = b
    return out


def test_map_hand_made_cases() -> None:
    gt_boxes = [np.array([[0.1, 0.1, 0.4, 0.4], [0.5, 0.5, 0.9, 0.9]]), np.array([[0.2, 0.2, 0.6, 0.7]])]
    gt_classes = [np.array([0, 1]), np.array([0])]
    perfect = _as_detections(gt_boxes, gt_classes)
    assert metrics.mean_average_precision(perfect, gt_boxes, gt_classes, 3) == pytest.approx(1.0)

    # Missing one of class 0's two objects: AP(0) = 0.5, AP(1) = 1, class 2 has no ground truth.
    missing = perfect.copy()
    missing[1, 0, 0] = -1
    np.testing.assert_allclose(metrics.per_class_ap(missing, gt_boxes, gt_classes, 3), [0.5, 1.0, np.nan])
    assert metrics.mean_average_precision(missing, gt_boxes, gt_classes, 3) == pytest.approx(0.75)

    # A higher-scored false positive first: class 0 precision 1/2 then 2/3 at recall 1/2, 1 -> AP 2/3.
    fp = np.concatenate([perfect, np.full((2, 1, 6), -1.0)], axis=1)
    fp[0, -1] = [0, 0.95, 0.6, 0.0, 0.9, 0.3]
    assert metrics.per_class_ap(fp, gt_boxes, gt_classes, 3)[0] == pytest.approx(2 / 3)

    # Duplicate detection of one object counts once; wrong class never matches.
    dup = perfect.copy()
    dup[0, 2] = [0, 0.5, 0.1, 0.1, 0.4, 0.4]
    dup[0, 3] = [2, 0.99, 0.5, 0.5, 0.9, 0.9]
    aps = metrics.per_class_ap(dup, gt_boxes, gt_classes, 3)
    assert aps[0] == pytest.approx(1.0) and aps[1] == pytest.approx(1.0) and np.isnan(aps[2])


def test_symbol_has_legacy_ssd_layout() -> None:
    graph = json.loads((EXAMPLE / "model-symbol.json").read_text())
    ops = {node["op"] for node in graph["nodes"]}
    names = {node["name"] for node in graph["nodes"]}
    assert {"_contrib_MultiBoxPrior", "SoftmaxActivation", "_contrib_MultiBoxDetection"} <= ops
    assert {"data", "multibox_loc_pred", "multibox_cls_pred", "multibox_anchors"} <= names
    assert (EXAMPLE / "model-0000.params").stat().st_size < 2_000_000


def test_trained_model_map(mx: ModuleType) -> None:
    sym, arg_params, aux_params = mx.model.load_checkpoint(str(EXAMPLE / "model"), 0)
    assert sym.list_outputs() == ["detection_output"]
    images, boxes, classes = shapes.make_validation_set()
    mod = mx.mod.Module(sym, data_names=["data"], label_names=None, context=mx.cpu())
    mod.bind(data_shapes=[("data", (len(images), 3, *images.shape[2:]))], for_training=False)
    mod.set_params(arg_params, aux_params)
    mean = np.array([123.0, 117.0, 104.0], dtype=np.float32).reshape(1, 3, 1, 1)
    mod.forward(mx.io.DataBatch([mx.nd.array(images.astype(np.float32) - mean)]), is_train=False)
    dets = mod.get_outputs()[0].asnumpy()
    assert dets.shape[0] == len(images) and dets.shape[2] == 6
    val_map = metrics.mean_average_precision(dets, boxes, classes, len(shapes.CLASS_NAMES))
    assert val_map >= MAP_FLOOR, val_map
    # confident detections: the best score per image is high on average
    assert float(np.mean(dets[:, :, 1].max(axis=1))) > 0.8
