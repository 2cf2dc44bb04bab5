"""The PyTorch trained test models' networks: a torchvision-style detector, a YOLO-style detector, a classifier.

This file is the models' source as bridge takes it (``model.py:FACTORY`` + a state_dict via ``--weights``): it
is copied beside the trained weights and must import nothing but torch.

NMS is written here without torchvision (no CPU wheel of it in this environment): ``nms`` has
``torchvision.ops.nms``'s contract (boxes [N, 4] xyxy, scores [N], IoU threshold -> kept indices by
descending score; a box is suppressed by a kept one with IoU > threshold) and is a custom op exported to
ONNX ``NonMaxSuppression`` exactly as torchvision registers its own (torchvision/ops/_register_onnx_ops.py);
``batched_nms`` is torchvision's coordinate trick (boxes of different groups shifted apart so they never
overlap). The TorchScript exporter translates the op (``--exporter torchscript``); the dynamo exporter
has no translation for it, as for torchvision's detectors.

Networks (64 x 64 RGB input, three classes: 0 square, 1 circle, 2 triangle):

- ``TorchvisionStyleDetector``: conv backbone to an 8 x 8 grid (stride 8); per cell a box (centre offset and
  log size against the cell) and a sigmoid score per class (RetinaNet / FCOS style); every (cell, class)
  above ``SCORE_THRESHOLD`` is a candidate, boxes clipped to the image, ``batched_nms`` per image and
  class (IoU ``NMS_IOU``); outputs ``boxes`` [K, 4] (pixels, xyxy), ``scores`` [K], ``labels`` [K] int64 (1..3:
  torchvision's convention, 0 is background) and ``batch_index`` [K] (the image of each row) - torchvision's
  per-image (boxes, scores, labels) for a whole batch, so the batch axis stays dynamic.
- ``YoloStyleDetector``: the same backbone; per cell objectness, class logits and a box (sigmoid centre in
  the cell, exp size); confidence = sigmoid(objectness) x softmax(classes) at the best class, rows above
  ``YOLO_CONF`` go through class-aware NMS (YOLOv5's offset ``class * MAX_WH``); output ``detections``
  [K, 7] rows (batch_index, x1, y1, x2, y2, score, class) in pixels, the ONNX "end2end" YOLO layout.
- ``ShapeClassifier``: a small CNN (32 x 32 input) -> ``logits`` [B, 3] for the largest shape's class.
"""

from __future__ import annotations

import torch
from torch import nn

NUM_CLASSES = 3
IMAGE_SIZE = 64
STRIDE = 8
GRID = IMAGE_SIZE // STRIDE
BOX_SIZE = 16.0  # the size a zero log-size prediction stands for (pixels)
SCORE_THRESHOLD = 0.05  # torchvision's box_score_thresh
NMS_IOU = 0.5  # torchvision RetinaNet / FCOS nms_thresh
YOLO_CONF = 0.25  # YOLOv5 conf_thres
YOLO_IOU = 0.45  # YOLOv5 iou_thres
MAX_WH = 4096.0  # YOLOv5's class offset (max_wh): larger than any box coordinate
CLASSIFIER_SIZE = 32


def _iou(box: torch.Tensor, others: torch.Tensor) -> torch.Tensor:
    lt = torch.maximum(box[:2], others[:, :2])
    rb = torch.minimum(box[2:], others[:, 2:])
    inter = (rb - lt).clamp(min=0).prod(-1)
    area = (box[2:] - box[:2]).prod()
    areas = (others[:, 2:] - others[:, :2]).prod(-1)
    return inter / (area + areas - inter)


def _nms_eager(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float) -> torch.Tensor:
    order = torch.argsort(scores, descending=True, stable=True)
    keep: list[int] = []
    for i in order.tolist():
        if not keep or bool((_iou(boxes[i], boxes[keep]) <= iou_threshold).all()):
            keep.append(i)
    return torch.tensor(keep, dtype=torch.int64)


def _register_nms() -> object:
    """The ``trained_models::nms`` op (registered once per process: this file may be loaded twice, by path)."""
    try:
        return torch.ops.trained_models.nms
    except (AttributeError, RuntimeError):
        pass

    @torch.library.custom_op("trained_models::nms", mutates_args=())
    def nms_op(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float) -> torch.Tensor:
        return _nms_eager(boxes, scores, iou_threshold)

    @nms_op.register_fake
    def _(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float) -> torch.Tensor:
        return boxes.new_empty((torch.library.get_ctx().new_dynamic_size(),), dtype=torch.int64)

    def symbolic(g, boxes, scores, iou_threshold):  # type: ignore[no-untyped-def]
        # torchvision/ops/_register_onnx_ops.py: one batch, one class, every box may be kept
        from torch.onnx import symbolic_helper

        iou = symbolic_helper._maybe_get_const(iou_threshold, "f")
        boxes = g.op("Unsqueeze", boxes, g.op("Constant", value_t=torch.tensor([0], dtype=torch.int64)))
        scores = g.op("Unsqueeze", scores, g.op("Constant", value_t=torch.tensor([0, 1], dtype=torch.int64)))
        selected = g.op("NonMaxSuppression", boxes, scores,
                        g.op("Constant", value_t=torch.tensor([2**31 - 1], dtype=torch.int64)),
                        g.op("Constant", value_t=torch.tensor([iou], dtype=torch.float32)))
        column = g.op("Gather", selected, g.op("Constant", value_t=torch.tensor([2], dtype=torch.int64)), axis_i=1)
        return g.op("Squeeze", column, g.op("Constant", value_t=torch.tensor([1], dtype=torch.int64)))

    torch.onnx.register_custom_op_symbolic("trained_models::nms", symbolic, 11)
    return torch.ops.trained_models.nms


nms = _register_nms()


def batched_nms(boxes: torch.Tensor, scores: torch.Tensor, groups: torch.Tensor, iou_threshold: float,
                offset: float) -> torch.Tensor:
    """torchvision.ops.batched_nms (coordinate trick): NMS within each group only; ``offset`` exceeds every
    coordinate (torchvision takes boxes.max() + 1: a constant keeps an empty candidate set valid)."""
    shifted = boxes + (groups.to(boxes.dtype) * offset)[:, None]
    return nms(shifted, scores, iou_threshold)  # type: ignore[operator]


def _block(cin: int, cout: int, stride: int) -> list[nn.Module]:
    return [nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU()]


FEATURES = 48  # the backbone's output channels


def backbone() -> nn.Sequential:
    """64 x 64 -> [B, FEATURES, 8, 8] (about 5 M multiply-adds per image)."""
    return nn.Sequential(*_block(3, 16, 2), *_block(16, 24, 2), *_block(24, 32, 1), *_block(32, FEATURES, 2),
                         *_block(FEATURES, FEATURES, 1))


def cell_centres(dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """[GRID * GRID, 2] (x, y) pixel centres of the cells, row-major."""
    ys, xs = torch.meshgrid(torch.arange(GRID, dtype=dtype), torch.arange(GRID, dtype=dtype), indexing="ij")
    return (torch.stack([xs, ys], -1).reshape(-1, 2) + 0.5) * STRIDE


class GridDetector(nn.Module):
    """Backbone + a 3x3 conv + 1x1 prediction conv with ``outputs`` channels per cell."""

    def __init__(self, outputs: int) -> None:
        super().__init__()
        self.backbone = backbone()
        self.head = nn.Sequential(nn.Conv2d(FEATURES, FEATURES, 3, padding=1), nn.ReLU(), nn.Conv2d(FEATURES, outputs, 1))
        self.register_buffer("centres", cell_centres(), persistent=False)

    def raw(self, images: torch.Tensor) -> torch.Tensor:
        """[B, GRID * GRID, outputs] predictions per cell."""
        return self.head(self.backbone(images)).flatten(2).transpose(1, 2)


class TorchvisionStyleDetector(GridDetector):
    def __init__(self) -> None:
        super().__init__(4 + NUM_CLASSES)

    def decode(self, raw: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Boxes [B, N, 4] (pixels, clipped to the image) and class logits [B, N, C] of raw predictions."""
        xy = self.centres + raw[..., :2] * STRIDE
        wh = BOX_SIZE * torch.exp(raw[..., 2:4].clamp(max=4.0))
        boxes = torch.cat([xy - wh / 2, xy + wh / 2], -1).clamp(0, IMAGE_SIZE)
        return boxes, raw[..., 4:]

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        boxes, logits = self.decode(self.raw(images))
        _, n, c = logits.shape
        scores = torch.sigmoid(logits).reshape(-1)  # every (image, cell, class) is a candidate, as in RetinaNet
        keep = torch.nonzero(scores > SCORE_THRESHOLD).reshape(-1)
        scores = scores[keep]
        cell = keep // c
        labels = keep % c
        image = cell // n
        boxes = boxes.reshape(-1, 4)[cell]
        kept = batched_nms(boxes, scores, image * c + labels, NMS_IOU, IMAGE_SIZE + 1.0)
        return boxes[kept], scores[kept], labels[kept] + 1, image[kept]


class YoloStyleDetector(GridDetector):
    def __init__(self) -> None:
        super().__init__(5 + NUM_CLASSES)

    def decode(self, raw: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Boxes [B, N, 4] (pixels), objectness logits [B, N] and class logits [B, N, C]."""
        xy = self.centres + (torch.sigmoid(raw[..., :2]) - 0.5) * STRIDE
        wh = BOX_SIZE * torch.exp(raw[..., 2:4].clamp(max=4.0))
        return torch.cat([xy - wh / 2, xy + wh / 2], -1), raw[..., 4], raw[..., 5:]

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        boxes, obj, cls = self.decode(self.raw(images))
        conf, label = (torch.sigmoid(obj)[..., None] * torch.softmax(cls, -1)).max(-1)  # [B, N]
        n = conf.shape[1]
        keep = torch.nonzero(conf.reshape(-1) > YOLO_CONF).reshape(-1)
        image = keep // n
        boxes = boxes.reshape(-1, 4)[keep]
        conf = conf.reshape(-1)[keep]
        label = label.reshape(-1)[keep]
        kept = batched_nms(boxes, conf, image * NUM_CLASSES + label, YOLO_IOU, MAX_WH)
        dtype = boxes.dtype
        return torch.cat([image[kept, None].to(dtype), boxes[kept], conf[kept, None], label[kept, None].to(dtype)], 1)


class ShapeClassifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(*_block(3, 16, 1), nn.MaxPool2d(2), *_block(16, 32, 1), nn.MaxPool2d(2),
                                      *_block(32, 64, 1), nn.MaxPool2d(2), *_block(64, 64, 1))
        self.fc = nn.Linear(64, NUM_CLASSES)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.fc(self.features(images).mean((2, 3)))


def torchvision_det() -> TorchvisionStyleDetector:
    """``model.py:torchvision_det`` (weights from ``--weights``)."""
    return TorchvisionStyleDetector().eval()


def yolo_rows() -> YoloStyleDetector:
    """``model.py:yolo_rows``."""
    return YoloStyleDetector().eval()


def classifier() -> ShapeClassifier:
    """``model.py:classifier``."""
    return ShapeClassifier().eval()
