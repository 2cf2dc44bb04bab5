"""Weighted (blended) NMS of ``graft_nms`` against MediaPipe's loop (mediapipe_reference.weighted_nms) on clustered
boxes: several images, several classes (per class and class-agnostic), keypoints blended with the boxes, fewer
rows than leaders, and no candidate at all."""

from __future__ import annotations

from pathlib import Path

import mediapipe_reference as mp
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from support import make_model

from bridge.graft import graft_nms

N, C, K = 60, 3, 2


def _head(tmp_path: Path) -> Path:
    model = make_model([helper.make_node("Identity", ["b"], ["boxes"]), helper.make_node("Identity", ["s"], ["scores"])],
                       [helper.make_tensor_value_info("b", TensorProto.FLOAT, ["batch", N, 4 + 2 * K]),
                        helper.make_tensor_value_info("s", TensorProto.FLOAT, ["batch", N, C])],
                       [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, ["batch", N, 4 + 2 * K]),
                        helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["batch", N, C])])
    path = tmp_path / "head.onnx"
    onnx.save(model, str(path))
    return path


def _clusters(seed: int, batch: int) -> tuple[np.ndarray, np.ndarray]:
    """Boxes jittered around 6 centres per image (corners + keypoints near the centre), scores in [0, 1]."""
    rng = np.random.default_rng(seed)
    centers = rng.uniform(0.2, 0.8, (batch, 6, 2))
    which = rng.integers(0, 6, (batch, N))
    c = np.take_along_axis(centers, which[..., None], 1) + rng.normal(0, 0.02, (batch, N, 2))
    wh = rng.uniform(0.1, 0.2, (batch, N, 2))
    kp = c[:, :, None, :] + rng.normal(0, 0.03, (batch, N, K, 2))
    boxes = np.concatenate([c - wh / 2, c + wh / 2, kp.reshape(batch, N, 2 * K)], -1).astype(np.float32)
    return boxes, rng.random((batch, N, C)).astype(np.float32)


def _reference(boxes: np.ndarray, scores: np.ndarray, *, threshold: float, iou: float, max_det: int,
               agnostic: bool) -> list[list[tuple[float, int, mp.Detection]]]:
    """Per image: MediaPipe's weighted loop per class (or once over each box's best class), best max_det."""
    out = []
    for bx, sc in zip(boxes.astype(np.float64), scores.astype(np.float64), strict=True):
        found: list[tuple[float, int, mp.Detection]] = []
        groups = [(None, sc.max(1), sc.argmax(1))] if agnostic else [(c, sc[:, c], np.full(N, c)) for c in range(C)]
        for _, s, cls in groups:
            dets = [mp.Detection(float(s[i]), *bx[i, :4], bx[i, 4:].reshape(K, 2)) for i in range(N) if s[i] > threshold]
            label = {id(d): int(cls[i]) for d, i in zip(dets, [i for i in range(N) if s[i] > threshold], strict=True)}
            for d in mp.weighted_nms(dets, threshold=iou, max_num=N):
                best = next(x for x in dets if x.score == d.score)  # the leader keeps its own score and class
                found.append((d.score, label[id(best)], d))
        found.sort(key=lambda f: (-f[0], f[1]))
        out.append(found[:max_det])
    return out


@pytest.mark.parametrize(("agnostic", "max_det", "threshold"), [(False, 40, 0.5), (True, 40, 0.3), (False, 5, 0.2),
                                                                (True, 10, 1.5)])
def test_weighted_nms_matches_mediapipe(tmp_path: Path, agnostic: bool, max_det: int, threshold: float) -> None:
    boxes, scores = _clusters(seed=int(threshold * 10) + agnostic, batch=3)
    grafted = graft_nms(_head(tmp_path), boxes="boxes", scores="scores", box_columns="0:4",
                        keypoint_columns=f"4:{4 + 2 * K}", nms="weighted", iou=0.4, score=threshold, max_det=max_det,
                        background_class=None, class_agnostic=agnostic)
    session = ort.InferenceSession(grafted.SerializeToString(), providers=["CPUExecutionProvider"])
    out_boxes, out_scores, out_classes, num, out_kp = session.run(None, {"b": boxes, "s": scores})
    assert out_boxes.shape == (3, max_det, 4) and out_kp.shape == (3, max_det, K, 2)
    ref = _reference(boxes, scores, threshold=threshold, iou=0.4, max_det=max_det, agnostic=agnostic)
    for image, want in enumerate(ref):
        assert int(num[image]) == len(want)
        for row, (score, cls, det) in enumerate(want):
            assert out_scores[image, row] == pytest.approx(score, abs=1e-6) and out_classes[image, row] == cls
            np.testing.assert_allclose(out_boxes[image, row], [det.xmin, det.ymin, det.xmax, det.ymax], atol=2e-6)
            np.testing.assert_allclose(out_kp[image, row], det.keypoints, atol=2e-6)
        assert not out_scores[image, len(want):].any()
    if threshold > 1:  # no score above it: no candidate, nothing selected, nothing crashes
        assert not num.any()
