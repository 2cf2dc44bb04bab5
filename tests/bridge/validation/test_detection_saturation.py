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
