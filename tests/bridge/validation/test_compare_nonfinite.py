"""compare_outputs judges NaN/inf instead of skipping them, flags vacuous verdicts, never leaks numpy
warnings, and reports relative error as undefined (None) where the reference is 0."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from bridge.config import Tolerance
from bridge.validation.compare import Comparison, OutputComparison, compare_outputs, insensitive_outputs

NAN, INF = np.nan, np.inf


DEFAULT = Tolerance()


def _one(ref: np.ndarray, cand: np.ndarray, tol: Tolerance = DEFAULT) -> tuple[Comparison, OutputComparison]:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any numpy RuntimeWarning fails the test
        comp = compare_outputs({"y": np.asarray(ref)}, {"y": np.asarray(cand)}, tol)
    json.dumps(comp.to_dict(), allow_nan=False)  # the report stays valid JSON: no inf/NaN figures
    return comp, comp.outputs[0]


@pytest.mark.parametrize(("ref", "cand", "passed", "nonfinite_bad"), [
    ([-INF, 1.0], [-INF, 1.0], True, 0),   # -inf vs -inf was reported as a mismatch
    ([INF, -INF, 2.0], [INF, -INF, 2.0], True, 0),
    ([INF, 1.0], [-INF, 1.0], False, 1),   # opposite infinities
    ([INF, 1.0], [NAN, 1.0], False, 1),
    ([1.0, 2.0], [NAN, 2.0], False, 1),    # NaN in the candidate only
    ([NAN, 2.0], [1.0, 2.0], False, 1),    # NaN in the reference only
    ([1.0, 2.0], [INF, 2.0], False, 1),
])
def test_non_finite_values_are_judged(ref: list[float], cand: list[float], passed: bool, nonfinite_bad: int) -> None:
    comp, o = _one(np.array(ref, np.float32), np.array(cand, np.float32))
    assert comp.passed is passed and o.passed is passed
    assert o.nonfinite_mismatch == nonfinite_bad
    assert o.max_abs == 0.0  # the finite positions agree; the failure is the non-finite one
    if not passed:
        assert o.mismatch_fraction == pytest.approx(nonfinite_bad / len(ref)) and o.note.startswith("mismatch: 1 positions")


@pytest.mark.parametrize(("ref", "cand", "reason"), [
    (np.full((2, 3), NAN, np.float32), np.full((2, 3), NAN, np.float32), "entirely NaN/inf"),  # NaN weights
    (np.full(4, INF, np.float32), np.full(4, INF, np.float32), "entirely NaN/inf"),
    (np.array([NAN, 1.0], np.float32), np.array([NAN, 1.0], np.float32), "both sides have NaN at 1 positions"),
    (np.zeros((0, 5), np.float32), np.zeros((0, 5), np.float32), "0-sized dimension"),
])
def test_vacuous_verdicts_pass_but_are_flagged(ref: np.ndarray, cand: np.ndarray, reason: str) -> None:
    comp, o = _one(ref, cand)
    assert comp.passed and o.vacuous and reason in o.vacuous_reason
    assert comp.vacuous and any(reason in r for r in comp.vacuous_reasons)
    data = comp.to_dict()
    assert data["vacuous"] is True and data["outputs"][0]["vacuous"] is True
    assert reason in data["outputs"][0]["vacuous_reason"]
    assert "vacuous" in comp.summary()


def test_candidate_all_nan_fails_as_a_named_mismatch() -> None:
    """NaN against finite values is a difference, not a verdict that proves little."""
    comp, o = _one(np.ones(3, np.float32), np.full(3, NAN, np.float32))
    assert not comp.passed and not o.vacuous and not comp.vacuous
    assert o.note == "mismatch: 3 positions NaN in the candidate where the reference is finite"


@pytest.mark.parametrize("nan_positions", [[0], [0, 2], [0, 1, 2]])
def test_nan_in_the_reference_against_finite_values_is_a_mismatch_not_a_vacuous_verdict(nan_positions: list[int]) -> None:
    """MXNet's 3-D average pooling gives NaN for an empty window where a translation may give 0: the verdict
    FAILs on those positions, names them, and does not call itself vacuous (the NaN positions are not
    positions that prove nothing: they are the difference)."""
    ref = np.array([1.0, 2.0, 3.0], np.float32)
    ref[nan_positions] = NAN
    cand = np.nan_to_num(ref)
    comp, o = _one(ref, cand)
    assert not comp.passed and not comp.vacuous and not o.vacuous and o.vacuous_reason == ""
    n = len(nan_positions)
    assert o.note.startswith(f"mismatch: {n} positions NaN in the reference where the candidate is finite")
    assert ("over the positions finite on both sides" in o.note) is (n < 3)
    summary = comp.summary()
    assert "FAIL (y)" in summary and "vacuous" not in summary
    assert f"{n} positions NaN/inf vs finite (mismatches)" in summary


def test_nan_where_both_sides_have_it_stays_vacuous_beside_a_mismatch() -> None:
    comp, o = _one(np.array([NAN, NAN, 1.0], np.float32), np.array([NAN, 0.0, 1.0], np.float32))
    assert not comp.passed and o.nonfinite_mismatch == 1
    assert "both sides have NaN at 1 positions" in o.vacuous_reason
    assert o.note.startswith("mismatch: 1 positions NaN in the reference where the candidate is finite")


def test_ordinary_outputs_are_not_vacuous() -> None:
    comp, o = _one(np.array([1.0, -INF, 3.0]), np.array([1.0, -INF, 3.0]))  # a partial -inf mask is a real value
    assert comp.passed and not comp.vacuous and not o.vacuous and comp.to_dict()["vacuous_reasons"] == []


def test_huge_error_with_tight_tolerance_fails() -> None:
    """The symptom of --atol nan: a 1.2e4 error must fail with any valid tolerance."""
    _, o = _one(np.zeros(3, np.float32), np.array([0, 0, 1.2e4], np.float32), Tolerance(atol=1e-4, rtol=0))
    assert not o.passed and o.max_abs == pytest.approx(1.2e4)


@pytest.mark.parametrize(("ref", "cand", "max_rel"), [
    ([0.0, 0.0], [1.0, 0.0], None),       # error only where the reference is 0: undefined, not inf
    ([0.0, 2.0], [1.0, 2.0], 0.0),        # positions with reference 0 are left out (atol judges them)
    ([0.0, 2.0], [1.0, 3.0], 0.5),        # defined where the reference is not 0
    ([0.0, 0.0], [0.0, 0.0], 0.0),        # no error anywhere
    ([4.0, -2.0], [5.0, -2.5], 0.25),
])
def test_relative_error_is_undefined_where_the_reference_is_zero(ref: list[float], cand: list[float],
                                                                 max_rel: float | None) -> None:
    _, o = _one(np.array(ref), np.array(cand), Tolerance(atol=10, rtol=0))
    assert o.max_rel == (pytest.approx(max_rel) if max_rel is not None else None)


def test_no_overflow_warning_for_huge_float64_values() -> None:
    ref = np.array([1e-310, -1.7e308, 0.0])
    cand = np.array([1e300, 1.7e308, 1e-300])
    _, o = _one(ref, cand)  # would warn "overflow in divide" / "overflow in subtract"
    assert not o.passed


def test_insensitive_outputs_names_outputs_that_ignore_the_input() -> None:
    a = {"logits": np.array([1.0, 2.0]), "const": np.array([NAN, 3.0]), "ids": np.array([1, 2]),
         "empty": np.zeros((0, 2)), "only_a": np.ones(1)}
    b = {"logits": np.array([1.0, 2.5]), "const": np.array([NAN, 3.0]), "ids": np.array([1, 2]),
         "empty": np.zeros((0, 2))}
    assert insensitive_outputs(a, b) == ["const", "ids"]


def test_mark_vacuous_flags_the_entry_covering_an_output() -> None:
    comp = compare_outputs({"y": np.ones(2), "z": np.ones(2)}, {"y": np.ones(2), "z": np.ones(2)})
    assert not comp.vacuous
    assert comp.mark_vacuous(["z"], "the reference does not change with the input") == ["z"]
    assert comp.passed and comp.vacuous
    assert comp.vacuous_reasons == ["z: the reference does not change with the input"]


def test_summary_counts_nan_on_one_side() -> None:
    """MXNet gives NaN where onnxruntime gives a number: the finite error is 0, the summary says why it fails."""
    comp, _ = _one(np.array([NAN, 1.0, NAN], np.float32), np.array([0.5, 1.0, 2.0], np.float32))
    assert not comp.passed
    assert "max abs err 0 over finite positions, 2 positions NaN/inf vs finite (mismatches)" in comp.summary()


def test_inf_of_another_sign_is_named_apart_from_nan() -> None:
    _, o = _one(np.array([INF, NAN, 1.0]), np.array([-INF, 1.0, 1.0]))
    assert o.note.startswith("mismatch: 1 positions NaN in the reference where the candidate is finite, "
                             "1 positions inf on one side only or NaN/inf of another kind")


def test_vacuous_warnings_cover_passing_verdicts_and_advise_feeds_only_when_inputs_were_generated() -> None:
    from bridge.validation.run import vacuous_warnings

    vacuous_pass, _ = _one(np.full(3, NAN, np.float32), np.full(3, NAN, np.float32))
    vacuous_fail, _ = _one(np.array([NAN, NAN, 1.0], np.float32), np.array([NAN, 0.0, 1.0], np.float32))
    assert vacuous_fail.vacuous and not vacuous_fail.passed
    generated = vacuous_warnings([vacuous_pass, vacuous_fail])
    assert len(generated) == 1 and "validate on real inputs (--feeds FILE.npz)" in generated[0]
    given = vacuous_warnings([vacuous_pass, vacuous_fail], feeds_given=True)
    assert len(given) == 1 and "--feeds" not in given[0] and given[0].endswith("use --strict to fail on this")
