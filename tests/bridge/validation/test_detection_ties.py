"""Tie-aware, non-finite-aware detection comparison: an NMS order difference between tied scores is
reported as tie-ambiguous (with its rows) and passes when every untied detection matches; a real
difference still fails; NaN/inf detections are judged; empty or NaN references are vacuous."""

from __future__ import annotations

import numpy as np
import pytest

from bridge.validation.detection.matching import Detections, compare_detections, from_mxnet

# three well separated objects (pairwise IoU 0), distinct scores
BASE_BOXES = np.array([[0.0, 0.0, 10, 10], [20, 20, 30, 30], [40, 0, 50, 10]])
BASE_SCORES = np.array([0.9, 0.8, 0.7])
BASE_CLASSES = np.array([0, 1, 0])
# two overlapping candidates of class 2 with the same float32 score: NMS (IoU > 0.1) keeps one of them,
# which one depends on the runtime's sort order. IoU(A, B) = 25/175 ~ 0.14 < 0.5. These outputs list no
# candidate they dropped (torchvision-like), so the NMS threshold read from the graph is the tie evidence.
A = np.array([60.0, 60, 70, 70])
B = np.array([65.0, 65, 75, 75])
TIED = float(np.float32(0.6))
NMS_IOU = 0.1


def _dets(boxes: list[np.ndarray] | np.ndarray, scores: list[float] | np.ndarray, classes: list[int] | np.ndarray
          ) -> Detections:
    return Detections(np.asarray(boxes, np.float64).reshape(-1, 4), np.asarray(scores, np.float64),
                      np.asarray(classes, np.int64))


def _with(extra_boxes: list[np.ndarray], extra_scores: list[float], extra_classes: list[int]) -> Detections:
    return _dets(np.concatenate([BASE_BOXES, np.reshape(extra_boxes, (-1, 4))]),
                 np.concatenate([BASE_SCORES, extra_scores]), np.concatenate([BASE_CLASSES, extra_classes]))


def test_tied_candidates_kept_in_another_order_are_tie_ambiguous_and_pass() -> None:
    ref = _with([A], [TIED], [2])
    # the candidate runtime kept B instead of A; its score differs by one float32 ulp of rounding
    cand = _with([B], [float(np.nextafter(np.float32(TIED), np.float32(1)))], [2])
    cmp = compare_detections([ref], [cand], nms_iou=NMS_IOU)
    assert cmp.passed and cmp.tie_ambiguous == 2 and cmp.mismatched == 0
    assert cmp.unmatched_reference == 1 and cmp.unmatched_candidate == 1  # the figures stay honest
    rows = {(r.side, r.row) for r in cmp.tied_rows}
    assert rows == {("reference", 3), ("candidate", 3)}
    assert cmp.tied_rows[0].box in ([60.0, 60.0, 70.0, 70.0], [65.0, 65.0, 75.0, 75.0])
    assert "tie-ambiguous" in cmp.summary() and cmp.to_dict()["tied_rows"]
    assert not cmp.vacuous  # three clean matches vouch for the rest


def test_ties_visible_on_one_side_excuse_a_cascade() -> None:
    """Three tied boxes A, B, C (A-B and B-C overlap): one order keeps A and C, the other only B."""
    c = np.array([70.0, 70, 80, 80])
    ref = _with([A, c], [TIED, TIED], [2, 2])
    cand = _with([B], [TIED], [2])
    cmp = compare_detections([ref], [cand], nms_iou=NMS_IOU)
    assert cmp.passed and cmp.tie_ambiguous == 3


def test_mxnet_suppressed_rows_corroborate_a_tie_between_overlapping_boxes() -> None:
    """A and B' overlap with IoU 0.68 (matched as a pair, IoU < 0.999): alone that looks like a moved box,
    but MXNet's output keeps B' as a suppressed row (class -1) with the tied score."""
    b2 = np.array([61.0, 61, 71, 71])

    def rows(kept: np.ndarray, suppressed: np.ndarray | None) -> np.ndarray:
        out = [[c, s, *b] for b, s, c in zip(BASE_BOXES, BASE_SCORES, BASE_CLASSES, strict=True)]
        out.append([2, TIED, *kept])
        out.append([-1, TIED, *suppressed] if suppressed is not None else [-1, -1, -1, -1, -1, -1])
        return np.array([out], np.float32)

    ref = from_mxnet(rows(A, b2))
    cand_same = from_mxnet(rows(b2, None))  # candidate kept B' and shows nothing of A
    assert compare_detections(ref, cand_same).passed
    cand_no_evidence = from_mxnet(rows(b2, None))
    ref_no_evidence = from_mxnet(rows(A, None))
    result = compare_detections(ref_no_evidence, cand_no_evidence)
    assert not result.passed and result.failed_pairs == 1  # nothing shows the tie: a box moved


WITH_A = _with([A], [TIED], [2])
BASE = _dets(BASE_BOXES, BASE_SCORES, BASE_CLASSES)


@pytest.mark.parametrize(("ref", "cand", "why"), [
    (WITH_A, _with([A], [0.61], [2]), "score off beyond tolerance"),
    (WITH_A, _with([B], [0.55], [2]), "untied replacement"),
    (WITH_A, BASE, "detection missing"),
    (WITH_A, _with([A, B], [TIED, 0.3], [2, 2]), "extra detection"),
    (BASE, _dets(BASE_BOXES + np.array([0, 0, 4, 0]), BASE_SCORES, BASE_CLASSES), "boxes moved, scores unchanged"),
    (BASE, _dets(BASE_BOXES, BASE_SCORES, [0, 1, 1]), "label changed, same box and score"),
    (BASE, _dets(BASE_BOXES[:, [1, 0, 3, 2]] * [1, 2, 1, 2], BASE_SCORES, BASE_CLASSES), "every box elsewhere"),
])
def test_real_differences_still_fail(ref: Detections, cand: Detections, why: str) -> None:
    cmp = compare_detections([ref], [cand], score_tol=1e-4, nms_iou=NMS_IOU)
    assert not cmp.passed, why
    assert cmp.mismatched >= 1 and cmp.mismatched_rows


def test_a_real_difference_next_to_a_tie_fails_and_the_tie_is_still_reported() -> None:
    ref = _with([A], [TIED], [2])
    cand = _dets(np.concatenate([BASE_BOXES[:2], [B]]), [0.9, 0.8, TIED], [0, 1, 2])  # lost the 0.7 detection
    cmp = compare_detections([ref], [cand], nms_iou=NMS_IOU)
    assert not cmp.passed and cmp.tie_ambiguous == 2 and cmp.mismatched == 1
    assert [(r.side, r.row) for r in cmp.mismatched_rows] == [("reference", 2)]


def test_ties_alone_cannot_pass_a_comparison_without_clean_matches() -> None:
    cmp = compare_detections([_dets([A], [TIED], [2])], [_dets([B], [TIED], [2])], nms_iou=NMS_IOU)
    assert not cmp.passed and cmp.tie_ambiguous == 0


def test_empty_on_both_sides_is_vacuous() -> None:
    empty = _dets(np.zeros((0, 4)), [], [])
    cmp = compare_detections([empty, empty], [empty, empty])
    assert cmp.passed and cmp.vacuous and "no detections" in cmp.vacuous_reason


@pytest.mark.parametrize(("ref_box", "cand_box", "passed"), [
    ([np.nan, 0, 1, 1], [np.nan, 0, 1, 1], True),    # the same NaN detection on both sides matches
    ([np.inf, 0, 1, 1], [np.inf, 0, 1, 1], True),
    ([np.nan, 0, 1, 1], [0.0, 0, 1, 1], False),       # NaN on one side only
    ([0.0, 0, 1, 1], [np.nan, 0, 1, 1], False),
    ([-np.inf, 0, 1, 1], [np.inf, 0, 1, 1], False),
])
def test_non_finite_detections_are_judged(ref_box: list[float], cand_box: list[float], passed: bool) -> None:
    ref = _with([np.array(ref_box)], [0.5], [3])
    cand = _with([np.array(cand_box)], [0.5], [3])
    cmp = compare_detections([ref], [cand], nms_iou=NMS_IOU)
    assert cmp.passed is passed
    # the finite base detections matched: the verdict is not vacuous; NaN/inf rows alone would be
    assert not cmp.vacuous
    reference_has_nonfinite = not np.isfinite(ref_box).all()
    if reference_has_nonfinite:
        alone = Detections(np.array([ref_box]), np.array([0.5]), np.array([3]))
        only = compare_detections([alone], [alone])
        assert only.vacuous and "NaN/inf" in only.vacuous_reason


def test_nan_scores_of_a_nan_model_are_not_dropped() -> None:
    """MXNet rows of a model with NaN weights: class and score NaN. Not 'no detections', not PASS silently."""
    rows = np.full((1, 4, 6), np.nan, np.float32)
    cmp = compare_detections(from_mxnet(rows), from_mxnet(rows.copy()))
    assert cmp.reference_count == 4 and cmp.vacuous and "NaN/inf" in cmp.vacuous_reason


def test_score_tolerance_has_a_relative_part() -> None:
    ref = _dets(BASE_BOXES, [900.0, 800.0, 700.0], BASE_CLASSES)
    cand = _dets(BASE_BOXES, [900.5, 800.0, 700.0], BASE_CLASSES)
    assert not compare_detections([ref], [cand], score_tol=1e-4).passed
    assert compare_detections([ref], [cand], score_tol=1e-4, score_rtol=1e-3).passed


@pytest.mark.parametrize(("gap", "excused"), [(2e-6, True), (7.9e-6, True), (2e-5, False), (1e-3, False)])
def test_near_ties_closer_than_the_measured_score_error_are_tie_ambiguous(gap: float, excused: bool) -> None:
    """The clean matches disagree by up to 8e-6 in score (the runtimes' own error): which of two overlapping
    candidates scored within that of each other NMS keeps is then a coin toss, not a conversion error."""
    ref = _with([A], [TIED], [2])
    cand = _with([B], [TIED + gap], [2])
    cand.scores[:3] += np.array([8e-6, -5e-6, 2e-6])  # the measured score error: 8e-6 (clean: <= 1e-5)
    cmp = compare_detections([ref], [cand], nms_iou=NMS_IOU)
    assert cmp.tie_margin == pytest.approx(8e-6)
    assert cmp.passed is excused
    assert cmp.tie_ambiguous == (2 if excused else 0) and cmp.mismatched == (0 if excused else 2)


@pytest.mark.parametrize(("rival", "excused"), [(B, True), (np.array([90.0, 90, 99, 99]), False)])
def test_a_near_tied_cascade_is_tie_ambiguous_only_through_an_overlapping_rival(rival: np.ndarray, excused: bool) -> None:
    """The reference keeps A and C, the candidate only a rival scored 5e-6 above them (under the 8e-6 score
    error): the rival overlapping both past the NMS threshold explains both (NMS choice and its cascade); a
    rival far from them explains neither - no side lists anything, and a swap of boxes that do not overlap at
    the bottom of such outputs is the picture of a moved box."""
    c = np.array([70.0, 70, 80, 80])
    ref = _with([A, c], [TIED, TIED], [2, 2])
    cand = _with([rival], [TIED + 5e-6], [2])
    cand.scores[:3] += np.array([8e-6, -5e-6, 2e-6])
    cmp = compare_detections([ref], [cand], nms_iou=NMS_IOU)
    assert cmp.passed is excused and cmp.tie_ambiguous == (3 if excused else 0)


def test_a_rival_kept_on_both_sides_excuses_nothing() -> None:
    """The reference keeps A and an overlapping rival B of the same score, the candidate only B: B did not
    suppress A in the reference, so it cannot have in the candidate - A is missing, not tie-ambiguous."""
    ref = _with([A, B], [TIED, TIED], [2, 2])
    cand = _with([B], [TIED], [2])
    cmp = compare_detections([ref], [cand], nms_iou=NMS_IOU)
    assert not cmp.passed and cmp.mismatched == 1 and cmp.tie_ambiguous == 0


def _mxnet_rows(kept: np.ndarray, kept_classes: np.ndarray, shown: np.ndarray, score: float) -> np.ndarray:
    """MXNet [1, N, 6] rows: the kept boxes with their classes, then ``shown`` as suppressed (class -1), all
    scored ``score``."""
    rows = [[c, score, *b] for b, c in zip(kept, kept_classes, strict=True)]
    rows += [[-1, score, *b] for b in shown]
    return np.array([rows], np.float32)


def test_a_candidate_dropping_most_equally_scored_detections_fails() -> None:
    """A saturated (random-weight) SSD scores every box 1.0; MXNet keeps 60 of them, the candidate keeps 3 and
    shows the rest as suppressed. Equal scores everywhere are no evidence of a tie swap: nothing the candidate
    kept could have suppressed them (zero-area boxes, or boxes apart from the kept ones), so it fails."""
    rng = np.random.default_rng(0)
    low = rng.uniform(0, 0.9, (60, 2))
    boxes = np.concatenate([low, low + rng.uniform(0.01, 0.05, (60, 2))], 1)
    boxes[::2, 3] = boxes[::2, 1]  # half of them clipped flat: zero area
    classes = np.arange(60) % 3
    ref = from_mxnet(_mxnet_rows(boxes, classes, np.zeros((0, 4)), 1.0))
    kept = np.flatnonzero(np.isin(np.arange(60), [0, 1, 2]))
    cand = from_mxnet(_mxnet_rows(boxes[kept], classes[kept], np.delete(boxes, kept, axis=0), 1.0))
    cmp = compare_detections(ref, cand)
    assert not cmp.passed
    assert cmp.matched == 3 and cmp.unmatched_reference == 57 and cmp.mismatched == 57 and cmp.tie_ambiguous == 0


def test_zero_area_boxes_are_never_rivals() -> None:
    """A zero-area box overlaps nothing: kept by the candidate alone, it cannot have suppressed anything (nor be
    paired at a cut: it overlaps nothing past the threshold and no side lists it)."""
    flat = np.array([60.0, 65, 75, 65])  # zero height across A
    ref = _with([A, np.array([90.0, 90, 99, 99])], [TIED, TIED], [2, 2])
    cand = _with([flat], [TIED], [2])
    cmp = compare_detections([ref], [cand], nms_iou=NMS_IOU)
    assert not cmp.passed and cmp.tie_ambiguous == 0 and cmp.mismatched == 3


@pytest.mark.parametrize(("shift", "clean"), [(2e-5, True), (1.2e-4, False)])
def test_a_thin_box_moved_by_float_noise_is_the_same_box(shift: float, clean: bool) -> None:
    """A box 4.5e-4 wide (normalised coordinates) whose corners moved by 2e-5 - float32 noise of a saturated
    decode - has IoU ~0.93 but is the same detection; moved by 1.2e-4 (IoU 0.58) it is not."""
    thin = np.array([[0.3471, 0.0, 0.3476, 1.0], [0.1, 0.1, 0.3, 0.3]])
    ref = _dets(thin, [0.77, 0.5], [15, 2])
    cand = _dets(thin + np.array([[shift, 0, shift, 0], [0, 0, 0, 0]]), [0.77, 0.5], [15, 2])
    cmp = compare_detections([ref], [cand], nms_iou=NMS_IOU)
    assert cmp.matched == 2 and cmp.passed is clean and cmp.failed_pairs == (0 if clean else 1)
    assert cmp.min_iou < 0.999 or not clean
