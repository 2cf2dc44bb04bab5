"""Keypoint agreement on a dataset: detectors whose detection group has keypoints (``bridge graft-nms
--keypoint-columns`` writes ``detection_keypoints`` [B, max_det, K, 2]) are scored per matched detection - PCK
(keypoints within 5% of the source box's larger side) and the mean distance in pixels - per runtime; a candidate
whose keypoints are shifted fails the default budget (--min-keypoint-agreement 0.99) while its boxes agree.

The end-to-end test uses the trained BlazeFace-style face detector (tests/blazeface_models.py: a .tflite converted
by bridge, grafted with MediaPipe's anchors, linear decode, 6 keypoints, weighted NMS) on procedural faces."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from dataset_models import shifted_keypoints_model

from bridge.runtimes.base import TensorMeta
from bridge.runtimes.onnxruntime import OnnxRuntime
from bridge.validation.dataset.metrics import PCK_ALPHA, ImageBoxes, KeypointAgreement
from bridge.validation.dataset.preprocess import Preprocessing
from bridge.validation.dataset.run import validate_on_dataset
from bridge.validation.dataset.sources import DatasetSpec
from bridge.validation.detection.layouts import detect_detection_outputs


def test_pck_and_pixel_error_of_matched_detections() -> None:
    """Two matched detections (boxes 100 and 20 px): keypoints 3 px off are within 5% of the first box (5 px),
    not of the second (1 px); a NaN keypoint is outside and left out of the mean error."""
    boxes = np.array([[0, 0, 100, 50], [200, 200, 210, 220.0]])
    src = np.array([[[10, 10], [20, 20]], [[205, 205], [206, 210]]], float)
    cand = src + np.array([[[3, 0], [0, 4]], [[0, 3], [np.nan, 0]]])
    source = ImageBoxes(boxes, np.zeros(2, np.int64), np.ones(2), keypoints=src)
    candidate = ImageBoxes(boxes, np.zeros(2, np.int64), np.ones(2), keypoints=cand)
    kp = KeypointAgreement()
    off = kp.add([source], [candidate], [(np.array([0, 1]), np.array([0, 1]))])
    assert PCK_ALPHA == 0.05 and list(off) == [2.0]  # the second box's two keypoints
    assert kp.to_dict() == {"keypoint_pck": 0.5, "keypoint_error": pytest.approx(10 / 3), "keypoints_compared": 4}
    assert KeypointAgreement().to_dict() == {}  # nothing compared: no figures


def test_shifted_keypoints_fail_the_budget_while_boxes_agree(faces: tuple[onnx.ModelProto, Path]) -> None:
    grafted, images = faces
    [spec] = detect_detection_outputs(grafted)
    assert spec.layout == "boxes-scores-classes" and spec.outputs["keypoints"] == "detection_keypoints"
    candidates = {"onnxruntime": OnnxRuntime(grafted), "shifted": OnnxRuntime(shifted_keypoints_model(grafted, 0.1)),
                  "nudged": OnnxRuntime(shifted_keypoints_model(grafted, 0.01))}
    result = validate_on_dataset(
        OnnxRuntime(grafted), candidates, DatasetSpec(images, batch_size=1),
        Preprocessing(scale="1/127.5", mean="1,1,1"), inputs=[TensorMeta.from_value_info(v) for v in grafted.graph.input],
        outputs=[TensorMeta.from_value_info(v) for v in grafted.graph.output], detections=[spec])
    same, shifted, nudged = (result.to_dict()[k] for k in ("onnxruntime", "shifted", "nudged"))
    assert same["matched"] >= 20 and same["keypoints_compared"] == 6 * same["matched"]  # faces found, 6 points each
    assert (same["keypoint_pck"], same["keypoint_error"], same["passed"]) == (1.0, 0.0, True)
    # boxes untouched: box agreement is perfect, only the keypoints tell
    assert shifted["agreement_ap50"] == shifted["agreement_ap50_95"] == 1.0
    assert shifted["keypoint_pck"] == 0.0 and shifted["keypoint_error"] > 2 and shifted["passed"] is False  # ~40 px faces
    assert "shifted: keypoint_pck 0.0000 < 0.99 (--min-keypoint-agreement)" in result.failures
    # 1% of the box width is within the 5% PCK distance: the nudged candidate keeps within the budget
    assert nudged["keypoint_pck"] == 1.0 and 0 < nudged["keypoint_error"] < shifted["keypoint_error"] / 5
    assert nudged["passed"] and not result.passed
    assert any(w.runtime == "shifted" for w in result.worst)
