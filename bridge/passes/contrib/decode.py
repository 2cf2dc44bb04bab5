"""Box decode kinds and score activations of detection heads, as ONNX through a ``Builder``: one implementation
of each rule, registered by name in ``DECODERS`` / ``ACTIVATIONS`` and selected by name (``bridge.graft``'s
``--decode`` and ``--score-activation``; the MXNet MultiBoxDetection / box_decode lowerings build their SSD
variance decode through the same ``ssd`` entry, with ``ssd_decode``).

Conventions: raw box values arrive x-first as [B, N, 4] (``dx, dy, dw, dh``, or corners / centre-size for the
direct kinds), keypoints as [B, N, K, 2] (x, y); anchors as ``AnchorValues`` (centres and sizes [1, N, 2],
optional YOLO strides [1, N, 2]); a decode returns corner boxes as two [B, N, 2] halves, (x1, y1) and (x2, y2).

Kinds (formulas with c = anchor centre, s = anchor size, g = stride, d = raw values):

- ``corners``: the values are (x1, y1, x2, y2) already; ``center-size``: (cx, cy, w, h), corners = c -/+ wh / 2.
- ``ssd``: centre = d_xy * v_xy * s + c, size = exp(d_wh * v_wh) * s (variances v), MXNet's float32 order
  (``_ssd_rule``); ``exp_clip`` caps d_wh * v_wh before exp (box_decode's clip), ``clip_unit`` clamps the corners
  to [0, 1] (MultiBoxDetection's clip). Two layouts of the one rule: [B, N, 4] rows (``boxes``) and interleaved
  [B, 1, 2N] pairs (``interleaved``, the MultiBoxDetection lowering's fast path). Keypoints: d * v_xy * s + c.
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

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from bridge.passes.contrib import nms
from bridge.rewriting.builder import F32, Builder


@dataclass(frozen=True)
class AnchorValues:
    """Anchors in the graph: centres and sizes [1, N, 2] (x, y) float32; YOLO strides [1, N, 2] when known."""

    center: ir.Value
    size: ir.Value
    stride: ir.Value | None = None


@dataclass(frozen=True)
class DecodeSettings:
    """The constants of the decodes: SSD variances and the linear decode's scales, each (x, y, w, h); the SSD
    decode's MXNet clips (``exp_clip``: cap of d_wh * v_wh before exp; ``clip_unit``: corners clamped to [0, 1])."""

    variances: tuple[float, float, float, float] = (0.1, 0.1, 0.2, 0.2)
    scales: tuple[float, float, float, float] = (1.0, 1.0, 1.0, 1.0)
    exp_size: bool = False
    exp_clip: float | None = None
    clip_unit: bool = False


Halves = tuple[ir.Value, ir.Value]


@dataclass(frozen=True)
class DecodeKind:
    """One decode rule: ``boxes(b, raw [B, N, 4], anchors, settings) -> (x1y1, x2y2)``, ``keypoints(b, raw
    [B, N, K, 2], anchors, settings) -> [B, N, K, 2]`` (None: the kind has no keypoint rule), whether it reads
    anchors and strides; ``interleaved``: the same rule on raw values [B, N, 4] returning the halves as
    interleaved [B, 1, 2N] pairs (``nms.rows_from_pairs`` builds rows from them), where a kind has that layout."""

    boxes: Callable[[Builder, ir.Value, AnchorValues | None, DecodeSettings], Halves]
    keypoints: Callable[[Builder, ir.Value, AnchorValues | None, DecodeSettings], ir.Value] | None
    anchors: bool
    strides: bool = False
    interleaved: Callable[[Builder, ir.Value, AnchorValues | None, DecodeSettings], Halves] | None = None


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


def _ssd_rule(b: Builder, d_xy: ir.Value, d_wh: ir.Value, center: ir.Value, size: ir.Value,
              v_xy: Callable[[], ir.Value], v_wh: Callable[[], ir.Value], s: DecodeSettings) -> Halves:
    """The SSD variance decode on matching (x, y) layouts of deltas and anchors -> unclamped corner halves.

    Float32 order of operations as in MXNet (multibox_detection.cc TransformLocations and bounding_box-inl.h
    box_decode): ox = dx * v0 * aw + ax; ow = exp(dw * v2) * aw / 2; box = (ox - ow, oy - oh, ox + ow, oy + oh).
    exp runs in float64 and is rounded to float32 once: the correctly rounded expf. MXNet calls glibc's expf,
    which is not correctly rounded in near-halfway cases: measured on 400k N(0, 0.15) inputs it differs from
    this by 1 ulp on 0.06% (onnxruntime's float32 Exp on 3.4%, so float64 is the closest available; on
    vgg_like_300 7 of 34k boxes differ by 1 ulp). ``v_xy`` / ``v_wh`` make the layout's variance constants
    where they are first used."""
    o_xy = b.op("Add", b.op("Mul", b.op("Mul", d_xy, v_xy()), size), center)
    t_wh = b.op("Mul", d_wh, v_wh())
    if s.exp_clip is not None:
        t_wh = b.op("Min", t_wh, b.f32(s.exp_clip))
    e_wh = b.cast(b.op("Exp", b.cast(t_wh, ir.DataType.DOUBLE)), F32)
    o_wh = b.op("Div", b.op("Mul", e_wh, size), b.f32(2.0))
    return b.op("Sub", o_xy, o_wh), b.op("Add", o_xy, o_wh)


def _ssd(b: Builder, raw: ir.Value, anchors: AnchorValues | None, s: DecodeSettings) -> Halves:
    """``_ssd_rule`` on rows: deltas [B, N, 4] (dx, dy, dw, dh), anchors [1 or B, N, 2] -> (x1, y1), (x2, y2)."""
    a = _need(anchors)
    d_xy, d_wh = _pairs(b, raw)
    v = [float(np.float32(x)) for x in s.variances]
    # a scalar when x and y share the variance (SSD's 0.1, 0.1, 0.2, 0.2): onnxruntime's Mul with a
    # [2]-vector takes its general broadcasting path, ~10x slower than with a scalar
    v_xy = b.f32(v[0]) if v[0] == v[1] else b.const(np.array(v[:2], np.float32))
    v_wh = b.f32(v[2]) if v[2] == v[3] else b.const(np.array(v[2:], np.float32))
    low, high = _ssd_rule(b, d_xy, d_wh, a.center, a.size, lambda: v_xy, lambda: v_wh, s)
    if s.clip_unit:  # std::max(0, std::min(1, v))
        one, zero = b.f32(1.0), b.f32(0.0)
        low, high = (b.op("Max", b.op("Min", v_, one), zero) for v_ in (low, high))
    return low, high


def _ssd_interleaved(b: Builder, raw: ir.Value, anchors: AnchorValues | None, s: DecodeSettings) -> Halves:
    """``_ssd_rule`` on an interleaved layout: corner boxes as (x1, y1) and (x2, y2), each [B, 1, 2N] with x and y
    alternating per anchor (a Reshape of [B, N, 2] pairs).

    Why: taking the (dx, dy) and (dw, dh) halves of [B, N, 4] apart, and putting (class, score, x1, y1,
    x2, y2) rows back together, are narrow strided copies that onnxruntime does per row (a Split or
    Concat over a last axis of 2: ~5 ns a row, 0.5-1.5 ms at 136k rows). Here one Transpose of the
    deltas viewed as [B, N, 2, 2] makes the halves contiguous blocks ([B, 2, N, 2], split on axis 1),
    and ``nms.rows_from_pairs`` builds the rows with one contiguous Concat and one Transpose. The Reshapes
    between them keep onnxruntime's transpose optimizer from moving the Transposes back onto the narrow
    ops (it would cancel the pair and split on the last axis again). The same float32 operations per element
    as the rows layout (``_ssd_rule``), so the same bits; per-axis variances that differ become a full-length
    constant (a [2]-vector broadcast takes onnxruntime's slow general broadcasting path).
    """
    a = _need(anchors)
    quads = b.op("Reshape", raw, b.i64(0, -1, 2, 2))  # [B, N, (xy, wh), 2]
    halves = b.op("Reshape", b.op("Transpose", quads, perm=[0, 2, 1, 3]), b.i64(0, 2, -1))  # [B, 2, 2N]
    d_xy, d_wh = b.slice(halves, 1, 0, 1), b.slice(halves, 1, 1, 2)
    center = b.op("Reshape", a.center, b.i64(0, 1, -1))  # [1 or B, 1, 2N]
    size = b.op("Reshape", a.size, b.i64(0, 1, -1))
    v = [float(np.float32(x)) for x in s.variances]

    def per_axis(vx: float, vy: float) -> ir.Value:
        if vx == vy:
            return b.f32(vx)
        return b.op("Tile", b.const(np.array([[[vx, vy]]], np.float32)),
                    b.op("Concat", b.i64(1, 1), b.dim(raw, 1), axis=0))

    low, high = _ssd_rule(b, d_xy, d_wh, center, size, lambda: per_axis(v[0], v[1]), lambda: per_axis(v[2], v[3]), s)
    if s.clip_unit:  # std::max(0, std::min(1, v)): one Clip, the same value for every non-NaN v
        one, zero = b.f32(1.0), b.f32(0.0)
        low, high = (b.op("Clip", v_, zero, one) for v_ in (low, high))
    return low, high


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
    "ssd": DecodeKind(_ssd, _ssd_keypoints, anchors=True, interleaved=_ssd_interleaved),
    "linear": DecodeKind(_linear, _linear_keypoints, anchors=True),
    "yolo-v3": DecodeKind(_yolo_v3, None, anchors=True, strides=True),
    "yolo-v5": DecodeKind(_yolo_v5, _yolo_v5_keypoints, anchors=True, strides=True),
}


def ssd_decode(b: Builder, deltas: ir.Value, anchors: nms.AnchorParts, variances: Sequence[float], *,
               exp_clip: float | None = None, clip_unit: bool = False, interleaved: bool = False) -> Halves:
    """The ``ssd`` decode of ``DECODERS`` for the lowerings: deltas [B, N, 4] against anchor parts -> corner halves,
    (x1, y1) and (x2, y2) as [B, N, 2] each, or as interleaved [B, 1, 2N] pairs (``interleaved``)."""
    kind = DECODERS["ssd"]
    rule = kind.interleaved if interleaved else kind.boxes
    assert rule is not None
    v = tuple(float(x) for x in variances)
    settings = DecodeSettings(variances=(v[0], v[1], v[2], v[3]), exp_clip=exp_clip, clip_unit=clip_unit)
    return rule(b, deltas, AnchorValues(anchors.center, anchors.size), settings)


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


__all__ = ["ACTIVATIONS", "DECODERS", "AnchorValues", "DecodeKind", "DecodeSettings", "activate_scores", "ssd_decode"]
