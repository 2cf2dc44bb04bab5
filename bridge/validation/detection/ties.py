"""Tie rules: which problem rows of one image an NMS or top-K cut visiting tied candidates in another order explains.

Two correct detectors can keep different ones of two candidates whose scores tie. ``matching`` finds the
*problem rows* (an unmatched detection, or either row of a matched pair that is not clean); this module
decides which of them are **tie-ambiguous** (reported with their rows, not counted as mismatches). A row
whose score merely ties with others is never excused: saturated or random-weight models score most boxes
exactly alike, and a candidate that moved or dropped detections would pass. Each excuse needs evidence that
the two runtimes *chose* between tied candidates, and a moved box (same score, other coordinates) leaves
none: the other side never computed the moved box, so it cannot show it among the candidates it weighed,
and it sits wherever its score puts it, not necessarily at a cut.

Scores tie within ``tie_ulps`` float32 ulps or within the score error measured on the clean matches
(``margin``: scores closer than the runtimes' own disagreement can be ordered either way).

How a side dropped a candidate the other side kept - the only two ways a tie changes what is kept:

- an NMS choice: an overlapping tied candidate was kept first and suppressed it (overlap with positive
  area: every NMS suppresses on IoU > t >= 0);
- a cut (top-K after NMS, max detections, per-class max outputs, or a top-k before NMS such as MXNet's
  ``nms_topk`` / box_nms ``topk``): a tied candidate took the last place. Every cut keeps the highest
  scores, so the dropped candidate's score ties the lowest score the side kept - it sat at the bottom of
  the kept list. A per-class cut (q rows per class) puts it at the bottom of its class, and that class is
  full: it holds q rows, as many as the fullest class of the side.

Where a side lists the candidates it weighed and did not keep (``Detections.suppressed_boxes``: MXNet
MultiBoxDetection's class -1 rows keep score and box, a reference cut to the candidate's K rows keeps the
rows it cut, ONNX NonMaxSuppression's unselected score entries), *shows* x means: a row there with
x's box (IoU >= ``iou``) and a tied score. A side whose list is complete (``complete_pool``: an MXNet
[B, N, 6] image showing any class -1 row with a score, as MultiBoxDetection keeps every candidate it
weighed; ONNX NonMaxSuppression's score matrix) must show every candidate it dropped; a side without one
(box_nms / GluonCV -1 rows, TF combined NMS, torchvision) can only be judged by where the rows sit.

The evidence, per problem row (x on side S, the other side O):

(a) swap at a cut: x is unmatched and paired one to one with an unmatched row y of O with a tied score
    whose box is a different candidate (IoU < ``match_iou``; the same box under another label is a real
    difference), and *both* drops are explained: O dropped x (O shows x, or O's list is not complete and
    x's score ties O's lowest kept score) and S dropped y (the same, mirrored). The lowest score is taken
    over the image, or, when x and y share a class, over that class if it is full on that side. Two tied
    candidates at a cut, each runtime kept the other - and nothing else: a moved box keeps a pair of tied
    rows, but O never shows the moved-from box and S never the moved-to one, and unless its score is the
    lowest on both sides (of the image, or of a full class) nothing puts it at a cut;
(b) NMS choice (cascade): x is unmatched and a problem row z of O (kept there, not here) with a tied
    score overlaps it with positive area and is another box (IoU < ``iou``): kept first, z could have
    suppressed x on O (one swap can change what a chain of overlapping tied boxes keeps). Below a tie the
    chain goes on through untied boxes: z may also score higher than x if z is itself excused (a tie
    explains why O kept it; then it suppressed x) - applied until nothing changes. When O's list is
    complete, O must also show x (it weighed x and suppressed it). A detection kept on *both* sides is no
    such rival: it did not suppress x on S, so it cannot have on O; nor is a zero-area box, which overlaps
    nothing and is never suppressed; nor an unexcused higher row (an extra box nothing explains);
(c) a matched pair that is not clean (two overlapping boxes, IoU >= ``match_iou``): the scores tie and a
    side shows the other side's box among its suppressed candidates with a tied score; alone such a pair
    looks exactly like a box that moved.

Residual: without a complete list on the other side, a box moved to where it still overlaps its old
place (IoU < ``match_iou``, positive overlap) with an unchanged score reads as an NMS choice (b), and the
lowest-scored box of the image (or of a full class) moved anywhere as a swap at a cut (a); nothing in
such outputs tells them apart. Conversely, a per-class top-k *before* NMS (k candidates per class, then
NMS thins the class) that cuts between tied candidates leaves its class short of full; only a complete list
or the image's bottom excuses such a swap.

Rows with a NaN/inf box or score are never excused; ``matching`` excuses nothing unless some detection
matched cleanly.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bridge.validation.detection.boxes import DEGENERATE_EPS, Detections, finite_rows, overlaps, pair_iou

DEFAULT_TIE_ULPS = 4
PAIR_WINDOW = 64  # tied rows of the other side examined per row when pairing: a bound for masses of equal scores


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


def _dropped_by_cut(other: Detections, d: Detections, rows: np.ndarray, shown: np.ndarray, ulps: int, margin: float
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Per row of ``d`` (kept by ``d``, not by ``other``): ``other`` may have dropped it at a cut, over the
    image and over its class - it shows the row, or it lists no complete pool and the row sits at its cut."""
    image, per_class = _at_cut(other, d.classes[rows], d.scores[rows], ulps, margin)
    judged = not other.complete_pool
    return shown | (judged & image), shown | (judged & per_class)


def pair_ties(ref: Detections, ref_rows: np.ndarray, cand: Detections, cand_rows: np.ndarray, ulps: int,
              match_iou: float, margin: float = 0.0, ref_cut: tuple[np.ndarray, np.ndarray] | None = None,
              cand_cut: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[list[int], list[int]]:
    """One-to-one pairs (positions in ref_rows / cand_rows) of rows whose scores tie and whose boxes are
    different candidates (IoU < match_iou: the same box under another label is no tie swap).

    ``ref_cut`` / ``cand_cut``: per row, (image-wide, per-class) evidence that the *other* side dropped it at
    a cut (rule a); a pair needs it for both rows, over the image or, for rows of one class, over the class.
    None: no such condition.
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
        free = np.flatnonzero(ious < match_iou)
        if len(free):
            j = int(window[free[0]])
            used[j] = True
            out_r.append(i)
            out_c.append(j)
    return out_r, out_c


def rivals(d: Detections, rows: np.ndarray, other: Detections, rival_rows: np.ndarray, ulps: int,
           margin: float, same_box: float, higher: bool = False) -> np.ndarray:
    """Rule (b): per row of ``d``, a row of ``other`` among ``rival_rows`` with a tied score (``higher``: a tied
    or higher score, one NMS visits first) whose box overlaps it with positive area and is another box (IoU <
    ``same_box``: the same box under another label is a changed label, not a rival)."""
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
            other_box = pair_iou(np.repeat(d.boxes[k][None], len(boxes), axis=0), boxes) < same_box
            out[i] = bool((overlaps(d.boxes[k], boxes) & other_box).any())
    return out


def excused(ref: Detections, cand: Detections, detail: dict[str, Any], ulps: int, match_iou: float,
            margin: float = 0.0, iou: float = 0.999, corner_atol: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Which problem rows of one image are tie-ambiguous (module docstring, rules a, b and c).

    ``detail`` is ``matching``'s account of the image: ``ref_rows`` / ``cand_rows`` (the problem rows),
    ``ref_unmatched`` / ``cand_unmatched`` (which of them are unmatched) and ``pair_ref_pos`` /
    ``pair_cand_pos`` (the positions of each failing pair's two rows); ``corner_atol`` the corner difference
    that makes two boxes the same (``matching``: ``box_atol`` of the image's coordinate scale). Rows with a
    NaN/inf box or score are never excused.
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
    # (a) unmatched rows of both sides paired one to one by tied scores, both dropped at a cut
    ref_cut = _dropped_by_cut(cand, ref, only_r, shown_r, ulps, margin)
    cand_cut = _dropped_by_cut(ref, cand, only_c, shown_c, ulps, margin)
    pr, pc = pair_ties(ref, only_r, cand, only_c, ulps, match_iou, margin, ref_cut, cand_cut)
    tied_r[ur[pr]] = True
    tied_c[uc[pc]] = True
    # (b) an unmatched row with an overlapping tied rival that only the other side kept (and, where the other
    # side lists every candidate it weighed, shows the row among them)
    rivals_c, rivals_r = cand_rows[finite_c], ref_rows[finite_r]
    gate_r, gate_c = shown_r | (not cand.complete_pool), shown_c | (not ref.complete_pool)
    tied_r[ur] |= rivals(ref, only_r, cand, rivals_c, ulps, margin, iou) & gate_r
    tied_c[uc] |= rivals(cand, only_c, ref, rivals_r, ulps, margin, iou) & gate_c
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
    # (b) downstream of a tie: an unmatched row overlapping a higher excused row only the other side kept,
    # until nothing changes (each round can explain the next link of an NMS chain)
    while True:
        more_r = gate_r & ~tied_r[ur] & rivals(ref, only_r, cand, cand_rows[tied_c & finite_c], ulps, margin, iou, True)
        more_c = gate_c & ~tied_c[uc] & rivals(cand, only_c, ref, ref_rows[tied_r & finite_r], ulps, margin, iou, True)
        if not (more_r.any() or more_c.any()):
            break
        tied_r[ur] |= more_r
        tied_c[uc] |= more_c
    return tied_r & finite_r, tied_c & finite_c
