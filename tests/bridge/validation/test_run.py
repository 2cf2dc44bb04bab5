"""run_and_compare: one place that runs a reference and candidates on the same inputs and compares them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from bridge.config import InputSpec, Tolerance
from bridge.errors import ReferenceUnavailableError, RuntimeLoadError
from bridge.runtimes.base import TensorMeta
from bridge.runtimes.onnxruntime import OnnxRuntime
from bridge.validation.results import RunResults
from bridge.validation.run import ComparisonRun, FeedSource, run_and_compare


def _model(op: str) -> onnx.ModelProto:
    graph = helper.make_graph([helper.make_node(op, ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


class Recording:
    """A Runtime that records its lifecycle (activate/deactivate always paired, even on failure)."""

    name = "recording"

    def __init__(self, fail_on_activate: bool = False) -> None:
        self.events: list[str] = []
        self.fail = fail_on_activate

    def activate(self) -> None:
        self.events.append("activate")
        if self.fail:
            raise RuntimeLoadError("cannot load")

    def infer(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.events.append("infer")
        return {"y": np.maximum(feeds["x"], 0)}

    def deactivate(self) -> None:
        self.events.append("deactivate")

    def input_metadata(self) -> Sequence[TensorMeta]:
        return [TensorMeta("x", ("n", 3), "float32")]


def test_candidates_share_the_inputs_and_loaders_are_called_once() -> None:
    reference = Recording()
    loads: list[str] = []

    def loader() -> OnnxRuntime:
        loads.append("load")
        return OnnxRuntime(_model("Relu"))

    run = run_and_compare(reference, {"good": loader, "bad": OnnxRuntime(_model("Abs"))},
                          FeedSource(specs=[InputSpec("x", (4, 3))], seed=3), Tolerance())
    assert loads == ["load"]
    assert reference.events == ["activate", "infer", "deactivate"]
    assert [c.candidate for c in run.comparisons] == ["good", "bad"]
    assert run.comparisons[0].passed and not run.comparisons[1].passed and not run.passed
    assert run.feeds["x"].shape[1] == 3 and run.input_shapes() == {"x": list(run.feeds["x"].shape)}


def test_a_saved_reference_supplies_inputs_and_outputs(tmp_path: Path) -> None:
    x = np.array([[-1, 2, -3]], np.float32)
    RunResults({"x": x}, {"y": np.maximum(x, 0)}, "mxnet", {}).save(tmp_path / "ref.npz")
    saved = RunResults.load(tmp_path / "ref.npz")
    run = run_and_compare(saved, {"onnxruntime": OnnxRuntime(_model("Relu"))}, FeedSource(), Tolerance())
    assert run.passed and run.reference_name == "mxnet"
    np.testing.assert_array_equal(run.feeds["x"], x)


def test_an_unloadable_reference_is_reported_as_unavailable() -> None:
    reference = Recording(fail_on_activate=True)
    with pytest.raises(ReferenceUnavailableError, match="source reference unavailable: cannot load"):
        run_and_compare(reference, {"onnxruntime": OnnxRuntime(_model("Relu"))}, FeedSource(), Tolerance())


def test_with_no_candidates_the_reference_still_runs() -> None:
    run = run_and_compare(Recording(), {}, FeedSource(specs=[InputSpec("x", (2, 3))]), Tolerance())
    assert run.comparisons == [] and list(run.reference_outputs) == ["y"]


def test_sequence_outputs_run_compare_and_sensitivity_check() -> None:
    """A model returning a sequence (onnxruntime gives a list of tensors) validates like any other."""
    model = helper.make_model(helper.make_graph(
        [helper.make_node("SplitToSequence", ["x"], ["parts"], axis=1)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_sequence_value_info("parts", TensorProto.FLOAT, None)]),
        opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    run = run_and_compare(OnnxRuntime(model), {"onnxruntime": OnnxRuntime(model)},
                          FeedSource(specs=[InputSpec("x", (2, 3), "float32")]), Tolerance(), check_sensitivity=True)
    assert run.passed and run.comparisons[0].outputs[0].note == "sequence of 3 elements"


def test_input_summary_states_each_inputs_real_values() -> None:
    from bridge.validation.run import ComparisonRun

    feeds = {"x": np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32),
             "ids": np.arange(8, dtype=np.int64).reshape(2, 4), "mask": np.array([[1, 1, 0], [1, 0, 0]], np.int64)}
    summary = ComparisonRun(feeds, {}, "ref").input_summary("generated (standard normal, seed 0)")
    assert summary["x"]["values"].startswith("floats, mean")
    assert summary["ids"]["values"] == "integers in [0, 7] (8 distinct)"
    assert summary["mask"]["values"] == "0/1 (50% ones)"


class Logged:
    """A Runtime appending ``(name, event)`` to a log shared with the other runtimes of the run: relu(x) as
    ``y``, and ``rare`` - x where it exceeds 3 (zeros on standard-normal data: within the tolerance until the
    inputs range wider) - over a dynamic batch."""

    def __init__(self, name: str, log: list[tuple[str, str]]) -> None:
        self.name, self.log = name, log

    def activate(self) -> None:
        self.log.append((self.name, "activate"))

    def infer(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.log.append((self.name, "infer"))
        x = feeds["x"]
        return {"y": np.maximum(x, 0), "rare": np.where(x > 3, x, 0).astype(x.dtype)}

    def deactivate(self) -> None:
        self.log.append((self.name, "deactivate"))

    def input_metadata(self) -> Sequence[TensorMeta]:
        return [TensorMeta("x", ("n", 3), "float32")]


def test_one_runtime_is_loaded_at_a_time_and_the_reference_runs_everything_first() -> None:
    """The reference and a candidate side by side double the peak memory: the first candidate is loaded alone
    for its inputs, the reference runs every input any comparison needs (main, wider-ranged, second size,
    sensitivity) and is unloaded, then each candidate in turn; the verdicts are those of the interleaved order."""
    log: list[tuple[str, str]] = []
    loads: list[str] = []

    def loader() -> Logged:
        loads.append("b")
        return Logged("b", log)

    messages: list[str] = []
    run = run_and_compare(Logged("ref", log), {"a": Logged("a", log), "b": loader},
                          FeedSource(specs=[InputSpec("x", (4, 3))], seed=1), Tolerance(),
                          second_size=True, check_sensitivity=True, progress=messages.append)
    active: set[str] = set()
    for name, event in log:  # never two runtimes loaded at once
        if event == "activate":
            assert not active, (name, active, log)
            active.add(name)
        elif event == "deactivate":
            active.discard(name)
        else:
            assert active == {name}, (name, active, log)
    ref_events = [i for i, (name, _) in enumerate(log) if name == "ref"]
    assert log[:3] == [("a", "activate"), ("a", "deactivate"), ("ref", "activate")]  # "a" read for its inputs only
    assert all(name != "ref" for name, _ in log[ref_events[-1] + 1:]) and log[ref_events[-1]] == ("ref", "deactivate")
    # main, x10 (``rare`` is all zeros at x1), second size, the sensitivity input; x1000 is not needed
    assert [e for n, e in log].count("infer") == 4 + 2 * 3 and [log[i][1] for i in ref_events].count("infer") == 4
    assert loads == ["b"] and [c.candidate for c in run.comparisons] == ["a", "b"]
    assert messages[:7] == ["reading the inputs of the a candidate", "loading the ref reference",
                            "running the ref reference at x[5, 3]",  # a dynamic axis runs off its sample size
                            "running the ref reference at a second size, x[4, 3]", "loading the a candidate",
                            "running a", "running a at a second size"], messages
    for comp in run.comparisons:  # both sizes once each, the small output settled on wider inputs
        assert comp.passed and not comp.vacuous and len(comp.sizes) == 2, comp.summary()
        rare = next(o for o in comp.outputs if o.name == "rare")
        assert "also compared on inputs x10" in rare.note and not rare.within_tolerance
    assert run.insensitive == [] and len(run.sizes) == 2


def test_a_candidate_that_cannot_load_fails_after_the_reference_says_it_is_available() -> None:
    """Loading the first candidate for its inputs comes before the reference: an unavailable reference is still
    reported as such (the caller skips validation), a loadable one leaves the candidate's own load error."""

    class Unloadable(Recording):
        def activate(self) -> None:
            raise RuntimeLoadError("candidate cannot load")

    with pytest.raises(ReferenceUnavailableError, match="cannot load"):
        run_and_compare(Recording(fail_on_activate=True), {"c": Unloadable()}, FeedSource(), Tolerance())
    reference = Recording()
    with pytest.raises(RuntimeLoadError, match="candidate cannot load"):
        run_and_compare(reference, {"c": Unloadable()}, FeedSource(), Tolerance())
    assert reference.events == ["activate", "deactivate"]


def test_a_first_candidate_whose_inputs_are_declared_is_loaded_once_with_the_same_verdicts() -> None:
    """Loading the first candidate only to ask its inputs (a child process and an onnxruntime session, then
    again to compare) is skipped when its loader declares them (``declared_inputs``): one activation, the same
    feeds and verdicts as the run that loads it twice."""

    def run(declared: bool) -> tuple[list[tuple[str, str]], ComparisonRun]:
        log: list[tuple[str, str]] = []

        class Loader:
            declared_inputs = [TensorMeta("x", ("n", 3), "float32")] if declared else None

            def __call__(self) -> Logged:
                return Logged("a", log)

        result = run_and_compare(Logged("ref", log), {"a": Loader()}, FeedSource(specs=[InputSpec("x", (4, 3))], seed=1),
                                 Tolerance(), second_size=True, check_sensitivity=True)
        return log, result

    once, declared_run = run(True)
    twice, loaded_run = run(False)
    assert [e for n, e in once if n == "a"].count("activate") == 1
    assert [e for n, e in twice if n == "a"].count("activate") == 2  # the waste this removes
    assert once == twice[2:] and once[0] == ("ref", "activate")  # the same work otherwise, in the same order
    assert [c.to_dict() for c in declared_run.comparisons] == [c.to_dict() for c in loaded_run.comparisons]
    assert declared_run.sizes == loaded_run.sizes
    for a, b in zip(declared_run.feeds.values(), loaded_run.feeds.values(), strict=True):
        np.testing.assert_array_equal(a, b)
