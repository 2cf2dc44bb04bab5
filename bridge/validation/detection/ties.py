"""Tie rules: which problem rows of one image an NMS or top-K cut visiting tied candidates in another order explains.

Two correct detectors can keep different ones of two candidates whose scores tie. ``matching`` finds the
*problem rows* (an unmatched detection, or either row of a matched pair that is not clean); this module
decides which of them are **tie-ambiguous** (reported with their rows, not counted as mismatches). A row
whose score merely ties with others is never excused: saturated or random-weight models score most boxes
exactly alike, and a candidate that moved or dropped detections would pass. Each excuse needs evidence that
the two runtimes *chose* between tied candidates; a moved box (same score, other coordinates) leaves none
of its own: the other side never computed the moved box.

Scores tie within ``tie_ulps`` float32 ulps or within the score error measured on the clean matches
(``margin``: scores closer than the runtimes' own disagreement can be ordered either way).

Evidence, strongest first:

- *listed*: the other side lists the row among the candidates it weighed and did not keep
  (``Detections.suppressed_boxes``: MXNet MultiBoxDetection's class -1 rows keep score and box, a reference cut
  to the candidate's K rows keeps the rows it cut, ONNX NonMaxSuppression's unselected score entries): a row
  there with the same box (IoU >= ``iou`` or corners within ``corner_atol``) and a tied score. A side whose
  list is complete (``complete_pool``) must list every candidate it dropped;
- *the NMS threshold* (``nms_iou``, read from the graph: the NMS node's iou_threshold, ``DetectionSpec.nms_iou``):
  NMS drops a box only for a kept box overlapping it by more than the threshold, so a rival must overlap that
  much - not merely touch;
- *position*: where the other side lists nothing (box_nms / GluonCV -1 rows, TF combined NMS, torchvision,
  YOLO rows), a row may be judged by where it sits (at the bottom of a full output, a cut) - never the
  best-scored row of its image, and such *bare* excuses are bounded per comparison
  (``matching.MAX_BARE_SHARE``, at least ``matching.MIN_BARE`` rows; over the bound none is excused).

The rules, per problem row (x on side S, the other side O):

(a) swap at a cut: x is unmatched and paired one to one with an unmatched row y of O with a tied score
    whose box is a different candidate (IoU < ``match_iou``), both drops explained (O lists x or x sits at
    O's cut; S lists y or y sits at S's cut: the image's lowest kept score, or a full class's), and the pair
    is real: one of the two is listed by the other side, or the two boxes overlap past the NMS threshold (a
    box moved at the bottom of both sides is the same picture otherwise);
(b) NMS choice (cascade): x is unmatched and a problem row z of O (kept there, not here) with a tied score
    overlaps it past the NMS threshold (positive area when the threshold is unknown and x is listed) and is
    another box (IoU < ``iou``): kept first, z could have suppressed x on O. Below a tie the chain goes on
    through untied boxes: z may also score higher than x if z is itself excused - applied until nothing
    changes. x must be listed by O, or O lists nothing, x is not S's best row and the threshold is known.
    A detection kept on *both* sides is no such rival; nor a zero-area box; nor an unexcused higher row;
(c) a matched pair that is not clean (two overlapping boxes, IoU >= ``match_iou``): the scores tie and a
    side lists the other side's box with a tied score; alone such a pair looks exactly like a box that moved;
(d) NMS threshold tie: x is unmatched and a detection w kept on both sides (a clean match), scored at least
    as high, overlaps x by the NMS threshold on both sides to within what the measured corner error of the
    clean matches can move an IoU (4 x error / x's shorter side): one runtime's IoU fell on the suppressing
    side of the threshold, the other's not (MXNet suppresses at IoU >= t, ONNX at > t). x must be listed by
    O, or be a bare row as in (b).

Residual: without a list on the other side, a box other than the image's best moved to where it still
overlaps its old place past the NMS threshold (and under ``match_iou``) with an unchanged score reads as an NMS
choice (b); nothing in such outputs tells them apart, and the bare bound caps how many rows it can hide.
Genuine ties these rules cannot excuse (a cut swap of two boxes that do not overlap, in an output that lists
nothing) fail here and are left to the upstream tie proof (``bridge.validation.pinning``), which re-runs the
candidate with the source's values deciding its selections.

Rows with a NaN/inf box or score are never excused; ``matching`` excuses nothing unless some detection
matched cleanly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from bridge.validation.detection.boxes import DEGENERATE_EPS, Detections, finite_rows, overlaps, pair_iou

DEFAULT_TIE_ULPS = 4
PAIR_WINDOW = 64  # tied rows of the other side examined per row when pairing: a bound for masses of equal scores
NMS_IOU_SLACK = 1e-6  # IoU computed in float64 here, in float32 by the runtimes: "over the threshold" within this


def tie_tolerance(scores: np.ndarray, ulps: int = DEFAULT_TIE_ULPS, margin: float = 0.0) -> np.ndarray:
    """How far two scores may be and still count as tied: ``ulps`` float32 ulps at each score, or
    ``margin`` (the score error measured on clean matches) when larger: two scores closer than the
    runtimes disagree on any score can be ordered either way."""
    mag = np.abs(np.asarray(scores, np.float64)).astype(np.float32)
    return np.maximum(ulps * np.spacing(mag).astype(np.float64), margin)


def shows(d: Detections, boxes: np.ndarray, scores: np.ndarray, iou: float, ulps: int, margin: float,
          corner_atol: float = 0.0) -> np.ndarray:
    """Per box: ``d`` lists it among the candidates it did not keep with a tied score - the same box as a clean
    match is: IoU >= ``iou`` or every corner within ``corner_atol``.

    The list is sorted by x1 once; a box is looked up only among rows whose x1 is close enough for either
    (within ``(1 - iou) / iou`` of its width, as ``matching._window_pairs`` bounds IoU, or ``corner_atol``).
    """
    out = np.zeros(len(boxes), bool)
    if d.suppressed_boxes is None or not len(d.suppressed_boxes) or not len(boxes):
        return out
    pool_boxes = np.asarray(d.suppressed_boxes, np.float64)
    pool_scores = np.asarray(d.suppressed_scores, np.float64).reshape(-1)
    order = np.argsort(pool_boxes[:, 0], kind="stable")
    x1 = pool_boxes[order, 0]
    if iou > 0:
        ratio = (1.0 - iou) / iou if iou < 1 else 0.0
        width = np.clip(boxes[:, 2] - boxes[:, 0], 0, None)
        radius = ratio * width * (1 + 1e-9) + DEGENERATE_EPS * np.maximum(1.0, np.abs(boxes[:, 0])) + corner_atol
        lo = np.searchsorted(x1, boxes[:, 0] - radius, "left")
        hi = np.searchsorted(x1, boxes[:, 0] + radius, "right")
    else:  # every box may reach IoU 0
        lo, hi = np.zeros(len(boxes), np.int64), np.full(len(boxes), len(x1))
    tol = tie_tolerance(scores, ulps, margin)
    for i in np.flatnonzero(hi > lo).tolist():
        near = order[lo[i]:hi[i]]
        near = near[np.abs(pool_scores[near] - scores[i]) <= tol[i]]
        if len(near):
            box = np.repeat(boxes[i][None], len(near), axis=0)
            same = pair_iou(box, pool_boxes[near], corner_atol) >= iou
            same |= np.abs(pool_boxes[near] - box).max(axis=1) <= corner_atol
            out[i] = bool(same.any())
    return out


def _at_cut(d: Detections, classes: np.ndarray, scores: np.ndarray, ulps: int, margin: float
            ) -> tuple[np.ndarray, np.ndarray]:
    """Per (class, score) of rows ``d`` does not have: could ``d`` have cut it, over the image (the score ties or
    is below the lowest score ``d`` kept) and over its class (the same within the class, and the class is full:
    a per-class cut keeps q rows of every class it cuts and at most q of any, so a cut class holds as many rows
    as the fullest class; False when ``d`` kept nothing of it)."""
    fin = finite_rows(d)
    kept_scores, kept_classes = d.scores[fin], d.classes[fin]
    tol = tie_tolerance(scores, ulps, margin)
    if not len(kept_scores):
        return np.zeros(len(scores), bool), np.zeros(len(scores), bool)
    image = scores <= kept_scores.min() + tol
    lowest: dict[int, float] = {}
    count: dict[int, int] = {}
    for c, s in zip(kept_classes.tolist(), kept_scores.tolist(), strict=True):
        lowest[c] = min(s, lowest.get(c, np.inf))
        count[c] = count.get(c, 0) + 1
    fullest = max(count.values())
    floor = np.asarray([lowest[c] if count.get(c) == fullest else -np.inf for c in classes.tolist()], np.float64)
    return image, scores <= floor + tol


def _dropped_by_cut(other: Detections, d: Detections, rows: np.ndarray, shown: np.ndarray, ulps: int, margin: float,
                    bare: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row of ``d`` (kept by ``d``, not by ``other``): ``other`` may have dropped it at a cut, over the
    image and over its class - it shows the row, or (``bare``: the row may be judged without a listing) the row
    sits at its cut."""
    image, per_class = _at_cut(other, d.classes[rows], d.scores[rows], ulps, margin)
    return shown | (bare & image), shown | (bare & per_class)


def pair_ties(ref: Detections, ref_rows: np.ndarray, cand: Detections, cand_rows: np.ndarray, ulps: int,
              match_iou: float, margin: float = 0.0, ref_cut: tuple[np.ndarray, np.ndarray] | None = None,
              cand_cut: tuple[np.ndarray, np.ndarray] | None = None, ref_shown: np.ndarray | None = None,
              cand_shown: np.ndarray | None = None, nms_iou: float | None = None) -> tuple[list[int], list[int]]:
    """One-to-one pairs (positions in ref_rows / cand_rows) of rows whose scores tie and whose boxes are
    different candidates (IoU < match_iou: the same box under another label is no tie swap).

    ``ref_cut`` / ``cand_cut``: per row, (image-wide, per-class) evidence that the *other* side dropped it at
    a cut (rule a); a pair needs it for both rows, over the image or, for rows of one class, over the class.
    None: no such condition. ``ref_shown`` / ``cand_shown``: per row, the other side lists it; a pair neither of
    whose rows the other side lists is a tie swap only when its two boxes overlap by more than the NMS threshold
    ``nms_iou`` (a box moved at the bottom looks exactly like such a swap otherwise).
    """
    rs, cs = ref.scores[ref_rows], cand.scores[cand_rows]
    co = np.argsort(cs, kind="stable")
    sorted_cs = cs[co]
    tol = tie_tolerance(rs, ulps, margin)
    lo = np.searchsorted(sorted_cs, rs - tol, "left")
    hi = np.searchsorted(sorted_cs, rs + tol, "right")
    used = np.zeros(len(cand_rows), bool)
    out_r: list[int] = []
    out_c: list[int] = []
    for i in np.argsort(-rs, kind="stable").tolist():
        if hi[i] <= lo[i]:
            continue
        window = co[lo[i]:min(hi[i], lo[i] + PAIR_WINDOW)]
        window = window[~used[window]]
        if ref_cut is not None and cand_cut is not None and len(window):
            same = cand.classes[cand_rows[window]] == ref.classes[ref_rows[i]]
            window = window[(ref_cut[0][i] & cand_cut[0][window]) | (same & ref_cut[1][i] & cand_cut[1][window])]
        if not len(window):
            continue
        ious = pair_iou(np.repeat(ref.boxes[ref_rows[i]][None], len(window), axis=0), cand.boxes[cand_rows[window]])
        ok = ious < match_iou
        if ref_shown is not None and cand_shown is not None:  # a listed row is a candidate the other side weighed
            listed = ref_shown[i] | cand_shown[window]
            ok &= listed | (nms_iou is not None and ious >= nms_iou - NMS_IOU_SLACK)
        free = np.flatnonzero(ok)
        if len(free):
            j = int(window[free[0]])
            used[j] = True
            out_r.append(i)
            out_c.append(j)
    return out_r, out_c


def rivals(d: Detections, rows: np.ndarray, other: Detections, rival_rows: np.ndarray, ulps: int,
           margin: float, same_box: float, higher: bool = False, min_iou: float | None = None) -> np.ndarray:
    """Rule (b): per row of ``d``, a row of ``other`` among ``rival_rows`` with a tied score (``higher``: a tied
    or higher score, one NMS visits first) whose box could have suppressed it - overlaps it by more than the NMS
    threshold ``min_iou`` (positive area when it is not known) - and is another box (IoU < ``same_box``: the same
    box under another label is a changed label, not a rival)."""
    out = np.zeros(len(rows), bool)
    if not len(rows) or not len(rival_rows):
        return out
    order = np.argsort(other.scores[rival_rows], kind="stable")
    pool = rival_rows[order]
    sorted_scores = other.scores[pool]
    tol = tie_tolerance(d.scores[rows], ulps, margin)
    lo = np.searchsorted(sorted_scores, d.scores[rows] - tol, "left")
    hi = np.full(len(rows), len(pool)) if higher else np.searchsorted(sorted_scores, d.scores[rows] + tol, "right")
    for i, k in enumerate(rows.tolist()):
        if hi[i] > lo[i]:
            boxes = other.boxes[pool[lo[i]:hi[i]]]
            ious = pair_iou(np.repeat(d.boxes[k][None], len(boxes), axis=0), boxes)
            close = overlaps(d.boxes[k], boxes) if min_iou is None else ious >= min_iou - NMS_IOU_SLACK
            out[i] = bool((close & (ious < same_box)).any())
    return out


@dataclass
class Excuses:
    """Which problem rows of one image are tie-ambiguous (``ref`` / ``cand``, per problem row) and which of those
    rest on where the rows sit rather than on the other side listing them (``bare_ref`` / ``bare_cand``): those
    are the ones the comparison bounds (``matching.MAX_BARE_SHARE``)."""

    ref: np.ndarray
    cand: np.ndarray
    bare_ref: np.ndarray
    bare_cand: np.ndarray


def _top(d: Detections, rows: np.ndarray, ulps: int, margin: float) -> np.ndarray:
    """Per row: it is (tied with) the best-scored detection of its side's image."""
    fin = finite_rows(d)
    if not fin.any():
        return np.zeros(len(rows), bool)
    best = d.scores[fin].max()
    return d.scores[rows] >= best - tie_tolerance(np.array([best]), ulps, margin)[0]


def threshold_ties(d: Detections, rows: np.ndarray, other: Detections, pairs: tuple[np.ndarray, np.ndarray],
                   nms_iou: float, corner_error: float, ulps: int, margin: float) -> np.ndarray:
    """Rule (d): per row of ``d`` (kept by ``d`` only), a detection kept on both sides (``pairs``: its row on
    ``d``'s side, its row on ``other``'s), scored at least as high, whose IoU with the row is the NMS threshold
    on both sides to within what the measured corner error can move an IoU: one runtime's IoU fell on the
    suppressing side of the threshold, the other's not (MXNet suppresses at IoU >= t, ONNX at > t)."""
    out = np.zeros(len(rows), bool)
    mine, theirs = pairs
    if not len(rows) or not len(mine):
        return out
    for n, k in enumerate(rows.tolist()):
        box = d.boxes[k]
        side = min(box[2] - box[0], box[3] - box[1])
        if not side > 0:
            continue
        eps = max(NMS_IOU_SLACK, 4.0 * corner_error / side)  # corners moved by e change an IoU by <~ 4e / side
        higher = d.scores[mine] >= d.scores[k] - tie_tolerance(np.array([d.scores[k]]), ulps, margin)[0]
        if not higher.any():
            continue
        here = pair_iou(np.repeat(box[None], int(higher.sum()), axis=0), d.boxes[mine[higher]])
        there = pair_iou(np.repeat(box[None], int(higher.sum()), axis=0), other.boxes[theirs[higher]])
        out[n] = bool(((np.abs(here - nms_iou) <= eps) & (np.abs(there - nms_iou) <= eps)).any())
    return out


def excused(ref: Detections, cand: Detections, detail: dict[str, Any], ulps: int, match_iou: float,
            margin: float = 0.0, iou: float = 0.999, corner_atol: float = 0.0, nms_iou: float | None = None,
            corner_error: float = 0.0) -> Excuses:
    """Which problem rows of one image are tie-ambiguous (module docstring, rules a to d).

    ``detail`` is ``matching``'s account of the image: ``ref_rows`` / ``cand_rows`` (the problem rows),
    ``ref_unmatched`` / ``cand_unmatched`` (which of them are unmatched), ``pair_ref_pos`` /
    ``pair_cand_pos`` (the positions of each failing pair's two rows) and ``clean_ref`` / ``clean_cand`` (the
    clean matches); ``corner_atol`` the corner difference that makes two boxes the same (``matching``:
    ``box_atol`` of the image's coordinate scale). ``nms_iou``: the IoU threshold of the NMS that selected the
    rows (read from the graph; None: unknown, and then a row the other side does not list is never excused).
    ``corner_error``: the largest corner difference of the clean matches. Rows with a NaN/inf box or score are
    never excused.
    """
    ref_rows, cand_rows = detail["ref_rows"], detail["cand_rows"]
    finite_r, finite_c = finite_rows(ref)[ref_rows], finite_rows(cand)[cand_rows]
    tied_r, tied_c = np.zeros(len(ref_rows), bool), np.zeros(len(cand_rows), bool)
    ur = np.flatnonzero(detail["ref_unmatched"] & finite_r)
    uc = np.flatnonzero(detail["cand_unmatched"] & finite_c)
    only_r, only_c = ref_rows[ur], cand_rows[uc]
    # rows one side kept that the other lists among the candidates it did not keep
    shown_r = shows(cand, ref.boxes[only_r], ref.scores[only_r], iou, ulps, margin, corner_atol)
    shown_c = shows(ref, cand.boxes[only_c], cand.scores[only_c], iou, ulps, margin, corner_atol)
    # a row the other side does not list may be judged by where it sits only where that side lists nothing
    # (no complete pool) and it is not the best-scored row of its image
    bare_r = (not cand.complete_pool) & ~_top(ref, only_r, ulps, margin)
    bare_c = (not ref.complete_pool) & ~_top(cand, only_c, ulps, margin)
    # (a) unmatched rows of both sides paired one to one by tied scores, both dropped at a cut
    ref_cut = _dropped_by_cut(cand, ref, only_r, shown_r, ulps, margin, bare_r)
    cand_cut = _dropped_by_cut(ref, cand, only_c, shown_c, ulps, margin, bare_c)
    pr, pc = pair_ties(ref, only_r, cand, only_c, ulps, match_iou, margin, ref_cut, cand_cut, shown_r, shown_c,
                       nms_iou)
    tied_r[ur[pr]] = True
    tied_c[uc[pc]] = True
    # (b) an unmatched row with a tied rival that only the other side kept, overlapping it past the NMS threshold
    # (and, where the other side lists every candidate it weighed, shows the row among them)
    rivals_c, rivals_r = cand_rows[finite_c], ref_rows[finite_r]
    known = nms_iou is not None  # an unlisted row's rival must overlap it past a threshold read from the graph
    gate_r, gate_c = shown_r | (bare_r & known), shown_c | (bare_c & known)
    tied_r[ur] |= rivals(ref, only_r, cand, rivals_c, ulps, margin, iou, min_iou=nms_iou) & gate_r
    tied_c[uc] |= rivals(cand, only_c, ref, rivals_r, ulps, margin, iou, min_iou=nms_iou) & gate_c
    # (c) a failing pair of tied scores where a side shows the other's box suppressed
    pos_r, pos_c = detail["pair_ref_pos"], detail["pair_cand_pos"]
    if len(pos_r):
        ri, cj = ref_rows[pos_r], cand_rows[pos_c]
        tie = np.abs(ref.scores[ri] - cand.scores[cj]) <= tie_tolerance(ref.scores[ri], ulps, margin)
        seen = (shows(ref, cand.boxes[cj], cand.scores[cj], iou, ulps, margin, corner_atol)
                | shows(cand, ref.boxes[ri], ref.scores[ri], iou, ulps, margin, corner_atol))
        both = tie & seen
        tied_r[pos_r] |= both
        tied_c[pos_c] |= both
    # (d) an unmatched row at the NMS threshold from a detection both sides kept
    if nms_iou is not None:
        clean_r, clean_c = detail["clean_ref"], detail["clean_cand"]
        tied_r[ur] |= threshold_ties(ref, only_r, cand, (clean_r, clean_c), nms_iou, corner_error, ulps, margin) & gate_r
        tied_c[uc] |= threshold_ties(cand, only_c, ref, (clean_c, clean_r), nms_iou, corner_error, ulps, margin) & gate_c
    # (b) downstream of a tie: an unmatched row overlapping a higher excused row only the other side kept,
    # until nothing changes (each round can explain the next link of an NMS chain)
    while True:
        more_r = gate_r & ~tied_r[ur] & rivals(ref, only_r, cand, cand_rows[tied_c & finite_c], ulps, margin, iou, True,
                                               nms_iou)
        more_c = gate_c & ~tied_c[uc] & rivals(cand, only_c, ref, ref_rows[tied_r & finite_r], ulps, margin, iou, True,
                                               nms_iou)
        if not (more_r.any() or more_c.any()):
            break
        tied_r[ur] |= more_r
        tied_c[uc] |= more_c
    tied_r &= finite_r
    tied_c &= finite_c
    bare_tied_r, bare_tied_c = np.zeros(len(ref_rows), bool), np.zeros(len(cand_rows), bool)
    bare_tied_r[ur] = tied_r[ur] & ~shown_r
    bare_tied_c[uc] = tied_c[uc] & ~shown_c
    return Excuses(tied_r, tied_c, bare_tied_r, bare_tied_c)
