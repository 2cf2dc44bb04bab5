"""A saved reference (``RunResults``) holding runs at two sizes of a model's dynamic axes checks a candidate at
both; one holding a single size checks a dynamic candidate at one size only, and says so
(``ComparisonRun.second_size_skipped``); a static candidate needs no second size."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pytest

from bridge.config import Tolerance
from bridge.runtimes.base import TensorMeta
from bridge.validation.results import RunResults, SizedRun
from bridge.validation.run import FeedSource, run_and_compare


class Doubler:
    """A candidate computing ``2 x`` (``off_at`` batch: plus one there: right at one batch, wrong at another)."""

    name = "doubler"

    def __init__(self, batch: int | str = "N", off_at: int | None = None) -> None:
        self.batch, self.off_at = batch, off_at

    def activate(self) -> None:
        pass

    def deactivate(self) -> None:
        pass

    def infer(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        x = feeds["x"]
        return {"y": x * 2 + (1 if x.shape[0] == self.off_at else 0)}

    def input_metadata(self) -> Sequence[TensorMeta]:
        return [TensorMeta("x", (self.batch, 4), "float32")]


def _saved(tmp_path: Path, sizes: Sequence[int], meta: dict[str, str] | None = None) -> RunResults:
    rng = np.random.default_rng(0)
    runs = [rng.standard_normal((n, 4)).astype(np.float32) for n in sizes]
    RunResults({"x": runs[0]}, {"y": runs[0] * 2}, "mxnet", meta or {},
               [SizedRun({"x": x}, {"y": x * 2}) for x in runs[1:]]).save(tmp_path / "ref.npz")
    return RunResults.load(tmp_path / "ref.npz")


@pytest.mark.parametrize(("off_at", "passed"), [(None, True), (2, False), (3, False)],
                         ids=["right", "wrong-at-the-first", "wrong-at-the-second"])
def test_a_saved_reference_of_two_sizes_checks_both(tmp_path: Path, off_at: int | None, passed: bool) -> None:
    run = run_and_compare(_saved(tmp_path, [2, 3]), {"ort": Doubler(off_at=off_at)}, FeedSource(), Tolerance())
    assert run.sizes == [{"x": [2, 4]}, {"x": [3, 4]}] and run.second_size_skipped is None
    comparison = run.comparisons[0]
    assert comparison.sizes == run.sizes and comparison.passed is passed
    if off_at == 3:
        assert "at x[3, 4]: FAIL" in comparison.outputs[0].note


@pytest.mark.parametrize(("batch", "meta", "said"), [
    ("N", {}, "has no run at a second size"),
    ("N", {"second_size_skipped": "the mxnet reference failed at x[3, 4]"}, "the mxnet reference failed at x[3, 4]"),
    (2, {}, None)], ids=["dynamic", "dynamic-source-failed", "static"])
def test_a_saved_reference_of_one_size_says_a_dynamic_axis_was_not_proved(
        tmp_path: Path, batch: int | str, meta: dict[str, str], said: str | None) -> None:
    run = run_and_compare(_saved(tmp_path, [2], meta), {"ort": Doubler(batch)}, FeedSource(), Tolerance())
    assert run.passed and run.sizes == [{"x": [2, 4]}]
    if said is None:
        assert run.second_size_skipped is None
    else:
        assert run.second_size_skipped is not None and said in run.second_size_skipped


def test_the_run_saved_from_a_validation_holds_every_size(tmp_path: Path) -> None:
    reference, candidate = Doubler(), Doubler()
    np.savez(tmp_path / "f.npz", x=np.ones((2, 4), np.float32))
    run = run_and_compare(reference, {"ort": candidate}, FeedSource(tmp_path / "f.npz"), Tolerance(), second_size=True)
    assert run.sizes == [{"x": [2, 4]}, {"x": [3, 4]}]
    run.results("doubler", {"seed": 0}).save(tmp_path / "ref.npz")
    back = RunResults.load(tmp_path / "ref.npz")
    assert back.inputs["x"].shape == (2, 4) and [r.inputs["x"].shape for r in back.other_sizes] == [(3, 4)]
    np.testing.assert_array_equal(back.other_sizes[0].outputs["y"], np.full((3, 4), 2, np.float32))
