"""Anchor generators for headless detectors: the anchor sets detection heads were trained against, computed
in numpy from a few parameters, as centre-size boxes ``(cx, cy, w, h)`` (x first), one row per box.

Three generators, each the one implementation of its rule (``bridge.graft`` selects them by name from
options or a small YAML, ``bridge graft-nms --dry-run`` prints their per-layer counts):

- ``ssd_anchors``: MediaPipe's SsdAnchorsCalculator (mediapipe/calculators/tflite/ssd_anchors_calculator.cc),
  the anchors of BlazeFace-style face, palm and pose detectors. Consecutive layers with the same stride are
  merged into one feature map (their anchors interleave per cell), scales interpolate linearly from
  ``min_scale`` to ``max_scale`` over the layers, the interpolated-scale anchor uses sqrt(scale * next scale)
  (1.0 after the last layer), ``reduce_boxes_in_lowest_layer`` gives layer 0 the fixed (1, 2, 0.5) x
  (0.1, s, s) anchors, ``fixed_anchor_size`` makes every anchor 1 x 1 (the box decode then carries the size).
  Coordinates are normalised to [0, 1]; the loop order is row, column, anchor, as MediaPipe's.
- ``multibox_prior_anchors``: MXNet MultiBoxPrior per feature map (``anchors.multibox_prior``, the same code
  the MultiBoxPrior lowering folds), corner boxes turned into centre-size.
- ``yolo_anchors``: a YOLO grid: per level a stride and prior sizes in pixels; the centre of cell (gx, gy) is
  ((gx + offset) * stride, (gy + offset) * stride) and each row also carries its stride (the YOLO decodes
  scale the cell offsets by it). Order: level, row, column, prior (as a flattened [B, A, H, W] head is not:
  the order must match the head's flattening; ``order`` says which).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from bridge.errors import UsageError
from bridge.limits import check_allocation
from bridge.passes.contrib.anchors import multibox_prior

f32 = np.float32


@dataclass(frozen=True)
class AnchorSet:
    """Anchors as centre-size rows [N, 4] (cx, cy, w, h) float32, optional per-row strides [N, 2] (x, y) for
    the YOLO decodes, and what each layer contributed (a label and a count, in row order)."""

    boxes: np.ndarray
    strides: np.ndarray | None = None
    layers: tuple[tuple[str, int], ...] = field(default_factory=tuple)

    @property
    def count(self) -> int:
        return int(self.boxes.shape[0])

    def describe(self) -> str:
        """``N anchors: 16x16x2 = 512 (stride 8), 8x8x6 = 384 (stride 16)``."""
        parts = ", ".join(f"{label} = {count}" for label, count in self.layers)
        return f"{self.count} anchors" + (f": {parts}" if parts else "")


def _scale(min_scale: float, max_scale: float, index: int, count: int) -> float:
    """SsdAnchorsCalculator's CalculateScale: min + (max - min) * 1.0 * index / (count - 1.0f), the difference in
    float, the rest in double (the 1.0), rounded to float on return."""
    low, high = f32(min_scale), f32(max_scale)
    if count == 1:
        return float((low + high) * f32(0.5))
    return float(f32(float(low) + float(high - low) * 1.0 * index / float(f32(count - 1.0))))


def ssd_anchors(*, num_layers: int, input_size: tuple[int, int], min_scale: float, max_scale: float,
                strides: Sequence[int], feature_maps: Sequence[tuple[int, int]] = (),
                aspect_ratios: Sequence[float] = (), anchor_offset: tuple[float, float] = (0.5, 0.5),
                interpolated_scale_aspect_ratio: float = 1.0, fixed_anchor_size: bool = False,
                reduce_boxes_in_lowest_layer: bool = False) -> AnchorSet:
    """MediaPipe SsdAnchorsCalculator anchors (module docstring). ``input_size`` is (height, width); one stride per
    layer; ``feature_maps`` (height, width) per layer replace the sizes derived from the strides when given;
    ``anchor_offset`` is (x, y)."""
    # MediaPipe merges layers by their strides even when feature_maps give the sizes: strides are always needed
    if len(strides) != num_layers:
        raise UsageError(f"ssd anchors: {len(strides)} strides for num_layers {num_layers} (one per layer)")
    if feature_maps and len(feature_maps) != num_layers:
        raise UsageError(f"ssd anchors: {len(feature_maps)} feature_maps for num_layers {num_layers}")
    if any(s <= 0 for s in strides) or any(r <= 0 for r in aspect_ratios):
        raise UsageError("ssd anchors: strides and aspect_ratios must be positive")
    in_h, in_w = input_size
    rows: list[np.ndarray] = []
    layers: list[tuple[str, int]] = []
    layer = 0
    while layer < num_layers:
        heights: list[float] = []
        widths: list[float] = []
        ratios: list[float] = []
        scales: list[float] = []
        last = layer  # consecutive layers with the same stride share one feature map (MediaPipe merges them)
        while last < len(strides) and strides[last] == strides[layer]:
            scale = _scale(min_scale, max_scale, last, len(strides))
            if last == 0 and reduce_boxes_in_lowest_layer:
                ratios += [1.0, 2.0, 0.5]
                scales += [0.1, scale, scale]
            else:
                ratios += list(aspect_ratios)
                scales += [scale] * len(aspect_ratios)
                if interpolated_scale_aspect_ratio > 0.0:
                    following = 1.0 if last == len(strides) - 1 else _scale(min_scale, max_scale, last + 1, len(strides))
                    scales.append(float(f32(math.sqrt(scale * following))))
                    ratios.append(interpolated_scale_aspect_ratio)
            last += 1
        if not ratios:
            raise UsageError("ssd anchors: no anchor per cell (give aspect_ratios, or interpolated_scale_aspect_ratio > 0)")
        for ratio, scale in zip(ratios, scales, strict=True):
            root = f32(math.sqrt(ratio))
            heights.append(float(f32(scale) / root))
            widths.append(float(f32(scale) * root))
        if feature_maps:
            fm_h, fm_w = feature_maps[layer]
        else:
            fm_h = math.ceil(f32(1.0) * f32(in_h) / f32(strides[layer]))
            fm_w = math.ceil(f32(1.0) * f32(in_w) / f32(strides[layer]))
        check_allocation(fm_h * fm_w * len(ratios) * 16, f"ssd anchors for a {fm_h} x {fm_w} feature map")
        cx = (np.arange(fm_w, dtype=f32) + f32(anchor_offset[0])) * f32(1.0) / f32(fm_w)
        cy = (np.arange(fm_h, dtype=f32) + f32(anchor_offset[1])) * f32(1.0) / f32(fm_h)
        a = len(ratios)
        w = np.ones(a, f32) if fixed_anchor_size else np.array(widths, f32)
        h = np.ones(a, f32) if fixed_anchor_size else np.array(heights, f32)
        grid = np.stack(np.broadcast_arrays(cx[None, :, None], cy[:, None, None], w[None, None, :], h[None, None, :]),
                        axis=-1)  # [H, W, A, 4]
        rows.append(grid.reshape(-1, 4).astype(f32))
        layers.append((f"{fm_h}x{fm_w}x{a} (stride {strides[layer]})", fm_h * fm_w * a))
        layer = last
    return AnchorSet(np.concatenate(rows, axis=0), None, tuple(layers))


def multibox_prior_anchors(feature_maps: Sequence[tuple[int, int]], sizes: Sequence[Sequence[float]],
                           ratios: Sequence[Sequence[float]], steps: Sequence[Sequence[float]] | None = None,
                           offsets: Sequence[Sequence[float]] | None = None, clip: bool = False) -> AnchorSet:
    """MXNet MultiBoxPrior anchors for each feature map (height, width), concatenated in layer order; per layer
    its sizes, ratios, steps (y, x; -1 = 1 / size) and offsets (y, x), as MultiBoxPrior's attributes."""
    count = len(feature_maps)
    for name, values in (("sizes", sizes), ("ratios", ratios), ("steps", steps), ("offsets", offsets)):
        if values is not None and len(values) != count:
            raise UsageError(f"multibox_prior anchors: {len(values)} {name} lists for {count} feature maps "
                             "(one per feature map)")
    rows = []
    layers = []
    for i, (fm_h, fm_w) in enumerate(feature_maps):
        step = steps[i] if steps is not None else (-1.0, -1.0)
        offset = offsets[i] if offsets is not None else (0.5, 0.5)
        if not sizes[i] or not ratios[i] or any(r <= 0 for r in ratios[i]):
            raise UsageError(f"multibox_prior anchors, feature map {i}: sizes and ratios must be non-empty, ratios "
                             "positive")
        corners = multibox_prior(fm_h, fm_w, sizes[i], ratios[i], clip, step, offset)[0]
        rows.append(corners_to_centers(corners))
        per_cell = len(sizes[i]) + len(ratios[i]) - 1
        layers.append((f"{fm_h}x{fm_w}x{per_cell}", fm_h * fm_w * per_cell))
    return AnchorSet(np.concatenate(rows, axis=0), None, tuple(layers))


def yolo_anchors(*, input_size: tuple[int, int], strides: Sequence[int], priors: Sequence[Sequence[tuple[float, float]]],
                 offset: float = 0.5, order: str = "cell-major") -> AnchorSet:
    """YOLO grid anchors: per level (stride, prior (w, h) sizes in pixels) over an ``input_size`` (height, width)
    image. ``order``: ``cell-major`` (row, column, prior: a [B, H, W, A*K] head reshaped to [B, H*W*A, K]) or
    ``prior-major`` (prior, row, column: a [B, A, H, W, K] head, as YOLOv5's Detect lays it out)."""
    if len(priors) != len(strides):
        raise UsageError(f"yolo anchors: {len(priors)} prior lists for {len(strides)} strides (one per level)")
    if order not in ("cell-major", "prior-major"):
        raise UsageError(f"yolo anchors: order must be cell-major or prior-major (got '{order}')")
    in_h, in_w = input_size
    rows, steps, layers = [], [], []
    for stride, level in zip(strides, priors, strict=True):
        if stride <= 0 or not level:
            raise UsageError("yolo anchors: strides must be positive and every level needs at least one prior")
        fm_h, fm_w = math.ceil(in_h / stride), math.ceil(in_w / stride)
        check_allocation(fm_h * fm_w * len(level) * 24, f"yolo anchors for a {fm_h} x {fm_w} grid")
        cx = (np.arange(fm_w, dtype=f32) + f32(offset)) * f32(stride)
        cy = (np.arange(fm_h, dtype=f32) + f32(offset)) * f32(stride)
        pw = np.array([p[0] for p in level], f32)
        ph = np.array([p[1] for p in level], f32)
        if order == "cell-major":
            grid = np.broadcast_arrays(cx[None, :, None], cy[:, None, None], pw[None, None, :], ph[None, None, :])
        else:
            grid = np.broadcast_arrays(cx[None, None, :], cy[None, :, None], pw[:, None, None], ph[:, None, None])
        level_rows = np.stack(grid, axis=-1).reshape(-1, 4).astype(f32)
        rows.append(level_rows)
        steps.append(np.full((level_rows.shape[0], 2), stride, f32))
        layers.append((f"{fm_h}x{fm_w}x{len(level)} (stride {stride})", level_rows.shape[0]))
    return AnchorSet(np.concatenate(rows, axis=0), np.concatenate(steps, axis=0), tuple(layers))


def corners_to_centers(corners: np.ndarray) -> np.ndarray:
    """(x1, y1, x2, y2) rows -> (cx, cy, w, h) rows, float32 (centre = (l + r) / 2)."""
    c = corners.astype(f32)
    return np.stack([(c[:, 0] + c[:, 2]) / f32(2), (c[:, 1] + c[:, 3]) / f32(2), c[:, 2] - c[:, 0], c[:, 3] - c[:, 1]],
                    axis=-1).astype(f32)


GENERATORS = {"ssd": ssd_anchors, "multibox_prior": multibox_prior_anchors, "yolo": yolo_anchors}

__all__ = ["GENERATORS", "AnchorSet", "corners_to_centers", "multibox_prior_anchors", "ssd_anchors", "yolo_anchors"]
