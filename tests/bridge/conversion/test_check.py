"""The one validation run (bridge.conversion.check): what it proves beyond the sample input, and that nothing in the
file under test decides how it is judged.

- a candidate whose outputs are constants (the sample folded into the graph) fails on the second input, saying it
  ignores its input; a static model gets that second input too (a second sample of the same shapes);
- random outputs are those the reference side says are random (the source giving them differently on the same
  input), never the candidate's own ``bridge.nondeterministic_outputs``; such a shape-only comparison is vacuous
  and fails --strict;
- detection groups recorded in the candidate's metadata are used only where its graph computes them through a
  selection: a tampered entry cannot turn an elementwise FAIL into a PASS;
- a detection group's line shows the shape of the output it is named after;
- a reference that fails on the second input is reported (and fails --strict), not passed over in silence.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from support import make_model

from bridge import api
from bridge.config import DETECTION_META, NONDETERMINISTIC_OUTPUTS_META, Tolerance
from bridge.errors import RuntimeCrashedError, ValidationMismatch
from bridge.runtimes.base import TensorMeta
from bridge.validation.compare import compare_outputs
from bridge.validation.detection.layouts import DetectionSpec
from bridge.validation.run import FeedSource

W = np.array([[0.5, -1.0, 2.0, 0.25]], np.float32)


def _source(scale: float = 1.0) -> onnx.ModelProto:
    """y = Relu(x * w) * scale, static [2, 4]."""
    return make_model(
        [helper.make_node("Mul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["r"]),
         helper.make_node("Mul", ["r", "s"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
        initializers=[numpy_helper.from_array(W, "w"), numpy_helper.from_array(np.float32(scale), "s")])


def _folded(x: np.ndarray) -> onnx.ModelProto:
    """The source with its sample input folded in: y is a constant, x is taken and ignored."""
    y = np.maximum(x * W, 0).astype(np.float32)
    return make_model([helper.make_node("Constant", [], ["y"], value=numpy_helper.from_array(y))],
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])])


@pytest.mark.parametrize("given", [True, False], ids=["feeds", "generated"])
def test_a_candidate_that_ignores_its_input_fails(given: bool, tmp_path: Path) -> None:
    onnx.save(_source(), tmp_path / "source.onnx")
    kwargs: dict[str, Any] = {}
    if given:
        x = np.random.default_rng(3).standard_normal((2, 4)).astype(np.float32)
        np.savez(tmp_path / "feeds.npz", x=x)
        kwargs["feeds"] = tmp_path / "feeds.npz"
    else:  # the sample validate generates for this signature (seed 0)
        probe = _folded(np.zeros((2, 4), np.float32))
        x = FeedSource(specs=(), seed=0, vary_dynamic=False, model=probe).make([TensorMeta("x", (2, 4), "float32")])["x"]
    onnx.save(_folded(x), tmp_path / "folded.onnx")
    with pytest.raises(ValidationMismatch) as caught:
        api.validate(tmp_path / "folded.onnx", source=tmp_path / "source.onnx", **kwargs)
    (comparison,) = caught.value.result.comparisons
    (y,) = comparison.outputs
    assert comparison.second_input and not y.passed and "ignores its input where the source does not" in y.note, y.note
    assert "on a second input: FAIL" in y.note
    # the honest model passes the same check, on both inputs
    onnx.save(_source(), tmp_path / "good.onnx")
    result = api.validate(tmp_path / "good.onnx", source=tmp_path / "source.onnx", strict=True, **kwargs)
    assert result.passed and result.comparisons[0].second_input and result.second_input_skipped is None


def _random_source() -> onnx.ModelProto:
    """y = x * 2 + RandomNormalLike(x) * 0.1: the source draws y anew on every run; z = x * 2 does not."""
    return make_model(
        [helper.make_node("Mul", ["x", "two"], ["z"]), helper.make_node("RandomNormalLike", ["x"], ["n"]),
         helper.make_node("Mul", ["n", "tenth"], ["t"]), helper.make_node("Add", ["z", "t"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 4])],
        initializers=[numpy_helper.from_array(np.float32(2), "two"), numpy_helper.from_array(np.float32(0.1), "tenth")])


def _declare_random(model: onnx.ModelProto, names: list[str]) -> onnx.ModelProto:
    entry = model.metadata_props.add()
    entry.key, entry.value = NONDETERMINISTIC_OUTPUTS_META, json.dumps(names)
    return model


def test_random_outputs_come_from_the_source_not_the_candidate(tmp_path: Path) -> None:
    onnx.save(_random_source(), tmp_path / "source.onnx")
    # the source itself gives y differently on the same input: compared by shape only, which proves nothing
    onnx.save(_random_source(), tmp_path / "same.onnx")
    result = api.validate(tmp_path / "same.onnx", source=tmp_path / "source.onnx")
    assert result.passed and result.random_outputs == ["y"] and result.vacuous
    by_name = {o.name: o for o in result.comparisons[0].outputs}
    assert by_name["y"].vacuous and not by_name["z"].vacuous and by_name["z"].max_abs == 0.0
    with pytest.raises(ValidationMismatch, match="shape and dtype only"):
        api.validate(tmp_path / "same.onnx", source=tmp_path / "source.onnx", strict=True)
    # a wrong candidate declaring its wrong output random is judged value by value all the same
    wrong = _declare_random(_source(scale=3.0), ["y"])
    onnx.save(wrong, tmp_path / "wrong.onnx")
    onnx.save(_source(), tmp_path / "plain.onnx")
    with pytest.raises(ValidationMismatch) as caught:
        api.validate(tmp_path / "wrong.onnx", source=tmp_path / "plain.onnx")
    (y,) = caught.value.result.comparisons[0].outputs
    assert not y.passed and y.max_abs is not None and y.max_abs > 0.1 and caught.value.result.random_outputs == []


def test_a_saved_reference_carries_what_is_random(tmp_path: Path) -> None:
    onnx.save(_random_source(), tmp_path / "source.onnx")
    api.validate(tmp_path / "source.onnx", source=tmp_path / "source.onnx", save_reference=tmp_path / "ref.npz")
    result = api.validate(tmp_path / "source.onnx", reference=tmp_path / "ref.npz")
    assert result.passed and result.random_outputs == ["y"] and result.comparisons[0].second_input
    # the candidate's own declaration adds nothing: z stays compared value by value
    onnx.save(_declare_random(_random_source(), ["y", "z"]), tmp_path / "declared.onnx")
    again = api.validate(tmp_path / "declared.onnx", reference=tmp_path / "ref.npz")
    assert again.random_outputs == ["y"] and not {o.name: o for o in again.comparisons[0].outputs}["z"].vacuous


ROWS = np.array([[[0, 0.9, 0.1, 0.1, 0.4, 0.4], [1, 0.8, 0.5, 0.5, 0.9, 0.9], [0, 0.7, 0.2, 0.6, 0.3, 0.8],
                  [2, 0.6, 0.6, 0.1, 0.8, 0.3], [-1, -1, -1, -1, -1, -1]]], np.float32)


def _rows(order: list[int] | None) -> onnx.ModelProto:
    """MXNet-layout rows [1, 5, 6] passed through (``order`` None) or reordered: as detections the same set,
    as a tensor another one."""
    nodes = [helper.make_node("Identity", ["x"], ["y"])] if order is None else [
        helper.make_node("Gather", ["x", "order"], ["y"], axis=1)]
    inits = [] if order is None else [numpy_helper.from_array(np.array(order, np.int64), "order")]
    return make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 5, 6])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5, 6])], initializers=inits)


def test_a_tampered_detection_group_does_not_turn_a_fail_into_a_pass(tmp_path: Path) -> None:
    onnx.save(_rows(None), tmp_path / "source.onnx")
    np.savez(tmp_path / "feeds.npz", x=ROWS)
    tampered = _rows([3, 2, 1, 0, 4])
    entry = tampered.metadata_props.add()
    entry.key, entry.value = DETECTION_META, json.dumps([{"layout": "mxnet", "outputs": {"detections": "y"}}])
    onnx.save(tampered, tmp_path / "tampered.onnx")
    with pytest.raises(ValidationMismatch) as caught:
        api.validate(tmp_path / "tampered.onnx", source=tmp_path / "source.onnx", feeds=tmp_path / "feeds.npz")
    result = caught.value.result
    (y,) = result.comparisons[0].outputs
    assert y.detection is None and not y.passed  # compared elementwise
    assert any("no NonMaxSuppression or TopK computes y" in w for w in result.warnings), result.warnings
    # declared by the user, the same group is compared detection by detection (and the reordering is no error)
    declared = api.validate(tmp_path / "tampered.onnx", source=tmp_path / "source.onnx", feeds=tmp_path / "feeds.npz",
                            detections=["layout=mxnet,detections=y"])
    assert declared.comparisons[0].outputs[0].detection is not None


def test_a_detection_group_line_shows_the_shape_of_the_output_it_is_named_after() -> None:
    boxes = np.array([[[0.1, 0.1, 0.5, 0.5], [0.2, 0.2, 0.9, 0.9], [0, 0, 0, 0]]], np.float32)  # [1, 3, 4]
    scores = np.array([[0.9, 0.8, 0.0]], np.float32)  # [1, 3]
    labels = np.array([[1, 2, -1]], np.int64)
    num = np.array([2], np.int64)  # [1]: listed first, the line used to show this shape
    outputs = {"num": num, "boxes": boxes, "scores": scores, "labels": labels}
    spec = DetectionSpec("boxes-scores-classes", {"num": "num", "boxes": "boxes", "scores": "scores", "labels": "labels"})
    (line,) = compare_outputs(outputs, outputs, detection_outputs=[spec]).outputs
    assert line.name == "boxes" and line.cand_shape == line.ref_shape == [1, 3, 4]


class _CrashesOnOtherInputs:
    """A reference that runs the first input it sees and crashes (as a native crash reports) on any other."""

    name = "fragile"

    def __init__(self) -> None:
        self.first: np.ndarray | None = None

    def activate(self) -> None:
        pass

    def deactivate(self) -> None:
        pass

    def input_metadata(self) -> list[TensorMeta]:
        return [TensorMeta("x", (2, 4), "float32")]

    def infer(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.first is None:
            self.first = feeds["x"]
        if not np.array_equal(feeds["x"], self.first):
            raise RuntimeCrashedError("the fragile reference crashed (signal SIGSEGV)")
        return {"y": np.maximum(feeds["x"] * W, 0)}


def test_a_reference_that_crashes_on_the_second_input_is_reported() -> None:
    from bridge.conversion.check import Check, Isolation, RuntimeReference, run_check
    from bridge.runtimes.onnxruntime import OnnxRuntime

    check = Check(RuntimeReference(_CrashesOnOtherInputs, "fragile"), {"onnxruntime": OnnxRuntime(_source())},
                  FeedSource(seed=0, vary_dynamic=False), Tolerance(), isolation=Isolation(enabled=False))
    result = run_check(check)
    assert result.matched and result.second_input_skipped is not None
    assert "failed on a second input" in result.second_input_skipped and "SIGSEGV" in result.second_input_skipped
    assert any("failed on a second input" in w for w in result.warnings)
    assert result.passed and not run_check(Check(**{**check.__dict__, "strict": True})).passed


def test_the_validation_run_and_its_excuse_are_called_from_one_place() -> None:
    """run_and_compare (the engine) and pin_failures (the upstream tie proof) have one caller: run_check."""
    import ast

    root = Path(__file__).resolve().parents[3]
    callers: dict[str, set[str]] = {}
    for path in (root / "bridge").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                name = getattr(node.func, "attr", None) or getattr(node.func, "id", None)
                if name in ("run_and_compare", "pin_failures", "explain_by_pinning"):
                    callers.setdefault(name, set()).add(str(path.relative_to(root)))
    assert callers == {"run_and_compare": {"bridge/conversion/check.py"}, "pin_failures": {"bridge/conversion/check.py"},
                       "explain_by_pinning": {"bridge/conversion/pinning.py"}}, callers


def _ranked_rows(columns: list[int] | None) -> onnx.ModelProto:
    """MXNet-layout rows [1, 5, 6] ranked by a TopK over their scores (a selection, so a recorded group is kept),
    then their columns taken in ``columns`` order (None: as they are)."""
    nodes = [helper.make_node("Gather", ["x", "score_col"], ["s"], axis=2),
             helper.make_node("TopK", ["s", "k"], ["top", "idx"], axis=1),
             helper.make_node("Reshape", ["idx", "flat"], ["order"]),
             helper.make_node("Gather", ["x", "order"], ["y" if columns is None else "ranked"], axis=1)]
    inits = [numpy_helper.from_array(np.array(1, np.int64), "score_col"),
             numpy_helper.from_array(np.array([5], np.int64), "k"),
             numpy_helper.from_array(np.array([5], np.int64), "flat")]
    if columns is not None:
        nodes.append(helper.make_node("Gather", ["ranked", "columns"], ["y"], axis=2))
        inits.append(numpy_helper.from_array(np.array(columns, np.int64), "columns"))
    return make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 5, 6])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5, 6])], initializers=inits)


def test_a_box_format_the_candidate_declares_does_not_decide_how_its_boxes_are_read(tmp_path: Path) -> None:
    onnx.save(_ranked_rows(None), tmp_path / "source.onnx")
    np.savez(tmp_path / "feeds.npz", x=ROWS)
    swapped = _ranked_rows([0, 1, 3, 2, 5, 4])  # x and y swapped after the selection ...
    entry = swapped.metadata_props.add()  # ... and declared y-first against the source's x-first boxes
    entry.key, entry.value = DETECTION_META, json.dumps([{"layout": "mxnet", "outputs": {"detections": "y"},
                                                          "box_format": "yxyx", "reference": {"box_format": "xyxy"}}])
    onnx.save(swapped, tmp_path / "swapped.onnx")
    with pytest.raises(ValidationMismatch) as caught:
        api.validate(tmp_path / "swapped.onnx", source=tmp_path / "source.onnx", feeds=tmp_path / "feeds.npz")
    result = caught.value.result
    (y,) = result.comparisons[0].outputs
    assert y.detection is not None and not y.passed  # still compared detection by detection, as xyxy
    assert any("declares y's boxes yxyx while the source's are xyxy" in w for w in result.warnings), result.warnings
    # the group as recorded, without the format claim, and the same model unswapped: PASS
    onnx.save(_ranked_rows(None), tmp_path / "good.onnx")
    assert api.validate(tmp_path / "good.onnx", source=tmp_path / "source.onnx", feeds=tmp_path / "feeds.npz").passed
