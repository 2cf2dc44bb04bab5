"""The scale rule (bridge.validation.tolerance): what float32 summation order changes passes, a wrong value FAILs.

Sums computed here in float32 in two orders (a plain forward loop and the BLAS sgemm) stand for two correct
runtimes; near-zero elements of an output reaching ~1e3 then differ by more than ``atol`` and FAIL
elementwise, and pass the scale rule. The wrong candidates of issue 35 (a small wrong scale, a bias off by a
fraction of the range on one channel, one element off by 1% of the range, signs flipped near zero, a probability
column next to pixel columns) FAIL it. The end-to-end routes (PyTorch vs onnxruntime, TFLite vs onnxruntime) are
in ``test_tolerance_routes.py``; mutants of converted models in ``mutation/`` (``scale_rule`` operators).
"""

from __future__ import annotations

import io
import itertools

import numpy as np
import pytest
from rich.console import Console

from bridge.config import Tolerance
from bridge.validation import tolerance as tolerance_module
from bridge.validation.compare import compare_outputs
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
