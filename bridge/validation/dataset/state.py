"""What a dataset run measured, per runtime, kept as mergeable state rather than finished figures.

A ``RuntimeState`` holds a runtime's metric accumulators (``bridge.validation.dataset.metrics``): the COCO AP
states against the labels and against the source, the matched / missed / extra counts, keypoint distances,
classifier counts, the segmentation confusion matrix, and its worst images. ``figures`` turns them into the
report's figures. Two states of the same runtime over consecutive images merge (``merge``) into the state of
one run over both: AP states concatenate in image order (what pycocotools computes over every image at once),
counts and confusion matrices add, keypoint distances concatenate (their mean is an exactly rounded sum,
``math.fsum``, whatever the grouping), worst images are the largest disagreements of the union (each image's
disagreement is its own). So a dataset split into shards (``bridge.migrate.shards``) gives the figures of one
run, exactly: ``to_arrays`` / ``from_arrays`` carry a shard's state in an .npz.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bridge.validation.dataset.metrics import Agreement, CocoAP, KeypointAgreement, SegmentationIoU, TopK


@dataclass
class WorstImage:
    """An image where a candidate disagrees most with the source, with both sides' boxes (original pixels)."""

    runtime: str
    index: int
    name: str
    path: str | None
    disagreement: float
    source: list[dict[str, Any]] = field(default_factory=list)  # {box, label, score, matched}
    candidate: list[dict[str, Any]] = field(default_factory=list)
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def worst_first(items: list[WorstImage], limit: int) -> list[WorstImage]:
    """The ``limit`` largest disagreements, largest first (of equal ones, the earlier image)."""
    return sorted(items, key=lambda w: (-w.disagreement, w.index))[:max(limit, 0)]


@dataclass
class RuntimeState:
    """One runtime's accumulators on the dataset (module docstring); None where its kind has none."""

    runtime: str
    role: str  # "source" or "candidate"
    images: int = 0
    seconds: float = 0.0
    truth: CocoAP | None = None  # its detections against the labels
    agreement: CocoAP | None = None  # a candidate's detections against the source's at the agreement score
    counts: Agreement | None = None
    keypoints: KeypointAgreement | None = None
    confident_sources: int = 0  # the source's detections at or above the agreement score (what agreement is of)
    keypoint_sides: list[str] = field(default_factory=list)  # which sides had keypoints
    topk: TopK | None = None
    segmentation: SegmentationIoU | None = None
    worst: list[WorstImage] = field(default_factory=list)

    def figures(self, kind: str, class_names: Mapping[int, str]) -> dict[str, Any]:
        """The report's figures (the keys the JSON report promises: ``map50``, ``agreement_ap50``, ...)."""
        f: dict[str, Any] = {}
        if kind == "detection" and self.role == "candidate":
            if self.agreement is not None and self.confident_sources:
                r = self.agreement.result()
                f.update(agreement_ap50=r["map50"], agreement_ap50_95=r["map50_95"])
            else:
                f.update(agreement_ap50=None, agreement_ap50_95=None)
            if self.counts is not None:
                f.update(self.counts.to_dict())
            if self.keypoints is not None:
                f.update(self.keypoints.to_dict())
        if self.truth is not None:
            r = self.truth.result()
            f.update(map50=r["map50"], map50_95=r["map50_95"],
                     ap_per_class={class_names.get(c, str(c)): v for c, v in r["per_class"].items()})
        if self.topk is not None:
            f.update(self.topk.to_dict(candidate=self.role == "candidate"))
        if self.segmentation is not None:
            f["miou"] = self.segmentation.miou()
        return f

    def metric_seconds(self) -> float:
        return sum(ap.seconds for ap in (self.truth, self.agreement) if ap is not None)

    def merge(self, other: RuntimeState, worst_limit: int) -> None:
        """Append ``other``'s images (the next shard) after these."""
        self.images += other.images
        self.seconds += other.seconds
        for name in ("truth", "agreement"):
            mine, theirs = getattr(self, name), getattr(other, name)
            if theirs is not None:
                if mine is None:
                    setattr(self, name, mine := CocoAP())
                mine.merge(theirs)
        if other.counts is not None:
            self.counts = self.counts or Agreement()
            self.counts.matched += other.counts.matched
            self.counts.missed += other.counts.missed
            self.counts.extra += other.counts.extra
        if other.keypoints is not None:
            self.keypoints = self.keypoints or KeypointAgreement()
            self.keypoints.merge(other.keypoints)
        if other.topk is not None:
            self.topk = self.topk or TopK()
            for name in ("images", "top1_agree", "top5_agree", "labelled", "top1_correct", "top5_correct"):
                setattr(self.topk, name, getattr(self.topk, name) + getattr(other.topk, name))
        if other.segmentation is not None:
            self.segmentation = self.segmentation or SegmentationIoU()
            self.segmentation.merge(other.segmentation)
        self.confident_sources += other.confident_sources
        self.keypoint_sides = sorted({*self.keypoint_sides, *other.keypoint_sides})
        self.worst = worst_first([*self.worst, *other.worst], worst_limit)

    # -- shards ----------------------------------------------------------------------------------------
    def to_arrays(self, prefix: str) -> dict[str, np.ndarray]:
        meta = {"runtime": self.runtime, "role": self.role, "images": self.images, "seconds": self.seconds,
                "confident_sources": self.confident_sources, "keypoint_sides": self.keypoint_sides,
                "worst": [w.to_dict() for w in self.worst],
                "counts": None if self.counts is None else self.counts.to_dict(),
                "topk": None if self.topk is None else self.topk.__dict__,
                "keypoints": None if self.keypoints is None else self.keypoints.scalars()}
        out = {f"{prefix}meta": np.asarray(json.dumps(meta))}
        for name in ("truth", "agreement"):
            ap = getattr(self, name)
            if ap is not None:
                out.update(ap.to_arrays(f"{prefix}{name}."))
        if self.keypoints is not None:
            out[f"{prefix}keypoint_distances"] = self.keypoints.distances()
        if self.segmentation is not None and self.segmentation.confusion is not None:
            out[f"{prefix}confusion"] = self.segmentation.confusion
        return out

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray], prefix: str) -> RuntimeState:
        meta = json.loads(str(arrays[f"{prefix}meta"]))
        state = cls(meta["runtime"], meta["role"], meta["images"], meta["seconds"],
                    confident_sources=meta["confident_sources"], keypoint_sides=list(meta["keypoint_sides"]),
                    worst=[WorstImage(**w) for w in meta["worst"]])
        for name in ("truth", "agreement"):
            if f"{prefix}{name}.images" in arrays:
                setattr(state, name, CocoAP.from_arrays(arrays, f"{prefix}{name}."))
        if meta["counts"] is not None:
            state.counts = Agreement(**meta["counts"])
        if meta["topk"] is not None:
            state.topk = TopK(**meta["topk"])
        if meta["keypoints"] is not None:
            state.keypoints = KeypointAgreement.from_parts(meta["keypoints"], arrays[f"{prefix}keypoint_distances"])
        if f"{prefix}confusion" in arrays:
            state.segmentation = SegmentationIoU(np.asarray(arrays[f"{prefix}confusion"]))
        return state


__all__ = ["RuntimeState", "WorstImage", "worst_first"]
