"""The dataset metrics: COCO AP accumulated chunk by chunk is pycocotools' own result over every image at once
(to the last bit), shards merge in order, and the agreement counts come from pycocotools' matching."""

from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest

from bridge.validation.dataset.metrics import Agreement, CocoAP, ImageBoxes, SegmentationIoU, TopK

pytest.importorskip("pycocotools")


def _scene(seed: int, images: int = 60, classes: int = 4) -> tuple[list[ImageBoxes], list[ImageBoxes]]:
    """Ground truth (some crowd boxes) and noisy detections (misses, false positives, class errors)."""
    rng = np.random.default_rng(seed)
    truth, dets = [], []
    for _ in range(images):
        k = int(rng.integers(0, 6))
        xy = rng.uniform(0, 200, (k, 2))
        boxes = np.concatenate([xy, xy + rng.uniform(4, 80, (k, 2))], axis=1)
        cls = rng.integers(0, classes, k)
        truth.append(ImageBoxes(boxes, cls, None, rng.uniform(size=k) < 0.1))
        keep = rng.uniform(size=k) < 0.85
        noisy = boxes[keep] + rng.normal(0, 3, (int(keep.sum()), 4))
        fp = int(rng.integers(0, 4))
        fxy = rng.uniform(0, 200, (fp, 2))
        all_boxes = np.concatenate([noisy, np.concatenate([fxy, fxy + rng.uniform(4, 60, (fp, 2))], 1)])
        labels = np.concatenate([np.where(rng.uniform(size=int(keep.sum())) < 0.1, rng.integers(0, classes),
                                          cls[keep]), rng.integers(0, classes, fp)])
        scores = rng.uniform(0, 1, len(all_boxes)).round(2)  # rounded: equal scores, so the sort order matters
        dets.append(ImageBoxes(all_boxes, labels, scores))
    return truth, dets


def _plain(truth: list[ImageBoxes], dets: list[ImageBoxes]) -> tuple[float, float]:
    """pycocotools as users run it: every image at once, its default parameters, summarize()'s first two."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    def dataset(items: list[ImageBoxes], scored: bool) -> COCO:
        anns = []
        for image, item in enumerate(items):
            for k in range(len(item)):
                x1, y1, x2, y2 = (float(v) for v in item.boxes[k])
                ann = {"id": len(anns) + 1, "image_id": image + 1, "category_id": int(item.classes[k]),
                       "bbox": [x1, y1, x2 - x1, y2 - y1], "area": (x2 - x1) * (y2 - y1),
                       "iscrowd": int(item.crowd[k]) if item.crowd is not None else 0}
                if scored:
                    ann["score"] = float(item.scores[k])
                anns.append(ann)
        coco = COCO()
        coco.dataset = {"images": [{"id": i + 1} for i in range(len(items))],
                        "categories": [{"id": c} for c in range(4)], "annotations": anns}
        coco.createIndex()
        return coco

    with contextlib.redirect_stdout(io.StringIO()):
        ev = COCOeval(dataset(truth, False), dataset(dets, True), "bbox")
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    return float(ev.stats[0]), float(ev.stats[1])


@pytest.mark.parametrize("chunk", [1, 7, 60])
@pytest.mark.parametrize("seed", [0, 1])
def test_chunked_ap_is_pycocotools_over_all_images(seed: int, chunk: int) -> None:
    truth, dets = _scene(seed)
    ap = CocoAP()
    for start in range(0, len(truth), chunk):
        ap.add(truth[start:start + chunk], dets[start:start + chunk])
    result = ap.result()
    map50_95, map50 = _plain(truth, dets)
    assert result["map50_95"] == map50_95 and result["map50"] == map50
    assert 0.2 < map50 < 1.0  # the scene is neither trivial nor hopeless


def test_shards_merge_in_order_and_round_trip_as_arrays() -> None:
    truth, dets = _scene(3)
    whole = CocoAP()
    whole.add(truth, dets)
    first, second = CocoAP(), CocoAP()
    first.add(truth[:25], dets[:25])
    second.add(truth[25:], dets[25:])
    restored = CocoAP.from_arrays(second.to_arrays("s."), "s.")
    first.merge(restored)
    assert first.result() == whole.result() and first.images == len(truth)


def test_a_worse_detector_scores_lower() -> None:
    truth, dets = _scene(4)
    shifted = [ImageBoxes(d.boxes + 6.0, d.classes, d.scores) for d in dets]
    good, bad = CocoAP(), CocoAP()
    good.add(truth, dets)
    bad.add(truth, shifted)
    assert bad.result()["map50_95"] < good.result()["map50_95"] - 0.05


def test_agreement_counts_matched_missed_extra_from_the_matches() -> None:
    source = ImageBoxes(np.array([[0, 0, 10, 10], [20, 20, 30, 30.0]]), np.array([0, 1]), np.array([0.9, 0.8]))
    # the first box found (shifted a little), the second missed; one extra box; one below the score threshold
    candidate = ImageBoxes(np.array([[1, 0, 11, 10], [50, 50, 60, 60], [20, 20, 30, 30.0]]), np.array([0, 0, 1]),
                           np.array([0.9, 0.7, 0.2]))
    ap = CocoAP()
    pairs = ap.add([source], [candidate])[0]
    counts = Agreement()
    [(rows_s, rows_c, disagreement)] = counts.add([source], [candidate], [pairs], threshold=0.5)
    assert counts.to_dict() == {"matched": 1, "missed": 1, "extra": 1}
    assert list(rows_s) == [0] and list(rows_c) == [0]
    assert disagreement == pytest.approx(2 + (1 - 90 / 110))


def test_topk_and_segmentation_iou() -> None:
    scores = np.array([[0.1, 0.9, 0.0], [0.5, 0.2, 0.3], [0.2, 0.3, 0.5]])
    topk = TopK()
    top1 = topk.add(scores, source=np.array([1, 2, 2]), labels=np.array([1, 0, -1]))
    assert list(top1) == [1, 0, 2]
    assert topk.to_dict(candidate=True) == {"top1_agreement": 2 / 3, "top5_agreement": 1.0, "top1_accuracy": 1.0,
                                            "top5_accuracy": 1.0}
    seg = SegmentationIoU()
    source = np.zeros((1, 4, 4), int)
    source[0, :2] = 1
    candidate = source.copy()
    candidate[0, 2, 0] = 1  # one pixel of class 0 called class 1
    ious = seg.add(source, candidate, 2)
    assert ious[0] == pytest.approx(((7 / 8) + (8 / 9)) / 2) and seg.miou() == pytest.approx(ious[0])
