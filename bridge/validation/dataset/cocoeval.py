"""pycocotools' per-image evaluation (``COCOeval.evaluate``) of bounding boxes, vectorised over a chunk of images.

``COCOeval.evaluate`` builds one dict per annotation, computes an IoU matrix per image and category
(``computeIoU``) and matches detections to ground truth in three nested Python loops per image and category
(``evaluateImg``: IoU thresholds x detections x ground truth). On a dataset run that is most of the metric's
time (about 0.2 ms per image and category, three evaluations per candidate). ``evaluate_chunk`` computes the
same per-detection results for a whole chunk with a few numpy operations per matching *step*, where a step
is one detection per (image, category) group that overlaps some ground truth by IoU >= 0.5 (the lowest
threshold): detections that overlap nothing that much are never matched at any threshold and take no step.
``evaluate_with_pycocotools`` is the plain path (pycocotools itself) with the same output; the differential
test (tests/bridge/validation/dataset/test_cocoeval.py) holds the two equal to the last bit, and
``evaluate_chunk`` hands a chunk to the plain path whenever it holds a value whose IEEE corner cases the
vectorised path does not reproduce (a non-finite box or score, an IoU that is NaN).

What is reproduced, for COCO's parameters as ``CocoAP`` sets them (bbox, one area range ``all`` =
[0, 1e5^2], ``maxDets`` = ``MAX_DETS``, ``useCats``):
- detections of each (image, category) sorted by score, highest first, stably (``np.argsort(-score,
  kind='mergesort')``) and cut after ``MAX_DETS``; ground truth sorted stably with ignored boxes (crowd, or
  area outside the range) last;
- IoU as pycocotools' C ``bbIou`` (maskApi.c) computes it on the xywh boxes, operation for operation:
  ``w = fmin(x_d + w_d, x_g + w_g) - fmax(x_d, x_g)`` (0 when <= 0; h likewise), ``i = w * h``,
  ``u = area_d`` for a crowd box else ``area_d + area_g - i``, ``iou = i / u``;
- ``evaluateImg``'s greedy matching at each threshold ``min(t, 1 - 1e-10)``: detections in score order each
  take, among the ground truth not yet matched at that threshold (crowd boxes always available) with IoU >=
  the threshold, a box that is not ignored if there is one, the largest IoU, and of equal IoUs the last in
  ground-truth order; a detection matched to an ignored box is ignored, as is an unmatched detection whose
  area is outside the range.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

MAX_DETS = 100  # COCO's maxDets for the headline AP
IOU_THRESHOLDS = np.linspace(0.5, 0.95, 10)  # as pycocotools' Params (np.linspace, not arange)
AREA_RANGE = (0.0, 1e5 ** 2)  # pycocotools' "all"
REC_THRESHOLDS = np.linspace(0.0, 1.00, int(np.round((1.00 - 0.0) / 0.01)) + 1, endpoint=True)  # as its Params
# evaluateImg's ``iou = min([t, 1 - 1e-10])``: the threshold a match must reach at each IoU threshold
_MATCH_AT = np.minimum(IOU_THRESHOLDS, 1 - 1e-10)


class Boxes(Protocol):
    """One image's boxes: corners [K, 4] (pixels), classes [K], scores [K] or None, crowd [K] or None."""

    @property
    def boxes(self) -> np.ndarray: ...

    @property
    def classes(self) -> np.ndarray: ...

    @property
    def scores(self) -> np.ndarray | None: ...

    @property
    def crowd(self) -> np.ndarray | None: ...


@dataclass
class CategoryEval:
    """One category's detections over a chunk of images, in image order, each image's in pycocotools' order
    (score, highest first, at most MAX_DETS): their scores, matched and ignored flags per IoU threshold
    ([T, D]), and the count of its ground-truth boxes that are not ignored."""

    scores: np.ndarray
    matched: np.ndarray
    ignored: np.ndarray
    positives: int


@dataclass
class ChunkEval:
    """``categories``: category id -> its evaluation (every category of the chunk's truth or detections);
    ``pairs``: per image the (truth row, detection row) pairs matched at IoU 0.5, rows [P, 2] ordered by
    category, then detection rank."""

    categories: dict[int, CategoryEval] = field(default_factory=dict)
    pairs: list[np.ndarray] = field(default_factory=list)
    plain: bool = False  # computed by pycocotools itself (evaluate_chunk's fallback)


@dataclass
class _Flat:
    """Every box of a chunk as columns: image, row in its image, class, xywh (as ``_xywh``), area, score, crowd."""

    image: np.ndarray
    row: np.ndarray
    cls: np.ndarray
    xywh: np.ndarray
    area: np.ndarray
    score: np.ndarray
    crowd: np.ndarray


def _xywh(boxes: np.ndarray) -> np.ndarray:
    """Corners -> COCO's [x, y, w, h] (w = x2 - x1: the values pycocotools is given)."""
    b = np.asarray(boxes, np.float64).reshape(-1, 4)
    return np.concatenate([b[:, :2], b[:, 2:] - b[:, :2]], axis=1)


def _flat(items: Sequence[Boxes], scored: bool) -> _Flat:
    classes = [np.asarray(it.classes).reshape(-1) for it in items]
    counts = np.fromiter((len(c) for c in classes), np.int64, len(classes))
    total = int(counts.sum())
    image = np.repeat(np.arange(len(items)), counts)
    row = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
    if not total:
        return _Flat(image, row, np.zeros(0, np.int64), np.zeros((0, 4)), np.zeros(0), np.zeros(0),
                     np.zeros(0, np.int64))
    xywh = _xywh(np.concatenate([np.asarray(it.boxes, np.float64).reshape(-1, 4) for it in items]))
    cls = np.concatenate(classes).astype(np.int64)
    score = np.zeros(total)
    if scored:
        score = np.concatenate([np.asarray(it.scores, np.float64).reshape(-1) if it.scores is not None
                                else np.ones(n) for it, n in zip(items, counts.tolist(), strict=True)])
    crowd = np.zeros(total, np.int64)
    if any(it.crowd is not None for it in items):
        crowd = np.concatenate([np.asarray(it.crowd).reshape(-1).astype(np.int64) if it.crowd is not None
                                else np.zeros(n, np.int64) for it, n in zip(items, counts.tolist(), strict=True)])
    return _Flat(image, row, cls, xywh, xywh[:, 2] * xywh[:, 3], score, crowd)


def _stable_order(*keys: np.ndarray) -> np.ndarray:
    """The permutation sorting by ``keys`` (first key primary), ties kept in input order."""
    order = np.arange(len(keys[0]))
    for key in reversed(keys):
        order = order[np.argsort(key[order], kind="stable")]
    return order


def coco_iou(d: np.ndarray, g: np.ndarray, crowd: np.ndarray) -> np.ndarray:
    """pycocotools' ``bbIou`` (maskApi.c) for pairs of xywh boxes d[i], g[i]: the same float64 operations in
    the same order (fmin / fmax, the area products, ``da + ga - i``)."""
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        da, ga = d[:, 2] * d[:, 3], g[:, 2] * g[:, 3]
        w = np.fmin(d[:, 2] + d[:, 0], g[:, 2] + g[:, 0]) - np.fmax(d[:, 0], g[:, 0])
        h = np.fmin(d[:, 3] + d[:, 1], g[:, 3] + g[:, 1]) - np.fmax(d[:, 1], g[:, 1])
        i = w * h
        u = np.where(crowd != 0, da, da + ga - i)
        iou = i / u
    return np.where((w <= 0) | (h <= 0), 0.0, iou)


def _group_starts(keys: np.ndarray) -> np.ndarray:
    """For sorted ``keys``: each element's offset from the first element with its key."""
    n = len(keys)
    if not n:
        return np.zeros(0, np.int64)
    first = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    return np.arange(n) - np.repeat(first, np.diff(np.r_[first, n]))


def evaluate_chunk(truth: Sequence[Boxes], detections: Sequence[Boxes]) -> ChunkEval:
    """pycocotools' ``evaluate`` of ``detections`` against ``truth`` (the same images, in order), vectorised
    (module docstring); the plain path for a chunk with a non-finite value."""
    gt, dt = _flat(truth, False), _flat(detections, True)
    if not (np.isfinite(gt.xywh).all() and np.isfinite(dt.xywh).all() and np.isfinite(dt.score).all()
            and np.isfinite(gt.area).all() and np.isfinite(dt.area).all()):
        return evaluate_with_pycocotools(truth, detections)
    images, t_count = len(truth), len(IOU_THRESHOLDS)
    cats = np.unique(np.concatenate([gt.cls, dt.cls]))
    out = ChunkEval(pairs=[np.zeros((0, 2), np.int64) for _ in range(images)])
    if not len(cats):
        return out
    # group = (category, image), numbered category-major: pycocotools' evalImgs order
    g_group = np.searchsorted(cats, gt.cls) * images + gt.image
    d_group = np.searchsorted(cats, dt.cls) * images + dt.image
    g_ignored = (gt.crowd != 0) | (gt.area < AREA_RANGE[0]) | (gt.area > AREA_RANGE[1])
    g_order = _stable_order(g_group, g_ignored.astype(np.int8))  # ignored last within a group, else input order
    g_group, g_ign, g_crowd = g_group[g_order], g_ignored[g_order], gt.crowd[g_order]
    d_order = _stable_order(d_group, -dt.score)  # score, highest first; ties in input order (mergesort)
    d_order = d_order[_group_starts(d_group[d_order]) < MAX_DETS]
    d_group = d_group[d_order]
    n_d = len(d_order)

    # every (detection, truth) pair of a group, then the pairs that reach the lowest threshold
    first = np.searchsorted(g_group, d_group, "left")
    per_det = np.searchsorted(g_group, d_group, "right") - first
    pair_d = np.repeat(np.arange(n_d), per_det)
    pair_g = np.repeat(first, per_det) + (np.arange(len(pair_d)) - np.repeat(np.cumsum(per_det) - per_det, per_det))
    iou = coco_iou(dt.xywh[d_order][pair_d], gt.xywh[g_order][pair_g], g_crowd[pair_g])
    if np.isnan(iou).any():  # NaN compares false in evaluateImg's loop in ways only the loop reproduces
        return evaluate_with_pycocotools(truth, detections)
    near = iou >= _MATCH_AT[0]
    pair_d, pair_g, iou = pair_d[near], pair_g[near], iou[near]

    match = np.full((t_count, n_d), -1, np.int64)  # matched truth (sorted position) per threshold, -1: none
    if len(pair_d):
        _greedy(pair_d, pair_g, iou, g_ign, g_crowd != 0, d_group, match, len(g_group))

    matched = match >= 0
    d_area = dt.area[d_order]
    outside = (d_area < AREA_RANGE[0]) | (d_area > AREA_RANGE[1])
    ignored = np.where(matched, np.r_[g_ign, False][match], outside[None, :])  # match -1: the padding entry
    d_cat = d_group // images
    g_cat = g_group // images
    positives = np.bincount(g_cat[~g_ign], minlength=len(cats))
    bounds = np.searchsorted(d_cat, np.arange(len(cats) + 1))
    scores = dt.score[d_order]
    for k, cat in enumerate(cats.tolist()):
        lo, hi = bounds[k], bounds[k + 1]
        out.categories[int(cat)] = CategoryEval(scores[lo:hi], matched[:, lo:hi], ignored[:, lo:hi], int(positives[k]))
    # the pairs at IoU 0.5, per image in (category, rank) order
    at_half = np.flatnonzero(matched[0])
    if len(at_half):
        truth_rows = gt.row[g_order][match[0, at_half]]
        det_rows = dt.row[d_order][at_half]
        det_images = dt.image[d_order][at_half]
        by_image = np.argsort(det_images, kind="stable")
        rows = np.stack([truth_rows[by_image], det_rows[by_image]], axis=1)
        ends = np.searchsorted(det_images[by_image], np.arange(images + 1))
        for image in np.flatnonzero(np.diff(ends)).tolist():
            out.pairs[image] = rows[ends[image]:ends[image + 1]]
    return out


def _greedy(pair_d: np.ndarray, pair_g: np.ndarray, iou: np.ndarray, g_ign: np.ndarray, g_crowd: np.ndarray,
            d_group: np.ndarray, match: np.ndarray, n_truth: int) -> None:
    """evaluateImg's matching, filling ``match`` [T, D]. The detections that overlap some truth by IoU >= 0.5
    are matched one *step* at a time: step s holds the s-th such detection (in score order) of every group
    (groups share no truth, so a step's detections cannot compete); each takes, per threshold, the best of
    its candidate truth boxes still available."""
    t_count = len(_MATCH_AT)
    # each detection's candidates, best last: not ignored over ignored, then IoU, then the later truth box
    order = np.lexsort((pair_g, iou, ~g_ign[pair_g], pair_d))
    pair_d, pair_g, iou = pair_d[order], pair_g[order], iou[order]
    dets, start, count = np.unique(pair_d, return_index=True, return_counts=True)
    slots = int(count.max())
    slot = np.arange(len(pair_d)) - np.repeat(start, count)
    row = np.repeat(np.arange(len(dets)), count)
    cand_g = np.full((len(dets), slots), -1, np.int64)
    cand_iou = np.full((len(dets), slots), -np.inf)
    cand_g[row, slot], cand_iou[row, slot] = pair_g, iou
    reach = cand_iou[:, :, None] >= _MATCH_AT[None, None, :]  # [R, S, T]
    step = _group_starts(d_group[dets])  # dets are in (group, rank) order: the step is the rank among them
    taken = np.zeros((t_count, n_truth + 1), bool)  # column n_truth: the padding slot, never taken
    crowd = np.r_[g_crowd, False]
    thresholds = np.arange(t_count)
    for s in range(int(step.max()) + 1):
        now = np.flatnonzero(step == s)
        g = cand_g[now]  # [R, S]
        free = ~taken[thresholds[None, None, :], g[:, :, None]] | crowd[g][:, :, None]  # [R, S, T]
        ok = reach[now] & free
        last = slots - 1 - np.argmax(ok[:, ::-1, :], axis=1)  # [R, T]: the last (best) candidate that is ok
        found = ok.any(axis=1)
        chosen = np.where(found, np.take_along_axis(g, last, axis=1), -1)
        match[:, dets[now]] = chosen.T
        r, t = np.nonzero(found)
        taken[t, chosen[r, t]] = True


def accumulate(scores: np.ndarray, matched: np.ndarray, ignored: np.ndarray, positives: int) -> np.ndarray | None:
    """pycocotools' ``accumulate`` for one category whose per-image results are merged into one entry (its
    detections of every image, in image order): the interpolated precision [T, R] at each IoU threshold and
    recall threshold, or None without a ground-truth box that counts (pycocotools leaves -1 there).

    The same numpy operations as pycocotools (a stable sort by score, cumulative true / false positives,
    ``tp / (fp + tp + eps)``, ``searchsorted`` of the recall thresholds, precision 0 past the last recall);
    its per-detection Python loop making precision non-increasing from the end is a reversed cumulative
    maximum here (the same values: a maximum is exact)."""
    if positives == 0:
        return None
    order = np.argsort(-scores, kind="mergesort")
    dtm, counted = matched[:, order], ~ignored[:, order]
    # cumulative counts of 0/1 summed in float64 are exact integers: pycocotools' int cumsum cast to float
    tp_sum = np.cumsum(dtm & counted, axis=1, dtype=np.float64)
    fp_sum = np.cumsum(~dtm & counted, axis=1, dtype=np.float64)
    rc = tp_sum / positives
    pr = tp_sum / (fp_sum + tp_sum + np.spacing(1))
    envelope = np.maximum.accumulate(pr[:, ::-1], axis=1)[:, ::-1]
    precision = np.zeros((len(tp_sum), len(REC_THRESHOLDS)))
    for t in range(len(tp_sum)):
        inds = np.searchsorted(rc[t], REC_THRESHOLDS, side="left")
        reached = inds < rc.shape[1]
        precision[t, reached] = envelope[t, inds[reached]]
    return precision


# -------------------------------------------------------------------------------------- the plain path


def pycocotools_classes() -> Any:
    try:
        from pycocotools.coco import COCO
        from pycocotools.cocoeval import COCOeval
    except ImportError:
        from bridge.errors import AdapterUnavailableError

        raise AdapterUnavailableError("pycocotools", "mAP on a dataset (--dataset)",
                                      "pip install 'bridge[dataset]'") from None
    return COCO, COCOeval


def _coco(images: Sequence[int], categories: Sequence[int], annotations: list[dict[str, Any]]) -> Any:
    COCO, _ = pycocotools_classes()
    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints its progress
        coco = COCO()
        coco.dataset = {"images": [{"id": i} for i in images], "categories": [{"id": c} for c in categories],
                        "annotations": annotations}
        coco.createIndex()
    return coco


def _annotations(ids: Sequence[int], items: Sequence[Boxes], with_scores: bool
                 ) -> tuple[list[int], list[dict[str, Any]]]:
    """COCO annotations (ids 1, 2, ... in image then row order) and each one's row in its image."""
    rows: list[int] = []
    out: list[dict[str, Any]] = []
    for image_id, item in zip(ids, items, strict=True):
        xywh = _xywh(item.boxes)
        area = (xywh[:, 2] * xywh[:, 3]).tolist()
        crowd = [0] * len(xywh) if item.crowd is None else np.asarray(item.crowd, np.int64).tolist()
        scores = np.asarray(item.scores, np.float64).tolist() if with_scores and item.scores is not None else None
        for k, (box, cls) in enumerate(zip(xywh.tolist(), np.asarray(item.classes).tolist(), strict=True)):
            ann = {"id": len(out) + 1, "image_id": image_id, "category_id": int(cls), "bbox": box, "area": area[k],
                   "iscrowd": crowd[k]}
            if scores is not None:
                ann["score"] = scores[k]
            out.append(ann)
            rows.append(k)
    return rows, out


def evaluate_with_pycocotools(truth: Sequence[Boxes], detections: Sequence[Boxes]) -> ChunkEval:
    """``evaluate_chunk``'s result from pycocotools' own ``COCOeval.evaluate`` (the plain path)."""
    _, COCOeval = pycocotools_classes()
    ids = list(range(1, len(truth) + 1))
    cats = sorted({int(c) for t in (*truth, *detections) for c in np.asarray(t.classes).reshape(-1).tolist()})
    out = ChunkEval(pairs=[np.zeros((0, 2), np.int64) for _ in truth], plain=True)
    if not cats:
        return out
    gt_rows, gt_anns = _annotations(ids, truth, False)
    dt_rows, dt_anns = _annotations(ids, detections, True)
    ev = COCOeval(_coco(ids, cats, gt_anns), _coco(ids, cats, dt_anns), "bbox")
    ev.params.imgIds, ev.params.catIds = ids, cats
    ev.params.areaRng, ev.params.areaRngLbl, ev.params.maxDets = [list(AREA_RANGE)], ["all"], [MAX_DETS]
    with contextlib.redirect_stdout(io.StringIO()):
        ev.evaluate()
    parts: dict[int, list[tuple[np.ndarray, np.ndarray, np.ndarray, int]]] = {}
    found: dict[int, list[tuple[int, int]]] = {}
    for e in ev.evalImgs:  # ordered by category, then image
        if e is None:
            continue
        matches = np.asarray(e["dtMatches"]).reshape(len(IOU_THRESHOLDS), -1)
        parts.setdefault(int(e["category_id"]), []).append((
            np.asarray(e["dtScores"], np.float64), matches > 0,
            np.asarray(e["dtIgnore"]).reshape(len(IOU_THRESHOLDS), -1).astype(bool),
            int(np.count_nonzero(np.asarray(e["gtIgnore"]) == 0))))
        for dt_id, gt_id in zip(e["dtIds"], matches[0].tolist(), strict=True):
            if gt_id > 0:
                found.setdefault(int(e["image_id"]) - 1, []).append((gt_rows[int(gt_id) - 1], dt_rows[int(dt_id) - 1]))
    for cat, items in parts.items():
        out.categories[cat] = CategoryEval(np.concatenate([p[0] for p in items]),
                                           np.concatenate([p[1] for p in items], axis=1),
                                           np.concatenate([p[2] for p in items], axis=1), sum(p[3] for p in items))
    for image, rows in found.items():
        out.pairs[image] = np.asarray(rows, np.int64).reshape(-1, 2)
    return out


__all__ = ["AREA_RANGE", "IOU_THRESHOLDS", "MAX_DETS", "REC_THRESHOLDS", "CategoryEval", "ChunkEval", "accumulate",
           "coco_iou", "evaluate_chunk",
           "evaluate_with_pycocotools", "pycocotools_classes"]
