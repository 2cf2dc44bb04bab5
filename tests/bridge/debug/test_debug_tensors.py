"""Statistics, tensor errors and error histograms of bridge.debug.tensors."""

from __future__ import annotations

import numpy as np
import pytest

from bridge.config import Tolerance
from bridge.debug.tensors import error_histogram, stats_of, tensor_error


@pytest.mark.parametrize(("values", "nan", "inf", "lo", "hi"), [
    ([1.0, 2.0, 3.0], 0, 0, 1.0, 3.0),
    ([1.0, np.nan, -np.inf, 5.0], 1, 1, 1.0, 5.0),
    ([np.nan, np.nan], 2, 0, None, None),
])
def test_stats_count_nonfinite_and_summarise_finite_values(values: list[float], nan: int, inf: int,
                                                           lo: float | None, hi: float | None) -> None:
    s = stats_of(np.asarray(values, np.float32))
    assert (s.nan, s.inf, s.min, s.max) == (nan, inf, lo, hi)
    assert s.shape == [len(values)] and s.dtype == "float32"


@pytest.mark.parametrize(("delta", "agree"), [(0.0, True), (5e-5, True), (1e-2, False)])
def test_tensor_error_uses_validation_tolerance(delta: float, agree: bool) -> None:
    ref = np.linspace(-1, 1, 50, dtype=np.float32)
    err = tensor_error(ref, ref + np.float32(delta), Tolerance(1e-4, 1e-3))
    assert err.agree is agree
    assert err.max_abs == pytest.approx(delta, abs=1e-7)


def test_tensor_error_reports_shape_mismatch() -> None:
    err = tensor_error(np.zeros((2, 3)), np.zeros((4,)), Tolerance())
    assert not err.agree and "shape" in err.note


def test_error_histogram_counts_every_differing_element() -> None:
    ref = np.zeros(100, np.float32)
    cand = ref.copy()
    cand[:10] = np.logspace(-6, 0, 10)
    hist = error_histogram(ref, cand)
    assert hist is not None
    assert sum(hist["counts"]) == 10 and hist["exact"] == 90 and hist["nonfinite"] == 0
    assert hist["edges"][0] == pytest.approx(1e-6, rel=1e-3) and hist["edges"][-1] == pytest.approx(1.0, rel=1e-3)
