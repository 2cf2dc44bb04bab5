"""Detections of a saturated model (exp overflowing to inf): rows with inf/NaN at the same positions, the same
class and finite parts equal within float32 noise agree; NaN/inf rows beside matched finite rows do not make the
verdict vacuous."""

from __future__ import annotations

import numpy as np
import pytest

from bridge.validation.detection.matching import Detections, compare_detections


def _dets(rows: list[list[float]]) -> Detections:
    a = np.asarray(rows, np.float64)
    return Detections(a[:, 2:6], a[:, 1], a[:, 0])


@pytest.mark.parametrize(("cand_row", "agrees"), [
    ([1, 0.9, -np.inf, 3.0000002, np.inf, 7.0], True),  # inf at the same places, finite parts 1 ulp apart
    ([1, 0.9, -np.inf, 3.5, np.inf, 7.0], False),  # a finite coordinate really differs
    ([1, 0.9, np.inf, 3.0, np.inf, 7.0], False),  # inf of the other sign
    ([2, 0.9, -np.inf, 3.0, np.inf, 7.0], False),  # another class
])
def test_nonfinite_rows_match_at_equal_positions(cand_row: list[float], agrees: bool) -> None:
    finite = [0, 0.5, 10.0, 10.0, 20.0, 20.0]
    ref = _dets([[1, 0.9, -np.inf, 3.0, np.inf, 7.0], finite])
    comp = compare_detections([ref], [_dets([cand_row, finite])])
    assert (comp.unmatched_reference == 0) is agrees
    assert not comp.vacuous  # a finite detection matched too: the comparison proves something


# a saturated decode clipped to the image: 2.4e-7 wide, full height (a random-weight MXNet SSD gives dozens)
THIN = [2, 1.0, 0.92470634, 0.0, 0.92470658, 1.0]
NORMAL = [0, 0.7, 0.1, 0.1, 0.4, 0.5]


@pytest.mark.parametrize(("dx", "agrees"), [
    (3e-7, True),  # float32 decode noise: disjoint from itself (IoU 0), corners 3e-7 apart: the same box
    (5e-5, True),  # still within the corner tolerance (1e-4 of the coordinate scale)
    (2e-3, False),  # moved beyond the tolerance: another box, however thin
])
def test_thin_boxes_match_within_the_corner_tolerance(dx: float, agrees: bool) -> None:
    moved = [*THIN[:2], THIN[2] + dx, THIN[3], THIN[4] + dx, THIN[5]]
    comp = compare_detections([_dets([THIN, NORMAL])], [_dets([moved, NORMAL])])
    assert (comp.unmatched_reference == 0 and comp.passed) is agrees, comp
    # a box with area moved by a fifth of its width fails as before
    shifted = [*NORMAL[:2], NORMAL[2] + 0.06, NORMAL[3], NORMAL[4] + 0.06, NORMAL[5]]
    assert not compare_detections([_dets([THIN, NORMAL])], [_dets([moved, shifted])]).passed
