"""The scale rule (bridge.validation.tolerance): what float32 summation order changes passes, a wrong value FAILs.

Sums computed here in float32 in two orders (a plain forward loop and the BLAS sgemm) stand for two correct
runtimes; near-zero elements of an output reaching ~1e3 then differ by more than ``atol`` and FAIL
elementwise, and pass the scale rule. The wrong candidates of issue 35 (a small wrong scale, a bias off by a
fraction of the range on one channel, one element off by 1% of the range, signs flipped near zero, a probability
column next to pixel columns) FAIL it. The end-to-end routes (PyTorch vs onnxruntime, TFLite vs onnxruntime) are
in ``test_tolerance_routes.py``; mutants of converted models in ``mutation/`` (``scale_rule`` operators).
The float16 default (below "float16 outputs"): float16 results computed two correct ways pass it, wrong float16
candidates FAIL it, float32 outputs are judged as before; MXNet end to end in
``tests/adapters/mxnet/test_float16_tolerance.py``.
"""

from __future__ import annotations

import io
import itertools
from typing import Any

import numpy as np
import pytest
from rich.console import Console

from bridge.config import Tolerance
from bridge.validation import tolerance as tolerance_module
from bridge.validation.compare import changed_beyond, compare_outputs
from bridge.validation.tolerance import ElementwiseRule, decide, element_scales


def _two_orders(k: int = 1152, channels: int = 21, positions: int = 4096, seed: int = 0
                ) -> tuple[np.ndarray, np.ndarray]:
    """A conv-like output [1, channels, positions] = W @ X (K = ``k`` terms, ReLU features, weights making the
    values reach ~2e3 with cancellation), summed in float32 by a plain forward loop (a naive kernel) and by the
    BLAS sgemm (blocked, vectorised: another order)."""
    rng = np.random.default_rng(seed)
    x = np.maximum(rng.standard_normal((k, positions)), 0).astype(np.float32)
    w = (rng.standard_normal((channels, k)) * np.sqrt(2 / k) * 600).astype(np.float32)
    forward = np.zeros((channels, positions), np.float32)
    for j in range(k):
        forward += w[:, j:j + 1] * x[j]
    return forward[None], (w @ x)[None]


@pytest.fixture(scope="module")
def orders() -> tuple[np.ndarray, np.ndarray]:
    return _two_orders()


def test_summation_order_alone_fails_elementwise_and_passes_the_scale_rule(orders: tuple[np.ndarray, np.ndarray]
                                                                            ) -> None:
    ref, cand = orders
    assert 5e2 < np.abs(ref).max() < 5e3  # the reported case: logits reaching ~1e3
    plain = compare_outputs({"y": ref}, {"y": cand}, Tolerance(scale_rule=False)).outputs[0]
    scaled = compare_outputs({"y": ref}, {"y": cand}).outputs[0]
    assert not plain.passed, "the two orders must differ beyond atol + rtol * |ref| near zero, else this proves nothing"
    assert scaled.passed and not scaled.vacuous
    assert scaled.scaled_elements == round(plain.mismatch_fraction * ref.size) > 0
    assert "scale rule" in scaled.tolerance_rule and f"{scaled.scaled_elements} element" in scaled.tolerance_rule
    # what it excused is rounding: orders of magnitude below rtol x scale
    diff = np.abs(cand.astype(np.float64) - ref)
    assert diff.max() < 1e-2 * 1e-3 * np.abs(ref).max()


def _wrong(ref: np.ndarray, kind: str) -> np.ndarray:
    """The wrong candidates the scale rule must still FAIL, applied to ``ref`` (module docstring)."""
    out = ref.astype(np.float64).copy()
    scale = float(np.abs(ref).max())
    if kind == "scale x1.003":
        out *= 1.003
    elif kind == "channel bias +0.5% of the range":
        quiet = int(np.argmin(np.abs(ref).max(axis=(0, 2))))  # the channel whose own values are smallest
        out[:, quiet] += 0.005 * scale
    elif kind == "one element +1% of the range":
        out.flat[int(np.argmin(np.abs(ref)))] += 0.01 * scale
    elif kind == "sign flipped where |value| < 1% of the range":
        near = np.abs(out) < 0.01 * scale
        out[near] = -out[near]
    return out.astype(np.float32)


@pytest.mark.parametrize("kind", ["scale x1.003", "channel bias +0.5% of the range", "one element +1% of the range",
                                  "sign flipped where |value| < 1% of the range"])
def test_wrong_values_on_a_large_output_still_fail(orders: tuple[np.ndarray, np.ndarray], kind: str) -> None:
    ref, cand = orders
    wrong = _wrong(cand, kind)  # on top of the rounding of the other order
    got = compare_outputs({"y": ref}, {"y": wrong}).outputs[0]
    assert not got.passed, f"{kind}: {got.tolerance_rule}"
    assert "beyond it, the worst at [" in got.tolerance_rule


def test_quantities_packed_in_one_tensor_are_judged_at_their_own_scale() -> None:
    """YOLO's raw rows [N, 85]: pixel coordinates up to 640 beside probabilities; a probability off by 0.05 FAILs
    (a scale taken over the whole output, 640, would allow 0.64)."""
    rng = np.random.default_rng(1)
    rows = np.concatenate([rng.uniform(0, 640, (300, 4)), rng.uniform(0, 1, (300, 81))], axis=1).astype(np.float32)
    wrong = rows.copy()
    wrong[7, 20] += 0.05
    got = compare_outputs({"y": rows[None]}, {"y": wrong[None]}).outputs[0]
    assert not got.passed and "beyond it, the worst at [0, 7, 20]" in got.tolerance_rule
    # while a coordinate near zero may carry the rounding of its column's scale
    noisy = rows.copy()
    noisy[3, 0] = 0.01
    moved = noisy.copy()
    moved[3, 0] += 1e-3 * 0.5 * np.abs(rows[:, 0]).max()
    assert compare_outputs({"y": noisy[None]}, {"y": moved[None]}).passed


def _plain_scales(abs_ref: np.ndarray) -> np.ndarray:
    """scale_i for every element, computed the direct way (the reference for the differential test)."""
    a = np.atleast_1d(abs_ref)
    axes = [k for k, d in enumerate(a.shape) if d > 1 and a.size // d > 1]
    if not axes:
        return np.full(a.shape, a.max())
    out = np.full(a.shape, np.inf)
    for k in axes:
        out = np.minimum(out, a.max(axis=tuple(j for j in range(a.ndim) if j != k), keepdims=True))
    return out


@pytest.mark.parametrize("path", ["gathered", "dense"])
@pytest.mark.parametrize("shape", [(), (1,), (7,), (1, 7), (3, 1, 5), (2, 4, 6, 3), (1, 21, 8, 8), (1, 64, 1)])
def test_decide_matches_the_direct_computation(shape: tuple[int, ...], path: str,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The scale computed only where the elementwise bound fails - gathered at those elements, or for the whole
    output when they are many - gives what computing it everywhere the direct way gives."""
    monkeypatch.setattr(tolerance_module, "DENSE_SHARE", 2.0 if path == "gathered" else 0.0)
    rng = np.random.default_rng(len(shape) * 7 + sum(shape))
    for trial in range(5):
        ref = rng.standard_normal(shape) * 10.0 ** rng.integers(-2, 4)
        ref = np.where(rng.random(shape) < 0.2, 0.0, ref)  # exact zeros
        cand = ref + rng.standard_normal(shape) * 10.0 ** rng.integers(-5, 1)
        if trial == 4 and ref.size > 1:
            ref.flat[0] = np.nan
        fin = np.isfinite(ref)
        abs_ref = np.where(fin, np.abs(ref), 0.0)
        both = fin & np.isfinite(cand)
        diff = np.where(both, np.abs(cand - ref), 0.0)
        rule = ElementwiseRule(1e-4, 1e-3)
        got = decide(diff, abs_ref, both, rule)
        expected = diff <= rule.atol + rule.rtol * _plain_scales(abs_ref).reshape(np.shape(ref))
        assert np.array_equal(got.within | ~both, expected | ~both)
        assert got.by_scale == int((both & expected & ~(diff <= rule.atol + rule.rtol * abs_ref)).sum())
        beyond = int((both & ~expected).sum())
        said = f"{beyond} element{'' if beyond == 1 else 's'} beyond it, the worst"
        assert (said in got.rule) if beyond else ("beyond it, the worst" not in got.rule)


def test_the_scale_is_only_computed_where_the_elementwise_bound_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: object) -> np.ndarray:
        raise AssertionError("scale computed for an output that passes elementwise")

    monkeypatch.setattr(tolerance_module, "element_scales", refuse)
    monkeypatch.setattr(tolerance_module, "dense_scales", refuse)
    ref = np.random.default_rng(0).standard_normal((1, 21, 64, 64)).astype(np.float32) * 1e3
    out = compare_outputs({"y": ref}, {"y": ref * (1 + 1e-6)}).outputs[0]
    assert out.passed and out.tolerance_rule.endswith("no element beyond it (the scale rule not needed)")


def test_element_scale_is_the_smallest_maximum_of_the_slices_it_lies_in() -> None:
    rows = np.array([[1.0, 2.0, 100.0], [3.0, 0.0, 0.0]])  # row maxima 100, 3; column maxima 3, 2, 100
    index = tuple(np.array(i) for i in zip(*itertools.product(range(2), range(3)), strict=True))
    assert element_scales(rows, index).tolist() == [3.0, 2.0, 100.0, 3.0, 2.0, 3.0]
    cube = np.array([[[1.0, 2.0], [3.0, 400.0]], [[5.0, 0.0], [0.0, 0.5]]])  # [2, 2, 2]
    index = tuple(np.array(i) for i in zip(*itertools.product(range(2), repeat=3), strict=True))
    assert element_scales(cube, index).tolist() == [5.0, 5.0, 5.0, 400.0, 5.0, 5.0, 5.0, 5.0]
    # a vector is one slice: the whole output's largest magnitude; a single value is its own scale
    assert element_scales(np.array([0.0, 9.0, 1.0]), (np.array([0]),)).tolist() == [9.0]
    assert element_scales(np.array([[4.0]]), (np.array([0]), np.array([0]))).tolist() == [4.0]


@pytest.mark.parametrize(("tolerance", "why"), [
    (Tolerance(per_output={"y": (1e-4, 1e-3)}), "--tolerance y=0.0001,0.001: elementwise, as given"),
    (Tolerance(scale_rule=False), "elementwise: the scale rule is off"),
])
def test_an_explicit_per_output_tolerance_or_the_rule_off_is_elementwise(
        orders: tuple[np.ndarray, np.ndarray], tolerance: Tolerance, why: str) -> None:
    ref, cand = orders
    got = compare_outputs({"y": ref, "z": ref}, {"y": cand, "z": cand}, tolerance).outputs
    assert not got[0].passed and got[0].tolerance_rule == f"atol 0.0001 + rtol 0.001 x |ref| ({why})"
    assert got[0].scaled_elements == 0
    assert got[1].passed is (why.startswith("--tolerance"))  # another output keeps the global rule


def test_explicit_atol_and_rtol_set_the_rule() -> None:
    ref = np.array([[1000.0, 0.0], [0.0, 1000.0]], np.float32)
    near_zero = ref + np.array([[0.0, 0.5], [0.0, 0.0]], np.float32)  # 5e-4 of the range, on a zero
    assert compare_outputs({"y": ref}, {"y": near_zero}).passed  # 0.5 <= 1e-4 + 1e-3 * 1000
    assert not compare_outputs({"y": ref}, {"y": near_zero}, Tolerance(rtol=1e-4)).passed
    only_atol = compare_outputs({"y": ref}, {"y": near_zero}, Tolerance(atol=1e-4, rtol=0)).outputs[0]
    assert not only_atol.passed and "(rtol 0: atol alone)" in only_atol.tolerance_rule
    assert compare_outputs({"y": ref}, {"y": ref}, Tolerance(atol=0, rtol=0)).passed


def test_integer_outputs_stay_elementwise() -> None:
    ids = np.array([[0, 5000, 3, 7]], np.int64)
    got = compare_outputs({"y": ids}, {"y": ids + np.array([[1, 0, 0, 0]])}).outputs[0]
    assert not got.passed and "elementwise: not a float output" in got.tolerance_rule


def test_an_all_zero_candidate_of_a_large_output_fails_and_vacuity_is_unchanged(
        orders: tuple[np.ndarray, np.ndarray]) -> None:
    ref, _ = orders
    assert not compare_outputs({"y": ref}, {"y": np.zeros_like(ref)}).passed
    tiny = ref * 1e-8  # the whole output within atol: vacuous, as before the scale rule
    assert compare_outputs({"y": tiny}, {"y": np.zeros_like(tiny)}).outputs[0].vacuous


def test_the_rule_is_stated_per_output_in_the_cli_line_json_and_markdown(
        orders: tuple[np.ndarray, np.ndarray], monkeypatch: pytest.MonkeyPatch) -> None:
    from bridge.cli import render
    from bridge.report import to_markdown

    ref, cand = orders
    comparison = compare_outputs({"logits": ref, "other": ref}, {"logits": cand, "other": ref},
                                 reference_name="torch", candidate_name="onnxruntime")
    rule = comparison.outputs[0].tolerance_rule
    assert rule.startswith("atol 0.0001 + rtol 0.001 x scale, the scale rule")
    as_json = comparison.to_dict()["outputs"]
    assert as_json[0]["tolerance_rule"] == rule and as_json[0]["scaled_elements"] > 0
    assert as_json[1]["tolerance_rule"].endswith("(the scale rule not needed)")
    sink = io.StringIO()
    monkeypatch.setattr(render, "out", Console(file=sink, width=80, force_terminal=False))
    render.print_comparisons([comparison])
    lines = sink.getvalue().splitlines()
    assert lines[1].startswith("  logits: ok") and lines[1].endswith(f"[tolerance: {rule}]")
    markdown = to_markdown({"command": "validate", "model": "m.onnx", "reference": "torch", "passed": True,
                            "comparisons": [comparison.to_dict()]})
    assert f"| {rule} |" in markdown


# ------------------------------------------------------------------------------------------ float16 outputs
# The float16 default (bridge.validation.tolerance, "Float16 outputs"): correct float16 results computed two ways
# (one rounding of the exact value, as a float32 accumulator gives; every step rounded to float16, as an ONNX graph
# of float16 nodes or a float16 accumulator gives) pass it and FAIL the float32 default; wrong float16 candidates
# FAIL it; float32 outputs are judged exactly as before.

F16_EPS = 2.0 ** -10


def _f16(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, np.float64).astype(np.float16)


def _f16_sum(x: np.ndarray, order: str) -> np.ndarray:
    """The sum over the last axis of the float16 ``x``: exact and rounded once (``once``), or accumulated in float16
    term by term (``forward`` / ``backward``: every partial sum rounded to float16)."""
    if order == "once":
        return _f16(x.astype(np.float64).sum(-1))
    acc = np.zeros(x.shape[:-1], np.float16)
    for k in range(x.shape[-1]) if order == "forward" else reversed(range(x.shape[-1])):
        acc = (acc + x[..., k]).astype(np.float16)
    return acc


def _f16_norm(x: np.ndarray, steps: bool) -> np.ndarray:
    """The L2 norm over the last axis of the float16 ``x``: rounded once, or as an ONNX graph of float16 nodes runs it
    (Mul, a float16 accumulation, Sqrt: each rounded to float16)."""
    if not steps:
        return _f16(np.sqrt((x.astype(np.float64) ** 2).sum(-1)))
    return np.sqrt(_f16_sum((x * x).astype(np.float16), "forward").astype(np.float32)).astype(np.float16)


def _f16_box_decode(deltas: np.ndarray, anchors: np.ndarray, steps: bool) -> np.ndarray:
    """MXNet's contrib.box_decode (corner anchors, stds 0.1, 0.1, 0.2, 0.2): in float64 rounded once, or with every
    intermediate stored in float16 (what its ONNX graph of Slice, Sub, Mul, Add, Exp nodes does)."""
    dtype = np.float16 if steps else np.float64

    def r(v: Any) -> Any:
        return np.asarray(v).astype(dtype)

    a, d = r(anchors), r(deltas)
    aw, ah = r(a[..., 2] - a[..., 0]), r(a[..., 3] - a[..., 1])
    ax, ay = r(a[..., 0] + r(aw * 0.5)), r(a[..., 1] + r(ah * 0.5))
    ox, oy = r(r(r(d[..., 0] * 0.1) * aw) + ax), r(r(r(d[..., 1] * 0.1) * ah) + ay)
    ow, oh = r(r(np.exp(r(d[..., 2] * 0.2)) * aw) * 0.5), r(r(np.exp(r(d[..., 3] * 0.2)) * ah) * 0.5)
    return _f16(np.stack([r(ox - ow), r(oy - oh), r(ox + ow), r(oy + oh)], -1))


def _ulps(x: np.ndarray, n: np.ndarray) -> np.ndarray:
    """``x`` (float16) moved ``n`` float16 ulps (per element; the sign is the direction)."""
    out = x.astype(np.float16).copy()
    for _ in range(int(np.abs(n).max())):
        step = np.abs(n) > 0
        out = np.where(step, np.nextafter(out, np.where(n > 0, np.float16(np.inf), np.float16(-np.inf))), out)
        n = n - np.sign(n)
    return out.astype(np.float16)


def _sums(seed: int = 0, shape: tuple[int, ...] = (16, 16, 64)) -> np.ndarray:
    """float16 N(0, 10) values (the MXNet operator suite's sum and norm inputs), summed over 64 terms."""
    return (np.random.default_rng(seed).standard_normal(shape) * 10).astype(np.float16)


def _pass_case(kind: str) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    if kind == "sum of 64: rounded once vs accumulated in float16":
        x = _sums()
        return _f16_sum(x, "once"), _f16_sum(x, "forward")
    if kind == "sum of 64: float16 accumulation forward vs backward":
        x = _sums(1)
        return _f16_sum(x, "forward"), _f16_sum(x, "backward")
    if kind == "L2 norm of 64: rounded once vs Mul, float16 sum, Sqrt":
        x = rng.uniform(0, 10, (16, 16, 64)).astype(np.float16)
        return _f16_norm(x, False), _f16_norm(x, True)
    if kind == "box decode: rounded once vs every step in float16":
        corner = np.array([-1, -1, 1, 1])
        deltas = (rng.uniform(0, 1, (2, 300, 4)) * corner).astype(np.float16)
        anchors = (rng.uniform(0, 1, (1, 300, 4)) * corner).astype(np.float16)
        return _f16_box_decode(deltas, anchors, False), _f16_box_decode(deltas, anchors, True)
    ref = _f16_sum(_sums(2), "once")
    n = rng.choice([-1, 1], ref.shape) * (1 if kind == "1 ulp at every element" else 2)
    return ref, _ulps(ref, n)


PASS_CASES = ["sum of 64: rounded once vs accumulated in float16", "sum of 64: float16 accumulation forward vs backward",
              "L2 norm of 64: rounded once vs Mul, float16 sum, Sqrt", "box decode: rounded once vs every step in float16",
              "1 ulp at every element", "2 ulps at every element"]


@pytest.mark.parametrize("kind", PASS_CASES)
def test_float16_rounding_passes_the_float16_default_and_fails_the_float32_one(kind: str) -> None:
    ref, cand = _pass_case(kind)
    assert ref.dtype == cand.dtype == np.float16 and not np.array_equal(ref, cand)
    got = compare_outputs({"y": ref}, {"y": cand}).outputs[0]
    assert got.passed and not got.vacuous, got.tolerance_rule
    assert got.tolerance_rule.startswith("float16 tolerance: atol 0.00012207 + rtol 0.00390625 x ")
    assert (got.atol, got.rtol) == (2.0 ** -13, 2.0 ** -8)
    # the same values as a float32 output: the float32 default refuses them (what the float16 rule removes), but
    # for 1 ulp, which is at most eps = 0.98e-3 of the value: within rtol 1e-3 already
    as_float32 = compare_outputs({"y": ref.astype(np.float32)}, {"y": cand.astype(np.float32)}).outputs[0]
    assert as_float32.passed is (kind == "1 ulp at every element") and not as_float32.tolerance_rule.startswith(
        "float16"), kind


def _f16_wrong(ref: np.ndarray, cand: np.ndarray, kind: str) -> np.ndarray:
    """The wrong float16 candidates the float16 default must still FAIL, made from the correct ``cand``."""
    out = cand.astype(np.float64).copy()
    scale = float(np.abs(ref.astype(np.float64)).max())
    if kind == "scale x1.01":
        out *= 1.01
    elif kind == "bias +1% of the range":
        out += 0.01 * scale
    elif kind == "one element +1% of its scale":
        i = int(np.argmin(np.abs(ref)))
        index = tuple(np.array([k]) for k in np.unravel_index(i, ref.shape))
        out.flat[i] += 0.01 * float(element_scales(np.abs(ref.astype(np.float64)), index)[0])
    elif kind == "sign flipped where 1% < |value| < 5% of the range":
        near = (np.abs(out) > 0.01 * scale) & (np.abs(out) < 0.05 * scale)
        assert near.any()
        out[near] = -out[near]
    elif kind == "transposed":
        out = out.T
    elif kind == "two rows swapped":
        out[[2, 9]] = out[[9, 2]]
    elif kind == "8 ulps at every element":
        return _ulps(ref, np.full(ref.shape, 8))
    return out.astype(np.float16)


F16_MUTANTS = ["scale x1.01", "bias +1% of the range", "one element +1% of its scale",
               "sign flipped where 1% < |value| < 5% of the range", "transposed", "two rows swapped",
               "8 ulps at every element"]


@pytest.mark.parametrize("kind", F16_MUTANTS)
def test_wrong_float16_outputs_still_fail_the_float16_default(kind: str) -> None:
    x = _sums(4)  # [16, 16] sums of 64 float16 terms, values up to ~100: a square output (transposable)
    ref, cand = _f16_sum(x, "once"), _f16_sum(x, "forward")
    assert compare_outputs({"y": ref}, {"y": cand}).passed  # the unmutated candidate passes: only the edit fails
    wrong = _f16_wrong(ref, cand, kind)
    assert wrong.dtype == np.float16 and wrong.shape == ref.shape
    got = compare_outputs({"y": ref}, {"y": wrong}).outputs[0]
    assert not got.passed, f"{kind}: {got.tolerance_rule}"
    assert got.tolerance_rule.startswith("float16 tolerance: ") and "beyond it, the worst at [" in got.tolerance_rule


@pytest.mark.parametrize("exponent", [-2, 0, 5, 12])
def test_nine_ulps_fail_and_three_pass_where_an_element_sets_its_scale(exponent: int) -> None:
    """At an element that is its slices' maximum the bound is atol + 4 eps |x|, between 4 and 8 ulps of x (plus
    atol) wherever x lies in its binade: every float16 x of the binade [2**e, 2**(e+1)) off by 9 ulps FAILs (for
    |x| >= 0.25), by 8 ulps FAILs unless x lies within atol / (4 eps) of the next power of two, by 3 ulps passes.
    Checked on every x by the rule's numbers, and through compare_outputs on scalars (their own scale)."""
    atol, rtol = ElementwiseRule.for_output(Tolerance(), "y", np.dtype(np.float16)).atol, 2.0 ** -8
    x = (2.0 ** exponent * (1 + np.arange(1024) * F16_EPS)).astype(np.float16)
    ulp = (2.0 ** exponent * F16_EPS)
    allowed = atol + rtol * x.astype(np.float64)
    assert (9 * ulp > allowed).all() and (3 * ulp <= allowed).all()
    assert ((8 * ulp > allowed) | (x >= 2.0 ** (exponent + 1) - atol / (4 * F16_EPS))).all()
    for i in [*range(0, 1024, 97), 1023]:
        for n, passes in ((9, False), (3, True), (-3, True)):
            got = compare_outputs({"y": x[i]}, {"y": _ulps(x[i], np.array(n))}).outputs[0]
            assert got.passed is passes and got.tolerance_rule.startswith("float16 tolerance"), (x[i], n)


@pytest.mark.parametrize(("tolerance", "says"), [
    (Tolerance(atol=1e-4, rtol=2e-3), "atol 0.0001 + rtol 0.002 x scale, the scale rule"),
    (Tolerance(per_output={"y": (1e-4, 1e-3)}), "atol 0.0001 + rtol 0.001 x |ref| (--tolerance y=0.0001,0.001"),
])
def test_an_explicit_tolerance_wins_over_the_float16_default(tolerance: Tolerance, says: str) -> None:
    ref, cand = _pass_case("sum of 64: float16 accumulation forward vs backward")
    got = compare_outputs({"y": ref}, {"y": cand}, tolerance).outputs[0]
    assert not got.passed and got.tolerance_rule.startswith(says)
    assert (got.atol, got.rtol) == (1e-4, tolerance.for_output("y")[1])


def test_the_float16_default_with_the_scale_rule_off_is_elementwise_at_float16_numbers() -> None:
    ref, cand = _pass_case("2 ulps at every element")
    got = compare_outputs({"y": ref}, {"y": cand}, Tolerance(scale_rule=False)).outputs[0]
    assert got.passed and got.tolerance_rule == ("float16 tolerance: atol 0.00012207 + rtol 0.00390625 x |ref| "
                                                 "(elementwise: the scale rule is off)")


def test_a_float32_reference_keeps_the_float32_default_for_a_float16_candidate() -> None:
    """A candidate computing at float16 what its source computes at float32 is judged at the source's precision."""
    x = _sums(5)
    exact = x.astype(np.float64).sum(-1)
    got = compare_outputs({"y": exact.astype(np.float32)}, {"y": _f16_sum(x, "forward")}).outputs[0]
    assert not got.passed and got.tolerance_rule.startswith("atol 0.0001 + rtol 0.001 x scale")
    # the same candidate against the source's float16 result passes the float16 default
    assert compare_outputs({"y": _f16(exact)}, {"y": _f16_sum(x, "forward")}).passed


def _random_comparison(rng: np.random.Generator, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    shape = tuple(int(d) for d in rng.integers(1, 9, int(rng.integers(0, 4))))
    ref = rng.standard_normal(shape) * 10.0 ** rng.integers(-5, 4)
    noise = rng.standard_normal(shape) * 10.0 ** rng.integers(-9, 1) * np.abs(ref).max(initial=1.0)
    cand = ref + np.where(rng.random(shape) < 0.5, noise, 0.0)
    return ref.astype(dtype), cand.astype(rng.choice(["float32", "float64", "float16"]))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_outputs_of_other_dtypes_are_judged_exactly_as_before(dtype: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Differential: every comparison of a float32 / float64 reference (against float32, float64 or float16
    candidates; passing, failing, vacuous) gives the same result with the float16 default removed."""
    rng = np.random.default_rng(11)
    pairs = [_random_comparison(rng, dtype) for _ in range(300)]
    tolerances = [Tolerance(), Tolerance(scale_rule=False)]
    now = [compare_outputs({"y": r}, {"y": c}, t).to_dict() for r, c in pairs for t in tolerances]
    monkeypatch.setattr(tolerance_module, "float16_tolerance", lambda *_: None)
    before = [compare_outputs({"y": r}, {"y": c}, t).to_dict() for r, c in pairs for t in tolerances]
    assert now == before
    verdicts = {o["outputs"][0]["passed"] for o in now}
    assert verdicts == {True, False}  # both verdicts were compared
    # the same switch does change float16 references (the differential can see the rule)
    ref, cand = _pass_case("2 ulps at every element")
    assert not compare_outputs({"y": ref}, {"y": cand}).passed


def test_two_float16_reference_runs_a_few_ulps_apart_have_not_changed_beyond_the_tolerance() -> None:
    """``changed_beyond`` (a reference unstable on the same input; an output that ignores its input) judges the
    reference's runs at the tolerance their comparison uses: the float16 default for float16."""
    ref = _f16_sum(_sums(6), "once")
    moved = _ulps(ref, np.where(np.arange(ref.size).reshape(ref.shape) % 2 == 0, 3, -3))
    assert not changed_beyond({"y": ref}, {"y": moved}, "y", Tolerance())
    assert changed_beyond({"y": ref.astype(np.float32)}, {"y": moved.astype(np.float32)}, "y", Tolerance())
    assert changed_beyond({"y": ref}, {"y": _ulps(ref, np.full(ref.shape, 16))}, "y", Tolerance())


def test_the_float16_rule_is_named_in_the_cli_line_json_and_markdown(monkeypatch: pytest.MonkeyPatch) -> None:
    from bridge.cli import render
    from bridge.report import to_markdown

    ref, cand = _pass_case("sum of 64: float16 accumulation forward vs backward")
    comparison = compare_outputs({"sum0_output": ref}, {"sum0_output": cand}, reference_name="mxnet",
                                 candidate_name="onnxruntime")
    rule = comparison.outputs[0].tolerance_rule
    assert rule.startswith("float16 tolerance: atol 0.00012207 + rtol 0.00390625 x ")
    as_json = comparison.to_dict()["outputs"][0]
    assert as_json["tolerance_rule"] == rule and (as_json["atol"], as_json["rtol"]) == (2.0 ** -13, 2.0 ** -8)
    sink = io.StringIO()
    monkeypatch.setattr(render, "out", Console(file=sink, width=80, force_terminal=False))
    render.print_comparisons([comparison])
    assert sink.getvalue().splitlines()[1].endswith(f"[tolerance: {rule}]")
    markdown = to_markdown({"command": "validate", "model": "m.onnx", "reference": "mxnet", "passed": True,
                            "comparisons": [comparison.to_dict()]})
    assert f"| {rule} |" in markdown
