"""A candidate that keeps at most K detections per image (boxes-scores-classes, ``--max-detections K``) is
compared with the reference's K best rows (score descending, stable), not with every reference row; a
reference row tied with the K-th score that the candidate swapped in is a tie, not a difference."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from bridge.validation.compare import compare_outputs

REPO = Path(__file__).resolve().parents[3]
SSD = REPO / "examples" / "mxnet_ssd"


def _reference(scores: list[float]) -> np.ndarray:
    """MXNet rows (class, score, x1, y1, x2, y2), one disjoint box per row, plus one -1 padding row."""
    n = len(scores)
    rows = np.full((1, n + 1, 6), -1, np.float32)
    for i, s in enumerate(scores):
        rows[0, i] = [i % 3, s, 2 * i, 0, 2 * i + 1, 1]
    return rows


def _padded(ref: np.ndarray, take: list[int], k: int) -> dict[str, np.ndarray]:
    rows = ref[0, take]
    boxes, scores, classes = np.zeros((1, k, 4), np.float32), np.zeros((1, k), np.float32), np.zeros((1, k), np.int64)
    boxes[0, : len(take)], scores[0, : len(take)], classes[0, : len(take)] = rows[:, 2:6], rows[:, 1], rows[:, 0]
    return {"det_boxes": boxes, "det_scores": scores, "det_classes": classes,
            "det_num_detections": np.array([len(take)], np.int64)}


@pytest.mark.parametrize(("scores", "take", "k"), [
    ([0.9, 0.2, 0.8, 0.5, 0.7], [0, 2, 4], 3),  # the three best, reference rows not in score order
    ([0.9, 0.6, 0.6, 0.6, 0.1], [0, 2, 1], 3),  # tie at the K-th score: the candidate kept the other tied row
    ([0.9, 0.2, 0.8], [0, 2, 1], 5),  # fewer detections than K: nothing is cut
])
def test_reference_is_cut_to_the_candidates_k_best(scores: list[float], take: list[int], k: int) -> None:
    ref = _reference(scores)
    comp = compare_outputs({"det": ref}, _padded(ref, take, k), detection_outputs={"det": "boxes-scores-classes"})
    assert comp.passed, comp.outputs[0].note


def test_a_missing_best_row_still_fails() -> None:
    ref = _reference([0.9, 0.2, 0.8, 0.5, 0.7])
    comp = compare_outputs({"det": ref}, _padded(ref, [0, 2, 3], 3), detection_outputs={"det": "boxes-scores-classes"})
    assert not comp.passed


@pytest.mark.skipif(importlib.util.find_spec("mxnet") is None, reason="mxnet not installed")
@pytest.mark.parametrize("k", [2, 3])
def test_bundled_ssd_with_max_detections_validates(k: int, tmp_path: Path) -> None:
    import bridge

    result = bridge.convert(str(SSD / "model-symbol.json"), tmp_path / "ssd.onnx", inputs=["data:4,3,64,64"],
                            weights=SSD / "model-0000.params", validate=["onnxruntime"], feeds=SSD / "sample_inputs.npz",
                            detection_format="boxes-scores-classes", max_detections=k)
    assert result.passed and not result.vacuous
