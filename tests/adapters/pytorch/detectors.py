"""Small torchvision-like detectors built in plain torch (no torchvision), one per detector output layout.

Each is a stride-4 conv backbone with one anchor per cell, box deltas decoded onto the anchors and
sigmoid class scores, then class-aware NMS and one output layout:

``torchvision``  per image (boxes [K, 4], scores [K], labels [K]), images taken apart with ``unbind``
                 as torchvision's GeneralizedRCNNTransform does (the traced graph fixes the batch)
``yolo``         rows [K, 7] (batch_index, x1, y1, x2, y2, score, class)
``tf``           TF combined NMS, zero padded: boxes [B, D, 4], scores [B, D], classes [B, D] float, num [B]
``gluoncv``      (ids [B, D, 1] float, -1 = padding, scores [B, D, 1], bboxes [B, D, 4])

NMS is the op ``bridge_test::nms`` with ONNX NonMaxSuppression's contract (boxes [B, N, 4], scores
[B, C, N] -> selected [K, 3] (batch, class, box)): greedy NMS in torch for eager runs, exported to
NonMaxSuppression by the TorchScript exporter exactly as torchvision registers ``torchvision::nms``.
Eager runs list each image's detections by descending score (torchvision's order), onnxruntime
class by class: the same detections in another row order.
The dynamo exporter has no translation for it (as for torchvision's detectors, dynamo fails).
Before NMS, ``if boxes.numel() == 0`` (torchvision's batched_nms) is data-dependent control flow.

``scores="separated"``: logits scaled so scores spread over (0, 1) like a trained model's;
``scores="tied"``: scores rounded to quarters, so many candidates tie exactly and two correct NMS
implementations may keep different ones of a tied pair.
"""

from __future__ import annotations

import torch
from torch import nn

IOU = 0.5
SCORE_THRESHOLD = 0.5
MAX_DETECTIONS = 20
LAYOUTS = ("torchvision", "yolo", "tf", "gluoncv")


def _iou(box: torch.Tensor, others: torch.Tensor) -> torch.Tensor:
    x1 = torch.maximum(box[0], others[:, 0])
    y1 = torch.maximum(box[1], others[:, 1])
    x2 = torch.minimum(box[2], others[:, 2])
    y2 = torch.minimum(box[3], others[:, 3])
    inter = (x2 - x1).clamp(min=0) * (y2 - y1).clamp(min=0)
    area = (box[2] - box[0]) * (box[3] - box[1])
    areas = (others[:, 2] - others[:, 0]) * (others[:, 3] - others[:, 1])
    return inter / (area + areas - inter)


@torch.library.custom_op("bridge_test::nms", mutates_args=())
def nms(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float, score_threshold: float) -> torch.Tensor:
    """ONNX NonMaxSuppression semantics (greedy, per image and class, descending score)."""
    rows = []
    for b in range(boxes.shape[0]):
        image: list[tuple[float, int, int]] = []
        for c in range(scores.shape[1]):
            s = scores[b, c]
            order = torch.argsort(s, descending=True, stable=True)
            order = order[s[order] > score_threshold]
            keep: list[int] = []
            for i in order.tolist():
                if not keep or bool((_iou(boxes[b, i], boxes[b, keep]) <= iou_threshold).all()):
                    keep.append(i)
            image += [(float(s[i]), c, i) for i in keep]
        # torchvision's batched_nms lists an image's detections by descending score across classes;
        # onnxruntime's NonMaxSuppression lists them class by class: the same set, another order
        image.sort(key=lambda t: -t[0])
        rows += [[b, c, i] for _, c, i in image]
    return torch.tensor(rows, dtype=torch.int64).reshape(-1, 3)


@nms.register_fake
def _nms_fake(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float, score_threshold: float) -> torch.Tensor:
    k = torch.library.get_ctx().new_dynamic_size()
    return boxes.new_empty((k, 3), dtype=torch.int64)


def _nms_symbolic(g, boxes, scores, iou_threshold, score_threshold):  # type: ignore[no-untyped-def]
    from torch.onnx import symbolic_helper

    iou = symbolic_helper._maybe_get_const(iou_threshold, "f")
    thr = symbolic_helper._maybe_get_const(score_threshold, "f")
    return g.op("NonMaxSuppression", boxes, scores,
                g.op("Constant", value_t=torch.tensor([2**31 - 1], dtype=torch.int64)),
                g.op("Constant", value_t=torch.tensor([iou], dtype=torch.float32)),
                g.op("Constant", value_t=torch.tensor([thr], dtype=torch.float32)))


torch.onnx.register_custom_op_symbolic("bridge_test::nms", _nms_symbolic, 11)


class TinyDetector(nn.Module):
    def __init__(self, layout: str, scores: str = "separated", classes: int = 3, seed: int = 0) -> None:
        super().__init__()
        assert layout in LAYOUTS and scores in ("separated", "tied")
        self.layout, self.tied, self.classes = layout, scores == "tied", classes
        gen = torch.Generator().manual_seed(seed)
        self.stem = nn.Conv2d(3, 8, 4, stride=4)
        self.head = nn.Conv2d(8, 4 + classes, 1)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
            self.head.weight[4:] *= 2.0  # well separated class scores, as a trained model's
            self.head.bias[4:] -= 2.0  # most anchors are background

    def _candidates(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        feat = self.head(torch.relu(self.stem(images)))  # [B, 4 + C, h, w]
        _, _, h, w = feat.shape
        ys, xs = torch.meshgrid(torch.arange(h, dtype=images.dtype), torch.arange(w, dtype=images.dtype), indexing="ij")
        centre = torch.stack([xs, ys], -1).reshape(1, h * w, 2) * 4.0 + 2.0
        deltas = feat[:, :4].flatten(2).transpose(1, 2)  # [B, N, 4]
        xy = centre + deltas[..., :2] * 4.0
        wh = 8.0 * torch.exp(deltas[..., 2:].clamp(max=2.0))
        boxes = torch.cat([xy - wh / 2, xy + wh / 2], -1)
        scores = torch.sigmoid(feat[:, 4:].flatten(2))  # [B, C, N]
        if self.tied:
            scores = torch.round(scores * 4.0) / 4.0
        return boxes, scores

    def forward(self, images: torch.Tensor):  # type: ignore[no-untyped-def]
        boxes, scores = self._candidates(images)
        if self.layout == "torchvision":
            out: list[torch.Tensor] = []
            for bx, sc in zip(boxes.unbind(0), scores.unbind(0), strict=True):
                out += list(self._per_image(bx, sc))
            return tuple(out)
        sel = nms(boxes, scores, IOU, SCORE_THRESHOLD)
        b, c, i = sel[:, 0], sel[:, 1], sel[:, 2]
        sel_boxes, sel_scores = boxes[b, i], scores[b, c, i]
        if self.layout == "yolo":
            return torch.cat([b[:, None].to(boxes.dtype), sel_boxes, sel_scores[:, None], c[:, None].to(boxes.dtype)], 1)
        # padded layouts: a dense [B, C * N] score table of the kept candidates, top MAX_DETECTIONS per image
        n = boxes.shape[1]
        dense = torch.full((boxes.shape[0], scores.shape[1] * n), -1.0, dtype=scores.dtype)
        dense = dense.index_put((b, c * n + i), sel_scores)
        top, idx = dense.topk(MAX_DETECTIONS, dim=1)
        valid = top >= 0
        cls = (idx // n).to(boxes.dtype)
        picked = torch.gather(boxes, 1, (idx % n)[..., None].expand(-1, -1, 4))
        if self.layout == "tf":
            zero = torch.zeros_like(top)
            return (torch.where(valid[..., None], picked, 0.0), torch.where(valid, top, zero),
                    torch.where(valid, cls, zero), valid.sum(1).to(torch.int32))
        neg = torch.full_like(top, -1.0)
        return (torch.where(valid, cls, neg)[..., None], torch.where(valid, top, neg)[..., None],
                torch.where(valid[..., None], picked, -1.0))

    def _per_image(self, boxes: torch.Tensor, scores: torch.Tensor) -> tuple[torch.Tensor, ...]:
        keep = scores.max(0).values > SCORE_THRESHOLD  # torchvision drops low-scoring candidates first
        boxes, scores = boxes[keep], scores[:, keep]
        if boxes.numel() == 0:  # torchvision's batched_nms: data-dependent control flow for torch.export
            return boxes, scores[0], scores[0].long()
        sel = nms(boxes[None], scores[None], IOU, SCORE_THRESHOLD)
        c, i = sel[:, 1], sel[:, 2]
        return boxes[i], scores[c, i], c


OUTPUT_NAMES = {
    "torchvision": ["boxes", "scores", "labels"],
    "yolo": ["detections"],
    "tf": ["detection_boxes", "detection_scores", "detection_classes", "num_detections"],
    "gluoncv": ["ids", "scores", "bboxes"],
}


def images(batch: int = 1, size: int = 32, seed: int = 0) -> torch.Tensor:
    """Image-like inputs in [0, 1]: gradients, a few flat rectangles and fine texture."""
    gen = torch.Generator().manual_seed(seed)
    img = torch.rand(batch, 3, 1, 1, generator=gen) * torch.linspace(0, 1, size)[None, None, None, :]
    img = img.expand(batch, 3, size, size).clone()
    for k in range(batch):
        for _ in range(3):
            x, y = torch.randint(0, size - 8, (2,), generator=gen).tolist()
            img[k, :, y:y + 8, x:x + 8] = torch.rand(3, 1, 1, generator=gen)
    return (img + 0.05 * torch.rand(img.shape, generator=gen)).clamp(0, 1)  # texture: no two cells alike


def torchvision_separated() -> TinyDetector:
    """``module:factory`` entry points (CLI tests load the detectors by file path)."""
    return TinyDetector("torchvision").eval()
