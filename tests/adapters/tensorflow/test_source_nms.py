"""A TF source states its NMS IoU threshold (``TensorFlowAdapter.nms_iou_thresholds``, read in a child process):
validation's tie rules take it from there, and a candidate whose threshold differs FAILs naming both."""

from __future__ import annotations

from pathlib import Path

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
                                                                      tmp_path: Path) -> None:
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
