"""Dataset metrics, accumulated batch by batch at constant memory per image.

``CocoAP``: COCO AP@0.5 and AP@[.5:.95] of detections against ground truth, as pycocotools computes them.
The per-image evaluation (per image and category: matching at the ten IoU thresholds, crowd regions) runs
on each chunk of images as it comes (``cocoeval.evaluate_chunk``: pycocotools' ``evaluate`` vectorised over
the chunk); of its results only what ``accumulate`` reads is kept (each detection's score, matched and
ignored flags per threshold; the count of ground-truth boxes that are not ignored), concatenated per
category in image order. ``result`` then runs ``accumulate`` (``cocoeval.accumulate``, pycocotools' own
vectorised; ``plain=True`` runs pycocotools' itself) on one merged entry per category, which is exactly
what pycocotools computes over every image at once: it concatenates the images' entries in image order and
sorts them stably by score. Tests hold every step equal to plain pycocotools to the last bit. Parameters:
one area range (all), at most 100 detections per image (COCO's ``maxDets`` of the headline AP), boxes as
given (no segmentation). States merge in shard order (``merge``), for a dataset split into shards.

``Agreement``: the candidate's detections at or above the agreement score matched to the source's
(pycocotools' matching at IoU 0.5, greedy by the candidate's scores): matched, missed (source only),
extra (candidate only).
``KeypointAgreement``: for detectors with keypoints, the keypoints of those matched detections against the
source's: PCK (within 5% of the box size) and the mean distance in pixels.
``TopK``: classifier top-1 / top-5 agreement and accuracy. ``SegmentationIoU``: mIoU of argmax maps.
"""

from __future__ import annotations

import contextlib
import io
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bridge.validation.dataset.cocoeval import (
    AREA_RANGE,
    IOU_THRESHOLDS,
    MAX_DETS,
    REC_THRESHOLDS,
    accumulate,
    evaluate_chunk,
    pycocotools_classes,
)
from bridge.validation.detection.boxes import pair_iou


@dataclass(frozen=True)
class ImageBoxes:
    """One image's boxes for a metric: corners [K, 4] (pixels), classes [K], scores [K] (1 for truth), crowd [K]."""

    boxes: np.ndarray
    classes: np.ndarray
    scores: np.ndarray | None = None
    crowd: np.ndarray | None = None
    keypoints: np.ndarray | None = None  # [K, P, 2] (x, y) per detection, pixels

    def __len__(self) -> int:
        return len(self.classes)


@dataclass
class _Category:
    scores: list[np.ndarray] = field(default_factory=list)
    matched: list[np.ndarray] = field(default_factory=list)  # [T, D] bool
    ignored: list[np.ndarray] = field(default_factory=list)  # [T, D] bool
    positives: int = 0


class CocoAP:
    """COCO AP of detections against ground truth, accumulated chunk by chunk (module docstring)."""

    def __init__(self) -> None:
        self._cats: dict[int, _Category] = {}
        self.images = 0
        self.seconds = 0.0  # time spent in the metric itself
        self.plain_chunks = 0  # chunks evaluate_chunk handed to pycocotools itself (a non-finite value)

    def add(self, truth: Sequence[ImageBoxes], detections: Sequence[ImageBoxes]) -> list[np.ndarray]:
        """One chunk of images: their ground truth and detections, in dataset order. Returns per image the
        pairs pycocotools matched at IoU 0.5, as rows [P, 2] (truth row, detection row)."""
        start = time.perf_counter()
        chunk = evaluate_chunk(truth, detections)
        self.images += len(truth)
        self.plain_chunks += int(chunk.plain)
        for key, e in chunk.categories.items():
            cat = self._cats.setdefault(key, _Category())
            cat.scores.append(e.scores)
            cat.matched.append(e.matched)
            cat.ignored.append(e.ignored)
            cat.positives += e.positives
        self.seconds += time.perf_counter() - start
        return chunk.pairs

    def _compact(self) -> None:
        """One array per category (not one per chunk)."""
        for cat in self._cats.values():
            if len(cat.scores) > 1:
                cat.scores = [np.concatenate(cat.scores)]
                cat.matched = [np.concatenate(cat.matched, axis=1)]
                cat.ignored = [np.concatenate(cat.ignored, axis=1)]

    def merge(self, other: CocoAP) -> None:
        """Append ``other``'s images after these (shards merged in dataset order)."""
        for key, theirs in other._cats.items():
            mine = self._cats.setdefault(key, _Category())
            mine.scores += theirs.scores
            mine.matched += theirs.matched
            mine.ignored += theirs.ignored
            mine.positives += theirs.positives
        self.images += other.images
        self.seconds += other.seconds
        self.plain_chunks += other.plain_chunks

    def result(self, plain: bool = False) -> dict[str, Any]:
        """``map50``, ``map50_95`` (None without any ground-truth box) and AP@[.5:.95] per class. ``plain``:
        pycocotools' own ``accumulate`` rather than ``cocoeval.accumulate`` (the same numbers; a test checks)."""
        start = time.perf_counter()
        cats = sorted(self._cats)
        if not cats:
            return {"map50": None, "map50_95": None, "per_class": {}}
        self._compact()
        precision = self._plain_precision(cats) if plain else self._precision(cats)  # [T, R, K], -1: absent

        def mean(values: np.ndarray) -> float | None:
            valid = values[values > -1]
            return float(valid.mean()) if valid.size else None

        self.seconds += time.perf_counter() - start
        return {"map50": mean(precision[0]), "map50_95": mean(precision),
                "per_class": {c: mean(precision[:, :, k]) for k, c in enumerate(cats)}}

    def _precision(self, cats: list[int]) -> np.ndarray:
        precision = -np.ones((len(IOU_THRESHOLDS), len(REC_THRESHOLDS), len(cats)))
        for k, c in enumerate(cats):
            entry = self._entry(self._cats[c])
            if entry is not None:
                p = accumulate(entry["dtScores"], entry["dtMatches"], entry["dtIgnore"], len(entry["gtIgnore"]))
                if p is not None:
                    precision[:, :, k] = p
        return precision

    def _plain_precision(self, cats: list[int]) -> np.ndarray:
        _, COCOeval = pycocotools_classes()
        ev = COCOeval(iouType="bbox")
        total = max(1, max(sum(len(s) for s in c.scores) for c in self._cats.values()))
        p = ev.params
        p.imgIds, p.catIds, p.areaRng, p.areaRngLbl, p.maxDets = [1], cats, [list(AREA_RANGE)], ["all"], [total]
        ev._paramsEval = p  # accumulate reads the evaluated parameters from here
        ev.evalImgs = [self._entry(self._cats[c]) for c in cats]  # index k * areas * images + ...: k
        with contextlib.redirect_stdout(io.StringIO()):
            ev.accumulate(p)
        return np.asarray(ev.eval["precision"][:, :, :, 0, 0])

    @staticmethod
    def _entry(cat: _Category) -> dict[str, Any] | None:
        if not cat.scores and not cat.positives:
            return None
        t = len(IOU_THRESHOLDS)
        return {"dtScores": np.concatenate(cat.scores) if cat.scores else np.zeros(0),
                "dtMatches": np.concatenate(cat.matched, axis=1) if cat.matched else np.zeros((t, 0), bool),
                "dtIgnore": np.concatenate(cat.ignored, axis=1) if cat.ignored else np.zeros((t, 0), bool),
                "gtIgnore": np.zeros(cat.positives, np.int8)}

    # -- shards ----------------------------------------------------------------------------------------
    def to_arrays(self, prefix: str) -> dict[str, np.ndarray]:
        """The state as named arrays (an .npz of a shard)."""
        self._compact()
        out: dict[str, np.ndarray] = {f"{prefix}images": np.asarray([self.images]),
                                      f"{prefix}seconds": np.asarray([self.seconds])}
        for key, cat in self._cats.items():
            t = len(IOU_THRESHOLDS)
            out[f"{prefix}{key}.scores"] = cat.scores[0] if cat.scores else np.zeros(0)
            out[f"{prefix}{key}.matched"] = cat.matched[0] if cat.matched else np.zeros((t, 0), bool)
            out[f"{prefix}{key}.ignored"] = cat.ignored[0] if cat.ignored else np.zeros((t, 0), bool)
            out[f"{prefix}{key}.positives"] = np.asarray([cat.positives])
        return out

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray], prefix: str) -> CocoAP:
        ap = cls()
        ap.images = int(arrays[f"{prefix}images"][0])
        ap.seconds = float(arrays[f"{prefix}seconds"][0])
        for name in arrays:
            if name.startswith(prefix) and name.endswith(".scores"):
                key = int(name[len(prefix):-len(".scores")])
                ap._cats[key] = _Category([arrays[name]], [arrays[f"{prefix}{key}.matched"]],
                                          [arrays[f"{prefix}{key}.ignored"]],
                                          int(arrays[f"{prefix}{key}.positives"][0]))
        return ap


@dataclass
class Agreement:
    """The candidate's detections at or above the agreement score against the source's (the ground truth of
    agreement), from pycocotools' own matching at IoU 0.5: matched, missed (only the source has them),
    extra (only the candidate)."""

    matched: int = 0
    missed: int = 0
    extra: int = 0

    def add(self, sources: Sequence[ImageBoxes], candidates: Sequence[ImageBoxes], pairs: Sequence[np.ndarray],
            threshold: float) -> list[tuple[np.ndarray, np.ndarray, float]]:
        """A chunk of images (``pairs``: each image's matched (source row, candidate row) at IoU 0.5,
        ``CocoAP.add``'s). Per image: the source rows and candidate rows matched by a candidate detection at
        or above ``threshold``, and the disagreement: missed + extra + the sum of (1 - IoU) over those pairs
        (the IoUs of the whole chunk in one call)."""
        kept, shown_counts = [], []
        for cand, p in zip(candidates, pairs, strict=True):
            scores = np.ones(len(cand)) if cand.scores is None else np.asarray(cand.scores)
            shown = scores >= threshold
            kept.append(p[shown[p[:, 1]]] if len(p) else p)
            shown_counts.append(int(shown.sum()))
        a = [s.boxes[k[:, 0]] for s, k in zip(sources, kept, strict=True)]
        b = [c.boxes[k[:, 1]] for c, k in zip(candidates, kept, strict=True)]
        ious = pair_iou(np.concatenate(a) if a else np.zeros((0, 4)), np.concatenate(b) if b else np.zeros((0, 4)))
        ends = np.cumsum([len(k) for k in kept])
        out = []
        for image, (source, k, n_shown) in enumerate(zip(sources, kept, shown_counts, strict=True)):
            m = len(k)
            missed, extra = len(source) - m, n_shown - m
            self.matched += m
            self.missed += missed
            self.extra += extra
            off = float(np.sum(1.0 - ious[ends[image] - m:ends[image]])) if m else 0.0
            out.append((k[:, 0], k[:, 1], float(missed + extra) + off))
        return out

    def to_dict(self) -> dict[str, int]:
        return {"matched": self.matched, "missed": self.missed, "extra": self.extra}


PCK_ALPHA = 0.05  # a keypoint agrees when within this share of the source box's larger side


@dataclass
class KeypointAgreement:
    """Keypoints of the detections ``Agreement`` matched: for each keypoint of a matched pair, its distance from
    the source's (original pixels). ``pck``: the share within ``PCK_ALPHA`` times the larger side of the
    source's box (PCK, as pose estimation scores keypoints, here against the source instead of labels; a
    keypoint with a non-finite coordinate on either side is outside); ``error``: the mean distance in pixels
    over the finite ones (kept, so that their sum is exactly rounded - ``math.fsum`` - however the images
    were grouped: shards merge to the figures of one run)."""

    compared: int = 0
    within: int = 0
    _distances: list[np.ndarray] = field(default_factory=list)

    def add(self, sources: Sequence[ImageBoxes], candidates: Sequence[ImageBoxes],
            matched: Sequence[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
        """A chunk of images and each image's matched (source rows, candidate rows); returns per image the
        count of keypoints outside the PCK distance."""
        off = np.zeros(len(sources))
        parts = [(image, s.keypoints[ri], c.keypoints[ci], s.boxes[ri])
                 for image, (s, c, (ri, ci)) in enumerate(zip(sources, candidates, matched, strict=True))
                 if len(ri) and s.keypoints is not None and c.keypoints is not None]
        if not parts:
            return off
        image = np.concatenate([np.full(len(p[1]) * p[1].shape[1], p[0]) for p in parts])
        src = np.concatenate([p[1] for p in parts]).reshape(-1, 2)
        cand = np.concatenate([p[2] for p in parts]).reshape(-1, 2)
        boxes = np.concatenate([np.repeat(p[3], p[1].shape[1], axis=0) for p in parts])
        with np.errstate(invalid="ignore", over="ignore"):
            distance = np.hypot(*(np.asarray(cand, np.float64) - np.asarray(src, np.float64)).T)
            size = np.maximum(boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1])
            inside = distance <= PCK_ALPHA * size  # NaN: outside
        self.compared += len(distance)
        self.within += int(inside.sum())
        self._distances.append(distance[np.isfinite(distance)])
        np.add.at(off, image[~inside], 1.0)
        return off

    def distances(self) -> np.ndarray:
        """The finite distances so far, in image order."""
        if len(self._distances) != 1:
            self._distances = [np.concatenate(self._distances) if self._distances else np.zeros(0)]
        return self._distances[0]

    def merge(self, other: KeypointAgreement) -> None:
        self.compared += other.compared
        self.within += other.within
        self._distances.append(other.distances())

    def scalars(self) -> dict[str, int]:
        return {"compared": self.compared, "within": self.within}

    @classmethod
    def from_parts(cls, scalars: Mapping[str, int], distances: np.ndarray) -> KeypointAgreement:
        return cls(int(scalars["compared"]), int(scalars["within"]), [np.asarray(distances, np.float64)])

    def to_dict(self) -> dict[str, Any]:
        if not self.compared:
            return {}
        d = self.distances()
        return {"keypoint_pck": self.within / self.compared,
                "keypoint_error": math.fsum(d.tolist()) / len(d) if len(d) else None,
                "keypoints_compared": self.compared}


@dataclass
class TopK:
    """Classifier agreement with the source (top-1 equal; the source's top-1 among the candidate's top-5) and
    accuracy against labels (top-1, top-5)."""

    images: int = 0
    top1_agree: int = 0
    top5_agree: int = 0
    labelled: int = 0
    top1_correct: int = 0
    top5_correct: int = 0

    def add(self, scores: np.ndarray, source: np.ndarray | None, labels: np.ndarray | None) -> np.ndarray:
        """[B, C] scores; ``source``: the source's top-1 per image; ``labels``: class per image (-1: none).
        Returns this batch's top-1 per image."""
        s = np.asarray(scores, np.float64).reshape(len(scores), -1)
        top5 = np.argsort(-s, axis=1, kind="stable")[:, :5]
        top1 = top5[:, 0]
        self.images += len(s)
        if source is not None:
            self.top1_agree += int(np.sum(top1 == source))
            self.top5_agree += int(np.sum((top5 == np.asarray(source)[:, None]).any(axis=1)))
        if labels is not None:
            lab = np.asarray(labels)
            known = lab >= 0
            self.labelled += int(known.sum())
            self.top1_correct += int(np.sum((top1 == lab) & known))
            self.top5_correct += int(np.sum((top5 == lab[:, None]).any(axis=1) & known))
        return top1

    def to_dict(self, candidate: bool) -> dict[str, Any]:
        data: dict[str, Any] = {}
        if candidate and self.images:
            data["top1_agreement"] = self.top1_agree / self.images
            data["top5_agreement"] = self.top5_agree / self.images
        if self.labelled:
            data["top1_accuracy"] = self.top1_correct / self.labelled
            data["top5_accuracy"] = self.top5_correct / self.labelled
        return data


@dataclass
class SegmentationIoU:
    """Mean IoU of the candidate's argmax class map against the source's (a confusion matrix over pixels)."""

    confusion: np.ndarray | None = None

    def add(self, source: np.ndarray, candidate: np.ndarray, classes: int) -> np.ndarray:
        """Argmax maps [B, H, W] of both; returns the per-image IoU of this batch."""
        classes = max(classes, int(max(np.max(source, initial=0), np.max(candidate, initial=0))) + 1)
        if self.confusion is None or self.confusion.shape[0] < classes:  # grown, never cut
            grown = np.zeros((classes, classes), np.int64)
            if self.confusion is not None:
                n = self.confusion.shape[0]
                grown[:n, :n] = self.confusion
            self.confusion = grown
        classes = self.confusion.shape[0]
        per_image = []
        for s, c in zip(source, candidate, strict=True):
            m = np.bincount(s.reshape(-1).astype(np.int64) * classes + c.reshape(-1).astype(np.int64),
                            minlength=classes * classes).reshape(classes, classes)
            self.confusion += m
            per_image.append(_miou(m))
        return np.asarray(per_image)

    def miou(self) -> float | None:
        return None if self.confusion is None else _miou(self.confusion)

    def merge(self, other: SegmentationIoU) -> None:
        """Add ``other``'s pixels (the confusion matrices, the smaller one padded)."""
        if other.confusion is None:
            return
        if self.confusion is None:
            self.confusion = other.confusion.copy()
            return
        n = max(len(self.confusion), len(other.confusion))
        total = np.zeros((n, n), np.int64)
        for m in (self.confusion, other.confusion):
            total[:len(m), :len(m)] += m
        self.confusion = total


def _miou(m: np.ndarray) -> float:
    inter = np.diag(m).astype(np.float64)
    union = m.sum(0) + m.sum(1) - inter
    present = union > 0
    return float((inter[present] / union[present]).mean()) if present.any() else 1.0


__all__ = ["IOU_THRESHOLDS", "MAX_DETS", "PCK_ALPHA", "Agreement", "CocoAP", "ImageBoxes", "KeypointAgreement",
           "SegmentationIoU", "TopK"]
