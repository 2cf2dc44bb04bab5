"""Box decode kinds and score activations of detection heads, as ONNX through a ``Builder``: one implementation
of each rule, registered by name in ``DECODERS`` / ``ACTIVATIONS`` and selected by name (``bridge.graft``'s
``--decode`` and ``--score-activation``; the SSD entry is ``nms.decode_halves``, the very decode the MXNet
MultiBoxDetection / box_decode lowerings emit).

Conventions: raw box values arrive x-first as [B, N, 4] (``dx, dy, dw, dh``, or corners / centre-size for the
direct kinds), keypoints as [B, N, K, 2] (x, y); anchors as ``AnchorValues`` (centres and sizes [1, N, 2],
optional YOLO strides [1, N, 2]); a decode returns corner boxes as two [B, N, 2] halves, (x1, y1) and (x2, y2).

Kinds (formulas with c = anchor centre, s = anchor size, g = stride, d = raw values):

- ``corners``: the values are (x1, y1, x2, y2) already; ``center-size``: (cx, cy, w, h), corners = c -/+ wh / 2.
- ``ssd``: centre = d_xy * v_xy * s + c, size = exp(d_wh * v_wh) * s (variances v), MXNet's float32 order.
  Keypoints: d * v_xy * s + c.
- ``linear`` (MediaPipe TensorsToDetectionsCalculator, BlazeFace / palm / pose heads): centre = d_xy / scale_xy
  * s + c, size = d_wh / scale_wh * s (``exp_size``: exp(d_wh / scale_wh) * s, MediaPipe's
  apply_exponential_on_box_size), box = centre -/+ size / 2. Keypoints: d / scale_xy * s + c. With
  fixed-size anchors (s = 1) the scales are the input size in pixels (128 for BlazeFace).
- ``yolo-v3``: centre = (sigmoid(d_xy) - 0.5) * g + c (c the cell centre: (cell + 0.5) * g), size = exp(d_wh) * s.
  No keypoints.
- ``yolo-v5``: centre = (2 sigmoid(d_xy) - 1) * g + c, size = (2 sigmoid(d_wh))^2 * s. Keypoints (YOLOv5-pose):
  (2 d - 1) * g + c.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from bridge.passes.contrib import nms
from bridge.rewriting.builder import Builder


@dataclass(frozen=True)
class AnchorValues:
    """Anchors in the graph: centres and sizes [1, N, 2] (x, y) float32; YOLO strides [1, N, 2] when known."""

    center: ir.Value
    size: ir.Value
    stride: ir.Value | None = None


@dataclass(frozen=True)
class DecodeSettings:
    """The constants of the decodes: SSD variances and the linear decode's scales, each (x, y, w, h)."""

    variances: tuple[float, float, float, float] = (0.1, 0.1, 0.2, 0.2)
    scales: tuple[float, float, float, float] = (1.0, 1.0, 1.0, 1.0)
    exp_size: bool = False


Halves = tuple[ir.Value, ir.Value]


@dataclass(frozen=True)
class DecodeKind:
    """One decode rule: ``boxes(b, raw [B, N, 4], anchors, settings) -> (x1y1, x2y2)``, ``keypoints(b, raw
    [B, N, K, 2], anchors, settings) -> [B, N, K, 2]`` (None: the kind has no keypoint rule), whether it reads
    anchors and strides."""

    boxes: Callable[[Builder, ir.Value, AnchorValues | None, DecodeSettings], Halves]
    keypoints: Callable[[Builder, ir.Value, AnchorValues | None, DecodeSettings], ir.Value] | None
    anchors: bool
    strides: bool = False


def _pairs(b: Builder, x: ir.Value) -> Halves:
    return b.slice(x, -1, 0, 2), b.slice(x, -1, 2, 4)


def _pair_const(b: Builder, x: float, y: float) -> ir.Value:
    """A float32 constant for an (x, y) pair: a scalar when both are equal (onnxruntime broadcasts scalars fast)."""
    fx, fy = float(np.float32(x)), float(np.float32(y))
    return b.f32(fx) if fx == fy else b.const(np.array([fx, fy], np.float32))


def _corners(b: Builder, center: ir.Value, size: ir.Value) -> Halves:
    half = b.op("Div", size, b.f32(2.0))
    return b.op("Sub", center, half), b.op("Add", center, half)


def _kp_anchors(b: Builder, anchors: AnchorValues) -> tuple[ir.Value, ir.Value]:
    """Anchor centre and size as [1, N, 1, 2], to broadcast over keypoints [B, N, K, 2]."""
    return b.unsqueeze(anchors.center, 2), b.unsqueeze(anchors.size, 2)


def _need(anchors: AnchorValues | None) -> AnchorValues:
    assert anchors is not None  # graft checks DecodeKind.anchors before it builds
    return anchors


def _corners_direct(b: Builder, raw: ir.Value, anchors: AnchorValues | None, s: DecodeSettings) -> Halves:
    return _pairs(b, raw)


def _center_size_direct(b: Builder, raw: ir.Value, anchors: AnchorValues | None, s: DecodeSettings) -> Halves:
    center, size = _pairs(b, raw)
    return _corners(b, center, size)


def _identity_keypoints(b: Builder, raw: ir.Value, anchors: AnchorValues | None, s: DecodeSettings) -> ir.Value:
    return raw


def _ssd(b: Builder, raw: ir.Value, anchors: AnchorValues | None, s: DecodeSettings) -> Halves:
    a = _need(anchors)
    return nms.decode_halves(b, raw, nms.AnchorParts(a.center, a.size), s.variances)


def _ssd_keypoints(b: Builder, raw: ir.Value, anchors: AnchorValues | None, s: DecodeSettings) -> ir.Value:
    center, size = _kp_anchors(b, _need(anchors))
    return b.op("Add", b.op("Mul", b.op("Mul", raw, _pair_const(b, *s.variances[:2])), size), center)


def _linear(b: Builder, raw: ir.Value, anchors: AnchorValues | None, s: DecodeSettings) -> Halves:
    # MediaPipe: x_center = x / x_scale * anchor.w + anchor.x_center; w = w / w_scale * anchor.w (or exp(w / w_scale))
    a = _need(anchors)
    d_xy, d_wh = _pairs(b, raw)
    center = b.op("Add", b.op("Mul", b.op("Div", d_xy, _pair_const(b, *s.scales[:2])), a.size), a.center)
    t_wh = b.op("Div", d_wh, _pair_const(b, *s.scales[2:]))
    size = b.op("Mul", b.op("Exp", t_wh) if s.exp_size else t_wh, a.size)
    return _corners(b, center, size)


def _linear_keypoints(b: Builder, raw: ir.Value, anchors: AnchorValues | None, s: DecodeSettings) -> ir.Value:
    center, size = _kp_anchors(b, _need(anchors))
    return b.op("Add", b.op("Mul", b.op("Div", raw, _pair_const(b, *s.scales[:2])), size), center)


def _stride(anchors: AnchorValues | None) -> ir.Value:
    a = _need(anchors)
    assert a.stride is not None  # graft checks DecodeKind.strides before it builds
    return a.stride


def _yolo_v3(b: Builder, raw: ir.Value, anchors: AnchorValues | None, s: DecodeSettings) -> Halves:
    a = _need(anchors)
    d_xy, d_wh = _pairs(b, raw)
    center = b.op("Add", b.op("Mul", b.op("Sub", b.op("Sigmoid", d_xy), b.f32(0.5)), _stride(anchors)), a.center)
    size = b.op("Mul", b.op("Exp", d_wh), a.size)
    return _corners(b, center, size)


def _yolo_v5(b: Builder, raw: ir.Value, anchors: AnchorValues | None, s: DecodeSettings) -> Halves:
    a = _need(anchors)
    d_xy, d_wh = _pairs(b, raw)
    two = b.f32(2.0)
    center = b.op("Add", b.op("Mul", b.op("Sub", b.op("Mul", b.op("Sigmoid", d_xy), two), b.f32(1.0)),
                              _stride(anchors)), a.center)
    grown = b.op("Mul", b.op("Sigmoid", d_wh), two)
    size = b.op("Mul", b.op("Mul", grown, grown), a.size)
    return _corners(b, center, size)


def _yolo_v5_keypoints(b: Builder, raw: ir.Value, anchors: AnchorValues | None, s: DecodeSettings) -> ir.Value:
    center, _ = _kp_anchors(b, _need(anchors))
    stride = b.unsqueeze(_stride(anchors), 2)
    return b.op("Add", b.op("Mul", b.op("Sub", b.op("Mul", raw, b.f32(2.0)), b.f32(1.0)), stride), center)


DECODERS: dict[str, DecodeKind] = {
    "corners": DecodeKind(_corners_direct, _identity_keypoints, anchors=False),
    "center-size": DecodeKind(_center_size_direct, _identity_keypoints, anchors=False),
    "ssd": DecodeKind(_ssd, _ssd_keypoints, anchors=True),
    "linear": DecodeKind(_linear, _linear_keypoints, anchors=True),
    "yolo-v3": DecodeKind(_yolo_v3, None, anchors=True, strides=True),
    "yolo-v5": DecodeKind(_yolo_v5, _yolo_v5_keypoints, anchors=True, strides=True),
}


def softmax_last(b: Builder, x: ir.Value) -> ir.Value:
    return b.op("Softmax", x, axis=-1)


def sigmoid(b: Builder, x: ir.Value) -> ir.Value:
    return b.op("Sigmoid", x)


def identity(b: Builder, x: ir.Value) -> ir.Value:
    return x


# score activations over the class axis (the last), applied after the optional clip of the raw scores
ACTIVATIONS: dict[str, Callable[[Builder, ir.Value], ir.Value]] = {
    "none": identity,
    "sigmoid": sigmoid,
    "softmax": softmax_last,
}


def activate_scores(b: Builder, raw: ir.Value, activation: str, clip: float | None) -> ir.Value:
    """Scores [B, N, C] from raw head values: clipped to [-clip, clip] first (MediaPipe's score_clipping_thresh),
    then the activation."""
    if clip is not None:
        raw = b.op("Clip", raw, b.f32(-clip), b.f32(clip))
    return ACTIVATIONS[activation](b, raw)


__all__ = ["ACTIVATIONS", "DECODERS", "AnchorValues", "DecodeKind", "DecodeSettings", "activate_scores"]
