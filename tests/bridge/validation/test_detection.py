"""Detection-aware comparison (match by class and IoU, greedy by score) and VOC mAP@0.5."""

from __future__ import annotations

import numpy as np
import pytest

from bridge.validation.detection.matching import (
    Detections,
    compare_detections,
    from_indices,
    from_mxnet,
    from_padded,
    iou_matrix,
    mean_average_precision,
    voc_ap,
)

BOXES = np.array([[0.1, 0.1, 0.4, 0.4], [0.5, 0.5, 0.9, 0.9], [0.1, 0.1, 0.4, 0.42]])
DETS = Detections(BOXES, np.array([0.9, 0.8, 0.7]), np.array([0, 1, 1]))


def _perturbed(**changes: np.ndarray) -> Detections:
    return Detections(changes.get("boxes", BOXES), changes.get("scores", DETS.scores), changes.get("classes", DETS.classes))


def test_identical_detections_in_another_order_pass() -> None:
    order = [2, 0, 1]
    cmp = compare_detections([DETS], [Detections(BOXES[order], DETS.scores[order], DETS.classes[order])])
    assert cmp.passed and cmp.matched == 3 and cmp.min_iou == 1.0 and cmp.max_score_diff == 0.0
    assert "PASS" in cmp.summary() and cmp.to_dict()["passed"]


@pytest.mark.parametrize(("cand", "what"), [
    (_perturbed(scores=np.array([0.9, 0.8, 0.7 + 1e-4])), "score"),
    (_perturbed(boxes=BOXES + np.array([0, 0, 0.01, 0])), "iou"),
    (_perturbed(classes=np.array([0, 1, 2])), "unmatched"),
    (Detections(BOXES[:2], DETS.scores[:2], DETS.classes[:2]), "unmatched"),
])
def test_differences_fail_with_the_reason_in_the_figures(cand: Detections, what: str) -> None:
    cmp = compare_detections([DETS], [cand])
    assert not cmp.passed
    if what == "score":
        assert cmp.max_score_diff == pytest.approx(1e-4)
    elif what == "iou":
        assert cmp.min_iou < 0.999 and cmp.unmatched_reference == 0
    else:
        assert cmp.unmatched_reference == 1


def test_tolerances_are_configurable() -> None:
    cand = _perturbed(scores=np.array([0.9, 0.8, 0.7 + 1e-4]), boxes=BOXES + np.array([0, 0, 0.001, 0]))
    assert compare_detections([DETS], [cand], iou=0.99, score_tol=1e-3).passed


def test_layout_parsers_agree() -> None:
    rows = np.full((1, 4, 6), -1, np.float32)
    rows[0, :3] = np.concatenate([DETS.classes[:, None], DETS.scores[:, None], BOXES], 1)
    rows[0, 3, 1:] = [0.5, 0, 0, 1, 1]  # suppressed row: class -1, score/box left in place (MXNet)
    mx = from_mxnet(rows)
    padded = from_padded(np.concatenate([BOXES, np.zeros((1, 4))])[None], np.r_[DETS.scores, 0][None],
                         np.r_[DETS.classes, 0][None], np.array([3]))
    scores = np.zeros((1, 2, 3))
    scores[0, DETS.classes, [0, 1, 2]] = DETS.scores
    indexed = from_indices(np.array([[0, 0, 0], [0, 1, 1], [0, 1, 2]]), BOXES[None], scores)
    for other in (padded, indexed):
        assert compare_detections(mx, other).passed


def test_iou_matrix() -> None:
    m = iou_matrix(BOXES, BOXES)
    assert np.allclose(np.diag(m), 1) and m[0, 1] == 0 and 0.9 < m[0, 2] < 1
    assert iou_matrix(np.zeros((0, 4)), BOXES).shape == (0, 3)


def test_voc_ap_all_points() -> None:
    # precision 1, 0.5, 2/3 at recall 0.5, 0.5, 1 -> envelope 1 on [0, .5], 2/3 on [.5, 1]
    assert voc_ap(np.array([0.5, 0.5, 1.0]), np.array([1.0, 0.5, 2 / 3])) == pytest.approx(0.5 + 1 / 3)


def test_map_at_05() -> None:
    gt = [np.array([[0, 0.1, 0.1, 0.4, 0.4], [1, 0.5, 0.5, 0.9, 0.9]]), np.array([[0, 0.2, 0.2, 0.6, 0.6]])]
    perfect = [np.c_[g[:, :1], np.full((len(g), 1), 0.9), g[:, 1:]] for g in gt]
    assert mean_average_precision(perfect, gt).map == pytest.approx(1.0)
    # image 0: a false positive of class 0 ranked above the hit; image 1: class 0 missed (a -1 row only)
    dets = [np.array([[0, 0.95, 0.6, 0.0, 0.7, 0.1], [0, 0.9, 0.1, 0.1, 0.4, 0.4], [1, 0.8, 0.5, 0.5, 0.9, 0.9]]),
            np.array([[-1, 0.99, 0.2, 0.2, 0.6, 0.6]])]
    result = mean_average_precision(dets, gt)
    assert result.ap[1] == pytest.approx(1.0)
    assert result.ap[0] == pytest.approx(0.25)  # precision 1/2 at recall 1/2
    assert result.map == pytest.approx(0.625)
    # a difficult ground-truth box neither counts as a miss nor makes its detection a false positive
    hard = mean_average_precision(dets, gt, difficult=[np.array([False, False]), np.array([True])])
    assert hard.ap[0] == pytest.approx(0.5)


def test_identical_degenerate_boxes_match() -> None:
    """Clipping leaves zero-width boxes (x1 == x2 == 0); the same one on both sides must still match."""
    from bridge.validation.detection.matching import iou_matrix

    flat = np.array([[0.0, 0.0, 0.0, 0.5]])
    np.testing.assert_array_equal(iou_matrix(flat, flat), [[1.0]])
    np.testing.assert_array_equal(iou_matrix(flat, flat + np.array([0, 0, 0, 0.1])), [[0.0]])
