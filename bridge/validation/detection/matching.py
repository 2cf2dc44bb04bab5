"""Detection-aware comparison and mAP: compare detectors by the detections they report, not elementwise.

Two correct NMS implementations can list the same detections in a different order, keep a
suppressed row's score in place (MXNet), or - when two candidates' scores tie - keep a different
one of the two. A tensor diff says little, so here detections are matched per image and class,
greedily by descending reference score, each to the unmatched candidate of the same class with the
highest IoU (at least ``match_iou``). A matched pair is clean when its IoU >= ``iou`` (default
0.999) or its corners differ by at most ``box_atol`` of the image's coordinate scale (the largest
finite reference coordinate magnitude, at least 1: normalised boxes 1e-4 of the image, pixel boxes
1e-4 of the largest coordinate), and its score difference <= ``score_tol + score_rtol * |reference
score|``. IoU alone is no measure for thin boxes: a box 4e-4 wide whose corners moved by 2e-5 - float32
noise of a decode whose offsets are ~1e2 in a saturated model - has IoU 0.93.

Scale: per class, only candidates whose corners lie within the window where IoU >= t is possible
(``|x1_a - x1_b| <= (1 - t) / t * width_a``, the same in y) are examined, found by range queries on
one sorted key, so time is O(N log N + P) and memory O(N + chunk) for N boxes and P same-class
pairs inside those windows; detections after NMS keep P = O(N). Nothing N x N is ever allocated (a
14k-detection model used to need 6 GiB).

Ties: a *problem row* is an unmatched detection or one side of a matched pair that is not clean. It is
**tie-ambiguous** (reported with its row, not counted as a mismatch) only with evidence that an NMS or a
top-K cut visiting tied candidates in another order produced it (``bridge.validation.detection.ties``):
(a) two tied candidates swapped at a cut - each side dropped the other's row, listed among its suppressed
or cut candidates or sitting at its lowest kept score; (b) an NMS choice - an overlapping rival only the
other side kept, tied, or higher and itself excused (a cascade), and where that side lists every
candidate it weighed it must list the row; (c) a matched pair of tied overlapping boxes that a side lists
among its suppressed candidates. A moved box with an unchanged score is no tie: the other side never
weighed the box it moved to or from. Ties excuse nothing unless at least one detection matched cleanly: a
systematic box error with unchanged scores (every row unmatched, each "tied" to its counterpart) must fail.

Non-finite detections (NaN/inf box or score) are matched only to an identical row (NaN equal to
NaN); NaN/inf in the reference's detections, or no detection on either side, makes the verdict
*vacuous* (it proves little), reported in ``vacuous``/``vacuous_reason``.

``mean_average_precision`` scores detections in MXNet's [B, N, 6] layout (class, score, x1, y1, x2,
y2; class < 0 = no detection) against ground truth with the PASCAL VOC all-points AP (VOC2010+:
area under the precision envelope), IoU >= 0.5 by default, "difficult" boxes ignored.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from bridge.validation.detection.boxes import (
    DEGENERATE_EPS,
    Detections,
    as_class_ids,
    finite_rows,
    iou_cols,
    iou_matrix,
    pair_iou,
)
from bridge.validation.detection.ties import DEFAULT_TIE_ULPS, excused, tie_tolerance

__all__ = [
    "DetectionComparison",
    "DetectionRow",
    "Detections",
    "ImageMatch",
    "MAPResult",
    "as_class_ids",
    "compare_detections",
    "detection_output_names",
    "from_indices",
    "from_mxnet",
    "from_padded",
    "iou_matrix",
    "match_pairs",
    "mean_average_precision",
    "pair_iou",
    "problem_rows",
    "read_detections",
    "tie_tolerance",
    "voc_ap",
]

DEFAULT_IOU = 0.999
DEFAULT_BOX_ATOL = 1e-4  # corner difference, as a share of the image's coordinate scale, that is the same box
DEFAULT_SCORE_TOL = 1e-5
DEFAULT_MATCH_IOU = 0.5
NONFINITE_RTOL = 1e-5  # finite values of two rows that saturate at the same places: equal within float32 noise
PAIR_CHUNK = 1 << 20  # candidate pairs examined at once: bounds the matcher's memory
POOL_LIMIT = 1 << 20  # unselected ONNX NMS candidates listed per image as tie evidence (the highest-scored)
MAX_LISTED = 50  # rows listed per category in a DetectionComparison (counts are always complete)
# rows the tie rules may excuse without the other side listing them (by where they sit): a tie is rare, one
# swap and its cascade a handful of rows; past this share of all detections (at least MIN_BARE) none is
MAX_BARE_SHARE = 0.02
MIN_BARE = 4


def _detections(boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray, rows: np.ndarray | None = None,
                suppressed: np.ndarray | None = None, suppressed_boxes: np.ndarray | None = None,
                complete_pool: bool = False) -> Detections:
    return Detections(np.asarray(boxes, np.float64).reshape(-1, 4), np.asarray(scores, np.float64).reshape(-1),
                      as_class_ids(classes), None if rows is None else np.asarray(rows, np.int64), suppressed,
                      suppressed_boxes=suppressed_boxes, complete_pool=complete_pool)


def from_mxnet(detections: np.ndarray) -> list[Detections]:
    """[B, N, 6] (class, score, x1, y1, x2, y2) rows; rows with class < 0 are not detections (those
    with a score >= 0 are candidates NMS suppressed or a top-k cut dropped, kept as tie evidence).

    MultiBoxDetection keeps every candidate it weighed (class -1, score and box in place; rows below the
    threshold are -1 throughout), so an image showing any such row lists them all (``complete_pool``);
    box_nms outputs (GluonCV) show none - every dropped row is -1 throughout - and claim nothing."""
    arr = np.asarray(detections)
    if arr.ndim == 2:
        arr = arr[None]
    out = []
    for rows in arr:
        cls = rows[:, 0]
        keep = ~(cls < 0)  # NaN classes stay: a NaN model must not look empty
        shown = (cls < 0) & (rows[:, 1] >= 0)
        out.append(_detections(rows[keep, 2:6], rows[keep, 1], cls[keep], np.flatnonzero(keep),
                               rows[shown, 1].astype(np.float64), rows[shown, 2:6].astype(np.float64),
                               complete_pool=bool(shown.any())))
    return out


def from_padded(boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray, num_detections: np.ndarray) -> list[Detections]:
    """The TF combined-NMS layout: [B, K, 4], [B, K], [B, K], [B] (first num rows are real)."""
    counts = np.asarray(num_detections).reshape(-1)
    return [_detections(np.asarray(bx)[:n], np.asarray(sc)[:n], np.asarray(cl)[:n], np.arange(n))
            for bx, sc, cl, n in zip(boxes, scores, classes, counts.astype(np.int64), strict=True)]


def from_indices(selected: np.ndarray, boxes: np.ndarray, scores: np.ndarray) -> list[Detections]:
    """ONNX NonMaxSuppression output [K, 3] (batch, class, box) with boxes [B, N, 4] and scores [B, C, N].

    The score matrix is every candidate NMS weighed: its finite entries not selected are the image's
    suppressed (or per-class max-output cut) candidates, a complete pool (``complete_pool``) for the tie
    rules. Past ``POOL_LIMIT`` entries (a 100k-anchor, 80-class model has 8M) only the highest-scored are
    kept and the pool no longer claims to be complete.
    """
    sel = np.asarray(selected).astype(np.int64).reshape(-1, 3)
    boxes, scores = np.asarray(boxes), np.asarray(scores)
    out = []
    for image in range(len(boxes)):
        rows = np.flatnonzero(sel[:, 0] == image)
        picked = sel[rows]
        grid = np.asarray(scores[image], np.float64)
        weighed = np.isfinite(grid)
        weighed[picked[:, 1], picked[:, 2]] = False
        pool = np.argwhere(weighed)
        complete = len(pool) <= POOL_LIMIT
        if not complete:
            pool = pool[np.argpartition(-grid[pool[:, 0], pool[:, 1]], POOL_LIMIT)[:POOL_LIMIT]]
        out.append(_detections(boxes[image, picked[:, 2]], grid[picked[:, 1], picked[:, 2]], picked[:, 1], rows,
                               grid[pool[:, 0], pool[:, 1]], np.asarray(boxes[image, pool[:, 1]], np.float64),
                               complete_pool=complete))
    return out


def match_pairs(ref: Detections, cand: Detections, match_iou: float = DEFAULT_MATCH_IOU, same_atol: float = 0.0
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Greedy class-aware matching: reference detections by descending score (stable), each to the
    unused candidate of its class with the highest IoU >= match_iou (lowest index on equal IoU).

    Returns (reference indices, candidate indices, IoU) of the matched pairs. Only candidates that
    can reach match_iou are examined (``_window_pairs``), in chunks of about PAIR_CHUNK pairs; boxes
    must be finite. ``same_atol``: boxes whose corners all agree within it are the same box, paired whatever their
    IoU (a box thinner than it has none to speak of); the IoU reported is the real one.
    """
    none = np.zeros(0, np.int64)
    if len(ref) == 0 or len(cand) == 0:
        return none, none, np.zeros(0)
    rb, cb = np.asarray(ref.boxes, np.float64), np.asarray(cand.boxes, np.float64)
    r_cols = tuple(np.ascontiguousarray(c) for c in rb.T)
    c_cols = tuple(np.ascontiguousarray(c) for c in cb.T)
    rank = np.empty(len(ref), np.int64)
    rank[np.argsort(-np.asarray(ref.scores, np.float64), kind="stable")] = np.arange(len(ref))
    c_order = np.argsort(cand.classes, kind="stable")
    c_classes = cand.classes[c_order]
    used = bytearray(len(cand))
    out_i: list[int] = []
    out_j: list[int] = []
    out_iou: list[float] = []
    for cls in np.unique(ref.classes):
        lo_k, hi_k = np.searchsorted(c_classes, cls, "left"), np.searchsorted(c_classes, cls, "right")
        if lo_k == hi_k:
            continue
        members = c_order[lo_k:hi_k]
        refs = np.flatnonzero(ref.classes == cls)
        refs = refs[np.argsort(rank[refs], kind="stable")]
        for pi, pj in _window_pairs(rb[refs], cb[members], match_iou, same_atol):
            pi, pj = refs[pi], members[pj]
            ious = iou_cols(tuple(c[pi] for c in r_cols), tuple(c[pj] for c in c_cols), same_atol)
            keep = ious >= match_iou
            if same_atol > 0:  # corners within it: the same box, however thin (IoU is no measure for a box
                # thinner than the tolerance: a saturated decode clipped to 2e-7 x 1 has IoU 0 with itself moved)
                keep |= np.all([np.abs(rc[pi] - cc[pj]) <= same_atol for rc, cc in zip(r_cols, c_cols, strict=True)],
                               axis=0)
            pi, pj, ious = pi[keep], pj[keep], ious[keep]
            order = np.lexsort((pj, -ious, rank[pi]))
            prev, taken = -1, False
            for i, j, v in zip(pi[order].tolist(), pj[order].tolist(), ious[order].tolist(), strict=True):
                if i != prev:
                    prev, taken = i, False
                if taken or used[j]:
                    continue
                used[j] = 1
                taken = True
                out_i.append(i)
                out_j.append(j)
                out_iou.append(v)
    return np.asarray(out_i, np.int64), np.asarray(out_j, np.int64), np.asarray(out_iou, np.float64)


def _window_pairs(rb: np.ndarray, cb: np.ndarray, match_iou: float, same_atol: float = 0.0
                  ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(reference, candidate) index pairs that may have IoU >= match_iou, grouped by reference in order.

    IoU >= t needs each corner within ``(1 - t) / t`` of the reference's width (x) and height (y): the
    overlap must cover t of both widths, so the other width is >= t * w and the x offset <= (1 - t) *
    the larger width. Candidates are bucketed by x1 into cells of the mean x radius and sorted by y1
    inside a cell (one sorted key: cell * span + y1), so each reference makes ~4 range queries on
    average. Chunks end at reference boundaries (the greedy needs all of a reference's pairs at once).
    """
    n = len(rb)
    if match_iou <= 0:  # every pair can match: all of them, chunk by chunk
        step = max(1, PAIR_CHUNK // max(len(cb), 1))
        for s in range(0, n, step):
            e = min(n, s + step)
            yield np.repeat(np.arange(s, e), len(cb)), np.tile(np.arange(len(cb)), e - s)
        return
    ratio = (1.0 - match_iou) / match_iou if match_iou < 1 else 0.0
    # plus the reach of the degenerate rule (zero-area boxes the same within DEGENERATE_EPS or same_atol)
    rx = ratio * np.clip(rb[:, 2] - rb[:, 0], 0, None) * (1 + 1e-9) + DEGENERATE_EPS * np.maximum(1.0, np.abs(rb[:, 0])) + same_atol
    ry = ratio * np.clip(rb[:, 3] - rb[:, 1], 0, None) * (1 + 1e-9) + DEGENERATE_EPS * np.maximum(1.0, np.abs(rb[:, 1])) + same_atol
    xmin = min(cb[:, 0].min(), (rb[:, 0] - rx).min())
    xspan = max(cb[:, 0].max(), (rb[:, 0] + rx).max()) - xmin
    ymin = min(cb[:, 1].min(), (rb[:, 1] - ry).min())
    span = (max(cb[:, 1].max(), (rb[:, 1] + ry).max()) - ymin) * (1 + 1e-9) + 1.0  # cells never touch
    cell = max(float(rx.mean()), xspan / max(len(cb), 1), 1e-12)
    key = np.floor((cb[:, 0] - xmin) / cell) * span + (cb[:, 1] - ymin)
    order = np.argsort(key, kind="stable")
    key = key[order]
    slack = 8 * float(np.spacing(abs(key[-1]) + span))  # rounding of cell * span + y: stay conservative
    q_lo = np.floor((rb[:, 0] - rx - xmin) / cell).astype(np.int64)
    nq = np.floor((rb[:, 0] + rx - xmin) / cell).astype(np.int64) - q_lo + 1
    q_ref = np.repeat(np.arange(n), nq)
    q_cell = np.repeat(q_lo, nq) + (np.arange(len(q_ref)) - np.repeat(np.cumsum(nq) - nq, nq))
    base = q_cell * span - ymin
    lo = np.searchsorted(key, base + rb[q_ref, 1] - ry[q_ref] - slack, "left")
    hi = np.searchsorted(key, base + rb[q_ref, 1] + ry[q_ref] + slack, "right")
    counts = np.maximum(hi - lo, 0)
    per_ref = np.cumsum(np.bincount(q_ref, weights=counts, minlength=n))
    q_end = np.cumsum(nq)
    s = 0
    while s < n:
        done = per_ref[s - 1] if s else 0.0
        e = max(int(np.searchsorted(per_ref, done + PAIR_CHUNK, "right")), s + 1)
        qs, qe = (q_end[s - 1] if s else 0), q_end[e - 1]
        cnt = counts[qs:qe]
        total = int(cnt.sum())
        if total:
            offsets = np.repeat(np.cumsum(cnt) - cnt, cnt)
            yield np.repeat(q_ref[qs:qe], cnt), order[np.arange(total) - offsets + np.repeat(lo[qs:qe], cnt)]
        s = e


def _match_nonfinite(ref: Detections, cand: Detections, rtol: float = NONFINITE_RTOL) -> tuple[np.ndarray, np.ndarray]:
    """Rows with a NaN/inf box or score match a row of the same class with NaN and inf (of the same sign) at the
    same positions and the finite values equal within float32 noise (``rtol`` of the larger magnitude, at least
    of 1): a saturated model (exp overflowing to inf) agrees with its source when both overflow at the same
    places. Each reference row takes the closest such candidate row."""
    def pattern(d: Detections, k: int) -> tuple[Any, ...]:
        values = np.concatenate([d.boxes[k], [d.scores[k]]])
        return (int(d.classes[k]), *("nan" if np.isnan(v) else float(v) if np.isinf(v) else "f" for v in values))

    def finite(d: Detections, k: int) -> np.ndarray:
        values = np.concatenate([d.boxes[k], [d.scores[k]]])
        return values[np.isfinite(values)]

    pool: dict[tuple[Any, ...], list[int]] = {}
    for k in range(len(cand)):
        pool.setdefault(pattern(cand, k), []).append(k)
    pairs = []
    for k in range(len(ref)):
        options = pool.get(pattern(ref, k))
        if not options:
            continue
        r = finite(ref, k)
        gaps = [float(np.max(np.abs(finite(cand, j) - r) / np.maximum(1.0, np.abs(r)), initial=0.0)) for j in options]
        best = int(np.argmin(gaps))
        if gaps[best] <= rtol:
            pairs.append((k, options.pop(best)))
    return (np.asarray([p[0] for p in pairs], np.int64), np.asarray([p[1] for p in pairs], np.int64))


@dataclass
class DetectionRow:
    """One detection named in a report: which side, image and output row, and what it is."""

    side: str
    image: int
    row: int
    label: int
    score: float | None
    box: list[float | None]


@dataclass
class ImageMatch:
    image: int
    matched: int
    unmatched_reference: int
    unmatched_candidate: int
    max_score_diff: float
    min_iou: float
    failed_pairs: int = 0
    tie_ambiguous: int = 0
    mismatched: int = 0


@dataclass
class DetectionComparison:
    """Detection-level verdict of a candidate against a reference (all images).

    ``matched`` counts pairs (clean or not), ``failed_pairs`` the matched pairs that are not clean;
    ``mismatched`` the problem rows (both sides) not excused as ties, ``tie_ambiguous`` the excused
    ones. ``max_score_diff`` / ``min_iou`` are over matched pairs that are not tie-ambiguous.
    ``tied_rows`` / ``mismatched_rows`` list up to MAX_LISTED of each.
    """

    reference: str
    candidate: str
    iou_threshold: float
    score_tolerance: float
    score_rtol: float = 0.0
    matched: int = 0
    unmatched_reference: int = 0
    unmatched_candidate: int = 0
    failed_pairs: int = 0
    mismatched: int = 0
    tie_ambiguous: int = 0
    max_score_diff: float = 0.0
    min_iou: float = 1.0
    max_mask_diff: float | None = None
    reference_count: int = 0
    candidate_count: int = 0
    vacuous: bool = False
    vacuous_reason: str = ""
    tie_margin: float = 0.0  # scores closer than this (the score error of clean matches) count as tied
    corner_error: float = 0.0  # the largest corner difference of clean matches (IoU-at-threshold ties)
    nms_iou: float | None = None  # the NMS threshold read from the graph (tie rules b and d need it without a pool)
    bare_tied: int = 0  # tie-ambiguous rows the other side does not list (judged by where they sit)
    bare_bound: int = 0  # at most this many may be (MAX_BARE_SHARE of the detections, at least MIN_BARE)
    bare_refused: int = 0  # rows over the bound: not excused
    box_tolerance: float = DEFAULT_BOX_ATOL  # corners this close (share of the coordinate scale): the same box
    tied_rows: list[DetectionRow] = field(default_factory=list)
    mismatched_rows: list[DetectionRow] = field(default_factory=list)
    images: list[ImageMatch] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.mismatched == 0

    def summary(self) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        ties = f", {self.tie_ambiguous} tie-ambiguous" if self.tie_ambiguous else ""
        if self.bare_tied or self.bare_refused:
            ties += f" ({self.bare_tied} of them unlisted by the other side, at most {self.bare_bound} may be)"
        if self.bare_refused:
            ties += f", {self.bare_refused} unlisted near-tie rows refused (over the bound)"
        vacuous = f" (vacuous: {self.vacuous_reason})" if self.vacuous else ""
        return (f"{self.candidate} vs {self.reference}: {verdict}{vacuous}, {self.matched} matched, "
                f"{self.unmatched_reference} only in reference, {self.unmatched_candidate} only in candidate{ties}, "
                f"min IoU {self.min_iou:.6f} (>= {self.iou_threshold} or corners within {self.box_tolerance:g} of the "
                f"coordinate scale), max score diff {self.max_score_diff:.3g} "
                f"(<= {self.score_tolerance:g})")

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["passed"] = self.passed
        return data


def compare_detections(
    reference: Sequence[Detections],
    candidate: Sequence[Detections],
    *,
    iou: float = DEFAULT_IOU,
    box_atol: float = DEFAULT_BOX_ATOL,
    score_tol: float = DEFAULT_SCORE_TOL,
    score_rtol: float = 0.0,
    match_iou: float = DEFAULT_MATCH_IOU,
    tie_ulps: int = DEFAULT_TIE_ULPS,
    mask_tol: float = 1e-4,
    mask_rtol: float = 1e-3,
    reference_name: str = "reference",
    candidate_name: str = "candidate",
    nms_iou: float | None = None,
) -> DetectionComparison:
    """Match detections image by image (module docstring) and judge them, ties and non-finite rows included.

    When both sides carry masks, a matched pair is clean only if its masks agree elementwise within
    ``mask_tol + mask_rtol * |reference mask|`` (and have the same shape); ``max_mask_diff`` reports the worst.
    ``nms_iou``: the IoU threshold of the NMS that selected the rows (``DetectionSpec.nms_iou``, read from the
    graph): without it, a row the other side does not list is never tie-ambiguous.
    """
    if len(reference) != len(candidate):
        raise ValueError(f"reference has {len(reference)} images, candidate {len(candidate)}")
    result = DetectionComparison(reference_name, candidate_name, iou, score_tol, score_rtol, box_tolerance=box_atol,
                                 nms_iou=nms_iou)
    problems: list[tuple[int, Detections, Detections, dict[str, Any]]] = []
    clean_total = 0
    nonfinite_reference = 0
    finite_clean = 0  # clean pairs of finite rows: what proves the model beyond NaN/inf rows equal on both sides
    for image, (ref, cand) in enumerate(zip(reference, candidate, strict=True)):
        m, clean, detail = _match_image(ref, cand, match_iou, iou, score_tol, score_rtol, (mask_tol, mask_rtol),
                                        box_atol)
        if detail["mask_diff"] is not None:
            result.max_mask_diff = max(result.max_mask_diff or 0.0, detail["mask_diff"])
        m.image = image
        result.images.append(m)
        result.matched += m.matched
        result.unmatched_reference += m.unmatched_reference
        result.unmatched_candidate += m.unmatched_candidate
        result.failed_pairs += m.failed_pairs
        result.reference_count += len(ref)
        result.candidate_count += len(cand)
        nonfinite_reference += int((~finite_rows(ref)).sum())
        finite_clean += clean - detail["nonfinite_matched"]
        clean_total += clean
        problems.append((image, ref, cand, detail))
    # near ties: the largest score difference among clean matches is the runtimes' own score error
    result.tie_margin = max((float(d["all_pair_diff"][:len(d["all_pair_diff"]) - len(d["pair_iou"])].max(initial=0.0))
                             for _i, _r, _c, d in problems), default=0.0)
    result.corner_error = max((d["clean_corner_diff"] for _i, _r, _c, d in problems), default=0.0)
    excuses = [excused(ref, cand, detail, tie_ulps, match_iou, result.tie_margin, iou, detail["corner_atol"],
                       nms_iou, result.corner_error) if clean_total else None for _i, ref, cand, detail in problems]
    # the bound on rows excused by where they sit: over it, none of them is
    result.bare_tied = sum(int(e.bare_ref.sum() + e.bare_cand.sum()) for e in excuses if e is not None)
    result.bare_bound = max(MIN_BARE, int(MAX_BARE_SHARE * sum(len(r) + len(c) for _i, r, c, _d in problems)))
    if result.bare_tied > result.bare_bound:
        result.bare_refused = result.bare_tied
        for e in excuses:
            if e is not None:
                e.ref &= ~e.bare_ref
                e.cand &= ~e.bare_cand
    for (image, ref, cand, detail), e in zip(problems, excuses, strict=True):
        m = result.images[image]
        tied_r, tied_c = (e.ref, e.cand) if e is not None else (
            np.zeros(len(detail["ref_rows"]), bool), np.zeros(len(detail["cand_rows"]), bool))
        m.tie_ambiguous = int(tied_r.sum() + tied_c.sum())
        m.mismatched = len(tied_r) + len(tied_c) - m.tie_ambiguous
        result.tie_ambiguous += m.tie_ambiguous
        result.mismatched += m.mismatched
        for side, d, rows, tied in (("reference", ref, detail["ref_rows"], tied_r),
                                    ("candidate", cand, detail["cand_rows"], tied_c)):
            for k, is_tied in zip(rows.tolist(), tied.tolist(), strict=True):
                target = result.tied_rows if is_tied else result.mismatched_rows
                if len(target) < MAX_LISTED:
                    target.append(_row(side, image, d, k))
        # pair figures: failing pairs whose two rows are both tie-ambiguous do not set min IoU / max score diff
        failing = len(detail["pair_iou"])
        pair_tied = tied_r[detail["pair_ref_pos"]] & tied_c[detail["pair_cand_pos"]]
        counted = np.concatenate([np.ones(len(detail["all_pair_iou"]) - failing, bool), ~pair_tied])
        ious, diffs = detail["all_pair_iou"][counted], detail["all_pair_diff"][counted]
        if len(ious):
            m.min_iou, m.max_score_diff = float(ious.min()), float(diffs.max())
            result.min_iou = min(result.min_iou, m.min_iou)
            result.max_score_diff = max(result.max_score_diff, m.max_score_diff)
    reasons = []
    if result.reference_count == 0 and result.candidate_count == 0:
        reasons.append("no detections on either side")
    if nonfinite_reference and not finite_clean:
        reasons.append(f"{nonfinite_reference} reference detections have NaN/inf boxes or scores and no finite "
                       "detection matched")
    if result.tie_ambiguous and result.tie_ambiguous >= clean_total:
        reasons.append(f"{result.tie_ambiguous} rows differ only by tied scores, more than the {clean_total} clean matches")
    result.vacuous, result.vacuous_reason = bool(reasons), "; ".join(reasons)
    return result


def problem_rows(reference: Sequence[Detections], candidate: Sequence[Detections], *, iou: float = DEFAULT_IOU,
                 box_atol: float = DEFAULT_BOX_ATOL, score_tol: float = DEFAULT_SCORE_TOL, score_rtol: float = 0.0,
                 match_iou: float = DEFAULT_MATCH_IOU, mask_tol: tuple[float, float] = (1e-4, 1e-3)
                 ) -> list[tuple[set[int], set[int]]]:
    """Per image, the output rows (``Detections.row_ids``) of each side that are problem rows - unmatched, or in
    a matched pair that is not clean - before any tie rule: what a tie rule or the tie proof would have to
    excuse. ``iou=1, box_atol=0, score_tol=0, mask_tol=(0, 0)`` finds every row that differs at all."""
    out = []
    for ref, cand in zip(reference, candidate, strict=True):
        _m, _clean, detail = _match_image(ref, cand, match_iou, iou, score_tol, score_rtol, mask_tol, box_atol)
        out.append(({int(r) for r in ref.row_ids()[detail["ref_rows"]]},
                    {int(c) for c in cand.row_ids()[detail["cand_rows"]]}))
    return out


def _row(side: str, image: int, d: Detections, k: int) -> DetectionRow:
    def num(v: float) -> float | None:
        return float(v) if np.isfinite(v) else None

    return DetectionRow(side, image, int(d.row_ids()[k]), int(d.classes[k]), num(d.scores[k]),
                        [num(v) for v in d.boxes[k]])


def _match_image(ref: Detections, cand: Detections, match_iou: float, iou: float, score_tol: float,
                 score_rtol: float, mask_tol: tuple[float, float], box_atol: float = DEFAULT_BOX_ATOL
                 ) -> tuple[ImageMatch, int, dict[str, Any]]:
    """Match one image; returns the counts, the number of clean pairs and the problem rows."""
    rf, cf = finite_rows(ref), finite_rows(cand)
    r_idx, c_idx = np.flatnonzero(rf), np.flatnonzero(cf)
    finite_coords = np.abs(ref.boxes[np.isfinite(ref.boxes)])
    scale = max(1.0, float(finite_coords.max(initial=0.0)))
    # zero-area boxes have no IoU: the same within the corner tolerance that makes a matched pair clean
    pi, pj, ious = match_pairs(ref.take(r_idx), cand.take(c_idx), match_iou, box_atol * scale)
    pi, pj = r_idx[pi], c_idx[pj]
    ni, nj = _match_nonfinite(ref.take(np.flatnonzero(~rf)), cand.take(np.flatnonzero(~cf)))
    ni, nj = np.flatnonzero(~rf)[ni], np.flatnonzero(~cf)[nj]
    diff = np.abs(ref.scores[pi] - cand.scores[pj])
    corners = np.abs(ref.boxes[pi] - cand.boxes[pj]).max(axis=1, initial=0.0)
    same_box = (ious >= iou) | (corners <= box_atol * scale)
    clean = same_box & (diff <= score_tol + score_rtol * np.abs(ref.scores[pi]))
    mask_diff = None
    if ref.masks is not None and cand.masks is not None:
        mask_ok, mask_diff = _compare_masks(ref.masks, cand.masks, pi, pj, *mask_tol)
        clean &= mask_ok
    if ref.keypoints is not None and cand.keypoints is not None:  # per-detection arrays too, judged as masks are
        kp_ok, kp_diff = _compare_masks(ref.keypoints, cand.keypoints, pi, pj, *mask_tol)
        clean &= kp_ok
        mask_diff = max(mask_diff or 0.0, kp_diff)
    ref_matched = np.zeros(len(ref), bool)
    cand_matched = np.zeros(len(cand), bool)
    ref_matched[pi] = ref_matched[ni] = True
    cand_matched[pj] = cand_matched[nj] = True
    bad_i, bad_j = pi[~clean], pj[~clean]
    ref_rows = np.concatenate([np.flatnonzero(~ref_matched), bad_i])
    cand_rows = np.concatenate([np.flatnonzero(~cand_matched), bad_j])
    n_unmatched_r, n_unmatched_c = int((~ref_matched).sum()), int((~cand_matched).sum())
    detail = {
        "ref_rows": ref_rows, "cand_rows": cand_rows,
        "ref_unmatched": np.arange(len(ref_rows)) < n_unmatched_r,
        "cand_unmatched": np.arange(len(cand_rows)) < n_unmatched_c,
        # failing pairs: positions of their two rows inside ref_rows / cand_rows
        "pair_ref_pos": n_unmatched_r + np.arange(len(bad_i)), "pair_cand_pos": n_unmatched_c + np.arange(len(bad_j)),
        "pair_iou": ious[~clean],
        # figures over every matched pair, failing pairs last (so tied failing pairs can be left out)
        "all_pair_iou": np.concatenate([ious[clean], ious[~clean]]),
        "all_pair_diff": np.concatenate([diff[clean], diff[~clean]]),
        "mask_diff": mask_diff,
        "nonfinite_matched": len(ni),
        "corner_atol": box_atol * scale,  # corners this close: the same box (tie evidence looks boxes up so)
        "clean_ref": pi[clean], "clean_cand": pj[clean],  # the clean matches (rule d's detections both kept)
        "clean_corner_diff": float(corners[clean].max(initial=0.0)),
    }
    matched = len(pi) + len(ni)
    m = ImageMatch(-1, matched, len(ref) - matched, len(cand) - matched, 0.0, 1.0, failed_pairs=int((~clean).sum()))
    return m, int(clean.sum()) + len(ni), detail


def _compare_masks(ref: np.ndarray, cand: np.ndarray, pi: np.ndarray, pj: np.ndarray, atol: float, rtol: float
                   ) -> tuple[np.ndarray, float]:
    """Per matched pair: masks equal within atol + rtol * |ref| (NaN equal to NaN); and the worst difference."""
    ok = np.ones(len(pi), bool)
    worst = 0.0
    if ref.shape[1:] != cand.shape[1:]:
        return np.zeros(len(pi), bool), float(np.finfo(np.float64).max)  # shapes differ: as bad as it gets
    with np.errstate(all="ignore"):
        for k, (i, j) in enumerate(zip(pi.tolist(), pj.tolist(), strict=True)):  # one pair at a time: masks are big
            r, c = np.asarray(ref[i], np.float64), np.asarray(cand[j], np.float64)
            d = np.abs(c - r)
            same = (d <= atol + rtol * np.abs(r)) | (np.isnan(r) & np.isnan(c)) | (r == c)
            ok[k] = bool(same.all())
            finite = np.isfinite(d)
            if finite.any():
                worst = max(worst, float(d[finite].max()))
    return ok, worst


# -- the lowering's output groups (bridge.passes.contrib.detection) ---------------------------------

def detection_output_names(name: str, output_format: str) -> list[str]:
    """Graph output names a lowered detection output called ``name`` has in ``output_format`` (the lowering's
    own list, ``bridge.passes.contrib.nms.FORMAT_OUTPUTS``)."""
    from bridge.passes.contrib.nms import FORMAT_OUTPUTS

    if output_format == "mxnet":
        return [name]
    return [f"{name}_{s}" for s in FORMAT_OUTPUTS[output_format]]


def read_detections(outputs: Mapping[str, np.ndarray], name: str, output_format: str) -> list[Detections]:
    """The detections of output ``name`` from a run's outputs, whatever layout the model emits them in."""
    arrays = [outputs[n] for n in detection_output_names(name, output_format)]
    if output_format == "mxnet":
        return from_mxnet(arrays[0])
    if output_format == "boxes-scores-classes":
        return from_padded(*arrays)
    return from_indices(*arrays)


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
