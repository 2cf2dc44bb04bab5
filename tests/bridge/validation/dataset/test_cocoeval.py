"""The vectorised per-image COCO evaluation (``evaluate_chunk``) against pycocotools itself, to the last bit: every
detection's score, matched and ignored flags at each IoU threshold, each category's count of ground truth that
counts, and the pairs matched at IoU 0.5 - over scenes built to reach every branch of pycocotools'
``evaluateImg``: crowd regions, many classes, empty images, images with only false positives, more detections
than ``maxDets``, equal scores and equal IoUs, boxes outside the area range, degenerate boxes, detections
competing for the same ground truth. Then the AP of a whole run against pycocotools over every image at once,
and the vectorised path's speed against the plain one's on the same chunk."""

from __future__ import annotations

import contextlib
import io
import time
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridge.validation.dataset.cocoeval import (
    MAX_DETS,
    ChunkEval,
    coco_iou,
    evaluate_chunk,
    evaluate_with_pycocotools,
)
from bridge.validation.dataset.metrics import CocoAP, ImageBoxes

pytest.importorskip("pycocotools")

Scene = tuple[list[ImageBoxes], list[ImageBoxes]]


def _boxes(rng: np.random.Generator, k: int, low: float = 4, high: float = 80) -> np.ndarray:
    xy = rng.uniform(0, 200, (k, 2))
    return np.concatenate([xy, xy + rng.uniform(low, high, (k, 2))], axis=1)


def _noisy(rng: np.random.Generator, truth: ImageBoxes, keep: float, sigma: float, classes: int,
           fp: int, wrong_class: float = 0.1, score_decimals: int | None = 2) -> ImageBoxes:
    """Detections of ``truth``: a share found (moved by ``sigma`` px), some with the wrong class, ``fp`` others."""
    k = len(truth)
    found = rng.uniform(size=k) < keep
    boxes = truth.boxes[found] + rng.normal(0, sigma, (int(found.sum()), 4))
    cls = np.where(rng.uniform(size=int(found.sum())) < wrong_class, rng.integers(0, classes, int(found.sum())),
                   np.asarray(truth.classes)[found])
    boxes = np.concatenate([boxes, _boxes(rng, fp)])
    cls = np.concatenate([cls, rng.integers(0, classes, fp)])
    scores = rng.uniform(0, 1, len(boxes))
    if score_decimals is not None:
        scores = scores.round(score_decimals)  # equal scores: the sort's tie order matters
    return ImageBoxes(boxes, cls, scores)


def scene_mixed(rng: np.random.Generator) -> Scene:
    """Noisy detections of a few boxes per image, some crowd regions."""
    truth, dets = [], []
    for _ in range(40):
        k = int(rng.integers(0, 6))
        t = ImageBoxes(_boxes(rng, k), rng.integers(0, 4, k), None, rng.uniform(size=k) < 0.15)
        truth.append(t)
        dets.append(_noisy(rng, t, 0.85, 3.0, 4, int(rng.integers(0, 4))))
    return truth, dets


def scene_crowd(rng: np.random.Generator) -> Scene:
    """Large crowd regions over many small boxes and detections: a crowd box matches any number of them."""
    truth, dets = [], []
    for _ in range(25):
        xy = rng.uniform(0, 100, 2)
        crowd_box = np.r_[xy, xy + rng.uniform(60, 120, 2)]
        inner = crowd_box[:2] + rng.uniform(0, 40, (6, 2))
        small = np.concatenate([inner, inner + rng.uniform(5, 20, (6, 2))], axis=1)
        boxes = np.concatenate([small[:3], crowd_box[None], small[3:4]])
        cls = np.zeros(len(boxes), np.int64)
        crowd = np.array([0, 0, 0, 1, 0])
        truth.append(ImageBoxes(boxes, cls, None, crowd))
        det_boxes = np.concatenate([small + rng.normal(0, 1.0, small.shape), crowd_box[None] + rng.normal(0, 3, (1, 4))])
        dets.append(ImageBoxes(det_boxes, np.zeros(len(det_boxes), np.int64), rng.uniform(0, 1, len(det_boxes)).round(1)))
    return truth, dets


def scene_many_classes(rng: np.random.Generator) -> Scene:
    truth, dets = [], []
    for _ in range(30):
        k = int(rng.integers(0, 12))
        t = ImageBoxes(_boxes(rng, k), rng.integers(0, 60, k))
        truth.append(t)
        dets.append(_noisy(rng, t, 0.8, 4.0, 60, int(rng.integers(0, 10)), wrong_class=0.3))
    return truth, dets


def scene_empty_and_false_positives(rng: np.random.Generator) -> Scene:
    """Images with nothing, truth only, detections only (false positives), and classes only one side has."""
    truth, dets = [], []
    empty = ImageBoxes(np.zeros((0, 4)), np.zeros(0, np.int64), np.zeros(0))
    for k in range(32):
        kind = k % 4
        t = ImageBoxes(_boxes(rng, 3), np.array([0, 1, 2])) if kind in (1, 3) else \
            ImageBoxes(np.zeros((0, 4)), np.zeros(0, np.int64))
        truth.append(t)
        if kind == 0:
            dets.append(empty)
        elif kind == 1:
            dets.append(_noisy(rng, t, 0.0, 0.0, 3, 0))  # nothing found
        elif kind == 2:
            fp = _boxes(rng, 5)
            dets.append(ImageBoxes(fp, np.array([0, 1, 5, 5, 7]), rng.uniform(size=5)))  # only false positives
        else:
            dets.append(_noisy(rng, t, 1.0, 2.0, 3, 2))
    return truth, dets


def scene_max_dets(rng: np.random.Generator) -> Scene:
    """Up to 300 detections per image and class, scores rounded to 1 decimal: the cut at maxDets falls in ties."""
    truth, dets = [], []
    for _ in range(8):
        k = int(rng.integers(1, 8))
        t = ImageBoxes(_boxes(rng, k), rng.integers(0, 2, k))
        truth.append(t)
        n = int(rng.integers(MAX_DETS - 5, 3 * MAX_DETS))
        near = t.boxes[rng.integers(0, k, n)] + rng.normal(0, 6, (n, 4))
        dets.append(ImageBoxes(near, rng.integers(0, 2, n), rng.uniform(0, 1, n).round(1)))
    return truth, dets


def scene_ties(rng: np.random.Generator) -> Scene:
    """Duplicated truth boxes (equal IoUs: the later one wins), duplicated detections with equal scores."""
    truth, dets = [], []
    for _ in range(30):
        base = _boxes(rng, 2)
        boxes = np.concatenate([base, base, base[:1]])
        cls = np.array([0, 1, 0, 1, 0])
        crowd = (rng.uniform(size=5) < 0.2).astype(int)
        truth.append(ImageBoxes(boxes, cls, None, crowd))
        d = np.concatenate([base, base, base + rng.normal(0, 2, base.shape)])
        dets.append(ImageBoxes(d, np.array([0, 1, 0, 1, 0, 1]), np.array([0.9, 0.9, 0.9, 0.5, 0.9, 0.5])))
    return truth, dets


def scene_degenerate(rng: np.random.Generator) -> Scene:
    """Zero-size and inverted boxes (negative area: ignored), huge boxes (area over 1e10: outside the range),
    touching boxes (IoU exactly 0 by the w <= 0 rule)."""
    truth, dets = [], []
    for _ in range(20):
        b = _boxes(rng, 4)
        b[1, 2] = b[1, 0]  # zero width
        b[2, [0, 2]] = b[2, [2, 0]]  # inverted: negative width, negative area
        b[3] = [0, 0, 2e5, 1e5]  # area 2e10
        truth.append(ImageBoxes(b, np.zeros(4, np.int64)))
        d = np.concatenate([b + rng.normal(0, 0.5, b.shape), [[b[0, 2], b[0, 1], b[0, 2] + 10, b[0, 3]]],
                            [[0, 0, 3e5, 2e5]]])
        dets.append(ImageBoxes(d, np.zeros(len(d), np.int64), rng.uniform(size=len(d)).round(2)))
    return truth, dets


def scene_competition(rng: np.random.Generator) -> Scene:
    """Many detections around the same few boxes with IoUs across 0.5 .. 0.95: at each threshold the greedy
    order decides which one takes a box."""
    truth, dets = [], []
    for _ in range(30):
        t = ImageBoxes(_boxes(rng, 3, 20, 60), np.zeros(3, np.int64), None, np.array([0, 0, int(rng.uniform() < 0.3)]))
        truth.append(t)
        n = 25
        picks = t.boxes[rng.integers(0, 3, n)]
        size = picks[:, 2:] - picks[:, :2]
        moved = picks + np.concatenate([size, size], axis=1) * rng.uniform(-0.25, 0.25, (n, 4))
        dets.append(ImageBoxes(moved, np.zeros(n, np.int64), rng.uniform(size=n).round(1)))
    return truth, dets


SCENES: dict[str, Callable[[np.random.Generator], Scene]] = {
    "mixed": scene_mixed, "crowd": scene_crowd, "many_classes": scene_many_classes,
    "empty_and_false_positives": scene_empty_and_false_positives, "max_dets": scene_max_dets, "ties": scene_ties,
    "degenerate": scene_degenerate, "competition": scene_competition,
}


def test_iou_is_pycocotools_bbiou_to_the_last_bit() -> None:
    """Every IoU, not only the matches it decides: random, grid-snapped (touching, equal), inverted and crowd boxes."""
    from pycocotools import mask

    rng = np.random.default_rng(3)
    d = np.concatenate([rng.uniform(0, 50, (300, 2)), rng.uniform(-5, 40, (300, 2))], axis=1)  # xywh, some w < 0
    g = np.concatenate([rng.uniform(0, 50, (40, 2)), rng.uniform(-5, 40, (40, 2))], axis=1)
    d[:100], g[:15] = np.round(d[:100] / 5) * 5, np.round(g[:15] / 5) * 5
    crowd = (rng.uniform(size=40) < 0.3).astype(np.uint8)
    want = mask.iou(d.tolist(), g.tolist(), crowd.tolist())  # [D, G]
    dd, gg = np.repeat(np.arange(300), 40), np.tile(np.arange(40), 300)
    got = coco_iou(d[dd], g[gg], crowd[gg]).reshape(300, 40)
    assert got.tobytes() == np.asarray(want, np.float64).tobytes()
    assert (want > 0).sum() > 500 and (want == 0).sum() > 500


def _same(fast: ChunkEval, plain: ChunkEval) -> None:
    assert not fast.plain and plain.plain
    assert sorted(fast.categories) == sorted(plain.categories)
    for cat, want in plain.categories.items():
        got = fast.categories[cat]
        assert got.positives == want.positives, cat
        assert got.scores.dtype == want.scores.dtype and np.array_equal(got.scores, want.scores), cat
        assert np.array_equal(got.matched, want.matched), cat
        assert np.array_equal(got.ignored, want.ignored), cat
    assert len(fast.pairs) == len(plain.pairs)
    for image, (a, b) in enumerate(zip(fast.pairs, plain.pairs, strict=True)):
        assert np.array_equal(a.reshape(-1, 2), b.reshape(-1, 2)), image


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("name", list(SCENES))
def test_vectorised_evaluation_is_pycocotools(name: str, seed: int) -> None:
    truth, dets = SCENES[name](np.random.default_rng(seed))
    fast, plain = evaluate_chunk(truth, dets), evaluate_with_pycocotools(truth, dets)
    _same(fast, plain)
    assert any(c.matched.any() for c in plain.categories.values())  # every scene matches something


def test_the_scenes_reach_the_branches_they_are_for() -> None:
    """The scenes are not vacuous: crowd boxes matched more than once, detections cut at maxDets, ignored
    detections (by crowd and by area), and thresholds at which the greedy order gives a box to another one."""
    crowd = evaluate_with_pycocotools(*scene_crowd(np.random.default_rng(0)))
    assert int(crowd.categories[0].ignored[0].sum()) > len(crowd.pairs)  # several detections per crowd region
    truth, dets = scene_max_dets(np.random.default_rng(0))
    cut = evaluate_with_pycocotools(truth, dets)
    assert sum(len(c.scores) for c in cut.categories.values()) < sum(len(d) for d in dets)
    degenerate = evaluate_with_pycocotools(*scene_degenerate(np.random.default_rng(0)))
    assert degenerate.categories[0].positives < 4 * 20 and degenerate.categories[0].ignored.any()
    competition = evaluate_with_pycocotools(*scene_competition(np.random.default_rng(0)))
    m = competition.categories[0].matched
    assert m[0].sum() > m[5].sum() > m[9].sum()  # fewer matches at stricter thresholds


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31), images=st.integers(0, 6), classes=st.integers(1, 4),
       crowd=st.floats(0, 0.5), decimals=st.sampled_from([0, 1, 2, None]), grid=st.sampled_from([None, 4.0]))
def test_random_chunks_evaluate_as_pycocotools(seed: int, images: int, classes: int, crowd: float,
                                               decimals: int | None, grid: float | None) -> None:
    """Random small chunks; ``grid`` snaps coordinates to a 4 px grid, so equal IoUs and touching boxes are common."""
    rng = np.random.default_rng(seed)
    truth, dets = [], []
    for _ in range(images):
        k = int(rng.integers(0, 5))
        boxes = _boxes(rng, k, 2, 40) / 4
        if grid:
            boxes = np.round(boxes / grid) * grid
        t = ImageBoxes(boxes, rng.integers(0, classes, k), None, rng.uniform(size=k) < crowd)
        truth.append(t)
        d = _noisy(rng, t, 0.8, 2.0, classes, int(rng.integers(0, 6)), score_decimals=decimals)
        if grid:
            d = ImageBoxes(np.round(d.boxes / grid) * grid, d.classes, d.scores)
        truth[-1] = t
        dets.append(d)
    _same(evaluate_chunk(truth, dets), evaluate_with_pycocotools(truth, dets))


def test_a_non_finite_value_takes_the_plain_path() -> None:
    truth, dets = scene_mixed(np.random.default_rng(5))
    k = next(i for i, d in enumerate(dets) if len(d))
    boxes = dets[k].boxes.copy()
    boxes[0, 2] = np.inf
    dets[k] = ImageBoxes(boxes, dets[k].classes, dets[k].scores)
    result = evaluate_chunk(truth, dets)
    assert result.plain
    ap = CocoAP()
    ap.add(truth, dets)
    assert ap.plain_chunks == 1


def _plain_ap(truth: list[ImageBoxes], dets: list[ImageBoxes], categories: int) -> tuple[float, float]:
    """pycocotools as users run it: every image at once (loadRes), default parameters, summarize()'s first two."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    anns = []
    for image, item in enumerate(truth):
        for k in range(len(item)):
            x1, y1, x2, y2 = (float(v) for v in item.boxes[k])
            anns.append({"id": len(anns) + 1, "image_id": image + 1, "category_id": int(item.classes[k]),
                         "bbox": [x1, y1, x2 - x1, y2 - y1], "area": (x2 - x1) * (y2 - y1),
                         "iscrowd": int(item.crowd[k]) if item.crowd is not None else 0})
    results = [{"image_id": image + 1, "category_id": int(item.classes[k]), "score": float(item.scores[k]),
                "bbox": [float(item.boxes[k, 0]), float(item.boxes[k, 1]), float(item.boxes[k, 2] - item.boxes[k, 0]),
                         float(item.boxes[k, 3] - item.boxes[k, 1])]}
               for image, item in enumerate(dets) for k in range(len(item))]
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO()
        gt.dataset = {"images": [{"id": i + 1} for i in range(len(truth))],
                      "categories": [{"id": c} for c in range(categories)], "annotations": anns}
        gt.createIndex()
        ev = COCOeval(gt, gt.loadRes(results), "bbox")
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    return float(ev.stats[0]), float(ev.stats[1])


@pytest.mark.parametrize(("name", "categories"), [("mixed", 4), ("crowd", 1), ("many_classes", 60), ("ties", 2),
                                                  ("competition", 1), ("max_dets", 2)])
def test_chunked_ap_equals_pycocotools_over_every_image(name: str, categories: int) -> None:
    truth, dets = SCENES[name](np.random.default_rng(7))
    ap = CocoAP()
    for start in range(0, len(truth), 7):
        ap.add(truth[start:start + 7], dets[start:start + 7])
    result = ap.result()
    map50_95, map50 = _plain_ap(truth, dets, categories)
    assert (result["map50_95"], result["map50"]) == (map50_95, map50)
    assert ap.plain_chunks == 0


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("name", list(SCENES))
def test_vectorised_accumulate_is_pycocotools(name: str, seed: int) -> None:
    """Every precision value (each IoU threshold, recall threshold and class), not only their means."""
    truth, dets = SCENES[name](np.random.default_rng(seed))
    ap = CocoAP()
    ap.add(truth, dets)
    cats = sorted(ap._cats)
    fast, plain = ap._precision(cats), ap._plain_precision(cats)
    assert fast.tobytes() == plain.tobytes() and (fast > 0).any()
    assert ap.result() == ap.result(plain=True)


def test_vectorised_evaluation_is_much_faster_than_pycocotools() -> None:
    """What the optimisation is for, measured as a ratio in one run (medians of 3): the same chunk of 256
    images, an SSD-like load of 100 detections per image over 3 classes."""
    rng = np.random.default_rng(11)
    truth, dets = [], []
    for _ in range(256):
        k = int(rng.integers(1, 4))
        t = ImageBoxes(_boxes(rng, k), rng.integers(0, 3, k))
        truth.append(t)
        dets.append(_noisy(rng, t, 1.0, 1.5, 3, 100 - k, score_decimals=None))

    def median(fn: Callable[[], object]) -> float:
        times = []
        for _ in range(3):
            start = time.process_time()
            fn()
            times.append(time.process_time() - start)
        return sorted(times)[1]

    fast = median(lambda: evaluate_chunk(truth, dets))
    plain = median(lambda: evaluate_with_pycocotools(truth, dets))
    assert plain / fast > 5, f"evaluate: vectorised {fast:.3f} s, pycocotools {plain:.3f} s"
    ap = CocoAP()
    for _ in range(8):  # 2,048 images' worth of detections
        ap.add(truth, dets)
    fast, plain = median(lambda: ap.result()), median(lambda: ap.result(plain=True))
    assert plain / fast > 2, f"accumulate: vectorised {fast:.3f} s, pycocotools {plain:.3f} s"
