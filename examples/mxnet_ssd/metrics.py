"""VOC-style mean average precision for the example's detections, in MXNet's MultiBoxDetection layout.

Detections are [B, N, 6] rows (class, score, xmin, ymin, xmax, ymax) as ``_contrib_MultiBoxDetection``
emits them; rows with class < 0 (invalid or suppressed) are ignored. Ground truth is one [k, 4] box
array and one [k] class array per image. The computation is bridge's own
(``bridge.validation.detection.matching.mean_average_precision``: PASCAL VOC greedy matching, all-points AP),
so the training script, the example's tests and bridge's parity tests score with one implementation.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from bridge.validation.detection.matching import mean_average_precision as _voc_map


def _ground_truth(gt_boxes: Sequence[np.ndarray], gt_classes: Sequence[np.ndarray]) -> list[np.ndarray]:
    return [np.concatenate([np.asarray(c, np.float64).reshape(-1, 1), np.asarray(b, np.float64).reshape(-1, 4)], 1)
            for b, c in zip(gt_boxes, gt_classes, strict=True)]


def per_class_ap(
    detections: np.ndarray | Sequence[np.ndarray],
    gt_boxes: Sequence[np.ndarray],
    gt_classes: Sequence[np.ndarray],
    num_classes: int,
    iou_threshold: float = 0.5,
) -> np.ndarray:
    """AP per class ([num_classes], NaN for a class without ground truth)."""
    if len(detections) != len(gt_boxes) or len(gt_boxes) != len(gt_classes):
        raise ValueError("detections, gt_boxes and gt_classes need one entry per image")
    result = _voc_map(detections, _ground_truth(gt_boxes, gt_classes), iou_threshold=iou_threshold)
    aps = np.full(num_classes, np.nan)
    for cls, ap in result.ap.items():
        aps[cls] = ap
    return aps


def mean_average_precision(
    detections: np.ndarray | Sequence[np.ndarray],
    gt_boxes: Sequence[np.ndarray],
    gt_classes: Sequence[np.ndarray],
    num_classes: int,
    iou_threshold: float = 0.5,
) -> float:
    """mAP: mean of :func:`per_class_ap` over the classes that have ground truth."""
    aps = per_class_ap(detections, gt_boxes, gt_classes, num_classes, iou_threshold)
    return float(np.nanmean(aps)) if np.any(~np.isnan(aps)) else 0.0
