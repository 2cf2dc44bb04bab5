"""What the tie rules rest on comes from the source, not from the file under test (bridge.conversion.check,
``source_nms``; the adapters' ``nms_iou_thresholds``).

A candidate whose NMS IoU threshold was changed would otherwise change its own excuse: the threshold read from its
graph decides which rows one side kept alone are "at the NMS threshold from a kept box" (float rounding put the
IoU on either side of it: bridge.validation.detection.ties, rule d). Here an ONNX source selects with
NonMaxSuppression at IoU 0.5; the candidate is the same graph with its threshold set just under the IoU 0.46
at which a box overlaps a better one: the source keeps that box, the candidate suppresses it: read from the candidate, 0.46 sits at its threshold and the
missing row is excused (today's PASS); read from the source, it is no tie, and the thresholds differing is a FAIL
naming both.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from support import make_model

from bridge import api
from bridge.errors import BridgeError, RuntimeLoadError, ValidationMismatch
from bridge.validation.detection.layouts import (
    DetectionSpec,
    same_nms_threshold,
    with_nms_thresholds,
    with_source_nms,
)

N = 6


def _nms_model(iou: float) -> onnx.ModelProto:
    """boxes [1, N, 4], scores [1, 1, N] -> NonMaxSuppression(iou) -> selected indices, with boxes and scores as
    outputs too (the indices layout)."""
    model = make_model(
        [helper.make_node("Identity", ["boxes"], ["out_boxes"]), helper.make_node("Identity", ["scores"], ["out_scores"]),
         helper.make_node("NonMaxSuppression", ["boxes", "scores", "max_out", "iou", "score_t"], ["selected"],
                          name="nms")],
        [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, N, 4]),
         helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 1, N])],
        [helper.make_tensor_value_info("selected", TensorProto.INT64, [None, 3]),
         helper.make_tensor_value_info("out_boxes", TensorProto.FLOAT, [1, N, 4]),
         helper.make_tensor_value_info("out_scores", TensorProto.FLOAT, [1, 1, N])],
        initializers=[numpy_helper.from_array(np.array([N], np.int64), "max_out"),
                      numpy_helper.from_array(np.array([iou], np.float32), "iou"),
                      numpy_helper.from_array(np.array([0.0], np.float32), "score_t")])
    return model


def _feeds(path: Path) -> Path:
    """A box overlapping the best one at IoU 0.46 (kept at 0.5), the rest apart."""
    shift = 10 * (1 - 0.46) / (1 + 0.46)  # overlap (10 - s) 10 over union (10 + s) 10 = 0.46
    boxes = np.array([[[0, 0, 10, 10], [shift, 0, 10 + shift, 10], [30, 30, 40, 40], [60, 0, 70, 10],
                       [0, 60, 10, 70], [80, 80, 90, 90]]], np.float32)
    scores = np.array([[[0.9, 0.3, 0.85, 0.8, 0.7, 0.5]]], np.float32)
    np.savez(path, boxes=boxes, scores=scores)
    return path


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    inter = max(w, 0) * max(h, 0)
    return float(inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter))


def test_a_candidate_with_another_nms_threshold_gets_no_tie_excuse_from_it(tmp_path: Path) -> None:
    feeds = _feeds(tmp_path / "feeds.npz")
    boxes = np.load(feeds)["boxes"][0].astype(np.float64)
    mutated = float(np.float32(_iou(boxes[0], boxes[1]) - 5e-7))  # suppresses the 0.46 box, "at" its IoU
    onnx.save(_nms_model(0.5), tmp_path / "source.onnx")
    onnx.save(_nms_model(mutated), tmp_path / "candidate.onnx")
    with pytest.raises(ValidationMismatch) as caught:
        api.validate(tmp_path / "candidate.onnx", source=tmp_path / "source.onnx", feeds=feeds, isolated=False)
    (comparison,) = caught.value.result.comparisons
    group = next(o for o in comparison.outputs if o.detection is not None)
    assert not group.passed
    assert f"NMS IoU threshold {mutated:.6g} is not the source's 0.5 (nms)" in group.note, group.note
    # the tie rules took the source's threshold: the row the candidate dropped is not excused as a tie
    assert group.detection["tie_ambiguous"] == 0 and group.detection["mismatched"] > 0, group.detection
    # the same graph at the source's threshold passes
    onnx.save(_nms_model(0.5), tmp_path / "same.onnx")
    assert api.validate(tmp_path / "same.onnx", source=tmp_path / "source.onnx", feeds=feeds, isolated=False).passed


def test_the_source_threshold_replaces_the_candidates() -> None:
    candidate = _nms_model(0.3)
    (spec,) = with_nms_thresholds(candidate, [DetectionSpec.parse("selected_indices=selected,boxes=out_boxes,"
                                                                  "scores=out_scores")])
    assert spec.nms_iou == pytest.approx(0.3)
    (checked,), said = with_source_nms(candidate, [spec], {"nms": 0.5, "rpn": 0.7})
    assert checked.nms_iou == 0.5 and "0.3 is not the source's 0.5 (nms)" in checked.nms_disagreement and not said
    # no NMS of the candidate names a source node: the largest threshold the source states, said
    (anon,), said = with_source_nms(candidate, [spec], {"other": 0.45, "rpn": 0.7})
    assert anon.nms_iou == 0.7 and "largest IoU threshold the source states (0.7, rpn)" in said[0]
    # a source that cannot state it: the candidate's value stays, and the verdict says where it came from
    (kept,), said = with_source_nms(candidate, [spec], None)
    assert kept.nms_iou == pytest.approx(0.3) and not kept.nms_disagreement
    assert "NMS IoU threshold read from the candidate: the source does not state it" in said[0]


@pytest.mark.parametrize(("candidate", "source", "same"), [
    (float(np.nextafter(np.float32(0.45), np.float32(0))), 0.45, True),  # MXNet's ">=" as ONNX's ">"
    (0.45, 0.45, True), (0.46, 0.45, False), (0.4499, 0.45, False)])
def test_one_ulp_apart_is_the_same_threshold(candidate: float, source: float, same: bool) -> None:
    assert same_nms_threshold(candidate, source) is same


class _Counted:
    """A reference runtime that counts its activations, and fails them with ``fails`` when given."""

    def __init__(self, runtime: Any, fails: Exception | None, log: list[str]) -> None:
        self.runtime, self.fails, self.log = runtime, fails, log

    def activate(self) -> None:
        self.log.append("activate")
        if self.fails is not None:
            raise self.fails
        self.runtime.activate()

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.runtime, attr)


def _read_by(there: bool) -> Any:
    """The ONNX adapter's threshold reading, made as the TF adapter's is: by ``run`` (where the reference runs)
    when ``there``, else here (the plain path)."""
    from adapters.onnx import nms_iou_thresholds

    def read(self: Any, source: Any, run: Any = None) -> dict[str, float]:
        job = partial(nms_iou_thresholds, onnx.load(source.location))
        if there:
            assert run is not None, "run_check gave no run although the reference is held"
            return run(job)  # type: ignore[no-any-return]
        return job()

    return read


@pytest.mark.parametrize("fails", [None, RuntimeLoadError("the source's file is gone"), ValueError("a bug")],
                         ids=["starts", "load-error", "other-error"])
def test_reading_where_the_reference_runs_starts_it_once_and_fails_as_the_plain_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fails: Exception | None) -> None:
    """``run_check`` reads the source's thresholds where the reference runs (``_reading``): the reference is
    started there once (run_and_compare's own activation is a no-op), the verdict is the plain path's (the
    candidate with another threshold FAILs naming both), and a reference that does not start raises exactly what
    the plain path raises (a RuntimeLoadError becomes ReferenceUnavailableError), started once, not twice."""
    import adapters
    from adapters.onnx import OnnxFileAdapter

    feeds = _feeds(tmp_path / "feeds.npz")
    onnx.save(_nms_model(0.5), tmp_path / "source.onnx")
    onnx.save(_nms_model(0.3), tmp_path / "candidate.onnx")
    real_runner = adapters.reference_runner
    outcomes: list[tuple[str, Any]] = []
    for there in (False, True):
        log: list[str] = []
        monkeypatch.setattr(adapters, "reference_runner",
                            lambda *a, log=log: _Counted(real_runner(*a), fails, log))  # type: ignore[misc]
        monkeypatch.setattr(OnnxFileAdapter, "nms_iou_thresholds", _read_by(there))
        try:
            api.validate(tmp_path / "candidate.onnx", source=tmp_path / "source.onnx", feeds=feeds, isolated=False)
            outcome: tuple[str, Any] = ("passed", None)
        except ValidationMismatch as exc:
            (comparison,) = exc.result.comparisons
            outcome = ("mismatch", next(o.note for o in comparison.outputs if o.detection is not None))
        except Exception as exc:
            outcome = (type(exc).__name__, str(exc))
        assert log == ["activate"], (there, log)
        outcomes.append(outcome)
    assert outcomes[0] == outcomes[1]
    if fails is None:
        assert outcomes[0][0] == "mismatch" and "NMS IoU threshold 0.3 is not the source's 0.5" in outcomes[0][1]
    elif isinstance(fails, RuntimeLoadError):
        assert outcomes[0][0] == "ReferenceUnavailableError", outcomes
    else:
        assert outcomes[0] == ("ValueError", "a bug")


def test_a_reading_that_fails_where_the_reference_runs_is_said_and_leaves_the_reference_running() -> None:
    """A job that raises in the reference's process comes back as a BridgeError (said as a warning by
    ``source_nms``) and does not end the reference (an error in an isolated child would stop it)."""
    from bridge.conversion.check import _Held, _reading

    log: list[str] = []

    class Ref:
        name = "ref"

        def activate(self) -> None:
            log.append("activate")

        def deactivate(self) -> None:
            log.append("deactivate")

    held = _Held(Ref())  # type: ignore[arg-type]
    run = _reading(held, lambda _m: None)

    def broken() -> None:
        raise ValueError("unparsable")

    with pytest.raises(BridgeError, match="ValueError: unparsable"):
        run(broken)
    assert run(lambda: 7) == 7 and held.active and log == ["activate"]
    held.release()
    assert log == ["activate", "deactivate"]
