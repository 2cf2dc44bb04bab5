"""The input-sensitivity check of run_and_compare and the inputs of FeedSource: a reference whose output
does not change with the input makes the verdict on it vacuous; a detector is judged by its boxes and
scores (its labels and counts may not change); generated inputs follow --input-kind / --input-range."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import pytest

from bridge.config import InputSpec, InputValues, Tolerance
from bridge.runtimes.base import TensorMeta
from bridge.validation.detection.layouts import DetectionSpec
from bridge.validation.run import FeedSource, run_and_compare

Outputs = Callable[[np.ndarray], dict[str, np.ndarray]]


class Fake:
    """A Runtime computing ``fn`` of its single input ``x`` [2, 3, 8, 8]."""

    name = "fake"

    def __init__(self, fn: Outputs) -> None:
        self.fn = fn

    def activate(self) -> None: ...

    def deactivate(self) -> None: ...

    def infer(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return self.fn(feeds["x"])

    def input_metadata(self) -> Sequence[TensorMeta]:
        return [TensorMeta("x", (2, 3, 8, 8), "float32")]


SPEC = DetectionSpec("boxes-scores-labels", {"boxes": "boxes", "scores": "scores", "labels": "labels"})


def _boxes(x: np.ndarray) -> np.ndarray:
    return np.array([[0, 0, 10, 10], [20, 20, 30, 30]], np.float32) + float(x.mean())


@pytest.mark.parametrize(("fn", "detections", "vacuous"), [
    (lambda x: {"y": np.ones(4, np.float32)}, None, {"y"}),
    (lambda x: {"y": x.sum(axis=(1, 2, 3)), "k": np.ones(2, np.float32)}, None, {"k"}),
    (lambda x: {"y": x * 2}, None, set()),
    (lambda x: {"boxes": _boxes(x), "scores": np.array([0.9, 0.8], np.float32),
                "labels": np.array([1.0, 2.0], np.float32)}, [SPEC], set()),  # float labels unchanged: fine
    (lambda x: {"boxes": _boxes(x * 0), "scores": np.array([0.9, 0.8], np.float32),
                "labels": np.array([1, 2])}, [SPEC], {"boxes"}),
])
def test_outputs_that_ignore_the_input_are_vacuous(fn: Outputs, detections: list[DetectionSpec] | None,
                                                   vacuous: set[str]) -> None:
    run = run_and_compare(Fake(fn), {"c": Fake(fn)}, FeedSource(specs=[InputSpec("x", (2, 3, 8, 8))]), Tolerance(),
                          detections=detections, check_sensitivity=True)
    comp = run.comparisons[0]
    assert comp.passed
    insensitive = {o.name for o in comp.outputs if "two different inputs" in o.vacuous_reason}
    assert insensitive == vacuous
    # two detections on two images are thin feeds besides (bridge.validation.coverage): said in the verdict too
    thin = {o.name for o in comp.outputs if "thin feeds" in o.vacuous_reason}
    assert thin == ({"boxes"} if detections else set())
    assert {o.name for o in comp.outputs if o.vacuous} == vacuous | thin


def _thresholded_relu(alpha: float) -> Outputs:
    return lambda x: {"y": np.where(x > alpha, x, 0).astype(np.float32)}


@pytest.mark.parametrize(("fn", "vacuous"), [
    (_thresholded_relu(8.0), False),  # standard-normal inputs never reach 8: zeros twice, yet not vacuous
    (lambda x: {"y": np.where(np.abs(x) > 1e30, x, 0).astype(np.float32)}, True),  # no range we try reaches it
    (lambda x: {"y": np.zeros(3, np.float32)}, True),
])
def test_outputs_that_vary_on_a_wider_range_are_not_vacuous(fn: Outputs, vacuous: bool) -> None:
    run = run_and_compare(Fake(fn), {"c": Fake(fn)}, FeedSource(specs=[InputSpec("x", (2, 3, 8, 8))]), Tolerance(),
                          check_sensitivity=True)
    assert run.comparisons[0].passed and run.comparisons[0].vacuous == vacuous


def test_onnx_thresholded_relu_conversions_are_not_vacuous() -> None:
    """onnx's backend node tests for ThresholdedRelu (alpha 2 on [3, 4, 5] standard normal) under --strict."""
    import onnx
    from onnx import TensorProto, helper

    from bridge.runtimes.onnxruntime import OnnxRuntime

    graph = helper.make_graph([helper.make_node("ThresholdedRelu", ["x"], ["y"], alpha=2.0)], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4, 5])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 10)], ir_version=8)
    onnx.checker.check_model(model)
    runs = [run_and_compare(OnnxRuntime(model), {"onnxruntime": OnnxRuntime(model)},
                            FeedSource(specs=[InputSpec("x", (3, 4, 5))], seed=seed), Tolerance(),
                            check_sensitivity=True) for seed in range(8)]
    assert not any(r.comparisons[0].vacuous for r in runs)


def test_without_the_check_nothing_is_flagged() -> None:
    fn: Outputs = lambda x: {"y": np.ones(4, np.float32)}  # noqa: E731
    run = run_and_compare(Fake(fn), {"c": Fake(fn)}, FeedSource(specs=[InputSpec("x", (2, 3, 8, 8))]), Tolerance())
    assert not run.comparisons[0].vacuous


def test_second_input_from_feeds_keeps_values_and_integer_inputs(tmp_path: Path) -> None:
    feeds = {"x": np.arange(12, dtype=np.float32).reshape(3, 4), "ids": np.arange(3)}
    other = FeedSource(file=tmp_path / "f.npz").other(feeds)
    assert not np.array_equal(other["x"], feeds["x"]) and sorted(other["x"].ravel()) == sorted(feeds["x"].ravel())
    assert other["ids"] is feeds["ids"]


@pytest.mark.parametrize(("values", "lo", "hi"), [
    (InputValues("image"), 0.0, 1.0), (InputValues("image", (0, 255)), 0.0, 255.0),
    (InputValues("normal", (-2, 3)), -2.0, 3.0),
])
def test_generated_inputs_follow_kind_and_range(values: InputValues, lo: float, hi: float) -> None:
    feeds = FeedSource(specs=[InputSpec("x", (2, 3, 8, 8))], values=values).make(Fake(dict).input_metadata())
    x = feeds["x"]
    assert x.dtype == np.float32 and lo <= x.min() and x.max() <= hi and x.max() - x.min() > (hi - lo) / 2
    assert values.describe() in FeedSource(values=values).describe()


@pytest.mark.parametrize(("kind", "text"), [("noise", None), (None, "1"), (None, "3,1"), (None, "0,inf")])
def test_bad_kind_or_range_is_a_usage_error(kind: str | None, text: str | None) -> None:
    from bridge.errors import UsageError

    with pytest.raises(UsageError):
        InputValues.parse(kind, text)


@pytest.mark.parametrize(("candidate", "vacuous", "note"), [
    (_thresholded_relu(8.0), False, "agrees"),  # right on the wider inputs too: a real check
    (lambda x: {"y": np.zeros_like(x)}, True, "differs"),  # zeros pass on small values only: still flagged
])
def test_outputs_within_the_tolerance_are_compared_again_on_wider_inputs(candidate: Outputs, vacuous: bool,
                                                                          note: str) -> None:
    """A reference that is all zeros on the generated inputs would let any near-zero candidate pass; the same
    output on inputs scaled wider (where it is not that small) decides whether the check proved anything."""
    run = run_and_compare(Fake(_thresholded_relu(8.0)), {"c": Fake(candidate)},
                          FeedSource(specs=[InputSpec("x", (2, 3, 8, 8))]), Tolerance())
    (out,) = run.comparisons[0].outputs
    assert run.comparisons[0].passed and out.vacuous == vacuous and note in out.note
    assert ("any output that small passes" in out.vacuous_reason) == vacuous
