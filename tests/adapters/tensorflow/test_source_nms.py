"""A TF source states its NMS IoU threshold (``TensorFlowAdapter.nms_iou_thresholds``, read in a child process, or
where the reference runs during validation): validation's tie rules take it from there, and a candidate whose
threshold differs FAILs naming both."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import bridge
from adapters import source_nms_thresholds
from bridge.config import Source
from bridge.errors import ValidationMismatch


def test_every_nms_of_a_saved_model_and_a_graph_def_states_its_threshold(tf_sources: dict[str, Path]) -> None:
    saved = source_nms_thresholds("tensorflow", Source(location=str(tf_sources["saved_model"])))
    assert saved is not None and len(saved) >= 4 and set(saved.values()) == {0.5}, saved  # V3, V4, V5, Combined
    frozen = source_nms_thresholds("tensorflow", Source(location=str(tf_sources["graph_def"])))
    assert frozen is not None and list(frozen.values()) == [0.5], frozen
    assert source_nms_thresholds("tensorflow", Source(location=str(tf_sources["keras"]))) is None


def test_a_candidate_with_another_threshold_than_the_tf_source_fails(tf_sources: dict[str, Path], make_boxes: object,
                                                                      tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """... and convert's and validate's checks read the threshold where the TF reference runs (no child process of
    its own for it: ``_no_child_of_its_own``)."""
    _no_child_of_its_own(monkeypatch)
    src = Source(location=str(tf_sources["saved_model"]), options={"signature": "combined"})
    n = 20
    boxes, scores = make_boxes(n, seed=3)  # type: ignore[operator]
    np.savez(tmp_path / "feeds.npz", boxes=boxes.reshape(1, n, 1, 4),
             scores=np.stack([scores, scores[::-1], np.roll(scores, 5)], axis=1).reshape(1, n, 3))
    result = bridge.convert(src, tmp_path / "nms.onnx", inputs=["boxes:1,20,1,4", "scores:1,20,3"],
                            validate=["onnxruntime"])
    assert result.passed
    model = onnx.load(tmp_path / "nms.onnx")
    nms = next(nd for nd in model.graph.node if nd.op_type == "NonMaxSuppression")
    for init in model.graph.initializer:
        if init.name == nms.input[3]:
            init.CopyFrom(numpy_helper.from_array(np.array(0.6, np.float32).reshape(init.dims), init.name))
            break
    else:
        pytest.fail("the converted NMS's iou_threshold is not an initializer")
    onnx.save(model, tmp_path / "mutated.onnx")
    with pytest.raises(ValidationMismatch) as caught:
        bridge.validate(tmp_path / "mutated.onnx", source=src, feeds=tmp_path / "feeds.npz")
    notes = [o.note for c in caught.value.result.comparisons for o in c.outputs if o.detection is not None]
    assert any("NMS IoU threshold 0.6 is not the source's 0.5" in note for note in notes), notes


def _no_child_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """The threshold read may not start a child process of its own (``call_isolated`` with its stage raises);
    every other ``call_isolated`` still runs."""
    from bridge.runtimes import isolated

    real = isolated.call_isolated

    def spy(fn: Any, *, stage: str, **kw: Any) -> Any:
        if "NMS thresholds" in stage:
            raise AssertionError(f"a child process of its own: {stage}")
        return real(fn, stage=stage, **kw)

    monkeypatch.setattr(isolated, "call_isolated", spy)


@pytest.mark.parametrize("isolated_reference", [True, False], ids=["child", "in-process"])
@pytest.mark.parametrize("kind", ["saved_model", "graph_def"])
def test_thresholds_read_where_the_reference_runs_equal_those_read_in_a_child_of_their_own(
        tf_sources: dict[str, Path], kind: str, isolated_reference: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The optimisation's differential test: read by the held reference (``check._reading``: its child, or this
    process when it runs here) the thresholds are those of the plain path (a child of their own) - every NMS of
    the SavedModel's signatures (V3, V4, V5, Combined) and of the frozen GraphDef - and no other child starts."""
    from adapters.base import ExportResult
    from bridge.conversion.check import Isolation, SourceReference, _Held, _reading, source_runtime

    src = Source(location=str(tf_sources[kind]))
    plain = source_nms_thresholds("tensorflow", src)
    assert plain, plain
    export = ExportResult(model=onnx.ModelProto(), exporter="(test)", inputs=(), output_names=())
    held = _Held(source_runtime(SourceReference("tensorflow", src, export), Isolation(enabled=isolated_reference), []))
    said: list[str] = []
    _no_child_of_its_own(monkeypatch)
    try:
        there = source_nms_thresholds("tensorflow", src, run=_reading(held, said.append))
        assert held.active and len(said) == 1 and said[0].startswith("starting the "), said  # started for it
        child = getattr(held.runtime, "_child", None)
        assert (child is not None) == isolated_reference
        held.activate()  # run_and_compare's own: a no-op, the reference started for the reading serves on
        assert getattr(held.runtime, "_child", None) is child
    finally:
        held.release()
    assert there == plain
