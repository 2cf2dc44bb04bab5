"""The bundled trained MXNet SSD (examples/mxnet_ssd) carried into other frameworks and heads, weights unchanged.

The mutation suite wants trained models (well-separated detections, few ties) in every detection layout bridge
matches, and the repository ships one trained detector. Its network is small and plain (conv-BN-ReLU blocks, a
3x3 loc and cls conv per feature map, MultiBoxPrior anchors), so it is rebuilt here, loading its own
``model-0000.params`` (read with bridge's MXNet params reader, no MXNet needed):

- ``gluoncv_symbol``: the MXNet symbol with GluonCV's SSD head (``bench.gluoncv_like.gluoncv_head``: box_decode,
  per-class decoder, box_nms; outputs ids / scores / bboxes) on its cut points;
- ``PortedSSD``: a PyTorch module with the head of ``tests/adapters/pytorch/detectors.py`` (torchvision per-image
  outputs, YOLO rows, TF-style padded outputs), NMS exported as ONNX NonMaxSuppression;
- ``keras_combined_nms``: a Keras model ending in ``tf.image.combined_non_max_suppression`` (NHWC input).

Anchors follow MXNet's MultiBoxPrior (``/work/shared/notes/mxnet-ssd.md``) and the decode MultiBoxDetection's
(variances 0.1, 0.1, 0.2, 0.2, boxes clipped to [0, 1]), so every port detects what the trained SSD detects.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[4]
EXAMPLE = REPO / "examples" / "mxnet_ssd"
SYMBOL, PARAMS = EXAMPLE / "model-symbol.json", EXAMPLE / "model-0000.params"
FEEDS = EXAMPLE / "sample_inputs.npz"  # 4 preprocessed validation images, input "data" [4, 3, 64, 64]
SIZE, CLASSES = 64, 3
VARIANCES = (0.1, 0.1, 0.2, 0.2)
# (name, out channels, stride) of the conv-BN-ReLU body; feature maps at multi_feat_1 (8x8) and multi_feat_2 (4x4)
BODY = (("stage1", 16, 2), ("stage2a", 32, 1), ("stage2b", 48, 2), ("stage3a", 48, 1), ("stage3b", 64, 2),
        ("multi_feat_1", 64, 1), ("multi_feat_2", 96, 2))
FEATURES = ("multi_feat_1", "multi_feat_2")
PRIORS = {"multi_feat_1": ((0.2, 0.3), (1.0, 2.0, 0.5)), "multi_feat_2": ((0.4, 0.55), (1.0, 2.0, 0.5))}
ANCHORS_PER_CELL = 4


def load_weights() -> dict[str, np.ndarray]:
    """The trained parameters by MXNet argument / auxiliary name (``arg:`` / ``aux:`` prefixes dropped)."""
    from adapters.mxnet.params import load_params

    return {k.split(":", 1)[-1]: v for k, v in load_params(PARAMS).items()}


def multibox_prior(height: int, width: int, sizes: tuple[float, ...], ratios: tuple[float, ...]) -> np.ndarray:
    """MXNet MultiBoxPrior's corner anchors [H * W * A, 4] (multibox_prior-inl.h: row, column, then the sizes
    at ratios[0], then ratios[1:] at sizes[0]; float32 as MXNet computes them)."""
    f = np.float32
    step_y, step_x = f(1) / f(height), f(1) / f(width)
    shapes = [(s, ratios[0]) for s in sizes] + [(sizes[0], q) for q in ratios[1:]]
    rows = []
    for r in range(height):
        for c in range(width):
            cy, cx = (f(r) + f(0.5)) * step_y, (f(c) + f(0.5)) * step_x
            for s, q in shapes:
                w = f(s) * f(height) / f(width) * np.sqrt(f(q)) / f(2)
                h = f(s) / np.sqrt(f(q)) / f(2)
                rows.append([cx - w, cy - h, cx + w, cy + h])
    return np.asarray(rows, np.float32)


def anchors() -> np.ndarray:
    """All anchors [N, 4] of the SSD (multi_feat_1 8x8 then multi_feat_2 4x4)."""
    return np.concatenate([multibox_prior(side, side, *PRIORS[f]) for f, side in zip(FEATURES, (8, 4), strict=True)])


def equivalence_images(count: int, seed: int = 7) -> np.ndarray:
    """``count`` fresh preprocessed images of the SSD's procedural dataset ([count, 3, 64, 64] NCHW float32)."""
    sys.path.insert(0, str(EXAMPLE))
    try:
        from shapes import make_dataset, preprocess  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(EXAMPLE))
    images, _, _ = make_dataset(count, seed, SIZE)
    return np.asarray(preprocess(images), np.float32)


# -- MXNet: GluonCV's head on the trained SSD -------------------------------------------------------------

def gluoncv_symbol(folder: Path) -> Path:
    """Write ``gluoncv_ssd-symbol.json`` (+ the trained params) into ``folder``: the trained SSD's cut points
    (``multibox_loc_pred``, ``multibox_cls_pred``, ``multibox_anchors``) under GluonCV's detection head."""
    from bench.gluoncv_like import gluoncv_head
    from bench.ssd_models import mxnet_import

    mx = mxnet_import(2)
    internals = mx.sym.load(str(SYMBOL)).get_internals()
    loc = mx.sym.reshape(internals["multibox_loc_pred_output"], shape=(0, -1, 4))
    cls = mx.sym.transpose(internals["multibox_cls_pred_output"], axes=(0, 2, 1))  # [B, N, C+1]
    head = gluoncv_head(mx, loc, cls, internals["multibox_anchors_output"], CLASSES)
    folder.mkdir(parents=True, exist_ok=True)
    symbol = folder / "gluoncv_ssd-symbol.json"
    head.save(str(symbol))
    shutil.copyfile(PARAMS, folder / "gluoncv_ssd-0000.params")
    return symbol


# -- PyTorch ---------------------------------------------------------------------------------------------

def _torch_detectors() -> Any:
    """tests/adapters/pytorch/detectors.py (its NMS op and heads); importing it registers the op."""
    here = str(REPO / "tests" / "adapters" / "pytorch")
    if here not in sys.path:
        sys.path.insert(0, here)
    import detectors  # type: ignore[import-not-found]

    return detectors


def ported_ssd(layout: str, *, classifier: bool = False) -> Any:
    """The trained SSD as a PyTorch module: ``layout`` one of detectors.LAYOUTS ("torchvision", "yolo", "tf",
    "gluoncv"); ``classifier``: an image classifier on the same body instead (see ``SSDClassifier``)."""
    import torch
    from torch import nn

    detectors = _torch_detectors()
    weights = load_weights()

    def conv_bn(name: str, cin: int, cout: int, stride: int) -> nn.Sequential:
        conv = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        bn = nn.BatchNorm2d(cout, eps=1e-5)
        with torch.no_grad():
            conv.weight.copy_(torch.from_numpy(weights[f"{name}_conv_weight"]))
            bn.weight.copy_(torch.from_numpy(weights[f"{name}_bn_gamma"]))
            bn.bias.copy_(torch.from_numpy(weights[f"{name}_bn_beta"]))
            bn.running_mean.copy_(torch.from_numpy(weights[f"{name}_bn_moving_mean"]))
            bn.running_var.copy_(torch.from_numpy(weights[f"{name}_bn_moving_var"]))
        return nn.Sequential(conv, bn, nn.ReLU())

    def head(feature: str, kind: str, cin: int) -> nn.Conv2d:
        w = weights[f"{feature}_{kind}_pred_conv_weight"]
        conv = nn.Conv2d(cin, w.shape[0], 3, padding=1)
        with torch.no_grad():
            conv.weight.copy_(torch.from_numpy(w))
            conv.bias.copy_(torch.from_numpy(weights[f"{feature}_{kind}_pred_conv_bias"]))
        return conv

    class Body(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            blocks, cin = [], 3
            for name, cout, stride in BODY:
                blocks.append(conv_bn(name, cin, cout, stride))
                cin = cout
            self.blocks = nn.ModuleList(blocks)
            self.loc = nn.ModuleList([head(f, "loc", c) for f, c in zip(FEATURES, (64, 96), strict=True)])
            self.cls = nn.ModuleList([head(f, "cls", c) for f, c in zip(FEATURES, (64, 96), strict=True)])

        def heads(self, images: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
            x, feats = images, []
            for (name, _, _), block in zip(BODY, self.blocks, strict=True):
                x = block(x)  # multi_feat_2 reads multi_feat_1, the block before it
                if name in FEATURES:
                    feats.append(x)
            return [h(f) for h, f in zip(self.loc, feats, strict=True)], [h(f) for h, f in zip(self.cls, feats, strict=True)]

    class PortedSSD(detectors.TinyDetector):  # type: ignore[misc,name-defined]
        """The SSD's candidates (decoded boxes [B, N, 4], class scores [B, C, N]) under TinyDetector's heads."""

        def __init__(self) -> None:
            nn.Module.__init__(self)
            self.layout, self.tied, self.classes = layout, False, CLASSES
            self.body = Body()
            self.register_buffer("anchors", torch.from_numpy(anchors()))

        def forward(self, data: torch.Tensor):  # type: ignore[no-untyped-def]  # the input named as the SSD's
            return super().forward(data)

        def _candidates(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            locs, clss = self.body.heads(images)
            b = images.shape[0]
            loc = torch.cat([t.permute(0, 2, 3, 1).reshape(b, -1) for t in locs], 1).reshape(b, -1, 4)
            cls = torch.cat([t.permute(0, 2, 3, 1).reshape(b, -1) for t in clss], 1).reshape(b, -1, CLASSES + 1)
            a = self.anchors
            aw, ah = a[:, 2] - a[:, 0], a[:, 3] - a[:, 1]
            ax, ay = (a[:, 0] + a[:, 2]) / 2, (a[:, 1] + a[:, 3]) / 2
            ox = loc[..., 0] * VARIANCES[0] * aw + ax
            oy = loc[..., 1] * VARIANCES[1] * ah + ay
            ow = torch.exp(loc[..., 2] * VARIANCES[2]) * aw / 2
            oh = torch.exp(loc[..., 3] * VARIANCES[3]) * ah / 2
            boxes = torch.stack([ox - ow, oy - oh, ox + ow, oy + oh], -1).clamp(0.0, 1.0)
            scores = torch.softmax(cls, -1)[..., 1:].transpose(1, 2)  # [B, C, N], background dropped
            return boxes, scores

    class SSDClassifier(nn.Module):
        """Which shapes an image holds (a multi-label classifier, [B, C] in [0, 1]): per anchor the class softmax on
        both feature maps, the coarse map's upsampled (bilinear, half-pixel) onto the fine one, the larger of the
        two, the most confident anchor and cell per class (background dropped)."""

        def __init__(self) -> None:
            super().__init__()
            self.body = Body()

        def forward(self, data: torch.Tensor) -> torch.Tensor:
            _, (fine, coarse) = self.body.heads(data)
            b = data.shape[0]

            def probs(logits: torch.Tensor) -> torch.Tensor:  # [B, A * (C+1), h, w] -> same, softmax per anchor
                h, w = logits.shape[-2:]
                p = torch.softmax(logits.reshape(b, ANCHORS_PER_CELL, CLASSES + 1, h, w), dim=2)
                return p.reshape(b, ANCHORS_PER_CELL * (CLASSES + 1), h, w)

            up = nn.functional.interpolate(probs(coarse), scale_factor=2.0, mode="bilinear", align_corners=False)
            both = torch.maximum(probs(fine), up).reshape(b, ANCHORS_PER_CELL, CLASSES + 1, -1)
            return both.amax(dim=(1, 3))[:, 1:]

    return (SSDClassifier() if classifier else PortedSSD()).eval()


# -- TensorFlow / Keras ----------------------------------------------------------------------------------

def keras_combined_nms(folder: Path, batch: int = 4, iou: float = 0.45, score: float = 0.3) -> Path:
    """Export (SavedModel, ``folder``/keras_ssd) the trained SSD as a Keras model on NHWC ``data``
    [batch, 64, 64, 3] ending in ``tf.image.combined_non_max_suppression`` (boxes xyxy, classes as floats)."""
    import keras
    import tensorflow as tf

    weights = load_weights()
    inp = keras.Input((SIZE, SIZE, 3), batch_size=batch, name="data")
    x = inp
    feats: dict[str, Any] = {}
    for name, cout, stride in BODY:
        src = feats["multi_feat_1"] if name == "multi_feat_2" else x
        y = keras.layers.ZeroPadding2D(1)(src)  # MXNet's symmetric pad 1 ("same" pads stride 2 on one side)
        conv = keras.layers.Conv2D(cout, 3, strides=stride, use_bias=False, name=f"{name}_conv")
        y = conv(y)
        bn = keras.layers.BatchNormalization(epsilon=1e-5, name=f"{name}_bn")
        y = keras.layers.ReLU()(bn(y))
        conv.set_weights([weights[f"{name}_conv_weight"].transpose(2, 3, 1, 0)])
        bn.set_weights([weights[f"{name}_bn_{k}"] for k in ("gamma", "beta", "moving_mean", "moving_var")])
        x = y
        if name in FEATURES:
            feats[name] = y
    locs: list[Any] = []
    clss: list[Any] = []
    for f in FEATURES:
        for kind, out in (("loc", locs), ("cls", clss)):
            w = weights[f"{f}_{kind}_pred_conv_weight"]
            conv = keras.layers.Conv2D(w.shape[0], 3, padding="same", name=f"{f}_{kind}_pred")  # stride 1: symmetric
            out.append(keras.layers.Flatten()(conv(feats[f])))
            conv.set_weights([w.transpose(2, 3, 1, 0), weights[f"{f}_{kind}_pred_conv_bias"]])
    loc = keras.layers.Reshape((-1, 4))(keras.layers.Concatenate(axis=1)(locs))
    cls = keras.layers.Reshape((-1, CLASSES + 1))(keras.layers.Concatenate(axis=1)(clss))

    class DecodeNMS(keras.layers.Layer):
        """MultiBoxDetection's decode on the anchors, softmax scores, then TF's combined NMS."""

        def call(self, loc: Any, cls: Any) -> Any:
            a = tf.constant(anchors())
            aw, ah = a[:, 2] - a[:, 0], a[:, 3] - a[:, 1]
            ax, ay = (a[:, 0] + a[:, 2]) / 2, (a[:, 1] + a[:, 3]) / 2
            ox = loc[..., 0] * VARIANCES[0] * aw + ax
            oy = loc[..., 1] * VARIANCES[1] * ah + ay
            ow = tf.exp(loc[..., 2] * VARIANCES[2]) * aw / 2
            oh = tf.exp(loc[..., 3] * VARIANCES[3]) * ah / 2
            boxes = tf.clip_by_value(tf.stack([ox - ow, oy - oh, ox + ow, oy + oh], -1), 0.0, 1.0)
            scores = tf.nn.softmax(cls, -1)[..., 1:]
            out = tf.image.combined_non_max_suppression(boxes[:, :, None, :], scores, 10, 20, iou_threshold=iou,
                                                        score_threshold=score, clip_boxes=False)
            return {"detection_boxes": out.nmsed_boxes, "detection_scores": out.nmsed_scores,
                    "detection_classes": out.nmsed_classes, "num_detections": out.valid_detections}

    model = keras.Model(inp, DecodeNMS()(loc, cls), name="keras_ssd")
    target = folder / "keras_ssd"
    if target.exists():
        shutil.rmtree(target)
    model.export(str(target), verbose=False)
    return target


def nhwc_feeds(nchw: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(nchw.transpose(0, 2, 3, 1))
