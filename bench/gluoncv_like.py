"""GluonCV-style SSDs (and a YOLOv3) end to end: the deploy graph a GluonCV SSD export has after its detection head, on the
backbones of ``bench.ssd_models``, converted by bridge and run in onnxruntime against MXNet.

GluonCV (gluoncv/model_zoo/ssd/ssd.py, 0.10) ends an SSD in: class scores ``softmax(axis=-1)`` [B, N, C+1];
boxes ``contrib.box_decode`` of the location predictions against the anchors (NormalizedBoxCenterDecoder,
stds 0.1/0.1/0.2/0.2, dw/dh clipped at log(1000/16)); ``MultiPerClassDecoder`` (scores of classes 1..,
class id where the score is over 0.01, else id -1 and score 0); one [B, N, 6] block (id, score, box) per
class concatenated to [B, N * C, 6]; ``contrib.box_nms`` (IoU 0.45, topk 400, valid 0.01, per class); the
first 100 rows split into ids, scores and boxes. gluoncv itself cannot be installed beside torch 2 here
(README: dependencies), so the head is written with ``mx.sym`` the way GluonCV's hybridized graph has it;
anchors are MultiBoxPrior's (corner format, which box_decode takes with ``format='corner'``).

YOLOv3 (gluoncv/model_zoo/yolo/yolo3.py): per scale YOLOOutputV3's inference branch - sigmoid centres plus
grid offsets times the stride, exp scales times the anchors, class scores sigmoid(class) x sigmoid(objectness),
every (box, class) a row via tile / transpose - then the scales concatenated, box_nms and the split; the
offsets and anchors are constants of the export, as GluonCV stores them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.ssd_bench import ort_session
from bench.ssd_models import CACHE, SSDSpec
from bridge.bench.timing import Timing, interleaved

# GluonCV SSD defaults
NMS_THRESH, NMS_TOPK, POST_NMS, SCORE_THRESH = 0.45, 400, 100, 0.01
STDS = (0.1, 0.1, 0.2, 0.2)

# the GluonCV-style models: a backbone of bench.ssd_models with GluonCV's detection head
GLUONCV_MODELS = {"gluoncv_vgg_like_300": "vgg_like_300", "gluoncv_mobilenet_like_256": "mobilenet_like_256",
                  "gluoncv_tiny": "tiny"}
# GluonCV-style YOLOv3 (YOLOOutputV3's inference branch + box_nms): name -> (input side, classes)
YOLO_MODELS = {"gluoncv_yolo3_like_320": (320, 80), "gluoncv_yolo3_like_128": (128, 8)}


def gluoncv_symbol(mx: Any, spec: SSDSpec, anchor_scale: float = 1.0) -> Any:
    """Backbone + heads as ``bench.ssd_models.ssd_symbol``, then GluonCV's decoder, per-class layout and box_nms.

    ``anchor_scale``: the anchors' unit (GluonCV's are in input pixels: the input side; 1 keeps them normalised)."""
    return gluoncv_detector(mx, spec, *gluoncv_heads(mx, spec, mx.sym.var("data")), anchor_scale=anchor_scale)


def gluoncv_heads(mx: Any, spec: SSDSpec, data: Any) -> tuple[Any, Any, Any]:
    """Backbone and per-layer heads: class predictions [B, N, C+1], box predictions [B, N, 4], anchors [1, N, 4]
    (MultiBoxPrior's, corner format, normalised): what GluonCV's SSD returns in training mode."""
    feats = spec.backbone(mx, data)
    c1 = spec.num_classes + 1
    locs, clss, anchors = [], [], []
    for i, (feat, layer) in enumerate(zip(feats, spec.layers, strict=True)):
        a = len(layer.sizes) + len(layer.ratios) - 1
        loc = mx.sym.Convolution(feat, kernel=(3, 3), pad=(1, 1), num_filter=4 * a, name=f"f{i}_loc_pred_conv")
        locs.append(mx.sym.Flatten(mx.sym.transpose(loc, axes=(0, 2, 3, 1))))
        cls = mx.sym.Convolution(feat, kernel=(3, 3), pad=(1, 1), num_filter=a * c1, name=f"f{i}_cls_pred_conv")
        clss.append(mx.sym.Flatten(mx.sym.transpose(cls, axes=(0, 2, 3, 1))))
        anchors.append(mx.sym.Flatten(mx.sym.contrib.MultiBoxPrior(feat, sizes=layer.sizes, ratios=layer.ratios,
                                                                   clip=False, name=f"f{i}_anchors")))
    cls_preds = mx.sym.reshape(mx.sym.concat(*clss, dim=1), shape=(0, -1, c1))  # [B, N, C+1]
    box_preds = mx.sym.reshape(mx.sym.concat(*locs, dim=1), shape=(0, -1, 4))
    anchor = mx.sym.reshape(mx.sym.concat(*anchors, dim=1), shape=(1, -1, 4))
    return cls_preds, box_preds, anchor


def gluoncv_detector(mx: Any, spec: SSDSpec, cls_preds: Any, box_preds: Any, anchor: Any,
                     anchor_scale: float = 1.0) -> Any:
    """GluonCV's inference head (``gluoncv_head``) on :func:`gluoncv_heads`' outputs, the anchors in units of
    ``anchor_scale``."""
    if anchor_scale != 1.0:
        anchor = anchor * anchor_scale
    return gluoncv_head(mx, box_preds, cls_preds, anchor, spec.num_classes)


def gluoncv_head(mx: Any, box_preds: Any, cls_preds: Any, anchor: Any, num_classes: int) -> Any:
    """GluonCV's SSD head on location predictions [B, N, 4], class logits [B, N, C+1] (background first) and
    corner anchors [1, N, 4]: decoder, softmax, MultiPerClassDecoder, box_nms and the (ids, scores, bboxes) split."""
    bboxes = mx.sym.contrib.box_decode(box_preds, anchor, std0=STDS[0], std1=STDS[1], std2=STDS[2], std3=STDS[3],
                                       clip=math.log(1000.0 / 16), format="corner", name="box_decode")
    probs = mx.sym.softmax(cls_preds, axis=-1)
    # MultiPerClassDecoder (gluoncv/nn/coder.py)
    scores = mx.sym.slice_axis(probs, axis=-1, begin=1, end=None)  # [B, N, C]
    template = mx.sym.zeros_like(mx.sym.slice_axis(scores, axis=-1, begin=0, end=1))
    cls_ids = mx.sym.broadcast_add(template, mx.sym.reshape(mx.sym.arange(num_classes), shape=(1, 1, -1)))
    mask = scores > SCORE_THRESH
    cls_ids = mx.sym.where(mask, cls_ids, mx.sym.ones_like(cls_ids) * -1)
    scores = mx.sym.where(mask, scores, mx.sym.zeros_like(scores))
    results = [mx.sym.concat(mx.sym.slice_axis(cls_ids, axis=-1, begin=i, end=i + 1),
                             mx.sym.slice_axis(scores, axis=-1, begin=i, end=i + 1), bboxes, dim=-1)
               for i in range(num_classes)]
    result = mx.sym.concat(*results, dim=1)  # [B, N * C, 6]
    result = mx.sym.contrib.box_nms(result, overlap_thresh=NMS_THRESH, topk=NMS_TOPK, valid_thresh=SCORE_THRESH,
                                    id_index=0, score_index=1, coord_start=2, force_suppress=False)
    result = mx.sym.slice_axis(result, axis=1, begin=0, end=POST_NMS)
    ids = mx.sym.slice_axis(result, axis=2, begin=0, end=1, name="ids")
    out_scores = mx.sym.slice_axis(result, axis=2, begin=1, end=2, name="scores")
    out_boxes = mx.sym.slice_axis(result, axis=2, begin=2, end=6, name="bboxes")
    return mx.sym.Group([ids, out_scores, out_boxes])


def yolo_backbone(mx: Any, data: Any) -> list[Any]:
    """A MobileNet-like body with three outputs at strides 8, 16, 32 (YOLOv3's scales)."""
    from bench.ssd_models import _conv

    x = _conv(mx, data, "y_conv0", 16, stride=2, bn=True)
    feats, cin = [], 16
    for i, cout in enumerate([32, 64, 128, 128], start=1):  # each block halves the side
        x = _conv(mx, x, f"y_conv{i}_dw", cin, group=cin, stride=2, bn=True)
        x = _conv(mx, x, f"y_conv{i}_pw", cout, kernel=1, bn=True)
        cin = cout
        if i >= 2:
            feats.append(x)
    return feats  # strides 8, 16, 32


YOLO_ANCHORS = (((10, 13), (16, 30), (33, 23)), ((30, 61), (62, 45), (59, 119)), ((116, 90), (156, 198), (373, 326)))


def yolo3_symbol(mx: Any, size: int, num_classes: int) -> Any:
    """GluonCV 0.10's YOLOOutputV3 (inference branch) on each scale, then YOLOV3's concat + box_nms + split."""
    data = mx.sym.var("data")
    feats = yolo_backbone(mx, data)
    num_pred = 5 + num_classes
    all_detections = []
    for i, (feat, anchors) in enumerate(zip(feats, YOLO_ANCHORS, strict=True)):
        stride = 8 * 2**i
        side = size // stride
        a = len(anchors)
        pred = mx.sym.Convolution(feat, kernel=(1, 1), num_filter=a * num_pred, name=f"yolooutput{i}_conv")
        pred = mx.sym.reshape(pred, shape=(0, a * num_pred, -1))
        pred = mx.sym.reshape(mx.sym.transpose(pred, axes=(0, 2, 1)), shape=(0, -1, a, num_pred))  # [B, HW, A, P]
        raw_centers = mx.sym.slice_axis(pred, axis=-1, begin=0, end=2)
        raw_scales = mx.sym.slice_axis(pred, axis=-1, begin=2, end=4)
        objness = mx.sym.slice_axis(pred, axis=-1, begin=4, end=5)
        class_pred = mx.sym.slice_axis(pred, axis=-1, begin=5, end=None)
        offsets = mx.sym.var(f"yolooutput{i}_offsets", shape=(1, side * side, 1, 2))  # a constant of the export
        anchor = mx.sym.var(f"yolooutput{i}_anchors", shape=(1, 1, a, 2))
        centers = mx.sym.broadcast_add(mx.sym.sigmoid(raw_centers), offsets) * stride
        scales = mx.sym.broadcast_mul(mx.sym.exp(raw_scales), anchor)
        class_score = mx.sym.broadcast_mul(mx.sym.sigmoid(class_pred), mx.sym.sigmoid(objness))
        wh = scales / 2.0
        bbox = mx.sym.concat(centers - wh, centers + wh, dim=-1)
        bboxes = mx.sym.tile(bbox, reps=(num_classes, 1, 1, 1, 1))  # [C, B, HW, A, 4]
        scores = mx.sym.expand_dims(mx.sym.transpose(class_score, axes=(3, 0, 1, 2)), axis=-1)
        ids = mx.sym.broadcast_add(scores * 0, mx.sym.reshape(mx.sym.arange(0, num_classes), shape=(0, 1, 1, 1, 1)))
        det = mx.sym.concat(ids, scores, bboxes, dim=-1)
        all_detections.append(mx.sym.reshape(mx.sym.transpose(det, axes=(1, 0, 2, 3, 4)), shape=(0, -1, 6)))
    result = mx.sym.concat(*all_detections, dim=1)
    result = mx.sym.contrib.box_nms(result, overlap_thresh=NMS_THRESH, valid_thresh=SCORE_THRESH, topk=NMS_TOPK,
                                    id_index=0, score_index=1, coord_start=2, force_suppress=False)
    result = mx.sym.slice_axis(result, axis=1, begin=0, end=POST_NMS)
    return mx.sym.Group([mx.sym.slice_axis(result, axis=-1, begin=0, end=1),
                         mx.sym.slice_axis(result, axis=-1, begin=1, end=2),
                         mx.sym.slice_axis(result, axis=-1, begin=2, end=None)])


def _yolo_params(mx: Any, sym: Any, size: int) -> dict[str, Any]:
    """He-normal weights, BatchNorm statistics, and the offsets / anchors constants GluonCV stores."""
    rng = np.random.default_rng(0)
    arg_shapes, _, aux_shapes = sym.infer_shape(data=(1, 3, size, size))
    params: dict[str, Any] = {}
    for name, shp in zip(sym.list_arguments(), arg_shapes, strict=True):
        if name == "data":
            continue
        if name.endswith("_offsets"):
            side = math.isqrt(shp[1])
            ys, xs = np.meshgrid(np.arange(side), np.arange(side), indexing="ij")
            arr = np.stack([xs, ys], -1).reshape(1, side * side, 1, 2).astype(np.float32)
        elif name.endswith("_anchors"):
            arr = np.array(YOLO_ANCHORS[int(name[len("yolooutput")])], np.float32).reshape(shp)
        elif name.endswith("_weight"):
            arr = (rng.standard_normal(shp) * np.sqrt(2.0 / np.prod(shp[1:]))).astype(np.float32)
        elif name.endswith("gamma"):
            arr = rng.uniform(0.8, 1.2, shp).astype(np.float32)
        else:
            arr = (rng.standard_normal(shp) * 0.05).astype(np.float32)
        params[f"arg:{name}"] = mx.nd.array(arr)
    for name, shp in zip(sym.list_auxiliary_states(), aux_shapes, strict=True):
        arr = rng.uniform(0.8, 1.2, shp) if name.endswith("var") else rng.standard_normal(shp) * 0.05
        params[f"aux:{name}"] = mx.nd.array(arr.astype(np.float32))
    return params


# GluonCV-style Faster / Mask R-CNN (gluoncv/model_zoo/rcnn/, 0.10): name -> (input side, classes, mask head,
# FPN-style level padding)
RCNN_MODELS = {"gluoncv_faster_rcnn_like_128": (128, 8, False, False),
               "gluoncv_mask_rcnn_like_128": (128, 8, True, False),
               "gluoncv_mask_rcnn_fpn_like_128": (128, 8, True, True)}
RPN_STRIDE, RPN_SIZES, RPN_RATIOS = 16, (16, 32, 64), (0.5, 1.0, 2.0)
RPN_PRE, RPN_POST, RCNN_NMS, RCNN_TOPK, RCNN_POST = 200, 32, 0.3, 200, 50


def rpn_anchors(size: int) -> np.ndarray:
    """RPNAnchorGenerator's anchors (corner format, pixels) of a size x size input at RPN_STRIDE: [1, HW*A, 4]."""
    side = size // RPN_STRIDE
    base = []
    for r in RPN_RATIOS:
        for s in RPN_SIZES:
            w, h = s / math.sqrt(r), s * math.sqrt(r)
            base.append((-w / 2, -h / 2, w / 2, h / 2))
    ys, xs = np.meshgrid(np.arange(side), np.arange(side), indexing="ij")
    centers = (np.stack([xs, ys, xs, ys], -1).reshape(-1, 1, 4) + 0.5) * RPN_STRIDE
    return (centers + np.array(base)[None]).reshape(1, -1, 4).astype(np.float32)


def _center_decode(F: Any, deltas: Any, anchors: Any, stds: tuple[float, ...], clip: float) -> Any:
    """gluoncv/nn/coder.py NormalizedBoxCenterDecoder (corner anchors converted to centres by BBoxCornerToCenter)
    as R-CNN uses it: elementwise ops, anchors broadcast against the deltas."""
    xmin, ymin, xmax, ymax = F.split(anchors, axis=-1, num_outputs=4)
    aw, ah = xmax - xmin, ymax - ymin
    ax, ay = xmin + aw * 0.5, ymin + ah * 0.5
    px, py, pw, ph = F.split(deltas, axis=-1, num_outputs=4)
    ox = F.broadcast_add(F.broadcast_mul(px * stds[0], aw), ax)
    oy = F.broadcast_add(F.broadcast_mul(py * stds[1], ah), ay)
    ow = F.broadcast_mul(F.exp(F.minimum(pw * stds[2], clip)), aw) * 0.5
    oh = F.broadcast_mul(F.exp(F.minimum(ph * stds[3], clip)), ah) * 0.5
    return F.concat(ox - ow, oy - oh, ox + ow, oy + oh, dim=-1)


def rcnn_symbol(mx: Any, size: int, num_classes: int, masks: bool, fpn_pad: bool) -> Any:
    """GluonCV 0.10's Faster R-CNN inference graph on a small conv body: RPN (sigmoid scores, deltas decoded against
    constant anchors, clip to the image, min-size mask with -1 fill, box_nms IoU 0.7, the top RPN_POST), rois with
    their batch index (arange over the batch: any batch size), ROIAlign, a dense head (softmax scores,
    per-class boxes decoded against the proposals with stds 0.1/0.1/0.2/0.2), MultiPerClassDecoder rows, box_nms
    per class and the split into ids / scores / boxes; Mask R-CNN adds ROIAlign on the kept boxes and a
    sigmoid mask head. ``fpn_pad``: each roi is pooled twice as by two FPN levels, every roi going to one level
    and padded with batch index -1 in the other (gluoncv's _pyramid_roi_feats), the two summed: MXNet leaves
    the padded rows unwritten."""
    from bench.ssd_models import _conv

    F = mx.sym
    data = F.var("data")
    x = _conv(mx, data, "rc_conv0", 16, stride=2, bn=True)
    for i, c in enumerate([24, 32, 32], start=1):
        x = _conv(mx, x, f"rc_conv{i}", c, stride=2, bn=True)  # stride 16
    feat = x
    a = len(RPN_SIZES) * len(RPN_RATIOS)
    rpn = _conv(mx, feat, "rpn_conv", 32)
    score = F.sigmoid(F.reshape(F.transpose(F.Convolution(rpn, kernel=(1, 1), num_filter=a, name="rpn_score"),
                                            axes=(0, 2, 3, 1)), shape=(0, -1, 1)))
    loc = F.reshape(F.transpose(F.Convolution(rpn, kernel=(1, 1), num_filter=4 * a, name="rpn_loc"),
                                axes=(0, 2, 3, 1)), shape=(0, -1, 4))
    anchors = F.var("rpn_anchors", shape=rpn_anchors(size).shape)  # a constant of the export
    roi = _center_decode(F, loc, anchors, (1.0, 1.0, 1.0, 1.0), math.log(1000.0 / 16))
    window = F.ones_like(F.slice_axis(roi, axis=1, begin=0, end=1)) * (size - 1.0)
    roi = F.broadcast_minimum(F.maximum(roi, 0.0), window)
    xmin, ymin, xmax, ymax = F.split(roi, num_outputs=4, axis=-1)
    invalid = (xmax - xmin < 4.0) + (ymax - ymin < 4.0)
    score = F.where(invalid, F.ones_like(invalid) * -1, score)
    invalid4 = F.broadcast_axes(invalid, axis=2, size=4)
    roi = F.where(invalid4, F.ones_like(invalid4) * -1, roi)
    pre = F.contrib.box_nms(F.concat(score, roi, dim=-1), overlap_thresh=0.7, topk=RPN_PRE, coord_start=1,
                            score_index=0, id_index=-1, force_suppress=True)
    pre = F.slice_axis(pre, axis=1, begin=0, end=RPN_POST)
    rpn_box = F.slice_axis(pre, axis=-1, begin=1, end=None)  # [B, P, 4]

    def with_batch_index(boxes: Any) -> Any:  # [B, K, 4] -> [B * K, 5]
        bidx = F.broadcast_like(F.reshape(F.contrib.arange_like(boxes, axis=0), shape=(-1, 1, 1)),
                                F.slice_axis(boxes, axis=-1, begin=0, end=1))
        return F.reshape(F.concat(bidx, boxes, dim=-1), shape=(-1, 5))

    rois = with_batch_index(rpn_box)

    def pool(rois: Any, side: int, name: str) -> Any:
        if not fpn_pad:
            return F.contrib.ROIAlign(feat, rois, pooled_size=(side, side), spatial_scale=1.0 / RPN_STRIDE,
                                      sample_ratio=2, name=name)
        bidx = F.slice_axis(rois, axis=-1, begin=0, end=1)
        area = (F.slice_axis(rois, axis=-1, begin=3, end=4) - F.slice_axis(rois, axis=-1, begin=1, end=2)) * \
            (F.slice_axis(rois, axis=-1, begin=4, end=5) - F.slice_axis(rois, axis=-1, begin=2, end=3))
        small = area < 32.0 * 32.0
        levels = []
        for k, on in enumerate((small, 1 - small)):
            level_rois = F.concat(F.where(on, bidx, F.ones_like(bidx) * -1), F.slice_axis(rois, axis=-1, begin=1,
                                                                                         end=None), dim=-1)
            levels.append(F.contrib.ROIAlign(feat, level_rois, pooled_size=(side, side), sample_ratio=2,
                                             spatial_scale=1.0 / RPN_STRIDE, name=f"{name}_level{k}"))
        return F.ElementWiseSum(*levels, name=f"{name}_sum")

    pooled = pool(rois, 7, "box_roi_align")
    top = F.Activation(F.FullyConnected(pooled, num_hidden=64, name="box_fc"), act_type="relu")
    cls_pred = F.reshape(F.FullyConnected(top, num_hidden=num_classes + 1, name="class_predictor"),
                         shape=(-1, RPN_POST, num_classes + 1))
    box_pred = F.reshape(F.FullyConnected(top, num_hidden=num_classes * 4, name="box_predictor"),
                         shape=(-1, RPN_POST, num_classes, 4))
    probs = F.softmax(cls_pred, axis=-1)
    scores = F.slice_axis(probs, axis=-1, begin=1, end=None)  # [B, P, C]; MultiPerClassDecoder
    template = F.zeros_like(F.slice_axis(scores, axis=-1, begin=0, end=1))
    cls_ids = F.broadcast_add(template, F.reshape(F.arange(num_classes), shape=(1, 1, -1)))
    mask = scores > 0.001
    cls_ids = F.where(mask, cls_ids, F.ones_like(cls_ids) * -1)
    scores = F.where(mask, scores, F.zeros_like(scores))
    rows = []
    for c in range(num_classes):  # NormalizedPerClassBoxCenterEncoder's decode, one class at a time
        deltas = F.reshape(F.slice_axis(box_pred, axis=2, begin=c, end=c + 1), shape=(0, 0, 4))
        boxes = _center_decode(F, deltas, rpn_box, STDS, math.log(1000.0 / 16))
        rows.append(F.concat(F.slice_axis(cls_ids, axis=-1, begin=c, end=c + 1),
                             F.slice_axis(scores, axis=-1, begin=c, end=c + 1), boxes, dim=-1))
    result = F.contrib.box_nms(F.concat(*rows, dim=1), overlap_thresh=RCNN_NMS, valid_thresh=0.001, topk=RCNN_TOPK,
                               id_index=0, score_index=1, coord_start=2, force_suppress=False)
    result = F.slice_axis(result, axis=1, begin=0, end=RCNN_POST)
    ids = F.slice_axis(result, axis=-1, begin=0, end=1, name="ids")
    out_scores = F.slice_axis(result, axis=-1, begin=1, end=2, name="scores")
    bboxes = F.slice_axis(result, axis=-1, begin=2, end=None, name="bboxes")
    outputs = [ids, out_scores, bboxes]
    if masks:
        mpool = pool(with_batch_index(bboxes), 14, "mask_roi_align")
        m = F.sigmoid(F.Convolution(mpool, kernel=(3, 3), pad=(1, 1), num_filter=1, name="mask_conv"))
        outputs.append(F.reshape(m, shape=(-1, RCNN_POST, 14, 14), name="masks"))
    return F.Group(outputs)


def _rcnn_params(mx: Any, sym: Any, size: int) -> dict[str, Any]:
    """He-normal weights, BatchNorm statistics near 1, and the RPN anchors constant."""
    rng = np.random.default_rng(0)
    arg_shapes, _, aux_shapes = sym.infer_shape(data=(1, 3, size, size))
    params: dict[str, Any] = {}
    for name, shp in zip(sym.list_arguments(), arg_shapes, strict=True):
        if name == "data":
            continue
        if name == "rpn_anchors":
            arr = rpn_anchors(size)
        elif name.endswith("_weight"):
            arr = (rng.standard_normal(shp) * np.sqrt(2.0 / np.prod(shp[1:]))).astype(np.float32)
        elif name.endswith("gamma"):
            arr = rng.uniform(0.8, 1.2, shp).astype(np.float32)
        else:
            arr = (rng.standard_normal(shp) * 0.05).astype(np.float32)
        params[f"arg:{name}"] = mx.nd.array(arr)
    for name, shp in zip(sym.list_auxiliary_states(), aux_shapes, strict=True):
        arr = rng.uniform(0.8, 1.2, shp) if name.endswith("var") else rng.standard_normal(shp) * 0.05
        params[f"aux:{name}"] = mx.nd.array(arr.astype(np.float32))
    return params


@dataclass(frozen=True)
class GluonBuilt:
    name: str
    spec: SSDSpec
    symbol: Path
    params: Path
    num_anchors: int


def build_gluoncv(mx: Any, name: str, cache: Path = CACHE) -> GluonBuilt:
    """The checkpoint of GluonCV-style model ``name``: the backbone's weights are its ssd_models twin's
    (the YOLOv3-style model gets its own)."""
    from bench.ssd_models import build

    if name in RCNN_MODELS:
        size, classes, masks, fpn_pad = RCNN_MODELS[name]
        kind = "Mask" if masks else "Faster"
        spec = SSDSpec(name, size, classes, yolo_backbone, (), {}, f"GluonCV-style {kind} R-CNN, {size} px, {classes} "
                       "classes" + (", FPN-style level padding" if fpn_pad else ""))
        symbol, params = cache / f"{name}-symbol.json", cache / f"{name}-0000.params"
        cache.mkdir(parents=True, exist_ok=True)
        sym = rcnn_symbol(mx, size, classes, masks, fpn_pad)
        if not (symbol.exists() and params.exists()):
            sym.save(str(symbol))
            mx.nd.save(str(params), _rcnn_params(mx, sym, size))
        return GluonBuilt(name, spec, symbol, params, RPN_POST)
    if name in YOLO_MODELS:
        size, classes = YOLO_MODELS[name]
        spec = SSDSpec(name, size, classes, yolo_backbone, (), {}, f"GluonCV-style YOLOv3, {size} px, {classes} classes")
        symbol, params = cache / f"{name}-symbol.json", cache / f"{name}-0000.params"
        cache.mkdir(parents=True, exist_ok=True)
        sym = yolo3_symbol(mx, size, classes)
        if not (symbol.exists() and params.exists()):
            sym.save(str(symbol))
            mx.nd.save(str(params), _yolo_params(mx, sym, size))
        boxes = sum((size // (8 * 2**i)) ** 2 * 3 for i in range(3))
        return GluonBuilt(name, spec, symbol, params, boxes)

    twin = build(mx, GLUONCV_MODELS[name], cache)
    spec = twin.spec
    symbol = cache / f"{name}-symbol.json"
    params = cache / f"{name}-0000.params"
    sym = gluoncv_symbol(mx, spec)
    if not symbol.exists():
        tmp = cache / f"{name}.tmp-symbol.json"
        sym.save(str(tmp))
        tmp.replace(symbol)
    if not params.exists() or params.stat().st_mtime < twin.params.stat().st_mtime:
        params.write_bytes(twin.params.read_bytes())  # same argument names: the twin's weights
    return GluonBuilt(name, spec, symbol, params, twin.num_anchors)


def _detections(ids: np.ndarray, scores: np.ndarray, boxes: np.ndarray) -> list[Any]:
    from bridge.validation.detection.matching import Detections

    out = []
    for i in range(ids.shape[0]):
        keep = ids[i, :, 0] >= 0
        out.append(Detections(boxes[i][keep], scores[i, keep, 0], ids[i, keep, 0].astype(np.int64)))
    return out


@dataclass
class GluonRow:
    name: str
    batch: int
    mxnet: Timing
    ort: Timing
    parity: bool

    @property
    def ratio(self) -> float:
        return self.mxnet.median / self.ort.median


def bench_gluoncv(mx: Any, built: GluonBuilt, batch: int, *, threads: int, rounds: int, workdir: Path) -> GluonRow:
    from bridge import api
    from bridge.validation.detection.matching import compare_detections

    size = built.spec.size
    out = workdir / f"{built.name}-b{batch}.onnx"
    if not out.exists():
        api.convert(str(built.symbol), out, inputs=[f"data:{batch},3,{size},{size}"], validate=[])
    session = ort_session(out, threads)
    sym, args, aux = mx.model.load_checkpoint(str(built.symbol).removesuffix("-symbol.json"), 0)
    mod = mx.mod.Module(sym, data_names=["data"], label_names=None, context=mx.cpu())
    mod.bind(data_shapes=[("data", (batch, 3, size, size))], for_training=False)
    mod.set_params(args, aux, allow_missing=False)
    x = np.random.default_rng(batch).uniform(-1, 1, (batch, 3, size, size)).astype(np.float32)

    def mx_run() -> list[np.ndarray]:
        mod.forward(mx.io.DataBatch(data=[mx.nd.array(x)]), is_train=False)
        return [o.asnumpy() for o in mod.get_outputs()]

    def ort_run() -> list[np.ndarray]:
        return session.run(None, {"data": x})

    ref, got = mx_run(), ort_run()
    cmp = compare_detections(_detections(*ref), _detections(*got))
    parity = cmp.passed and cmp.matched > 0  # something was compared: detections exist on both sides
    ways: dict[str, Callable[[], object]] = {"mxnet": mx_run, "ort": ort_run}
    t = interleaved(ways, rounds)
    return GluonRow(built.name, batch, t["mxnet"], t["ort"], parity)


__all__ = ["GLUONCV_MODELS", "GluonRow", "bench_gluoncv", "build_gluoncv", "gluoncv_detector", "gluoncv_head",
           "gluoncv_heads", "gluoncv_symbol"]
