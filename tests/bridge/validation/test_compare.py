"""compare_outputs: error figures, tolerance semantics, shape/dtype/missing-output failures."""

import numpy as np
import pytest

from bridge.config import Tolerance
from bridge.validation.compare import compare_outputs


def test_identical_outputs_pass_with_zero_error() -> None:
    a = {"y": np.arange(6, dtype=np.float32).reshape(2, 3)}
    comp = compare_outputs(a, {"y": a["y"].copy()})
    assert comp.passed
    assert comp.outputs[0].max_abs == 0.0 and comp.outputs[0].mismatch_fraction == 0.0


def test_figures_and_mismatch_fraction() -> None:
    ref = np.zeros(4, np.float32)
    cand = np.array([0, 0, 1e-5, 1.0], np.float32)
    comp = compare_outputs({"y": ref}, {"y": cand}, Tolerance(atol=1e-4, rtol=0))
    o = comp.outputs[0]
    assert not comp.passed and not o.passed
    assert o.max_abs == pytest.approx(1.0)
    assert o.mismatch_fraction == pytest.approx(0.25)


def test_per_output_tolerance_applies() -> None:
    ref = {"a": np.ones(3, np.float32), "b": np.ones(3, np.float32)}
    cand = {"a": ref["a"] + 0.01, "b": ref["b"] + 0.01}
    comp = compare_outputs(ref, cand, Tolerance(atol=1e-4, rtol=0, per_output={"b": (0.1, 0.0)}))
    assert [o.passed for o in comp.outputs] == [False, True]


def test_relative_tolerance_scales_with_reference() -> None:
    ref = np.array([1000.0], np.float32)
    assert compare_outputs({"y": ref}, {"y": ref + 0.5}, Tolerance(atol=0, rtol=1e-3)).passed
    assert not compare_outputs({"y": ref}, {"y": ref + 2.0}, Tolerance(atol=0, rtol=1e-3)).passed


@pytest.mark.parametrize(("ref", "cand", "note"), [
    (np.zeros((2, 3), np.float32), np.zeros((3, 2), np.float32), "shape"),
    (np.zeros(3, np.float32), np.zeros(3, np.int64), "dtype"),
])
def test_shape_and_dtype_mismatch_fail(ref: np.ndarray, cand: np.ndarray, note: str) -> None:
    comp = compare_outputs({"y": ref}, {"y": cand})
    assert not comp.passed and note in comp.outputs[0].note


def test_nan_only_on_one_side_fails_and_nan_on_both_passes() -> None:
    ref = np.array([np.nan, 1.0], np.float32)
    assert compare_outputs({"y": ref}, {"y": ref.copy()}).passed
    assert not compare_outputs({"y": ref}, {"y": np.array([0.0, 1.0], np.float32)}).passed


def test_missing_outputs_fail_on_either_side() -> None:
    comp = compare_outputs({"a": np.zeros(1), "b": np.zeros(1)}, {"a": np.zeros(1), "c": np.zeros(1)})
    notes = {o.name: o.note for o in comp.outputs}
    assert not comp.passed
    assert "missing from candidate" in notes["b"] and "missing from reference" in notes["c"]


def test_sequence_outputs_compare_element_by_element() -> None:
    """onnxruntime returns a sequence output as a list of tensors of different shapes."""
    from bridge.validation.compare import compare_outputs

    seq = [np.ones((2, 4), np.float32), np.zeros((2, 2), np.float32)]
    assert compare_outputs({"s": seq}, {"s": [a.copy() for a in seq]}).passed
    off = compare_outputs({"s": seq}, {"s": [seq[0] + 1, seq[1]]}).outputs[0]
    assert not off.passed and off.note.startswith("sequence of 2 elements; [0]")
    short = compare_outputs({"s": seq}, {"s": seq[:1]}).outputs[0]
    assert not short.passed and "sequence of 1 elements != reference 2" in short.note


@pytest.mark.parametrize(("scale", "vacuous"), [(1e-5, True), (1.6e-4, False), (1.0, False), (0.0, True)])
def test_an_output_no_larger_than_the_tolerance_is_a_vacuous_check(scale: float, vacuous: bool) -> None:
    """~1e-5 logits at atol 1e-4 pass whatever the candidate computes (all zeros here): flagged vacuous."""
    ref = {"y": (np.random.default_rng(0).standard_normal((3, 10)) * scale).astype(np.float32)}
    cand = {"y": np.zeros((3, 10), np.float32)}
    cmp = compare_outputs(ref, cand, Tolerance(atol=1e-4, rtol=1e-3))
    out = cmp.outputs[0]
    assert out.vacuous is vacuous and cmp.vacuous is vacuous
    if vacuous:
        assert out.passed and "within the tolerance" in out.vacuous_reason
