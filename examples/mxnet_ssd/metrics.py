"""VOC-style mean average precision at IoU 0.5 for detections in MXNet's MultiBoxDetection layout.

Detections are [B, N, 6] rows (class, score, xmin, ymin, xmax, ymax) as ``_contrib_MultiBoxDetection``
emits them; rows with class < 0 (invalid or suppressed) are ignored. Ground truth is one [k, 4] box
array and one [k] class array per image, boxes normalised like the detections. Matching follows the
PASCAL VOC devkit (greedy by descending score, a ground truth matches at most once, IoU > 0.5, no
+1 pixel term since boxes are normalised) with all-points interpolated AP (VOC 2010+). Numpy only.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def iou(box: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """IoU of one box [4] against boxes [k, 4] (xmin, ymin, xmax, ymax)."""
    ix = np.clip(np.minimum(box[2], boxes[:, 2]) - np.maximum(box[0], boxes[:, 0]), 0, None)
    iy = np.clip(np.minimum(box[3], boxes[:, 3]) - np.maximum(box[1], boxes[:, 1]), 0, None)
    inter = ix * iy
    area = (box[2] - box[0]) * (box[3] - box[1])
    areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    union = area + areas - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1), 0.0)


def average_precision(recall: np.ndarray, precision: np.ndarray) -> float:
    """All-points interpolated AP: area under the monotone precision envelope."""
    mrec = np.concatenate([[0.0], recall, [1.0]])
    mpre = np.concatenate([[0.0], precision, [0.0]])
    mpre = np.maximum.accumulate(mpre[::-1])[::-1]
    idx = np.nonzero(mrec[1:] != mrec[:-1])[0]
    return float(np.sum((mrec[idx + 1] - mrec[idx]) * mpre[idx + 1]))


def per_class_ap(
    detections: np.ndarray | Sequence[np.ndarray],
    gt_boxes: Sequence[np.ndarray],
    gt_classes: Sequence[np.ndarray],
    num_classes: int,
    iou_threshold: float = 0.5,
) -> np.ndarray:
    """AP per class ([num_classes], NaN for a class without ground truth).

    ``detections[i]`` is image i's [N, 6] MultiBoxDetection output (or [B, N, 6] for all images).
    """
    if len(detections) != len(gt_boxes) or len(gt_boxes) != len(gt_classes):
        raise ValueError("detections, gt_boxes and gt_classes need one entry per image")
    aps = np.full(num_classes, np.nan)
    for c in range(num_classes):
        gts = [np.asarray(b, dtype=np.float64).reshape(-1, 4)[np.asarray(k) == c]
               for b, k in zip(gt_boxes, gt_classes, strict=True)]
        n_gt = sum(len(g) for g in gts)
        if n_gt == 0:
            continue
        img_ids, scores, boxes = [], [], []
        for i, det in enumerate(detections):
            det = np.asarray(det, dtype=np.float64).reshape(-1, 6)
            det = det[det[:, 0].astype(np.int64) == c]  # class < 0 never equals c
            img_ids.extend([i] * len(det))
            scores.extend(det[:, 1])
            boxes.extend(det[:, 2:6])
        order = np.argsort(-np.asarray(scores), kind="stable")
        used = [np.zeros(len(g), dtype=bool) for g in gts]
        tp = np.zeros(len(order))
        for rank, j in enumerate(order):
            g = gts[img_ids[j]]
            if len(g) == 0:
                continue
            ov = iou(np.asarray(boxes[j]), g)
            best = int(np.argmax(ov))
            if ov[best] > iou_threshold and not used[img_ids[j]][best]:
                tp[rank] = 1
                used[img_ids[j]][best] = True
        ctp = np.cumsum(tp)
        recall = ctp / n_gt
        precision = ctp / np.arange(1, len(order) + 1)
        aps[c] = average_precision(recall, precision)
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
