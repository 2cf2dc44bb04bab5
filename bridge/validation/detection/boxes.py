"""Per-image detections and their box geometry: the ``Detections`` record every layout reader fills, IoU.

``Detections`` holds one image's kept detections and, where the output shows them, the candidates it
weighed and did not keep (``suppressed_scores`` / ``suppressed_boxes``: MXNet's class -1 rows, the rows a
top-K cut dropped, the unselected entries of ONNX NonMaxSuppression's score matrix); ``complete_pool``
says that pool lists *every* candidate the output weighed, so a candidate missing from it was never one
(the tie rules in ``ties`` rely on it). Both ``matching`` (greedy matching, verdicts) and ``ties`` (which
problem rows an NMS tie explains) build on this module; it imports neither.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DEGENERATE_EPS = 1e-6  # corners this close make two zero-area boxes "the same box"


@dataclass(frozen=True)
class Detections:
    """The detections of one image: boxes [K, 4] corner (x1, y1, x2, y2), scores [K], classes [K] int.

    ``rows`` is where each detection sits in the output it was read from (reports name it);
    ``suppressed_scores`` / ``suppressed_boxes`` [S] / [S, 4] the candidates the output shows as
    suppressed (MXNet keeps them, class -1; a top-K cut keeps the rows it cut; ONNX NMS's unselected
    scores), evidence that the output weighed a candidate the other side kept (``ties``); ``masks`` [K, ...] instance masks
    (torchvision Mask R-CNN) and ``keypoints`` [K, P, 2] (x, y pairs), compared between matched detections; ``complete_pool``: the suppressed
    rows are every candidate the output weighed and did not keep (MXNet MultiBoxDetection rows with class
    -1, ONNX NonMaxSuppression's unselected scores), not a sample of them (a box_nms output, -1 rows only).
    """

    boxes: np.ndarray
    scores: np.ndarray
    classes: np.ndarray
    rows: np.ndarray | None = None
    suppressed_scores: np.ndarray | None = None
    masks: np.ndarray | None = None
    suppressed_boxes: np.ndarray | None = None
    complete_pool: bool = False
    keypoints: np.ndarray | None = None  # [K, P, 2] (x, y) per detection, in the boxes' frame

    def __post_init__(self) -> None:
        object.__setattr__(self, "boxes", np.asarray(self.boxes, np.float64).reshape(-1, 4))
        object.__setattr__(self, "scores", np.asarray(self.scores, np.float64).reshape(-1))
        object.__setattr__(self, "classes", as_class_ids(self.classes))
        if not (len(self.boxes) == len(self.scores) == len(self.classes)):
            raise ValueError("boxes, scores and classes must have the same length")
        if self.rows is not None and len(self.rows) != len(self.scores):
            raise ValueError("rows must have one entry per detection")
        if self.masks is not None and len(self.masks) != len(self.scores):
            raise ValueError("masks must have one entry per detection")
        if self.keypoints is not None and len(self.keypoints) != len(self.scores):
            raise ValueError("keypoints must have one entry per detection")
        if self.suppressed_boxes is not None:
            sb = np.asarray(self.suppressed_boxes, np.float64).reshape(-1, 4)
            if self.suppressed_scores is None or len(sb) != len(np.asarray(self.suppressed_scores).reshape(-1)):
                raise ValueError("suppressed_boxes needs one suppressed score per box")
            object.__setattr__(self, "suppressed_boxes", sb)

    def __len__(self) -> int:
        return len(self.scores)

    def row_ids(self) -> np.ndarray:
        return np.arange(len(self)) if self.rows is None else np.asarray(self.rows)

    def take(self, index: np.ndarray) -> Detections:
        return Detections(self.boxes[index], self.scores[index], self.classes[index], self.row_ids()[index],
                          self.suppressed_scores, None if self.masks is None else self.masks[index],
                          self.suppressed_boxes, self.complete_pool,
                          None if self.keypoints is None else self.keypoints[index])


def as_class_ids(classes: np.ndarray) -> np.ndarray:
    """Class ids as int64 (float ids from GluonCV / TF are cast; a NaN id becomes a class of its own)."""
    c = np.asarray(classes).reshape(-1)
    if c.dtype.kind == "f":
        c = np.where(np.isfinite(c), c, -(2**62))  # a NaN class is a class of its own, not 0
    return c.astype(np.int64)


def iou_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pairwise IoU of corner boxes a [K, 4] and b [M, 4] (float64); K x M memory, for small sets.

    Degenerate (zero-area) boxes - common after clipping to [0, 1] - have no overlap to measure; they
    count as IoU 1 with a box whose corners are the same within 1e-6 (relative, past magnitude 1) and 0 otherwise, so identical
    degenerate detections still match (``iou_cols``: or within a given absolute tolerance).
    """
    a = np.asarray(a, np.float64).reshape(-1, 4)
    b = np.asarray(b, np.float64).reshape(-1, 4)
    return pair_iou(np.repeat(a, len(b), axis=0), np.tile(b, (len(a), 1))).reshape(len(a), len(b))


def pair_iou(a: np.ndarray, b: np.ndarray, same_atol: float = 0.0) -> np.ndarray:
    """IoU of a[i] with b[i] for corner boxes of equal count (the degenerate rule of ``iou_cols``)."""
    a = np.asarray(a, np.float64).reshape(-1, 4)
    b = np.asarray(b, np.float64).reshape(-1, 4)
    return iou_cols(tuple(a.T), tuple(b.T), same_atol)


def iou_cols(a: tuple[np.ndarray, ...], b: tuple[np.ndarray, ...], same_atol: float = 0.0) -> np.ndarray:
    """IoU from the four coordinate columns of each side (1-D gathers are much cheaper than rows).

    Two zero-area boxes are the same box (IoU 1) when their corners agree within DEGENERATE_EPS (relative past
    magnitude 1) or ``same_atol``: the comparison's corner tolerance, so a flat box whose corners moved by
    float32 decode noise matches itself as a box with area does (corners within that tolerance are clean).
    """
    ax1, ay1, ax2, ay2 = a
    bx1, by1, bx2, by2 = b
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        iw = np.minimum(ax2, bx2) - np.maximum(ax1, bx1)
        ih = np.minimum(ay2, by2) - np.maximum(ay1, by1)
        inter = np.maximum(iw, 0) * np.maximum(ih, 0)
        union = np.maximum(ax2 - ax1, 0) * np.maximum(ay2 - ay1, 0) + np.maximum(bx2 - bx1, 0) * np.maximum(by2 - by1, 0)
        union -= inter
        ok = union > 0
        iou = np.divide(inter, union, out=np.zeros_like(inter), where=ok)
        degenerate = np.flatnonzero(~ok)
        if len(degenerate):  # zero-area pairs: the same box (corners within DEGENERATE_EPS) or nothing
            same = np.ones(len(degenerate), bool)
            for ac, bc in zip(a, b, strict=True):
                ad, bd = ac[degenerate], bc[degenerate]  # relative beyond 1: saturated models reach 1e2..1e38
                same &= np.abs(ad - bd) <= np.maximum(DEGENERATE_EPS * np.maximum(1.0, np.abs(ad)), same_atol)
            iou[degenerate] = same.astype(np.float64)
    return iou


def finite_rows(d: Detections) -> np.ndarray:
    """Per detection: its box and score are finite."""
    return np.isfinite(d.boxes).all(axis=1) & np.isfinite(d.scores)


def overlaps(box: np.ndarray, others: np.ndarray) -> np.ndarray:
    """Per row of ``others``: its intersection with ``box`` has positive area (NaN compares false)."""
    with np.errstate(invalid="ignore"):
        iw = np.minimum(box[2], others[:, 2]) - np.maximum(box[0], others[:, 0])
        ih = np.minimum(box[3], others[:, 3]) - np.maximum(box[1], others[:, 1])
        return (iw > 0) & (ih > 0)
