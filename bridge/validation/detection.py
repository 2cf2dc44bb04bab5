"""Detection-aware comparison and mAP: compare detectors by the detections they report, not elementwise.

Two correct NMS implementations can list the same detections in a different order or keep a
suppressed row's score in place (MXNet), so a tensor diff says little. Here detections are matched
per image and class, greedily by descending reference score, each to the unmatched candidate of the
same class with the highest IoU (at least ``match_iou``). The verdict needs every detection matched
on both sides, every pair's IoU >= ``iou`` (default 0.999) and score difference <= ``score_tol``
(default 1e-5).

``mean_average_precision`` scores detections in MXNet's [B, N, 6] layout (class, score, x1, y1, x2,
y2; class < 0 = no detection) against ground truth with the PASCAL VOC all-points AP (VOC2010+:
area under the precision envelope), IoU >= 0.5 by default, "difficult" boxes ignored.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

DEFAULT_IOU = 0.999
DEFAULT_SCORE_TOL = 1e-5
DEFAULT_MATCH_IOU = 0.5


@dataclass(frozen=True)
class Detections:
    """The detections of one image: boxes [K, 4] corner (x1, y1, x2, y2), scores [K], classes [K] int."""

    boxes: np.ndarray
    scores: np.ndarray
    classes: np.ndarray

    def __post_init__(self) -> None:
        if not (len(self.boxes) == len(self.scores) == len(self.classes)):
            raise ValueError("boxes, scores and classes must have the same length")

    def __len__(self) -> int:
        return len(self.scores)


def from_mxnet(detections: np.ndarray) -> list[Detections]:
    """[B, N, 6] (class, score, x1, y1, x2, y2) rows; rows with class < 0 are not detections."""
    arr = np.asarray(detections)
    if arr.ndim == 2:
        arr = arr[None]
    out = []
    for rows in arr:
        keep = rows[:, 0] >= 0
        out.append(Detections(rows[keep, 2:6].astype(np.float64), rows[keep, 1].astype(np.float64),
                              rows[keep, 0].astype(np.int64)))
    return out


def from_padded(boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray, num_detections: np.ndarray) -> list[Detections]:
    """The TF combined-NMS layout: [B, K, 4], [B, K], [B, K], [B] (first num rows are real)."""
    return [Detections(np.asarray(bx)[:n].astype(np.float64), np.asarray(sc)[:n].astype(np.float64),
                       np.asarray(cl)[:n].astype(np.int64))
            for bx, sc, cl, n in zip(boxes, scores, classes, np.asarray(num_detections).astype(int), strict=True)]


def from_indices(selected: np.ndarray, boxes: np.ndarray, scores: np.ndarray) -> list[Detections]:
    """ONNX NonMaxSuppression output [K, 3] (batch, class, box) with boxes [B, N, 4] and scores [B, C, N]."""
    sel = np.asarray(selected).astype(np.int64).reshape(-1, 3)
    out = []
    for image in range(len(boxes)):
        rows = sel[sel[:, 0] == image]
        out.append(Detections(np.asarray(boxes)[image, rows[:, 2]].astype(np.float64),
                              np.asarray(scores)[image, rows[:, 1], rows[:, 2]].astype(np.float64),
                              rows[:, 1].copy()))
    return out


def iou_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pairwise IoU of corner boxes a [K, 4] and b [M, 4] (float64).

    Degenerate (zero-area) boxes - common after clipping to [0, 1] - have no overlap to measure; they
    count as IoU 1 with a box whose corners are the same within 1e-6 and 0 otherwise, so identical
    degenerate detections still match.
    """
    a = np.asarray(a, np.float64).reshape(-1, 4)
    b = np.asarray(b, np.float64).reshape(-1, 4)
    x1 = np.maximum(a[:, None, 0], b[None, :, 0])
    y1 = np.maximum(a[:, None, 1], b[None, :, 1])
    x2 = np.minimum(a[:, None, 2], b[None, :, 2])
    y2 = np.minimum(a[:, None, 3], b[None, :, 3])
    inter = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
    area_a = np.clip(a[:, 2] - a[:, 0], 0, None) * np.clip(a[:, 3] - a[:, 1], 0, None)
    area_b = np.clip(b[:, 2] - b[:, 0], 0, None) * np.clip(b[:, 3] - b[:, 1], 0, None)
    union = area_a[:, None] + area_b[None, :] - inter
    same_corners = np.all(np.abs(a[:, None, :] - b[None, :, :]) <= 1e-6, axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(union > 0, inter / np.where(union > 0, union, 1), np.where(same_corners, 1.0, 0.0))


@dataclass
class ImageMatch:
    image: int
    matched: int
    unmatched_reference: int
    unmatched_candidate: int
    max_score_diff: float
    min_iou: float


@dataclass
class DetectionComparison:
    """Detection-level verdict of a candidate against a reference (all images)."""

    reference: str
    candidate: str
    iou_threshold: float
    score_tolerance: float
    matched: int = 0
    unmatched_reference: int = 0
    unmatched_candidate: int = 0
    max_score_diff: float = 0.0
    min_iou: float = 1.0
    images: list[ImageMatch] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return (self.unmatched_reference == 0 and self.unmatched_candidate == 0
                and self.min_iou >= self.iou_threshold and self.max_score_diff <= self.score_tolerance)

    def summary(self) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        return (f"{self.candidate} vs {self.reference}: {verdict}, {self.matched} matched, "
                f"{self.unmatched_reference} only in reference, {self.unmatched_candidate} only in candidate, "
                f"min IoU {self.min_iou:.6f} (>= {self.iou_threshold}), max score diff {self.max_score_diff:.3g} "
                f"(<= {self.score_tolerance:g})")

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["passed"] = self.passed
        return data


DETECTION_FORMATS = ("mxnet", "boxes-scores-classes", "indices")


def detection_output_names(name: str, output_format: str) -> list[str]:
    """Graph output names a lowered detection output called ``name`` has in ``output_format``."""
    if output_format == "mxnet":
        return [name]
    suffixes = {"boxes-scores-classes": ("boxes", "scores", "classes", "num_detections"),
                "indices": ("selected_indices", "boxes", "scores")}[output_format]
    return [f"{name}_{s}" for s in suffixes]


def read_detections(outputs: Mapping[str, np.ndarray], name: str, output_format: str) -> list[Detections]:
    """The detections of output ``name`` from a run's outputs, whatever layout the model emits them in."""
    arrays = [outputs[n] for n in detection_output_names(name, output_format)]
    if output_format == "mxnet":
        return from_mxnet(arrays[0])
    if output_format == "boxes-scores-classes":
        return from_padded(*arrays)
    return from_indices(*arrays)


def compare_detections(
    reference: Sequence[Detections],
    candidate: Sequence[Detections],
    *,
    iou: float = DEFAULT_IOU,
    score_tol: float = DEFAULT_SCORE_TOL,
    match_iou: float = DEFAULT_MATCH_IOU,
    reference_name: str = "reference",
    candidate_name: str = "candidate",
) -> DetectionComparison:
    """Match detections image by image (same class, greedy by reference score, best IoU >= match_iou)."""
    if len(reference) != len(candidate):
        raise ValueError(f"reference has {len(reference)} images, candidate {len(candidate)}")
    result = DetectionComparison(reference_name, candidate_name, iou, score_tol)
    for image, (ref, cand) in enumerate(zip(reference, candidate, strict=True)):
        m = _match_image(ref, cand, match_iou)
        m.image = image
        result.images.append(m)
        result.matched += m.matched
        result.unmatched_reference += m.unmatched_reference
        result.unmatched_candidate += m.unmatched_candidate
        result.max_score_diff = max(result.max_score_diff, m.max_score_diff)
        result.min_iou = min(result.min_iou, m.min_iou)
    return result


def _match_image(ref: Detections, cand: Detections, match_iou: float) -> ImageMatch:
    ious = iou_matrix(ref.boxes, cand.boxes)
    used = np.zeros(len(cand), dtype=bool)
    matched, max_diff, min_iou = 0, 0.0, 1.0
    for i in np.argsort(-np.asarray(ref.scores), kind="stable"):
        options = (~used) & (cand.classes == ref.classes[i]) & (ious[i] >= match_iou) if len(cand) else used
        if not options.any():
            continue
        j = int(np.argmax(np.where(options, ious[i], -1.0)))
        used[j] = True
        matched += 1
        max_diff = max(max_diff, float(abs(ref.scores[i] - cand.scores[j])))
        min_iou = min(min_iou, float(ious[i, j]))
    return ImageMatch(-1, matched, len(ref) - matched, len(cand) - matched, max_diff, min_iou)


# -- mAP ----------------------------------------------------------------------------------------------

@dataclass
class MAPResult:
    map: float
    ap: dict[int, float]  # per class with ground truth
    iou_threshold: float


def voc_ap(recall: np.ndarray, precision: np.ndarray) -> float:
    """VOC2010+ all-points AP: area under the monotone (right-to-left max) precision envelope."""
    mrec = np.concatenate(([0.0], recall, [1.0]))
    mpre = np.concatenate(([0.0], precision, [0.0]))
    for i in range(len(mpre) - 2, -1, -1):
        mpre[i] = max(mpre[i], mpre[i + 1])
    steps = np.where(mrec[1:] != mrec[:-1])[0]
    return float(np.sum((mrec[steps + 1] - mrec[steps]) * mpre[steps + 1]))


def mean_average_precision(
    detections: np.ndarray | Sequence[np.ndarray],
    ground_truth: Sequence[np.ndarray],
    *,
    iou_threshold: float = 0.5,
    difficult: Sequence[np.ndarray] | None = None,
) -> MAPResult:
    """mAP@iou of MXNet-layout detections ([B, N, 6] or a list of [N, 6]) against ground truth.

    ``ground_truth[i]`` is [M, 5] rows (class, x1, y1, x2, y2) for image i; ``difficult[i]`` an
    optional [M] bool mask of boxes that count neither as hits nor as misses (VOC). Each detection,
    in descending score order over all images, is a true positive if its best-IoU ground-truth box of
    the same class has IoU >= iou_threshold and is not yet taken; otherwise a false positive.
    """
    dets = list(detections)
    if len(dets) != len(ground_truth):
        raise ValueError(f"{len(dets)} images of detections, {len(ground_truth)} of ground truth")
    classes = sorted({int(c) for gt in ground_truth for c in np.asarray(gt).reshape(-1, 5)[:, 0]})
    ap: dict[int, float] = {}
    for cls in classes:
        gts, hard, records = [], [], []
        for image, (det, gt) in enumerate(zip(dets, ground_truth, strict=True)):
            g = np.asarray(gt, np.float64).reshape(-1, 5)
            sel = g[:, 0] == cls
            gts.append(g[sel, 1:5])
            hard_mask = np.zeros(len(g), bool) if difficult is None else np.asarray(difficult[image], bool)
            hard.append(hard_mask[sel])
            d = np.asarray(det, np.float64).reshape(-1, 6)
            for row in d[d[:, 0] == cls]:
                records.append((row[1], image, row[2:6]))
        n_pos = int(sum((~h).sum() for h in hard))
        if n_pos == 0:
            continue
        records.sort(key=lambda r: -r[0])
        taken = [np.zeros(len(g), bool) for g in gts]
        tp, fp = np.zeros(len(records)), np.zeros(len(records))
        for k, (_, image, box) in enumerate(records):
            g = gts[image]
            if len(g) == 0:
                fp[k] = 1
                continue
            overlaps = iou_matrix(box[None], g)[0]
            j = int(np.argmax(overlaps))
            if overlaps[j] >= iou_threshold:
                if hard[image][j]:
                    continue  # matched a difficult box: ignored
                if not taken[image][j]:
                    taken[image][j] = True
                    tp[k] = 1
                else:
                    fp[k] = 1
            else:
                fp[k] = 1
        ctp, cfp = np.cumsum(tp), np.cumsum(fp)
        recall = ctp / n_pos
        precision = ctp / np.maximum(ctp + cfp, np.finfo(np.float64).eps)
        ap[cls] = voc_ap(recall, precision)
    return MAPResult(float(np.mean(list(ap.values()))) if ap else 0.0, ap, iou_threshold)
