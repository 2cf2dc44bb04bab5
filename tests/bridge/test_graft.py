"""graft_nms on a headless PyTorch detector (boxes [B, N, 4], scores [B, N, C]) and on SSD-style deltas
with anchors, checked against a plain numpy NMS written here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from bridge.errors import UsageError
from bridge.graft import graft_nms
from bridge.validation.detection.matching import Detections, compare_detections, from_indices, from_padded

torch = pytest.importorskip("torch")
C, H, W = 4, 6, 6  # classes (column 0 = background), feature map -> N = 36 boxes


class Head(torch.nn.Module):
    """A headless detector: per cell, a box (xyxy or deltas) and class probabilities."""

    def __init__(self, deltas: bool = False) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 4 + C, 3, padding=1)
        self.deltas = deltas

    def forward(self, x: Any) -> tuple[Any, Any]:
        y = self.conv(x).flatten(2).transpose(1, 2)  # [B, N, 4 + C]
        if self.deltas:
            boxes = y[..., :4]
        else:
            xy = torch.sigmoid(y[..., :2]) * 0.7
            boxes = torch.cat([xy, xy + torch.sigmoid(y[..., 2:4]) * 0.3 + 0.05], -1)
        return boxes, torch.softmax(y[..., 4:] * 3, -1)


def _export(tmp_path: Path, deltas: bool = False) -> Path:
    path = tmp_path / ("deltas.onnx" if deltas else "head.onnx")
    torch.onnx.export(Head(deltas).eval(), (torch.randn(2, 3, H, W),), str(path), input_names=["images"],
                      output_names=["boxes", "scores"], dynamic_axes={"images": {0: "batch"}}, dynamo=False,
                      opset_version=17)
    return path


def _torch_outputs(images: np.ndarray, deltas: bool = False) -> tuple[np.ndarray, np.ndarray]:
    with torch.no_grad():
        boxes, scores = Head(deltas).eval()(torch.from_numpy(images))
    return boxes.numpy(), scores.numpy()


def reference_nms(boxes: np.ndarray, scores: np.ndarray, *, iou: float, score: float, max_per_class: int | None,
                  max_det: int, background: int | None) -> list[Detections]:
    """Per image and class: greedy NMS in score order (keep score > score, drop IoU > iou), then the best max_det."""
    out = []
    for bx, sc in zip(boxes.astype(np.float64), scores.astype(np.float64), strict=True):
        found: list[tuple[float, int, np.ndarray]] = []
        for c in range(sc.shape[1]):
            if c == background:
                continue
            order = [i for i in np.argsort(-sc[:, c], kind="stable") if sc[i, c] > score]
            kept: list[int] = []
            for i in order:
                if all(_iou(bx[i], bx[j]) <= iou for j in kept):
                    kept.append(i)
                if max_per_class is not None and len(kept) == max_per_class:
                    break
            found += [(sc[i, c], c, bx[i]) for i in kept]
        found.sort(key=lambda f: -f[0])
        found = found[:max_det]
        out.append(Detections(np.array([f[2] for f in found]).reshape(-1, 4), np.array([f[0] for f in found]),
                              np.array([f[1] for f in found], dtype=np.int64)))
    return out


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    a = np.array([min(a[0], a[2]), min(a[1], a[3]), max(a[0], a[2]), max(a[1], a[3])])
    b = np.array([min(b[0], b[2]), min(b[1], b[3]), max(b[0], b[2]), max(b[1], b[3])])
    inter = max(0.0, min(a[2], b[2]) - max(a[0], b[0])) * max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def _run(model: onnx.ModelProto, images: np.ndarray) -> list[np.ndarray]:
    onnx.checker.check_model(model, full_check=True)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"images": images})


@pytest.fixture(scope="module")
def head_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _export(tmp_path_factory.mktemp("graft"))


SETTINGS: list[dict[str, Any]] = [
    dict(),
    dict(iou=0.3, score=0.2, max_det=10),
    dict(max_per_class=2, background_class=None),
    dict(iou=0.6, score=0.05, max_det=5, background_class=2),
]


@pytest.mark.parametrize("settings", SETTINGS, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()) or "defaults")
def test_graft_on_a_pytorch_head_matches_numpy_nms(head_path: Path, settings: dict[str, Any]) -> None:
    kw = {**dict(iou=0.45, score=0.01, max_per_class=None, max_det=100, background_class=0), **settings}
    grafted = graft_nms(head_path, boxes="boxes", scores="scores", **kw)
    assert [o.name for o in grafted.graph.output] == ["detection_boxes", "detection_scores", "detection_classes",
                                                      "num_detections"]
    images = np.random.default_rng(0).standard_normal((3, 3, H, W)).astype(np.float32)  # batch 3: dynamic
    boxes, scores, classes, num = _run(grafted, images)
    assert boxes.shape == (3, kw["max_det"], 4) and num.shape == (3,)
    ref = reference_nms(*_torch_outputs(images), iou=kw["iou"], score=kw["score"], max_per_class=kw["max_per_class"],
                        max_det=kw["max_det"], background=kw["background_class"])
    cmp = compare_detections(ref, from_padded(boxes, scores, classes, num), score_tol=1e-5)
    assert cmp.passed and cmp.matched > 0, cmp.summary()


def test_indices_format(head_path: Path) -> None:
    grafted = graft_nms(onnx.load(str(head_path)), boxes="boxes", scores="scores", output_format="indices",
                        background_class=None)
    images = np.random.default_rng(1).standard_normal((2, 3, H, W)).astype(np.float32)
    selected, boxes, class_scores = _run(grafted, images)
    assert selected.shape[1] == 3 and class_scores.shape == (2, C, H * W)
    ref = reference_nms(*_torch_outputs(images), iou=0.45, score=0.01, max_per_class=None, max_det=10**6,
                        background=None)
    assert compare_detections(ref, from_indices(selected, boxes, class_scores)).passed


def _decode(deltas: np.ndarray, anchors: np.ndarray, fmt: str, var: tuple[float, ...]) -> np.ndarray:
    d = deltas.astype(np.float64)
    a = anchors.astype(np.float64)
    if fmt == "yxyx":
        d, a = d[..., [1, 0, 3, 2]], a[..., [1, 0, 3, 2]]
        var = (var[1], var[0], var[3], var[2])
    if fmt == "cxcywh":
        ax, ay, aw, ah = a[..., 0], a[..., 1], a[..., 2], a[..., 3]
    else:
        aw, ah = a[..., 2] - a[..., 0], a[..., 3] - a[..., 1]
        ax, ay = (a[..., 0] + a[..., 2]) / 2, (a[..., 1] + a[..., 3]) / 2
    cx, cy = d[..., 0] * var[0] * aw + ax, d[..., 1] * var[1] * ah + ay
    w, h = np.exp(d[..., 2] * var[2]) * aw / 2, np.exp(d[..., 3] * var[3]) * ah / 2
    out = np.stack([cx - w, cy - h, cx + w, cy + h], -1)
    return out[..., [1, 0, 3, 2]] if fmt == "yxyx" else out


@pytest.mark.parametrize("fmt", ["xyxy", "yxyx", "cxcywh"])
def test_graft_decodes_deltas_with_npy_anchors(tmp_path: Path, fmt: str) -> None:
    path = _export(tmp_path, deltas=True)
    rng = np.random.default_rng(2)
    xy, wh = rng.random((H * W, 2)) * 0.7, rng.random((H * W, 2)) * 0.3 + 0.05
    corners = np.concatenate([xy, xy + wh], -1)
    anchors = {"xyxy": corners, "yxyx": corners[:, [1, 0, 3, 2]], "cxcywh": np.concatenate([xy + wh / 2, wh], -1)}[fmt]
    np.save(tmp_path / "anchors.npy", anchors.astype(np.float32))
    variances = (0.1, 0.1, 0.2, 0.2) if fmt != "yxyx" else (0.1, 0.2, 0.3, 0.4)
    grafted = graft_nms(path, boxes="boxes", scores="scores", anchors=tmp_path / "anchors.npy", box_format=fmt,
                        variances=variances, max_det=50)
    images = rng.standard_normal((2, 3, H, W)).astype(np.float32)
    boxes, scores, classes, num = _run(grafted, images)
    deltas, probs = _torch_outputs(images, deltas=True)
    decoded = _decode(deltas, anchors.astype(np.float32)[None], fmt, variances)
    ref = reference_nms(decoded, probs, iou=0.45, score=0.01, max_per_class=None, max_det=50, background=0)
    if fmt == "yxyx":  # compare as xyxy
        boxes = boxes[..., [1, 0, 3, 2]]
        ref = [Detections(d.boxes[:, [1, 0, 3, 2]], d.scores, d.classes) for d in ref]
    cmp = compare_detections(ref, from_padded(boxes, scores, classes, num))
    assert cmp.passed and cmp.matched > 0, cmp.summary()


def test_graft_with_anchors_inside_the_model(tmp_path: Path) -> None:
    model = onnx.load(str(_export(tmp_path, deltas=True)))
    rng = np.random.default_rng(3)
    xy = rng.random((H * W, 2)) * 0.7
    anchors = np.concatenate([xy, xy + 0.2], -1).astype(np.float32)
    model.graph.initializer.append(onnx.numpy_helper.from_array(anchors.reshape(1, -1, 4), "priors"))
    grafted = graft_nms(model, boxes="boxes", scores="scores", anchors="priors")
    images = rng.standard_normal((1, 3, H, W)).astype(np.float32)
    boxes, scores, classes, num = _run(grafted, images)
    deltas, probs = _torch_outputs(images, deltas=True)
    ref = reference_nms(_decode(deltas, anchors[None], "xyxy", (0.1, 0.1, 0.2, 0.2)), probs, iou=0.45, score=0.01,
                        max_per_class=None, max_det=100, background=0)
    assert compare_detections(ref, from_padded(boxes, scores, classes, num)).passed


@pytest.mark.parametrize(("kwargs", "message"), [
    (dict(boxes="nope"), "no tensor of that name"),
    (dict(box_format="xywh"), "--box-format"),
    (dict(variances=(0.1, 0.1, 0.2, 0.2)), "only applies when --anchors"),
    (dict(anchors="missing.npy"), "no such file"),
    (dict(max_det=0), "--max-det"),
    (dict(output_format="mxnet"), "--output-format"),
])
def test_bad_arguments_are_usage_errors(head_path: Path, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        graft_nms(head_path, **{**dict(boxes="boxes", scores="scores"), **kwargs})
