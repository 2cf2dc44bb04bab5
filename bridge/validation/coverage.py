"""Feed coverage: how much of a detector's selections the validation inputs exercised, and more inputs when too
little.

A detector's verdict proves only what its inputs made it do. Eight detections on four images say nothing about
its NMS threshold (no two boxes near it), its score threshold (no score near it) or a top-k cut (never reached):
a converter that moved any of them passes. ``measure`` reads the *reference's* outputs of every detection group
(``DetectionSpec``) and counts, per check:

- detections per image (fewest, most, mean) and the classes seen;
- scores near the score threshold (``score_threshold`` read from the graph): within ``[t, t + max(t, 0.01)]``;
- box pairs near the NMS threshold (``nms_iou`` read from the graph): two detections the reference kept in one
  class with an IoU within ``NEAR_IOU`` below the threshold, or a kept one and a candidate the reference lists
  as suppressed (MXNet's class -1 rows) within ``NEAR_IOU`` above it.

A check is *thin* (``Coverage.thin_reasons``) with fewer than ``MIN_DETECTIONS`` detections, fewer than
``MIN_PER_IMAGE`` per image on average, or with most boxes flat (width or height within
the box tolerance: a saturated decode, on which a moved box changes nothing). Fewer than ``MIN_NEAR`` scores near
the score threshold or box pairs near the NMS threshold (each where the graph gives the threshold) is stated
(``Coverage.near_reasons``) but does not make a check thin. Where the inputs are images (float
[B, C, H, W] or [B, H, W, C], C 1 or 3), ``more_inputs`` makes more of the same kind and shape from the given ones - 2x2 mosaics
of half-size copies, some mirrored (more objects per image, more candidates for the cuts), blends of an image
with a mirrored other (objects over objects), each image over itself shifted sideways (every object twice,
the two boxes overlapping by an IoU that sweeps the NMS threshold), and each image at a tenth of its contrast
(a saturated detector - most boxes flat, clipped to an edge - decodes boxes with extent there) - and the validation compares the candidate
on all of them too (``CoverageRuns``). A check thin on every input set is said in the verdict: its output's
comparison is marked vacuous with the best measurement, which ``--strict`` turns into a failure.

A score threshold moved by a converter shows only on a score between the two thresholds. Ordinary images rarely
put one there, so with fewer than ``MIN_NEAR`` scores within ``CLOSE`` of the graph's score threshold (or none
read), ``boundary_inputs`` finds, for each image, the contrast at which the source's detections start: the
reference run on the image at contrast ``a`` (``mean + a * (image - mean)``), ``a`` bisected between a faint copy
with no detection and the image. The source decides where its boundary lies, not the file under test. Two input
sets come of it: each image where its first detection scores ``SCORE_MARGIN`` above where it appeared (a candidate
whose threshold is higher drops it), and mirrored below the boundary (the source keeps nothing; a candidate whose
threshold is lower keeps it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from bridge.validation.compare import Comparison, compare_outputs
from bridge.validation.detection.boxes import Detections, iou_matrix
from bridge.validation.detection.layouts import DetectionSpec
from bridge.validation.detection.matching import DEFAULT_BOX_ATOL

log = logging.getLogger(__name__)

MIN_DETECTIONS = 20  # over every image of a check
MIN_PER_IMAGE = 3.0
MIN_NEAR = 3  # scores near the score threshold, box pairs near the NMS threshold
NEAR_IOU = 0.05  # IoU within this of the NMS threshold: a threshold moved that far changes what is kept
MAX_PAIRS = 1 << 22  # IoU pairs measured per image and class (a detector with thousands of rows is not thin)
THIN = "thin feeds"
FLAT_SHARE = 0.5  # more detections than this share flat (a saturated decode clipped to an edge): thin
LOW_CONTRAST = 0.1  # the low-contrast copies keep this share of each image's deviation from its mean
CLOSE = 0.01  # a score this close above the score threshold: a threshold moved further changes what is kept
BOUNDARY_STEPS = 14  # bisection steps for the contrast where an image's first detection appears (2^-14)
SCORE_MARGIN = 0.003  # the boundary inputs' first detection this far from the boundary (no rounding tie there)
MARGIN_STEPS = 10  # bisection steps for the contrast SCORE_MARGIN above the boundary


@dataclass
class Coverage:
    """One detection group's coverage on one set of inputs (module docstring)."""

    output: str
    inputs: str  # which inputs: "the validation inputs", "mosaics of them", ...
    images: int = 0
    detections: int = 0
    fewest: int = 0
    most: int = 0
    classes: int = 0
    score_threshold: float | None = None
    near_score: int = 0
    nms_iou: float | None = None
    near_iou: int = 0
    flat: int = 0  # detections whose width or height is within the box tolerance (moving them changes nothing)
    thin_reasons: list[str] = field(default_factory=list)
    # few scores / box pairs near the thresholds: stated (report, JSON), not thin - a detector on ordinary inputs
    # rarely puts boxes at the NMS threshold, and calling every such check unproved made --strict refuse most
    # correct detector conversions; the inputs coverage adds (shifted copies sweep the NMS threshold) still run
    near_reasons: list[str] = field(default_factory=list)

    @property
    def thin(self) -> bool:
        return bool(self.thin_reasons)

    @property
    def text(self) -> str:
        per = self.detections / max(self.images, 1)
        parts = [f"{self.detections} detections on {self.images} images ({self.fewest}-{self.most}, mean {per:.3g} "
                 f"per image), {self.classes} classes"]
        parts.append(f"{self.near_score} scores near the score threshold {self.score_threshold:.3g}"
                     if self.score_threshold is not None else "score threshold not read from the graph")
        parts.append(f"{self.near_iou} box pairs near the NMS threshold {self.nms_iou:.3g}"
                     if self.nms_iou is not None else "NMS threshold not read from the graph")
        if self.flat:
            parts.append(f"{self.flat} flat boxes")
        return f"{self.output} on {self.inputs}: " + ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(thin=self.thin, text=self.text)
        return data


def _near_pairs(d: Detections, nms_iou: float) -> int:
    """Box pairs whose IoU lies within NEAR_IOU of ``nms_iou`` on the side that decided them: two kept
    detections of a class just under it, a listed suppressed candidate and a kept one just over it."""
    count = 0
    for cls in np.unique(d.classes):
        boxes = d.boxes[d.classes == cls]
        if len(boxes) > 1 and len(boxes) ** 2 <= MAX_PAIRS:
            ious = iou_matrix(boxes, boxes)[np.triu_indices(len(boxes), 1)]
            count += int(((ious <= nms_iou) & (ious >= nms_iou - NEAR_IOU)).sum())
    if d.suppressed_boxes is not None and len(d.suppressed_boxes) and len(d) and len(d) * len(d.suppressed_boxes) <= MAX_PAIRS:
        ious = iou_matrix(np.asarray(d.suppressed_boxes), d.boxes)
        count += int(((ious >= nms_iou) & (ious <= nms_iou + NEAR_IOU)).sum())
    return count


def measure(spec: DetectionSpec, reference_outputs: Mapping[str, Any], inputs: str) -> Coverage:
    """The coverage of ``spec``'s group in the reference's outputs (the source decides what was exercised)."""
    cov = Coverage(spec.label, inputs, score_threshold=spec.score_threshold, nms_iou=spec.nms_iou)
    try:
        dets = spec.read(reference_outputs, "reference")
    except (KeyError, ValueError) as exc:
        cov.thin_reasons.append(f"its detections could not be read ({exc})")
        return cov
    counts = [len(d) for d in dets]
    cov.images, cov.detections = len(dets), int(sum(counts))
    cov.fewest, cov.most = (min(counts), max(counts)) if counts else (0, 0)
    cov.classes = len({int(c) for d in dets for c in d.classes.tolist()})
    if spec.score_threshold is not None:
        t = spec.score_threshold
        cov.near_score = int(sum(((d.scores >= t) & (d.scores <= t + max(t, 0.01))).sum() for d in dets))
    if spec.nms_iou is not None:
        cov.near_iou = sum(_near_pairs(d, spec.nms_iou) for d in dets)
    # a box whose width or height is within the box tolerance of the coordinate scale: shifting it along that
    # side changes nothing measurable, so a geometry bug cannot show on it
    scale = max([1.0, *(float(np.abs(d.boxes[np.isfinite(d.boxes)]).max(initial=0.0)) for d in dets)])
    tol = DEFAULT_BOX_ATOL * scale
    cov.flat = int(sum((((d.boxes[:, 2] - d.boxes[:, 0]) <= tol) | ((d.boxes[:, 3] - d.boxes[:, 1]) <= tol)).sum()
                       for d in dets if len(d)))
    if cov.detections and cov.flat > FLAT_SHARE * cov.detections:
        cov.thin_reasons.append(f"{cov.flat} of {cov.detections} boxes flat (width or height within the box "
                                "tolerance: a saturated decode)")
    if cov.detections < MIN_DETECTIONS:
        cov.thin_reasons.append(f"{cov.detections} detections (fewer than {MIN_DETECTIONS})")
    if cov.images and cov.detections / cov.images < MIN_PER_IMAGE:
        cov.thin_reasons.append(f"{cov.detections / cov.images:.3g} detections per image (fewer than {MIN_PER_IMAGE:g})")
    if spec.score_threshold is not None and cov.near_score < MIN_NEAR:
        cov.near_reasons.append(f"{cov.near_score} scores near the score threshold (fewer than {MIN_NEAR})")
    if spec.nms_iou is not None and cov.near_iou < MIN_NEAR:
        cov.near_reasons.append(f"{cov.near_iou} box pairs near the NMS threshold (fewer than {MIN_NEAR})")
    return cov


def _image_inputs(feeds: Mapping[str, np.ndarray]) -> dict[str, bool]:
    """Inputs that are batches of images -> whether channels come last: float [B, C, H, W] (or [B, H, W, C], as
    Keras and TFLite take them) with C 1 or 3 and even H, W of at least 8."""
    def image(h: int, w: int) -> bool:
        return h % 2 == 0 and w % 2 == 0 and h >= 8 and w >= 8

    found = {}
    for k, v in feeds.items():
        if v.dtype.kind != "f" or v.ndim != 4:
            continue
        if v.shape[1] in (1, 3) and image(v.shape[2], v.shape[3]):
            found[k] = False
        elif v.shape[3] in (1, 3) and image(v.shape[1], v.shape[2]):
            found[k] = True
    return found


def _half(image: np.ndarray) -> np.ndarray:
    """[C, H, W] -> [C, H/2, W/2] by 2x2 means."""
    c, h, w = image.shape
    return image.reshape(c, h // 2, 2, w // 2, 2).mean(axis=(2, 4)).astype(image.dtype)


def blended_images(feeds: Mapping[str, np.ndarray], keep: Sequence[str] = ()) -> dict[str, np.ndarray]:
    """``feeds`` with each image-like input (``_image_inputs``, not in ``keep``) replaced by each image blended
    with the next one mirrored (itself mirrored when there is one): new content of the same kind - objects over
    objects, at other places - rather than the same images in another order, which a model that treats samples
    alike answers with the same outputs in another order (the second input every candidate runs on). Other
    inputs are given back as they are."""
    out = dict(feeds)
    for name, channels_last in _image_inputs(feeds).items():
        if name in keep:
            continue
        x = np.asarray(feeds[name])
        x = x.transpose(0, 3, 1, 2) if channels_last else x
        mixed = (0.5 * x + 0.5 * np.roll(x, -1, axis=0)[..., ::-1]).astype(x.dtype)
        out[name] = np.ascontiguousarray(mixed.transpose(0, 2, 3, 1)) if channels_last else mixed
    return out


def more_inputs(feeds: Mapping[str, np.ndarray]) -> list[tuple[str, dict[str, np.ndarray]]]:
    """Image-like inputs of the same shapes made from ``feeds`` (module docstring), in the order they are tried;
    [] when no input is a batch of images. Other inputs are kept as they are."""
    names = _image_inputs(feeds)
    if not names:
        return []
    mosaics, blends, echoes, dim = dict(feeds), dict(feeds), dict(feeds), dict(feeds)
    for name, channels_last in names.items():
        x = np.asarray(feeds[name])
        x = x.transpose(0, 3, 1, 2) if channels_last else x  # made as [B, C, H, W], given back as it came
        b, w = x.shape[0], x.shape[3]
        tiles, mixed, echoed = np.empty_like(x), np.empty_like(x), np.empty_like(x)
        mean = x.mean(axis=(1, 2, 3), keepdims=True)
        faint = (mean + LOW_CONTRAST * (x - mean)).astype(x.dtype)
        for i in range(b):
            quads = [_half(x[(i + k) % b][..., ::-1] if k % 2 else x[(i + k) % b]) for k in range(4)]
            top, bottom = np.concatenate(quads[:2], axis=2), np.concatenate(quads[2:], axis=2)
            tiles[i] = np.concatenate([top, bottom], axis=1)
            mixed[i] = (0.5 * x[i] + 0.5 * x[(i + 1) % b][..., ::-1]).astype(x.dtype)
            # the image over itself shifted by a growing share of its width: every object twice, the two boxes
            # overlapping by an IoU that sweeps past the NMS threshold from image to image
            shift = max(1, round(w * (0.04 + 0.12 * i / max(b - 1, 1))))
            echoed[i] = (0.5 * x[i] + 0.5 * np.roll(x[i], shift, axis=2)).astype(x.dtype)
        if channels_last:
            tiles, mixed, echoed, faint = (np.ascontiguousarray(a.transpose(0, 2, 3, 1))
                                           for a in (tiles, mixed, echoed, faint))
        mosaics[name], blends[name], echoes[name], dim[name] = tiles, mixed, echoed, faint
    return [("2x2 mosaics of the validation images (some mirrored)", mosaics),
            ("blends of each validation image with another, mirrored", blends),
            ("each validation image over itself shifted sideways (objects twice, overlapping)", echoes),
            (f"each validation image at {LOW_CONTRAST:g} of its contrast (weaker activations, less saturated boxes)",
             dim)]


def _close_scores(spec: DetectionSpec, outputs: Mapping[str, Any]) -> int | None:
    """Detections scoring within ``CLOSE`` above ``spec``'s score threshold (None: no threshold read, or unread)."""
    if spec.score_threshold is None:
        return None
    try:
        dets = spec.read(outputs, "reference")
    except (KeyError, ValueError):
        return None
    t = spec.score_threshold
    return int(sum(((d.scores >= t) & (d.scores <= t + CLOSE)).sum() for d in dets))


def _top_scores(specs: Sequence[DetectionSpec], outputs: Mapping[str, Any], images: int) -> np.ndarray | None:
    """Per image the highest score any group detected (-inf: none); None when the groups do not give one
    detection list per image."""
    top = np.full(images, -np.inf)
    for spec in specs:
        try:
            dets = spec.read(outputs, "reference")
        except (KeyError, ValueError):
            return None
        if len(dets) != images:
            return None
        for i, d in enumerate(dets):
            if len(d):
                top[i] = max(top[i], float(np.max(d.scores)))
    return top


def _at_contrast(feeds: Mapping[str, np.ndarray], names: Mapping[str, bool], contrast: np.ndarray
                 ) -> dict[str, np.ndarray]:
    """``feeds`` with each image of each image input at ``contrast[i]`` of its deviation from its own mean."""
    out = dict(feeds)
    for name in names:
        x = np.asarray(feeds[name])
        mean = x.mean(axis=(1, 2, 3), keepdims=True)
        a = contrast.reshape(-1, 1, 1, 1).astype(np.float64)
        out[name] = (mean + a * (x - mean)).astype(x.dtype)
    return out


def boundary_inputs(infer: Callable[[Mapping[str, np.ndarray]], dict[str, Any]], feeds: Mapping[str, np.ndarray],
                    outputs: Mapping[str, Any], specs: Sequence[DetectionSpec], say: Callable[[str], None]
                    ) -> list[tuple[str, dict[str, np.ndarray], dict[str, Any]]]:
    """The two boundary input sets (module docstring) with the reference's outputs on them; [] when no image has
    a detection at full contrast and none at ``LOW_CONTRAST`` (no boundary to bracket), or the inputs are no
    images."""
    names = _image_inputs(feeds)
    if not names or len({np.shape(feeds[n])[0] for n in names}) != 1:
        return []
    images = int(np.shape(feeds[next(iter(names))])[0])
    full = _top_scores(specs, outputs, images)
    if full is None or not np.isfinite(full).any():
        return []
    say("few scores near the score threshold: finding where each image's detections start (the source's boundary)")
    lo, hi = np.full(images, LOW_CONTRAST), np.ones(images)
    faint = _top_scores(specs, infer(_at_contrast(feeds, names, lo)), images)
    if faint is None:
        return []
    bracketed = np.isfinite(full) & ~np.isfinite(faint)
    if not bracketed.any():
        return []
    def bisect(lo: np.ndarray, hi: np.ndarray, active: np.ndarray, steps: int,
               holds: Callable[[np.ndarray], np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """Per active image, the contrast interval [lo, hi] narrowed ``steps`` times around where ``holds`` (of the
        reference's top scores) starts to hold at hi, with the top scores last seen at hi; the inactive images run at
        full contrast. None: the groups stopped giving one detection list per image."""
        top = full.copy()
        for _ in range(steps):
            mid = np.where(active, (lo + hi) / 2, 1.0)
            seen = _top_scores(specs, infer(_at_contrast(feeds, names, mid)), images)
            if seen is None:
                return None
            yes = active & holds(seen)
            hi, top = np.where(yes, mid, hi), np.where(yes, seen, top)
            lo = np.where(active & ~yes, mid, lo)
        return lo, hi, top

    found_at = bisect(lo, hi, bracketed, BOUNDARY_STEPS, np.isfinite)
    if found_at is None:
        return []
    lo, hi, top = found_at
    # above the boundary: the contrast where the first detection scores SCORE_MARGIN over what it scored at hi
    # (bisected on [hi, 1]: the score at full contrast is higher, or the image is left at full contrast)
    target = top + SCORE_MARGIN
    enough = bracketed & (full >= target)
    above = bisect(hi.copy(), np.ones(images), enough, MARGIN_STEPS, lambda seen: seen >= target)
    if above is None:
        return []
    up = np.where(enough, above[1], 1.0)
    down = np.where(enough, np.clip(lo - (up - hi), LOW_CONTRAST, 1.0), 1.0)  # mirrored below the boundary
    found = []
    for label, contrast in (("each validation image just above where the source's first detection in it appears "
                             "(contrast searched)", up),
                            ("each validation image just below where the source's first detection in it appears "
                             "(contrast searched)", down)):
        more = _at_contrast(feeds, names, contrast)
        try:
            found.append((label, more, infer(more)))
        except Exception as exc:  # extra evidence only
            log.info("coverage: the reference failed on %s: %s", label, exc)
    return found


@dataclass
class CoverageRuns:
    """The reference's runs on the inputs ``more_inputs`` made (taken while a check was thin), and the coverage
    of every detection group on the validation inputs and on each of them."""

    specs: list[DetectionSpec]
    coverage: list[Coverage] = field(default_factory=list)
    runs: list[tuple[str, dict[str, np.ndarray], dict[str, Any]]] = field(default_factory=list)

    @classmethod
    def run(cls, infer: Callable[[Mapping[str, np.ndarray]], dict[str, Any]] | None, feeds: Mapping[str, np.ndarray],
            outputs: Mapping[str, Any], specs: Sequence[DetectionSpec], say: Callable[[str], None]) -> CoverageRuns:
        """Measure the validation inputs; when some group is thin there, run the reference (``infer``; None: no
        reference to run, a saved one) on every kind of input ``more_inputs`` makes and measure those too."""
        runs = cls(list(specs))
        if not runs.specs:
            return runs
        runs.coverage = [measure(s, outputs, "the validation inputs") for s in runs.specs]
        thin = [c for c in runs.coverage if c.thin]
        if infer is None:
            return runs
        for label, more in more_inputs(feeds) if thin else []:  # every kind: each exercises other cuts
            say(f"thin feeds ({'; '.join(c.output for c in thin)}): running the reference on {label}")
            try:
                more_out = infer(more)
            except Exception as exc:  # extra evidence only: a reference refusing them leaves the measurement
                log.info("coverage: the reference failed on %s: %s", label, exc)
                break
            runs.runs.append((label, more, more_out))
            runs.coverage.extend(measure(s, more_out, label) for s in runs.specs)
        close = [_close_scores(s, o) for s in runs.specs for o in [outputs, *(r[2] for r in runs.runs)]]
        if all(c is None for c in close) or sum(c or 0 for c in close) < MIN_NEAR:
            try:
                for label, more, more_out in boundary_inputs(infer, feeds, outputs, runs.specs, say):
                    runs.runs.append((label, more, more_out))
                    runs.coverage.extend(measure(s, more_out, label) for s in runs.specs)
            except Exception as exc:  # extra evidence only
                log.info("coverage: the boundary search failed: %s", exc)
        return runs

    def compare(self, comparison: Comparison, candidate: Any, tolerance: Any,
                detections: Sequence[DetectionSpec] | Mapping[str, str] | None, shape_only: Sequence[str],
                say: Callable[[str], None]) -> None:
        """The candidate on every extra input set, folded into ``comparison`` (an output passes only where it
        passes on all of them); then each group thin on every input set is marked so in the verdict."""
        for label, more, reference in self.runs:
            say(f"running {comparison.candidate} on {label}")
            try:
                outputs = candidate.infer(more)
            except Exception as exc:
                comparison.fail_at_size({k: list(np.shape(v)) for k, v in more.items()}, f"{type(exc).__name__}: {exc}",
                                        label=label)
                continue
            again = compare_outputs(reference, outputs, tolerance, reference_name=comparison.reference,
                                    candidate_name=comparison.candidate, detection_outputs=detections,
                                    shape_only=shape_only)
            comparison.add_size(again, {k: list(np.shape(v)) for k, v in more.items()}, label=label)
        comparison.coverage = [c.to_dict() for c in self.coverage]
        for spec in self.specs:
            if _still_thin(self, spec.label):
                best = self.best(spec.label)
                comparison.mark_vacuous([spec.label], f"{THIN}: {best.text} ({'; '.join(best.thin_reasons)})"
                                        + ("" if self.runs else "; bridge could not add inputs of the same kind (no "
                                           "image-like input) - validate on more real inputs (--feeds)"))

    def best(self, output: str) -> Coverage:
        """The measurement of ``output`` that exercised the most (fewest thin reasons, then most detections)."""
        mine = [c for c in self.coverage if c.output == output]
        return min(mine, key=lambda c: (len(c.thin_reasons), -c.detections))

    def extra_sizes(self) -> list[tuple[dict[str, np.ndarray], dict[str, Any]]]:
        """(inputs, reference outputs) of every extra run: what the tie proof must re-run too."""
        return [(more, outputs) for _label, more, outputs in self.runs]


def _still_thin(runs: CoverageRuns, output: str) -> bool:
    """A group is thin while no input set exercised it enough on its own."""
    return all(c.thin for c in runs.coverage if c.output == output)
