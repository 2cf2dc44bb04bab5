"""A tiny detector-like PyTorch model: the bundled example for `bridge convert`.

Three outputs of different kinds, as detection heads have: per-anchor boxes [B, N, 4], per-anchor
class scores [B, N, C] and an upsampled feature map [B, 16, H/2, W/2] (through nn.Upsample, the
layer that most often goes wrong across opsets). Fully convolutional: any batch, any H and W
divisible by 8.
"""

from __future__ import annotations

import torch
from torch import nn

NUM_CLASSES = 3
ANCHORS = 2


class TinyDetector(nn.Module):
    def __init__(self, num_classes: int = NUM_CLASSES, anchors: int = ANCHORS) -> None:
        super().__init__()
        self.num_classes = num_classes
        self.backbone = nn.Sequential(
            nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
            nn.Conv2d(32, 32, 3, stride=2, padding=1), nn.ReLU(),
        )
        self.upsample = nn.Upsample(scale_factor=4, mode="nearest")
        self.neck = nn.Conv2d(32, 16, 1)
        self.box_head = nn.Conv2d(32, anchors * 4, 3, padding=1)
        self.cls_head = nn.Conv2d(32, anchors * num_classes, 3, padding=1)

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        feat = self.backbone(images)  # [B, 32, H/8, W/8]
        b = feat.shape[0]
        boxes = torch.sigmoid(self.box_head(feat)).permute(0, 2, 3, 1).reshape(b, -1, 4)
        scores = self.cls_head(feat).permute(0, 2, 3, 1).reshape(b, -1, self.num_classes).softmax(-1)
        fmap = self.upsample(self.neck(feat))  # [B, 16, H/2, W/2]
        return boxes, scores, fmap


def build() -> TinyDetector:
    """Factory used as `examples/tiny_detector/model.py:build`."""
    return TinyDetector().eval()
