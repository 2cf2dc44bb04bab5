"""Validation on the user's dataset: the source and every candidate run on the same preprocessed images;
the report says, per runtime, how well each agrees with the source and scores against the labels.

``validate_on_dataset`` is the one entry (the validation run calls it with its reference, candidates,
the model's inputs and outputs and detection groups). One runtime is loaded at a time, as in
``bridge.validation.run``: the source streams the dataset first, keeping per image only what candidates
are judged against (its detections in the original image's pixels, a classifier's top-1, or a
segmenter's argmax maps in a scratch file); then each candidate streams it and is scored batch by batch
(``bridge.validation.dataset.metrics``). Memory is one batch of images plus those detections.

What is measured depends on the output kind: detectors (the model's detection groups, read through
``bridge.validation.detection.layouts``): agreement with the source - COCO AP@0.5 and AP@[.5:.95] of the
candidate's detections taking the source's detections at or above ``agreement_score`` as ground truth,
and matched / missed / extra counts at that score - mAP against the labels for the source and each
candidate, and where the detection group has keypoints, their agreement on the matched detections (PCK,
mean pixel error); classifiers (one [B, C] output): top-1 / top-5 agreement and accuracy; segmenters (one
[B, C, H, W] output): mIoU of the argmax maps against the source's. Each runtime's measurements are kept as
mergeable state (``state.RuntimeState``: a run over a range of the images, ``DatasetSpec.start``, is a shard
that merges with the others into one run's figures, ``shards``); ``DatasetResult.finish`` computes the
figures from it and the ``AccuracyBudget`` turns them into a verdict, per candidate.

Ctrl-C stops the run between batches: the result says where (``cancelled``), holds the metrics of the
images done, and ``DatasetCancelled`` (exit 130) carries it.
"""

from __future__ import annotations

import contextlib
import heapq
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bridge.errors import BridgeError, UsageError
from bridge.runtimes.base import Runtime, TensorMeta
from bridge.validation.dataset.labels import Labels, load_labels
from bridge.validation.dataset.metrics import (
    MAX_DETS,
    Agreement,
    CocoAP,
    ImageBoxes,
    KeypointAgreement,
    SegmentationIoU,
    TopK,
)
from bridge.validation.dataset.preprocess import Frame, InputFrame, Preprocessing, input_frame
from bridge.validation.dataset.sources import Batch, Dataset, DatasetSpec
from bridge.validation.dataset.state import RuntimeState, WorstImage, worst_first
from bridge.validation.detection.layouts import DetectionSpec

CandidateSource = Runtime | Callable[[], Runtime]
Progress = Callable[[str], None]
COCO_CHUNK = 256  # images evaluated by pycocotools at once
KINDS = ("detection", "classification", "segmentation")
WORST_MIN = 1e-3  # disagreement below this (float noise moving a box by a millionth) is not shown as a worst image


class DatasetCancelled(BridgeError):
    """The dataset run was stopped (Ctrl-C); ``result`` holds what was measured until then."""

    exit_code = 130

    def __init__(self, message: str, result: DatasetResult) -> None:
        super().__init__(message)
        self.result = result


@dataclass(frozen=True)
class AccuracyBudget:
    """A candidate fails when its agreement with the source (detectors: AP@0.5 of its detections against the
    source's; classifiers: top-1 agreement; segmenters: mIoU) is below ``min_agreement``, or when its
    mAP@0.5 or mAP@[.5:.95] (classifiers: top-1 accuracy) against the labels is more than ``max_map_drop``
    below the source's.

    Detectors also need an AP@[.5:.95] agreement of ``min_agreement_ap50_95``: AP@0.5 alone lets a box
    moved by a quarter of its size pass, and without labels nothing else would see it. The default, 0.95,
    fails a box shifted by 5% of its width (IoU 0.905: unmatched at the 0.95 threshold, so at most 0.9)
    and passes float noise (IoU 0.9999...: matched at every threshold). Detectors with keypoints need a
    keypoint agreement (PCK, ``metrics.KeypointAgreement``) of ``min_keypoint_agreement``."""

    min_agreement: float = 0.99
    max_map_drop: float = 0.005
    min_agreement_ap50_95: float = 0.95
    min_keypoint_agreement: float = 0.99

    def __post_init__(self) -> None:
        for name, flag in (("min_agreement", "--min-agreement"), ("max_map_drop", "--max-map-drop"),
                           ("min_agreement_ap50_95", "--min-agreement-ap50-95"),
                           ("min_keypoint_agreement", "--min-keypoint-agreement")):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise UsageError(f"{flag} {value}: must be in [0, 1]")

    def to_dict(self) -> dict[str, float]:
        return {"min_agreement": self.min_agreement, "max_map_drop": self.max_map_drop,
                "min_agreement_ap50_95": self.min_agreement_ap50_95,
                "min_keypoint_agreement": self.min_keypoint_agreement}


@dataclass
class RuntimeScores:
    """One runtime's figures on the dataset (the source's: no agreement)."""

    runtime: str
    role: str  # "source" or "candidate"
    images: int = 0
    seconds: float = 0.0
    figures: dict[str, Any] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)  # a candidate's: where it is outside the budget

    @property
    def passed(self) -> bool:
        return not self.failures

    def to_dict(self) -> dict[str, Any]:
        rate = self.images / self.seconds if self.seconds > 0 else None
        verdict = {"passed": self.passed} if self.role == "candidate" else {}
        return {"runtime": self.runtime, "role": self.role, "images": self.images, "seconds": round(self.seconds, 3),
                "images_per_s": None if rate is None else round(rate, 1), **self.figures, **verdict}


@dataclass
class DatasetResult:
    """The dataset run: what ran on what, each runtime's figures, the budget's verdict."""

    spec: DatasetSpec
    preprocessing: Preprocessing
    kind: str
    budget: AccuracyBudget
    images: int = 0
    input: str = ""
    labels: bool = False
    entries: dict[str, RuntimeScores] = field(default_factory=dict)  # "source" first, then each candidate
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    worst: list[WorstImage] = field(default_factory=list)
    cancelled: dict[str, Any] | None = None
    metric_seconds: float = 0.0
    seconds: float = 0.0
    class_names: dict[int, str] = field(default_factory=dict)
    detection_group: str | None = None
    states: dict[str, RuntimeState] = field(default_factory=dict)  # what ``entries`` are computed from
    run_notes: list[str] = field(default_factory=list)  # notes about the inputs (``notes`` adds the figures')
    normalised: bool | None = None  # detector boxes were in [0, 1] of the input (decided on the source's)

    @property
    def passed(self) -> bool:
        return not self.failures and self.cancelled is None

    def finish(self) -> None:
        """Each runtime's figures from its state, the notes they call for and, unless the run was cancelled,
        the budget's verdict (``failures``)."""
        before = sum(st.metric_seconds() for st in self.states.values())
        self.entries, self.worst, self.failures, self.notes = {}, [], [], list(self.run_notes)
        for key, st in self.states.items():
            self.entries[key] = RuntimeScores(st.runtime, st.role, st.images, st.seconds,
                                              st.figures(self.kind, self.class_names))
            if st.role != "candidate":
                continue
            self.worst.extend(st.worst)
            notes = []
            if self.kind == "detection" and not st.confident_sources:
                notes.append(f"the source reports no detection at or above --agreement-score "
                             f"{self.spec.agreement_score:g} on these images: agreement was not measured")
            if len(st.keypoint_sides) == 1:
                notes.append(f"{key}: only the {st.keypoint_sides[0]} has keypoints (detection group "
                             f"{self.detection_group}): keypoint agreement was not measured")
            self.notes.extend(n for n in notes if n not in self.notes)
        self.metric_seconds += sum(st.metric_seconds() for st in self.states.values()) - before
        if self.cancelled is None:
            _judge(self)

    def candidate_passed(self, name: str) -> bool | None:
        """Whether candidate ``name`` kept within the budget (None: it was not run on the dataset)."""
        entry = self.entries.get(name)
        if entry is None or entry.role != "candidate":
            return None
        return entry.passed and self.cancelled is None

    def summary(self) -> str:
        """One line per runtime: its figures and the verdict."""
        parts = []
        for key, entry in self.entries.items():
            figures = ", ".join(f"{k} {_fmt(v)}" for k, v in entry.figures.items()
                                if k in _HEADLINE and v is not None)
            parts.append(f"{key if key == 'source' else entry.runtime}"
                         f"{' (' + entry.runtime + ')' if key == 'source' else ''}: {figures or 'no figures'}")
        verdict = "PASS" if self.passed else ("CANCELLED" if self.cancelled else "FAIL")
        return f"dataset ({self.images} images): {verdict}; " + "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """The report's ``dataset`` section: one entry per runtime (``source`` for the source)."""
        return {key: entry.to_dict() for key, entry in self.entries.items()}

    def run_dict(self) -> dict[str, Any]:
        """The report's ``dataset_run`` section: what ran, the budget and the verdict."""
        return {"passed": self.passed, "kind": self.kind, "images": self.images, "input": self.input,
                "dataset": self.spec.to_dict(), "labels": self.labels,
                "preprocessing": {**self.preprocessing.to_dict(), "description": self.preprocessing.describe()},
                "budget": self.budget.to_dict(), "failures": self.failures, "notes": self.notes,
                "cancelled": self.cancelled, "seconds": round(self.seconds, 3),
                "metric_seconds": round(self.metric_seconds, 3), "detection_group": self.detection_group,
                "class_names": {str(k): v for k, v in self.class_names.items()},
                "worst": [w.to_dict() for w in self.worst]}


_HEADLINE = ("map50", "map50_95", "agreement_ap50", "agreement_ap50_95", "keypoint_pck", "keypoint_error",
             "top1_agreement", "top5_agreement", "top1_accuracy", "top5_accuracy", "miou")


def _fmt(v: Any) -> str:
    return f"{v:.3f}" if isinstance(v, float) else str(v)


# ------------------------------------------------------------------------------------------- the entry


def validate_on_dataset(
    reference: Runtime,
    candidates: Mapping[str, CandidateSource],
    dataset: DatasetSpec,
    preprocessing: Preprocessing,
    *,
    inputs: Sequence[TensorMeta],
    outputs: Sequence[TensorMeta],
    detections: Sequence[DetectionSpec] = (),
    budget: AccuracyBudget = AccuracyBudget(),
    sample_shapes: Mapping[str, Sequence[int]] | None = None,
    progress: Progress | None = None,
    reference_name: str | None = None,
) -> DatasetResult:
    """Run ``reference`` and every candidate on ``dataset`` and score them (module docstring).

    ``inputs`` / ``outputs``: the converted model's (its graph's) tensors; ``sample_shapes``: concrete
    shapes for inputs whose dims the graph leaves open (``--input``). ``detections``: the model's detection
    groups (the first is scored). Raises UsageError before any runtime runs when the dataset, labels or
    preprocessing do not fit the model; DatasetCancelled on Ctrl-C.
    """
    say = progress or (lambda _msg: None)
    start = time.perf_counter()
    data = Dataset(dataset)
    if dataset.start >= len(data):
        raise UsageError(f"--dataset {dataset.path}: a shard from image {dataset.start}, but it has {len(data)}")
    kind, output = output_kind(detections, outputs)
    target = image_input(data, inputs, preprocessing, sample_shapes)
    labels = load_labels(dataset.labels, data.names, dataset.classes, by_position=data.npz is not None) \
        if dataset.labels is not None else None
    result = DatasetResult(dataset, preprocessing, kind, budget, images=len(data) - dataset.start,
                           labels=labels is not None,
                           input=data.describe() if target is None else
                           f"{data.describe()} -> {target.name} {list(target.shape(target.batch or 1))[1:]} "
                           f"{target.layout} {preprocessing.dtype or target.dtype}",
                           class_names=dict(labels.names) if labels is not None else {},
                           detection_group=detections[0].label if kind == "detection" else None)
    if labels is not None:
        result.run_notes.extend(labels.notes)
    if kind == "detection" and len(detections) > 1:
        result.run_notes.append(f"{len(detections)} detection groups: scored on the first, {detections[0].label}")
    batch = target.batch if target is not None and target.batch else dataset.batch_size
    run = _Run(data, labels, preprocessing, target, batch, kind, output, detections[0] if detections else None,
               result, say)
    with _interruptible() as stop, tempfile.TemporaryDirectory(prefix="bridge-dataset-") as scratch:
        run.stop, run.scratch = stop, Path(scratch)
        try:
            run.source(reference, reference_name)
            for name, make in candidates.items():
                if result.cancelled:
                    break
                run.candidate(name, make)
        finally:
            result.metric_seconds = run.metric_seconds
            result.normalised = run.normalised
            result.finish()
            result.seconds = time.perf_counter() - start
    if result.cancelled is not None:
        c = result.cancelled
        raise DatasetCancelled(f"dataset validation cancelled in the {c['runtime']} run after {c['images']} of "
                               f"{c['of']} images", result)
    return result


def output_kind(detections: Sequence[DetectionSpec], outputs: Sequence[TensorMeta]) -> tuple[str, str | None]:
    """``detection`` (the model has detection groups), ``classification`` (an output [B, C]) or
    ``segmentation`` ([B, C, H, W]) and the output scored (None for detection); UsageError otherwise."""
    if detections:
        return "detection", None
    for meta in outputs:
        if meta.shape is not None and len(meta.shape) == 2:
            return "classification", meta.name
    for meta in outputs:
        if meta.shape is not None and len(meta.shape) == 4:
            return "segmentation", meta.name
    shapes = ", ".join(f"{m.name}{list(m.shape) if m.shape is not None else '?'}" for m in outputs)
    raise UsageError(f"--dataset: the model is not a detector (no detection outputs; declare them with "
                     f"--detections), a classifier ([B, C] output) or a segmenter ([B, C, H, W]); outputs: {shapes}")


def image_input(data: Dataset, inputs: Sequence[TensorMeta], pre: Preprocessing,
                 sample_shapes: Mapping[str, Sequence[int]] | None) -> InputFrame | None:
    """The input images feed (None for an .npz of ready inputs, whose arrays must be the model's inputs)."""
    names = [m.name for m in inputs]
    if data.npz is not None:
        missing = [n for n in names if n not in data.ready_inputs]
        extra = [n for n in data.ready_inputs if n not in names]
        if missing or extra:
            raise UsageError(f"--dataset {data.spec.path}: an .npz of ready inputs holds one array per model input "
                             f"(inputs: {', '.join(names)}; the file has {', '.join(data.ready_inputs)})")
        return None
    images = [m for m in inputs if m.shape is not None and len(m.shape) == 4] or list(inputs)
    if len(inputs) != 1 and len(images) != 1:
        raise UsageError(f"--dataset: the model has {len(inputs)} inputs ({', '.join(names)}); images feed a model "
                         "with one image input (give an .npz of ready inputs for the others)")
    meta = images[0]
    return input_frame(meta.name, meta.shape, meta.dtype, pre, (sample_shapes or {}).get(meta.name))


@contextlib.contextmanager
def _interruptible() -> Iterator[threading.Event]:
    """An event set by Ctrl-C (SIGINT) while the block runs, so the loop stops between batches; outside the
    main thread (a Dask worker, a test) the event is only set by KeyboardInterrupt."""
    stop = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return
    previous = signal.getsignal(signal.SIGINT)

    def handler(_signum: int, _frame: Any) -> None:
        if stop.is_set():  # a second Ctrl-C: stop now
            signal.signal(signal.SIGINT, previous)
            raise KeyboardInterrupt
        stop.set()

    signal.signal(signal.SIGINT, handler)
    try:
        yield stop
    finally:
        signal.signal(signal.SIGINT, previous)


# --------------------------------------------------------------------------------------------- the run


@dataclass
class _SourceImage:
    """What a candidate is judged against, for one image."""

    boxes: ImageBoxes | None = None  # the source's detections (original pixels), all of them
    top1: int = -1


class _Packed:
    """Per-image detections kept as one float32 array per batch (class, score, x1, y1, x2, y2, then the keypoints'
    x, y pairs when there are any) plus offsets: no Python object per image."""

    def __init__(self) -> None:
        self.rows: list[np.ndarray] = []
        self.offsets: list[np.ndarray] = []
        self.points: list[int] = []  # keypoints per detection in each batch (0: none)

    def append(self, images: Sequence[ImageBoxes]) -> None:
        points = next((d.keypoints.shape[1] for d in images if d.keypoints is not None), 0)
        rows = [np.concatenate([np.asarray(d.classes, np.float64).reshape(-1, 1),
                                np.asarray(d.scores, np.float64).reshape(-1, 1),
                                np.asarray(d.boxes, np.float64).reshape(-1, 4),
                                *([np.asarray(d.keypoints, np.float64).reshape(len(d), 2 * points)] if points else [])],
                               axis=1) for d in images]
        self.rows.append(np.concatenate(rows).astype(np.float32) if rows else np.zeros((0, 6), np.float32))
        self.offsets.append(np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int32))
        self.points.append(points)

    def batch(self, k: int) -> list[ImageBoxes]:
        rows, off, points = self.rows[k], self.offsets[k], self.points[k]
        return [_boxes_of(rows[off[i]:off[i + 1]], points) for i in range(len(off) - 1)]


def _boxes_of(rows: np.ndarray, points: int = 0) -> ImageBoxes:
    r = np.asarray(rows, np.float64).reshape(-1, 6 + 2 * points)
    return ImageBoxes(r[:, 2:6], r[:, 0].astype(np.int64), r[:, 1],
                      keypoints=r[:, 6:].reshape(-1, points, 2) if points else None)


class _Run:
    def __init__(self, data: Dataset, labels: Labels | None, pre: Preprocessing, target: InputFrame | None,
                 batch: int, kind: str, output: str | None, spec: DetectionSpec | None, result: DatasetResult,
                 say: Progress) -> None:
        self.data, self.labels, self.pre, self.target, self.batch = data, labels, pre, target, batch
        self.kind, self.output, self.spec, self.result, self.say = kind, output, spec, result, say
        self.stop = threading.Event()
        self.scratch = Path(tempfile.gettempdir())
        self.normalised: bool | None = None  # detector boxes in [0, 1] of the input (decided on the source)
        self.source_dets = _Packed()
        self.source_top1: list[np.ndarray] = []
        self.metric_seconds = 0.0
        self.first = result.spec.start  # the run covers images first .. done - 1 (a shard: part of the dataset)
        self.done = len(data)  # the end of what every runtime ran (earlier after a cancel)

    # -- passes ----------------------------------------------------------------------------------------
    def source(self, reference: Runtime, name: str | None) -> None:
        reference.activate()
        try:
            label = name or reference.name
            entry = RuntimeState(label, "source")
            self.result.states["source"] = entry
            truth_ap = entry.truth = CocoAP() if self.labels is not None and self.kind == "detection" else None
            topk = entry.topk = TopK() if self.kind == "classification" else None
            chunk: list[tuple[ImageBoxes, ImageBoxes]] = []
            for k, (b, outputs) in enumerate(self._stream(reference, label, entry)):
                if self.kind == "detection":
                    dets = self._detections(b, outputs, "reference")
                    self.source_dets.append(dets)
                    if truth_ap is not None:
                        chunk += [(self._truth(i), d) for i, d in zip(b.indices, dets, strict=True)]
                        if len(chunk) >= COCO_CHUNK:
                            self._add(truth_ap, chunk)
                elif topk is not None:
                    scores = self._scores(outputs, len(b.indices))
                    self.source_top1.append(topk.add(scores, None, self._image_classes(b)).astype(np.int32))
                else:
                    maps = self._argmax(outputs)[: len(b.indices)]
                    np.save(self.scratch / f"source-{k}.npy", maps.astype(np.uint16 if maps.max(initial=0) > 255
                                                                           else np.uint8))
            if truth_ap is not None:
                self._add(truth_ap, chunk)
        finally:
            reference.deactivate()

    def candidate(self, name: str, make: CandidateSource) -> None:
        runtime = make if isinstance(make, Runtime) else make()
        runtime.activate()
        try:
            entry = RuntimeState(name, "candidate")
            self.result.states[name] = entry
            worst: list[tuple[float, int, WorstImage]] = []
            if self.kind == "detection":
                self._candidate_detections(runtime, name, entry, worst)
            elif self.kind == "classification":
                topk = entry.topk = TopK()
                for k, (b, outputs) in enumerate(self._stream(runtime, name, entry)):
                    scores = self._scores(outputs, len(b.indices))
                    source = self.source_top1[k]
                    top1 = topk.add(scores, source, self._image_classes(b))
                    for j, i in enumerate(b.indices):
                        if top1[j] != source[j]:
                            self._keep(worst, 1.0, i, WorstImage(name, i, b.names[j], _path(b, j), 1.0,
                                                                 note=f"top-1 {int(top1[j])} vs source {int(source[j])}"))
            else:
                seg = entry.segmentation = SegmentationIoU()
                for k, (b, outputs) in enumerate(self._stream(runtime, name, entry)):
                    maps = self._argmax(outputs)[: len(b.indices)]
                    source = np.load(self.scratch / f"source-{k}.npy")
                    ious = seg.add(source, maps, int(np.shape(self._scores(outputs, 1))[1]))  # C of [B, C, H, W]
                    for j, i in enumerate(b.indices):
                        if ious[j] < 1.0:
                            self._keep(worst, 1.0 - float(ious[j]), i, WorstImage(
                                name, i, b.names[j], _path(b, j), 1.0 - float(ious[j]), note=f"IoU {ious[j]:.3f}"))
            entry.worst = worst_first([w for _d, _i, w in worst], self.result.spec.worst)
        finally:
            runtime.deactivate()

    def _candidate_detections(self, runtime: Runtime, name: str, entry: RuntimeState,
                              worst: list[tuple[float, int, WorstImage]]) -> None:
        agree_ap = entry.agreement = CocoAP()
        truth_ap = entry.truth = CocoAP() if self.labels is not None else None
        counts = entry.counts = Agreement()
        keypoints = entry.keypoints = KeypointAgreement()
        threshold = self.result.spec.agreement_score
        chunk: list[tuple[int, str, str | None, ImageBoxes, ImageBoxes]] = []
        sides_with_keypoints: set[str] = set()

        def flush() -> None:
            if not chunk:
                return
            t0 = time.perf_counter()
            pairs = agree_ap.add([c[3] for c in chunk], [c[4] for c in chunk])
            if truth_ap is not None:
                truth_ap.add([self._truth(c[0]) for c in chunk], [c[4] for c in chunk])
            judged = counts.add([c[3] for c in chunk], [c[4] for c in chunk], pairs, threshold)
            # keypoints outside the PCK distance count in an image's disagreement as a share of a detection each
            off = keypoints.add([c[3] for c in chunk], [c[4] for c in chunk], [(ri, ci) for ri, ci, _s in judged])
            per_detection = max(1, next((c[3].keypoints.shape[1] for c in chunk if c[3].keypoints is not None), 1))
            for (i, image, path, confident, cand), (ri, ci, score), kp_off in zip(chunk, judged, off, strict=True):
                score += float(kp_off) / per_detection
                if score > WORST_MIN and self._worthy(worst, score, i):
                    shown = _above(cand, threshold)
                    rows = np.flatnonzero(np.asarray(cand.scores) >= threshold)
                    self._keep(worst, score, i, WorstImage(name, i, image, path, score, _listed(confident, ri),
                                                           _listed(shown, np.searchsorted(rows, ci))))
            self.metric_seconds += time.perf_counter() - t0
            chunk.clear()

        for k, (b, outputs) in enumerate(self._stream(runtime, name, entry)):
            dets = self._detections(b, outputs, "candidate")
            for j, (i, src, cand) in enumerate(zip(b.indices, self.source_dets.batch(k), dets, strict=True)):
                confident = _above(src, threshold)
                entry.confident_sources += len(confident)
                sides_with_keypoints |= {side for side, d in (("source", src), ("candidate", cand))
                                         if d.keypoints is not None}
                chunk.append((i, b.names[j], _path(b, j), confident, cand))
            if len(chunk) >= COCO_CHUNK:
                flush()
        flush()
        entry.keypoint_sides = sorted(sides_with_keypoints)

    # -- plumbing --------------------------------------------------------------------------------------
    def _scores(self, outputs: Mapping[str, Any], n: int) -> np.ndarray:
        assert self.output is not None
        return np.asarray(outputs[self.output])[:n]

    def _stream(self, runtime: Runtime, label: str, entry: RuntimeState) -> Iterator[tuple[Batch, dict[str, Any]]]:
        """Every batch from ``self.first`` up to ``self.done`` with the runtime's outputs, progress shown; a stop
        request (Ctrl-C) ends the stream between batches and records where."""
        total = self.done - self.first
        bar = _Bar(label, total, self.say)
        started = time.perf_counter()
        count = 0
        try:
            for b in self.data.batches(self.pre, self.target, self.batch, self.first, self.done):
                if self.stop.is_set():
                    break
                t0 = time.perf_counter()
                try:
                    outputs = runtime.infer(b.feeds)
                except BridgeError:
                    if self.stop.is_set():  # Ctrl-C reached the child first: a cancel, not a crash
                        break
                    raise
                entry.seconds += time.perf_counter() - t0
                yield b, outputs
                count += len(b.indices)
                entry.images = count
                bar.update(count, time.perf_counter() - started)
        except KeyboardInterrupt:
            self.stop.set()
        if self.stop.is_set() and count < total:
            self.done = min(self.done, self.first + count)
            if self.result.cancelled is None:
                self.result.cancelled = {"runtime": label, "images": count, "of": total}
        entry.seconds = time.perf_counter() - started  # decode and preprocessing included: images/s as seen

    def _detections(self, b: Batch, outputs: Mapping[str, Any], side: str) -> list[ImageBoxes]:
        """The batch's real images' detections, in the original image's pixels."""
        assert self.spec is not None
        try:
            per_image = self.spec.read(outputs, side)
        except KeyError as exc:
            raise UsageError(f"--dataset: the {side} has no output {exc} of detection group {self.spec.label}") from None
        n = len(b.indices)
        empty = ImageBoxes(np.zeros((0, 4)), np.zeros(0, np.int64), np.zeros(0))
        out = []
        for j in range(n):
            if j >= len(per_image):  # a batch-index layout's empty last images
                out.append(empty)
                continue
            d = per_image[j]
            keep = np.isfinite(d.scores)
            order = np.argsort(-d.scores[keep], kind="stable")[:MAX_DETS * 10]
            boxes, scores, classes = d.boxes[keep][order], d.scores[keep][order], d.classes[keep][order]
            if self.normalised is None and len(boxes):
                finite = boxes[np.isfinite(boxes)]
                self.normalised = bool(finite.size and np.abs(finite).max() <= 1.0 + 1e-3)
            frame = b.frames[j] or self._ready_frame(b.indices[j])
            mapped = frame.to_original(boxes, bool(self.normalised)) if len(boxes) else boxes.reshape(0, 4)
            points = None
            if d.keypoints is not None:  # (x, y) pairs in the boxes' frame: mapped as (x, y, x, y), not clipped
                kp = np.asarray(d.keypoints, np.float64)[keep][order]
                pairs = np.tile(kp.reshape(-1, 2), 2)
                points = frame.to_original(pairs, bool(self.normalised), clip=False)[:, :2].reshape(kp.shape)
            out.append(ImageBoxes(mapped, classes, scores, keypoints=points))
        return out

    def _ready_frame(self, index: int) -> Frame:
        """An .npz image's frame: its input size, stretched to the labels' image size when they say it."""
        shape = next(iter(self.data._npz_shapes.values()))[0]
        h, w = (shape[2], shape[3]) if len(shape) == 4 and shape[1] in (1, 3) else (shape[1], shape[2]) \
            if len(shape) == 4 else (1, 1)
        width, height = (int(v) for v in self.labels.sizes[index]) if self.labels is not None else (w, h)
        width, height = width or w, height or h
        return Frame(width, height, w / width, h / height, input_width=w, input_height=h)

    def _truth(self, index: int) -> ImageBoxes:
        assert self.labels is not None
        t = self.labels.truth(index)
        return ImageBoxes(t.boxes, t.classes, None, t.crowd)

    def _image_classes(self, b: Batch) -> np.ndarray | None:
        if self.labels is None:
            return None
        return np.asarray([self.labels.image_class(i) for i in b.indices])

    def _argmax(self, outputs: Mapping[str, Any]) -> np.ndarray:
        assert self.output is not None
        scores = np.asarray(outputs[self.output])
        return np.argmax(scores, axis=1)

    def _add(self, ap: CocoAP, chunk: list[tuple[ImageBoxes, ImageBoxes]]) -> None:
        if chunk:
            before = ap.seconds
            ap.add([t for t, _d in chunk], [d for _t, d in chunk])
            self.metric_seconds += ap.seconds - before
            chunk.clear()

    def _worthy(self, heap: list[tuple[float, int, WorstImage]], score: float, index: int) -> bool:
        """Whether an image with this disagreement would enter the worst images (before building its entry)."""
        limit = self.result.spec.worst
        return limit > 0 and (len(heap) < limit or (score, -index) > heap[0][:2])

    def _keep(self, heap: list[tuple[float, int, WorstImage]], score: float, index: int, item: WorstImage) -> None:
        """The ``worst`` largest disagreements seen so far (a bounded heap)."""
        limit = self.result.spec.worst
        if limit <= 0:
            return
        entry = (score, -index, item)
        if len(heap) < limit:
            heapq.heappush(heap, entry)
        elif entry[:2] > heap[0][:2]:
            heapq.heapreplace(heap, entry)


def _path(b: Batch, j: int) -> str | None:
    return str(b.paths[j]) if b.paths and b.paths[j] is not None else None


def _above(d: ImageBoxes, threshold: float) -> ImageBoxes:
    keep = np.asarray(d.scores) >= threshold if d.scores is not None else np.ones(len(d), bool)
    return ImageBoxes(d.boxes[keep], d.classes[keep], None if d.scores is None else d.scores[keep],
                      keypoints=None if d.keypoints is None else d.keypoints[keep])


def _listed(d: ImageBoxes, matched_rows: np.ndarray) -> list[dict[str, Any]]:
    matched = np.zeros(len(d), bool)
    matched[matched_rows] = True
    return [{"box": [round(float(v), 2) for v in d.boxes[k]], "label": int(d.classes[k]),
             "score": None if d.scores is None else round(float(d.scores[k]), 4), "matched": bool(matched[k])}
            for k in range(len(d))]


class _Bar:
    """A text progress bar with images/s through the stage callback, at most every 0.25 s."""

    WIDTH = 24

    def __init__(self, label: str, total: int, say: Progress) -> None:
        self.label, self.total, self.say, self.last = label, total, say, -1.0
        say(f"{label}: 0/{total} images")

    def update(self, done: int, elapsed: float) -> None:
        if elapsed - self.last < 0.25 and done < self.total:
            return
        self.last = elapsed
        filled = int(self.WIDTH * done / max(self.total, 1))
        bar = "━" * filled + ("╺" if filled < self.WIDTH else "") + "─" * max(self.WIDTH - filled - 1, 0)
        rate = done / elapsed if elapsed > 0 else 0.0
        self.say(f"{self.label} {bar} {done}/{self.total} images, {rate:.0f} images/s")


def _judge(result: DatasetResult) -> None:
    """The budget's verdict on every candidate, with the numbers (``failures``, and each candidate's own)."""
    b, source = result.budget, result.entries.get("source")
    for key, entry in result.entries.items():
        if key == "source":
            continue
        f = entry.figures
        floors = {"detection": [("agreement_ap50", b.min_agreement, "--min-agreement"),
                                ("agreement_ap50_95", b.min_agreement_ap50_95, "--min-agreement-ap50-95"),
                                ("keypoint_pck", b.min_keypoint_agreement, "--min-keypoint-agreement")],
                  "classification": [("top1_agreement", b.min_agreement, "--min-agreement")],
                  "segmentation": [("miou", b.min_agreement, "--min-agreement")]}[result.kind]
        for metric, floor, flag in floors:
            value = f.get(metric)
            if value is not None and value < floor:
                entry.failures.append(f"{key}: {metric} {value:.4f} < {floor:g} ({flag})")
        drops = ("map50", "map50_95") if result.kind == "detection" else ("top1_accuracy",)
        for metric in drops:
            ours, theirs = f.get(metric), (source.figures.get(metric) if source else None)
            if ours is not None and theirs is not None and theirs - ours > b.max_map_drop:
                entry.failures.append(f"{key}: {metric} {ours:.4f} vs source {theirs:.4f}, a drop of "
                                      f"{theirs - ours:.4f} > {b.max_map_drop:g} (--max-map-drop)")
        result.failures.extend(entry.failures)


__all__ = ["KINDS", "AccuracyBudget", "DatasetCancelled", "DatasetResult", "RuntimeScores", "WorstImage",
           "output_kind", "validate_on_dataset"]
