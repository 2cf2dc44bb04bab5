"""Detection-aware comparison for NMS outputs: match boxes by class and IoU, then compare scores.

Two correct NMS implementations may list the same detections in a different order (ties,
padding, per-class vs. global sorting), so elementwise comparison of their outputs is wrong.
Here every reference detection is matched greedily (highest score first) to the unmatched
candidate detection of the same class with the highest IoU; a pair counts when IoU >= ``iou``.
Numpy only, so it runs wherever validation runs. (bridge.validation will get a general version;
this one serves the TF adapter's NMS tests until then.)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class DetectionMatch:
    matched: int
    reference_count: int
    candidate_count: int
    max_box_error: float
    max_score_error: float

    @property
    def recall(self) -> float:
        return self.matched / self.reference_count if self.reference_count else 1.0

    def passed(self, min_recall: float = 1.0, score_atol: float = 1e-4, allow_extra: bool = False) -> bool:
        extra_ok = allow_extra or self.candidate_count == self.reference_count
        return self.recall >= min_recall and self.max_score_error <= score_atol and extra_ok


def iou_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pairwise IoU of boxes (N, 4) x (M, 4) given as (y1, x1, y2, x2) or (x1, y1, x2, y2), corners in any order."""
    a = np.asarray(a, np.float64).reshape(-1, 4)
    b = np.asarray(b, np.float64).reshape(-1, 4)
    a_lo, a_hi = np.minimum(a[:, :2], a[:, 2:]), np.maximum(a[:, :2], a[:, 2:])
    b_lo, b_hi = np.minimum(b[:, :2], b[:, 2:]), np.maximum(b[:, :2], b[:, 2:])
    lo = np.maximum(a_lo[:, None, :], b_lo[None, :, :])
    hi = np.minimum(a_hi[:, None, :], b_hi[None, :, :])
    inter = np.prod(np.clip(hi - lo, 0, None), axis=-1)
    area_a = np.prod(a_hi - a_lo, axis=-1)
    area_b = np.prod(b_hi - b_lo, axis=-1)
    union = area_a[:, None] + area_b[None, :] - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1), 0.0)


def match_detections(
    ref_boxes: np.ndarray, ref_scores: np.ndarray, ref_classes: np.ndarray | None,
    cand_boxes: np.ndarray, cand_scores: np.ndarray, cand_classes: np.ndarray | None,
    iou: float = 0.5,
) -> DetectionMatch:
    """Greedy class-aware IoU matching of two detection sets (padding rows must be removed first)."""
    rb, cb = np.asarray(ref_boxes).reshape(-1, 4), np.asarray(cand_boxes).reshape(-1, 4)
    rs, cs = np.asarray(ref_scores).reshape(-1), np.asarray(cand_scores).reshape(-1)
    rc = np.zeros(len(rs), np.int64) if ref_classes is None else np.asarray(ref_classes).reshape(-1).astype(np.int64)
    cc = np.zeros(len(cs), np.int64) if cand_classes is None else np.asarray(cand_classes).reshape(-1).astype(np.int64)
    ious = iou_matrix(rb, cb) if len(rb) and len(cb) else np.zeros((len(rb), len(cb)))
    used = np.zeros(len(cb), bool)
    matched, box_err, score_err = 0, 0.0, 0.0
    for i in np.argsort(-rs, kind="stable"):
        candidates = np.where(~used & (cc == rc[i]))[0]
        if not len(candidates):
            continue
        j = candidates[np.argmax(ious[i, candidates])]
        if ious[i, j] < iou:
            continue
        used[j] = True
        matched += 1
        box_err = max(box_err, float(np.abs(rb[i] - cb[j]).max()))
        score_err = max(score_err, float(abs(rs[i] - cs[j])))
    return DetectionMatch(matched, len(rb), len(cb), box_err, score_err)
