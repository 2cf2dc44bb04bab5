"""Shared detection building blocks: anchors as centre/size pairs, class-aware NonMaxSuppression, output assembly
(the SSD box decode itself is the ``ssd`` entry of ``decode.DECODERS``).

One implementation serves every detection rewrite: the MultiBoxDetection and box_nms/box_decode
lowerings (``detection.py``, ``box_ops.py``) and NMS grafting on any headless detector
(``bridge.graft``). Each function emits standard ONNX through a ``Builder`` and returns the values.

Conventions: boxes are [B, N, 4] corner boxes; NMS scores are [B, C, N] as ONNX NonMaxSuppression
wants them; entries that must never be selected hold -inf and NMS runs with score_threshold =
lowest float32, so *which* boxes are candidates is decided by the caller with exact comparisons
(MXNet keeps score >= threshold, box_nms score > valid_thresh, ONNX NMS score > threshold).
``ONNX NonMaxSuppression`` is class-wise greedy NMS in score order; selected_indices are
[K, 3] int64 rows (batch, class, box).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from bridge.rewriting.builder import BOOL, F32, I64, LOWEST_F32, Builder

# the output formats of the detection lowerings (--detection-format): the one list of them, with the names
# (suffixes) of each format's outputs, in order
FORMAT_OUTPUTS: dict[str, tuple[str, ...]] = {
    "mxnet": ("detections",),
    "boxes-scores-classes": ("boxes", "scores", "classes", "num_detections"),
    "indices": ("selected_indices", "boxes", "scores"),
}
OUTPUT_FORMATS = tuple(FORMAT_OUTPUTS)


@dataclass(frozen=True)
class AnchorParts:
    """Anchor centres (cx, cy) and sizes (w, h), each [1 or B, N, 2] float32.

    Pairs, not four [.., N, 1] columns: every decode step is then one op on x and y together (the
    same float32 operation per element, so the same bits), half the node count and kernel launches.
    With constant anchors (MultiBoxPrior folded to an initializer) these fold away entirely.
    """

    center: ir.Value
    size: ir.Value


def _pairs(b: Builder, x: ir.Value) -> tuple[ir.Value, ir.Value]:
    """The last axis (4) of ``x`` as its first and second halves, [.., 2] each."""
    return b.slice(x, -1, 0, 2), b.slice(x, -1, 2, 4)


def anchors_from_corners_mean(b: Builder, anchors: ir.Value) -> AnchorParts:
    """(xmin, ymin, xmax, ymax) anchors; centre = (l + r) / 2 as in MXNet multibox_detection.cc."""
    low, high = _pairs(b, anchors)
    return AnchorParts(b.op("Div", b.op("Add", low, high), b.f32(2.0)), b.op("Sub", high, low))


def anchors_from_corners_halfwidth(b: Builder, anchors: ir.Value) -> AnchorParts:
    """(xmin, ymin, xmax, ymax) anchors; centre = l + w * 0.5 as in MXNet bounding_box-inl.h box_decode."""
    low, high = _pairs(b, anchors)
    size = b.op("Sub", high, low)
    return AnchorParts(b.op("Add", low, b.op("Mul", size, b.f32(0.5))), size)


def anchors_from_centers(b: Builder, anchors: ir.Value) -> AnchorParts:
    """(cx, cy, w, h) anchors."""
    center, size = _pairs(b, anchors)
    return AnchorParts(center, size)


def rows_from_pairs(b: Builder, *pairs: ir.Value) -> ir.Value:
    """Interleaved pair columns, each [B, 1, 2N] (the ssd decode's interleaved layout), -> rows [B, N, 2 * len(pairs)]:
    one contiguous Concat and one Transpose instead of a Concat of narrow columns."""
    stacked = b.op("Reshape", b.op("Concat", *pairs, axis=1), b.i64(0, len(pairs), -1, 2))  # [B, P, N, 2]
    return b.op("Reshape", b.op("Transpose", stacked, perm=[0, 2, 1, 3]), b.i64(0, -1, 2 * len(pairs)))


def widen_mask(b: Builder, mask: ir.Value, width: int) -> ir.Value:
    """bool [..., 1] -> bool [..., width], repeated along the last axis, for a Where over [..., width] rows.

    onnxruntime's Where broadcasting a [..., 1] condition takes its general per-element path (~850 us
    for [1, 13752, 6]); a float MatMul with a row of ones does the widening exactly (0 or 1 times 1) in
    ~50 us and the Where then runs on equal shapes (measured with onnxruntime 1.31)."""
    ones = b.const(np.ones((1, width), np.float32))
    return b.cast(b.op("MatMul", b.cast(mask, F32), ones), BOOL)


def center_to_corner(b: Builder, boxes: ir.Value) -> ir.Value:
    """(cx, cy, w, h) -> (x1, y1, x2, y2), with half extents w / 2 as in MXNet center_to_corner."""
    cx, cy, w, h = b.columns(boxes, 4)
    two = b.f32(2.0)
    hw, hh = b.op("Div", w, two), b.op("Div", h, two)
    return b.op("Concat", b.op("Sub", cx, hw), b.op("Sub", cy, hh), b.op("Add", cx, hw), b.op("Add", cy, hh), axis=-1)


def corner_to_center(b: Builder, boxes: ir.Value) -> ir.Value:
    """(x1, y1, x2, y2) -> ((l + r) / 2, (t + b) / 2, r - l, b - t) as in MXNet corner_to_center."""
    left, top, right, bottom = b.columns(boxes, 4)
    two = b.f32(2.0)
    return b.op("Concat", b.op("Div", b.op("Add", left, right), two), b.op("Div", b.op("Add", top, bottom), two),
                b.op("Sub", right, left), b.op("Sub", bottom, top), axis=-1)


def swap_xy(b: Builder, boxes: ir.Value) -> ir.Value:
    """(a, b, c, d) -> (b, a, d, c): yxyx <-> xyxy, (dy, dx, dh, dw) <-> (dx, dy, dw, dh)."""
    c0, c1, c2, c3 = b.columns(boxes, 4)
    return b.op("Concat", c1, c0, c3, c2, axis=-1)


def collapse_inverted(b: Builder, boxes: ir.Value) -> ir.Value:
    """Corner boxes [B, N, 4] with x2 < x1 or y2 < y1 -> the zero-area box (x1, y1, x1, y1); others unchanged.

    Why: MXNet's box_nms (bounding_box-inl.h BoxArea / Intersect) gives an inverted box area 0 and
    intersection 0 with everything, so it never suppresses and is never suppressed; ONNX
    NonMaxSuppression (onnxruntime) reads any diagonal pair of corners, so it sorts the corners and
    suppresses inverted boxes like ordinary ones. A zero-area box is never suppressed in either. Only
    NMS reads the collapsed boxes; outputs keep the original coordinates. (Random or early-training
    weights decode inverted boxes in bulk: 301 of 400 candidates of an SSD-512 with random weights.)
    """
    low, high = _pairs(b, boxes)
    inverted = b.cast(b.reduce("ReduceMax", b.cast(b.op("Less", high, low), F32), [-1], keepdims=1), BOOL)
    return b.op("Concat", low, b.where(inverted, low, high), axis=-1)


def neg_inf(b: Builder) -> ir.Value:
    return b.f32(float("-inf"))


def topk_mask(b: Builder, key: ir.Value, k: int) -> ir.Value:
    """bool [B, N]: True at the ``k`` largest entries of each row of ``key`` (ties: lower index first)."""
    n = b.dim(key, 1)
    kk = b.op("Min", n, b.i64(k))
    _, idx = b.op_multi("TopK", key, kk, num_outputs=2, axis=1, largest=1, sorted=1)
    zeros = b.op("ConstantOfShape", b.op("Shape", key), value=ir.tensor(np.array([0], np.int64)))
    ones = b.op("ConstantOfShape", b.op("Shape", idx), value=ir.tensor(np.array([1], np.int64)))
    return b.cast(b.op("ScatterElements", zeros, idx, ones, axis=1), BOOL)


def sort_desc(b: Builder, key: ir.Value) -> ir.Value:
    """Indices [B, N] that sort each row of ``key`` descending; equal keys keep index order (TopK-11+)."""
    _, idx = b.op_multi("TopK", key, b.dim(key, 1), num_outputs=2, axis=1, largest=1, sorted=1)
    return idx


def top_candidates(b: Builder, key: ir.Value, k: int | None) -> tuple[ir.Value, ir.Value]:
    """The ``k`` largest entries of each row of ``key`` [B, N] (all N when ``k`` is None or <= 0), sorted
    descending, equal keys in index order (TopK-11+): (values [B, K], indices [B, K]), K = min(N, k).

    One TopK serves both the ``topk`` cut and the score order, so everything after it (NMS score
    matrix, suppression mask, output rows) is K-sized instead of N-sized.
    """
    n = b.dim(key, 1)
    kk = n if k is None or k <= 0 else b.op("Min", n, b.i64(k))
    values, idx = b.op_multi("TopK", key, kk, num_outputs=2, axis=1, largest=1, sorted=1)
    return values, idx


def stable_partition(b: Builder, mask: ir.Value, count: ir.Value | None = None) -> ir.Value:
    """Indices [B, M] listing each row's True positions of ``mask`` [B, M] first, then the False ones, each
    group in index order (a stable partition) in O(M): True at i goes to cumsum(mask)[i] - 1, False at i
    to count + i - cumsum(mask)[i]; ScatterElements inverts that permutation. ``count`` [B, 1] int64: the
    number of True per row, when the caller has it already."""
    m = b.cast(mask, I64)
    inclusive = b.op("CumSum", m, b.const(np.array(1, np.int64)))
    if count is None:
        count = count_true(b, mask)
    pos = b.op("Expand", b.unsqueeze(arange(b, b.dim(mask, 1)), 0), b.op("Shape", mask))
    one = b.const(np.array(1, np.int64))
    target = b.where(mask, b.op("Sub", inclusive, one), b.op("Sub", b.op("Add", count, pos), inclusive))
    zeros = b.op("ConstantOfShape", b.op("Shape", mask), value=ir.tensor(np.array([0], np.int64)))
    return b.op("ScatterElements", zeros, target, pos, axis=1)


def count_true(b: Builder, mask: ir.Value) -> ir.Value:
    """[B, 1] int64: True entries per row of ``mask`` [B, M]. Summed as float32 (exact below 2^24 entries):
    onnxruntime's float ReduceSum is ~4x faster than its int64 one."""
    return b.cast(b.reduce("ReduceSum", b.cast(mask, F32), [1], keepdims=1), I64)


def arange(b: Builder, n: ir.Value) -> ir.Value:
    """0 .. n-1 as int64 [n] (``n`` a 1-D one-element int64 tensor)."""
    return b.op("Range", b.const(np.array(0, np.int64)), b.squeeze(n, 0), b.const(np.array(1, np.int64)))


def pad_axis1(b: Builder, x: ir.Value, length: ir.Value, value: ir.Value, rank: int) -> ir.Value:
    """Pad axis 1 of ``x`` [B, K, ...] (``rank`` axes) at the end with ``value`` up to ``length`` ([1] int64)."""
    extra = b.op("Sub", length, b.dim(x, 1))
    zero = b.i64(0)
    ends = [zero, extra] + [zero] * (rank - 2)
    pads = b.op("Concat", *([zero] * rank), *ends, axis=0)
    return b.op("Pad", x, pads, value)


def class_score_matrix(b: Builder, score: ir.Value, cls: ir.Value, candidate: ir.Value,
                       num_classes: ir.Value) -> ir.Value:
    """NMS scores [B, C, N]: box n's score in row cls[b, n] when it is a candidate, -inf elsewhere.

    score [B, N] float32, cls [B, N] int64 in [0, C), candidate [B, N] bool, num_classes [1] int64.
    One class per box makes ONNX's per-class NMS exactly MXNet's "suppress only within a class".
    """
    c_range = b.op("Range", b.const(np.array(0, np.int64)), b.squeeze(num_classes, 0), b.const(np.array(1, np.int64)))
    onehot = b.op("Equal", b.unsqueeze(cls, 1), b.unsqueeze(c_range, 0, 2))  # [B, C, N]
    take = b.op("And", onehot, b.unsqueeze(candidate, 1))
    return b.where(take, b.unsqueeze(score, 1), neg_inf(b))


def agnostic_scores(b: Builder, score: ir.Value, candidate: ir.Value) -> ir.Value:
    """NMS scores [B, 1, N] for class-agnostic suppression (force_suppress)."""
    return b.unsqueeze(b.where(candidate, score, neg_inf(b)), 1)


def non_max_suppression(b: Builder, boxes: ir.Value, scores: ir.Value, *, iou_threshold: float,
                        score_threshold: float = LOWEST_F32, max_per_class: int | None = None,
                        center_point_box: int = 0) -> ir.Value:
    """ONNX NonMaxSuppression -> selected_indices [K, 3] int64 (batch, class, box).

    ONNX keeps score > score_threshold and suppresses IoU > iou_threshold (both strict).
    ``max_per_class`` None means all boxes (N, read from the shape at run time).
    """
    limit = b.dim(boxes, 1) if max_per_class is None else b.i64(max_per_class)
    return b.op("NonMaxSuppression", boxes, scores, limit, b.const(np.array([iou_threshold], np.float32)),
                b.const(np.array([score_threshold], np.float32)), center_point_box=center_point_box)


def selected_mask(b: Builder, selected: ir.Value, like: ir.Value, columns: Sequence[int]) -> ir.Value:
    """bool tensor shaped like ``like``, True at ``selected[:, columns]`` (e.g. (0, 2) -> [B, N])."""
    index = selected if tuple(columns) == (0, 1, 2) else b.op("Gather", selected, b.i64(*columns), axis=1)
    zeros = b.op("ConstantOfShape", b.op("Shape", like), value=ir.tensor(np.array([0], np.int64)))
    ones = b.op("ConstantOfShape", b.dim(selected, 0), value=ir.tensor(np.array([1], np.int64)))
    return b.cast(b.op("ScatterND", zeros, index, ones), BOOL)


def mask_to_selected(b: Builder, mask: ir.Value) -> ir.Value:
    """bool [B, C, N] -> [K, 3] int64 rows (batch, class, box) in row-major order (NonZero)."""
    return b.op("Transpose", b.op("NonZero", mask), perm=[1, 0])


@dataclass(frozen=True)
class PaddedDetections:
    boxes: ir.Value  # [B, K, 4] float32
    scores: ir.Value  # [B, K] float32
    classes: ir.Value  # [B, K] int64
    num_detections: ir.Value  # [B] int64


def padded_detections(b: Builder, boxes: ir.Value, scores: ir.Value, kept: ir.Value, max_det: int | None,
                      box_classes: ir.Value | None = None) -> PaddedDetections:
    """The TF combined-NMS layout from kept (batch, class, box) triples.

    boxes [B, N, 4]; scores [B, C, N]; kept bool [B, C, N]. Keeps the ``max_det`` best-scoring kept
    triples per image (ties: lower class, then lower box index first), padded with zeros to
    ``max_det`` rows (None: N rows, one per box - enough when each box has one class - unpadded); ``num_detections`` counts the real rows. With
    ``box_classes`` [B, N] int64 the class of each row is read from it (class-agnostic NMS, C == 1).
    """
    flat = b.op("Reshape", b.where(kept, scores, neg_inf(b)), b.i64(0, -1))  # [B, C*N]
    total = b.dim(flat, 1)
    n = b.dim(boxes, 1)
    k = b.op("Min", total, n if max_det is None else b.i64(max_det))
    values, idx = b.op_multi("TopK", flat, k, num_outputs=2, axis=1, largest=1, sorted=1)
    valid = b.op("Greater", values, neg_inf(b))
    box_idx = b.op("Mod", idx, n)
    cls = b.gather_cols(box_classes, box_idx) if box_classes is not None else b.op("Div", idx, n)
    zero_f, zero_i = b.f32(0.0), b.const(np.array(0, np.int64))
    out_boxes = b.where(b.unsqueeze(valid, -1), b.gather_rows(boxes, box_idx), zero_f)
    out_scores = b.where(valid, values, zero_f)
    out_classes = b.where(valid, cls, zero_i)
    num = b.reduce("ReduceSum", b.cast(valid, I64), [1], keepdims=0)
    if max_det is not None:  # pad rows up to max_det when there are fewer candidates than max_det
        pad = b.op("Sub", b.i64(max_det), k)
        zero1 = b.i64(0)
        pads2 = b.op("Concat", zero1, zero1, zero1, pad, axis=0)
        pads3 = b.op("Concat", zero1, zero1, zero1, zero1, pad, zero1, axis=0)
        out_boxes = b.op("Pad", out_boxes, pads3, b.f32(0.0))
        out_scores = b.op("Pad", out_scores, pads2, b.f32(0.0))
        out_classes = b.op("Pad", out_classes, pads2, zero_i)
    return PaddedDetections(out_boxes, out_scores, out_classes, num)


def set_output_types(values: Sequence[ir.Value], specs: Sequence[tuple[ir.DataType, Sequence[int | str | None]]]) -> None:
    """Declare dtype and shape of new output values (shape inference cannot see through NMS/TopK)."""
    for value, (dtype, dims) in zip(values, specs, strict=True):
        value.type = ir.TensorType(dtype)
        value.shape = ir.Shape([d if isinstance(d, int) else ir.SymbolicDim(d) for d in dims])


def iou_with(b: Builder, box: ir.Value, boxes: ir.Value) -> ir.Value:
    """IoU of each corner box ``box`` [L, 1, 4] with every box of ``boxes`` [L, N, 4] -> [L, N] float32.

    Corners are read in either diagonal order (min / max per axis, as ONNX NonMaxSuppression does); a pair with
    no positive union has IoU 0 (as MediaPipe's OverlapSimilarity)."""
    def extent(x: ir.Value) -> tuple[ir.Value, ir.Value]:
        low, high = b.slice(x, -1, 0, 2), b.slice(x, -1, 2, 4)
        return b.op("Min", low, high), b.op("Max", low, high)

    a_low, a_high = extent(box)
    o_low, o_high = extent(boxes)
    zero = b.f32(0.0)

    def area(low: ir.Value, high: ir.Value) -> ir.Value:
        side = b.op("Max", b.op("Sub", high, low), zero)
        return b.op("Mul", b.slice(side, -1, 0, 1), b.slice(side, -1, 1, 2))

    inter = area(b.op("Max", a_low, o_low), b.op("Min", a_high, o_high))  # [L, N, 1]
    union = b.op("Sub", b.op("Add", area(a_low, a_high), area(o_low, o_high)), inter)
    positive = b.op("Greater", union, zero)
    iou = b.where(positive, b.op("Div", inter, b.where(positive, union, b.f32(1.0))), zero)
    return b.squeeze(iou, -1)


def _stable_order(b: Builder, key: ir.Value, largest: int) -> ir.Value:
    """Indices [L] sorting the float key [L] (descending when ``largest``), equal keys in index order (TopK-11+)."""
    _, idx = b.op_multi("TopK", key, b.dim(key, 0), num_outputs=2, axis=0, largest=largest, sorted=1)
    return idx


def weighted_detections(b: Builder, coords: ir.Value, nms_scores: ir.Value, selected: ir.Value, *,
                        iou_threshold: float, max_det: int, box_classes: ir.Value | None = None) -> PaddedDetections:
    """Weighted (blended) NMS in the TF combined-NMS layout: MediaPipe's NonMaxSuppressionCalculator with
    algorithm WEIGHTED (mediapipe/calculators/util/non_max_suppression_calculator.cc).

    MediaPipe's loop takes the best remaining detection, removes every remaining one whose IoU with it is above
    the threshold (itself included), and outputs the best one with its score but with the score-weighted mean of
    the removed ones' coordinates (boxes as x1, y1, x2, y2 and keypoints). The detections it outputs are exactly
    the ones greedy NMS selects (``selected``, ONNX NonMaxSuppression on the same scores and threshold); each
    other candidate is blended into the first selected one, in score order, it overlaps. So: the leaders are
    the rows of ``selected`` [L, 3] (batch, class, box), sorted by (batch, class), score descending, box
    ascending; member[l, k] = candidate k of l's (batch, class) with IoU(l, k) > threshold not taken by an
    earlier leader of that group (an exclusive CumSum over the sorted leaders); the blend is one MatMul.
    The candidates are the boxes whose entry in ``nms_scores`` [B, C, N] is not -inf; ``coords`` [B, N, D] holds
    the corner box in columns 0-3 and any keypoints after it. Returns the ``max_det`` best leaders per image
    (ties: lower class, then lower box first) zero padded; ``boxes`` holds all D blended columns.
    One difference from MediaPipe: a leader whose box has no area (IoU 0 even with itself) ends MediaPipe's
    loop (nothing after it is output); here it is output alone and the others continue, as in hard NMS.
    """
    leader_b = b.squeeze(b.op("Gather", selected, b.i64(0), axis=1), 1)  # [L]
    leader_c = b.squeeze(b.op("Gather", selected, b.i64(1), axis=1), 1)
    leader_k = b.squeeze(b.op("Gather", selected, b.i64(2), axis=1), 1)
    num_classes = b.dim(nms_scores, 1)
    group = b.op("Add", b.op("Mul", leader_b, b.squeeze(num_classes, 0)), leader_c)  # [L] int64
    score = b.op("GatherND", nms_scores, selected)  # [L]
    # sort by (group asc, score desc, box asc): stable TopK passes, least significant key first
    order = _stable_order(b, b.op("Neg", b.cast(leader_k, F32)), 1)
    order = b.op("Gather", order, _stable_order(b, b.op("Gather", score, order, axis=0), 1), axis=0)
    order = b.op("Gather", order, _stable_order(b, b.op("Neg", b.cast(b.op("Gather", group, order, axis=0), F32)), 1),
                 axis=0)
    sel = b.op("Gather", selected, order, axis=0)  # [L, 3] sorted
    leader_b, leader_c, leader_k = (b.op("Gather", x, order, axis=0) for x in (leader_b, leader_c, leader_k))
    group = b.op("Gather", group, order, axis=0)
    score = b.op("Gather", score, order, axis=0)
    # every leader's view of its own image: boxes [L, N, 4], candidate scores of its class [L, N]
    boxes = b.slice(coords, -1, 0, 4)
    image_boxes = b.op("Gather", boxes, leader_b, axis=0)
    own_box = b.op("GatherND", boxes, b.op("Gather", sel, b.i64(0, 2), axis=1))  # [L, 4]
    slot_scores = b.op("GatherND", nms_scores, b.op("Gather", sel, b.i64(0, 1), axis=1))  # [L, N]
    candidate = b.op("Greater", slot_scores, neg_inf(b))
    overlap = b.op("And", b.op("Greater", iou_with(b, b.unsqueeze(own_box, 1), image_boxes), b.f32(iou_threshold)),
                   candidate)
    # taken by an earlier leader of the same group: exclusive CumSum over the sorted leaders minus its value at the
    # group's first leader (the number of leaders in a lower group)
    counts = b.op("CumSum", b.cast(overlap, F32), b.const(np.array(0, np.int64)), exclusive=1)  # [L, N]
    first = b.reduce("ReduceSum", b.cast(b.op("Less", b.unsqueeze(group, 0), b.unsqueeze(group, 1)), I64), [1],
                     keepdims=0)  # [L]
    taken = b.op("Greater", b.op("Sub", counts, b.op("Gather", counts, first, axis=0)), b.f32(0.0))
    positions = b.unsqueeze(arange(b, b.dim(coords, 1)), 0)  # [1, N]
    itself = b.op("Equal", positions, b.unsqueeze(leader_k, 1))  # [L, N]
    member = b.op("Or", b.op("And", overlap, b.op("Not", taken)), itself)
    weights = b.where(member, slot_scores, b.f32(0.0))  # [L, N]
    # blended[l] = sum_k w[l, k] coords[b_l, k] / sum_k w[l, k], as one batched MatMul over the images
    images = arange(b, b.dim(coords, 0))
    in_image = b.cast(b.op("Equal", b.unsqueeze(images, 1, 2), b.unsqueeze(leader_b, 0, 2)), F32)  # [B, L, 1]
    summed = b.op("MatMul", b.op("Mul", b.unsqueeze(weights, 0), in_image), coords)  # [B, L, D]
    rows = b.unsqueeze(arange(b, b.dim(sel, 0)), 1)  # [L, 1]
    summed = b.op("GatherND", summed, b.op("Concat", b.op("Gather", sel, b.i64(0), axis=1), rows, axis=1))  # [L, D]
    total = b.reduce("ReduceSum", weights, [1], keepdims=1)  # [L, 1]
    own = b.op("GatherND", coords, b.op("Gather", sel, b.i64(0, 2), axis=1))  # [L, D]
    positive = b.op("Greater", total, b.f32(0.0))  # scores <= 0 (no activation) cannot weigh: the leader's own
    blended = b.where(positive, b.op("Div", summed, b.where(positive, total, b.f32(1.0))), own)
    classes = leader_c if box_classes is None else b.op("GatherND", box_classes, b.op("Gather", sel, b.i64(0, 2), axis=1))
    # per image, the max_det best leaders (their sorted order breaks ties: lower class, then lower box)
    per_image = b.where(b.op("Equal", b.unsqueeze(images, 1), b.unsqueeze(leader_b, 0)), b.unsqueeze(score, 0),
                        neg_inf(b))  # [B, L]
    k = b.op("Min", b.dim(per_image, 1), b.i64(max_det))
    values, idx = b.op_multi("TopK", per_image, k, num_outputs=2, axis=1, largest=1, sorted=1)  # [B, k]
    valid = b.op("Greater", values, neg_inf(b))
    zero_f, zero_i = b.f32(0.0), b.const(np.array(0, np.int64))
    picked = b.where(b.unsqueeze(valid, -1), b.op("Gather", blended, idx, axis=0), zero_f)  # [B, k, D]
    out_scores = b.where(valid, values, zero_f)
    out_classes = b.where(valid, b.op("Gather", classes, idx, axis=0), zero_i)
    num = b.reduce("ReduceSum", b.cast(valid, I64), [1], keepdims=0)
    pad = b.op("Sub", b.i64(max_det), k)
    zero1 = b.i64(0)
    pads2 = b.op("Concat", zero1, zero1, zero1, pad, axis=0)
    pads3 = b.op("Concat", zero1, zero1, zero1, zero1, pad, zero1, axis=0)
    return PaddedDetections(b.op("Pad", picked, pads3, zero_f), b.op("Pad", out_scores, pads2, zero_f),
                            b.op("Pad", out_classes, pads2, zero_i), num)
