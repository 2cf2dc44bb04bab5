"""A trained BlazeFace-style face detector (.tflite, converted by bridge) through ``graft-nms`` with MediaPipe's
anchors generated from the YAML a user writes, the linear decode, keypoints and weighted NMS: bridge's detections
match a hand-written numpy reference of MediaPipe's post-processing (mediapipe_reference) run on the source's own
raw outputs - IoU >= 0.99 per box, keypoints within 1 px - and find the faces drawn in the images."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mediapipe_reference as mp
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from support import run_cli

from bridge.graft import graft_nms

SIZE = 128
GRAFT = dict(boxes="regressors", scores="classificators", decode="linear", scales=128, box_format="cxcywh",
             box_columns="0:4", keypoint_columns="4:16", score_activation="sigmoid", score_clip=100.0, score=0.5,
             iou=0.3, max_det=50)


def _reference(raw: dict[str, np.ndarray], nms: str) -> list[mp.Detection]:
    anchors = mp.ssd_anchors(num_layers=4, min_scale=0.1484375, max_scale=0.75, input_h=128, input_w=128,
                             strides=[8, 16, 16, 16], aspect_ratios=[1.0], interpolated_scale_aspect_ratio=1.0,
                             fixed_anchor_size=True)
    found = mp.decode(raw["regressors"][0], raw["classificators"][0], anchors, scale=128.0, num_keypoints=6,
                      score_clip=100.0, min_score=0.5)
    run = mp.weighted_nms if nms == "weighted" else mp.hard_nms
    return run(found, threshold=0.3, max_num=50)


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    inter = max(0.0, min(a[2], b[2]) - max(a[0], b[0])) * max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return float(inter / union)


def _grafted(face_onnx: Path, anchors_yaml: Path, nms: str) -> ort.InferenceSession:
    model = graft_nms(face_onnx, anchors=str(anchors_yaml), nms=nms, **GRAFT)  # type: ignore[arg-type]
    onnx.checker.check_model(model, full_check=True)
    assert [o.name for o in model.graph.output] == ["detection_boxes", "detection_scores", "detection_classes",
                                                    "num_detections", "detection_keypoints"]
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("nms", ["weighted", "hard"])
def test_blazeface_detections_match_the_mediapipe_reference(face_onnx: Path, anchors_yaml: Path, nms: str,
                                                            faces: tuple[np.ndarray, Any],
                                                            tflite_raw: list[dict[str, np.ndarray]]) -> None:
    session = _grafted(face_onnx, anchors_yaml, nms)
    blended = 0
    for image, raw in zip(faces[0], tflite_raw, strict=True):
        boxes, scores, classes, num, keypoints = session.run(None, {"input": image[None]})
        ref = _reference(raw, nms)
        assert int(num[0]) == len(ref) > 0
        for row, want in enumerate(ref):  # both in score order
            box = boxes[0, row]
            assert _iou(box, np.array([want.xmin, want.ymin, want.xmax, want.ymax])) >= 0.99
            assert np.abs(keypoints[0, row] - want.keypoints).max() * SIZE <= 1.0
            assert scores[0, row] == pytest.approx(want.score, abs=1e-5) and classes[0, row] == 0
        assert not boxes[0, int(num[0]):].any() and not keypoints[0, int(num[0]):].any()  # zero padded
        unblended = mp.hard_nms(mp.decode(raw["regressors"][0], raw["classificators"][0], _anchors(), scale=128.0,
                                          num_keypoints=6, score_clip=100.0, min_score=0.5), threshold=0.3, max_num=50)
        blended += sum(_iou(np.array([a.xmin, a.ymin, a.xmax, a.ymax]), np.array([b.xmin, b.ymin, b.xmax, b.ymax]))
                       < 0.99 for a, b in zip(ref, unblended, strict=True))
    if nms == "weighted":  # blending moves boxes further than the tolerance: hard NMS could not pass for weighted
        assert blended > 0


def _anchors() -> np.ndarray:
    return mp.ssd_anchors(num_layers=4, min_scale=0.1484375, max_scale=0.75, input_h=128, input_w=128,
                          strides=[8, 16, 16, 16], aspect_ratios=[1.0], fixed_anchor_size=True)


def test_the_grafted_detector_finds_the_drawn_faces(face_onnx: Path, anchors_yaml: Path,
                                                    faces: tuple[np.ndarray, Any]) -> None:
    session = _grafted(face_onnx, anchors_yaml, "weighted")
    images, truth = faces
    for image, drawn in zip(images, truth, strict=True):
        boxes, _scores, _classes, num, keypoints = session.run(None, {"input": image[None]})
        assert int(num[0]) == len(drawn)
        for face in drawn:
            best = max(range(int(num[0])), key=lambda r: _iou(boxes[0, r], face["box"]))
            assert _iou(boxes[0, best], face["box"]) > 0.6
            assert np.abs(keypoints[0, best] - face["keypoints"]).max() * SIZE < 6  # eyes, nose, mouth, ears


def test_graft_nms_from_the_command_line(face_onnx: Path, anchors_yaml: Path, faces: tuple[np.ndarray, Any],
                                         tmp_path: Path) -> None:
    feeds = tmp_path / "faces.npz"
    np.savez(feeds, input=faces[0][:1])
    out = tmp_path / "face_det.onnx"
    args = ["graft-nms", str(face_onnx), "--boxes", "regressors", "--scores", "classificators", "--anchors",
            str(anchors_yaml), "--decode", "linear", "--scale", "128", "--box-format", "cxcywh", "--box-columns", "0:4",
            "--keypoint-columns", "4:16", "--score-activation", "sigmoid", "--score-clip", "100", "--score", "0.5",
            "--nms", "weighted", "--iou", "0.3", "--feeds", str(feeds)]
    dry = run_cli(*args, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "896 anchors: 16x16x2 (stride 8) = 512, 8x8x6 (stride 16) = 384 - matches the 896 box rows" in dry.stdout
    assert "dry run: nothing written" in dry.stdout and not out.exists()
    result = run_cli(*args, "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert "background class: none (one score class" in result.stdout
    assert f"detection check on --feeds {feeds}: " in result.stdout
    assert f"), {len(faces[1][0])} detection(s)" in result.stdout
    session = ort.InferenceSession(out.read_bytes(), providers=["CPUExecutionProvider"])
    assert session.run(["num_detections"], {"input": faces[0][:1]})[0][0] == len(faces[1][0])


def test_an_anchor_set_that_does_not_fit_names_both_counts(face_onnx: Path, tmp_path: Path) -> None:
    result = run_cli("graft-nms", str(face_onnx), "--boxes", "regressors", "--scores", "classificators",
                     "--anchors", "ssd", "--anchor-option", "num_layers=4", "--anchor-option", "input_size=128",
                     "--anchor-option", "strides=8,16,32,32", "--anchor-option", "min_scale=0.15",
                     "--anchor-option", "max_scale=0.75", "--anchor-option", "aspect_ratios=1.0",
                     "--decode", "linear", "--scale", "128", "--box-columns", "0:4", "--dry-run")
    assert result.returncode == 2
    said = " ".join(result.stderr.split())  # the error renderer wraps long lines
    assert "704 anchors: 16x16x2 (stride 8) = 512, 8x8x2 (stride 16) = 128, 4x4x4 (stride 32) = 64" in said
    assert "'regressors' has 896 rows" in said
