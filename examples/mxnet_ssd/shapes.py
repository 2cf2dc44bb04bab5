"""Procedural "coloured shapes" detection dataset for the MXNet SSD example (numpy only).

Each image holds 1-3 non-overlapping shapes -- class 0 square, 1 circle, 2 triangle -- in random
colours on a noisy, randomly tinted background. Boxes are the exact pixel extents of each drawn
shape, normalised to [0, 1] (xmin, ymin, xmax, ymax), so the ground truth is known without any
annotation step. Everything is drawn from one ``numpy.random.Generator`` seeded by ``seed``: the
same (n, seed, size) always yields the same bytes, which is how the validation set is "stored".
"""

from __future__ import annotations

import numpy as np

CLASS_NAMES = ("square", "circle", "triangle")
TRAIN_SEED = 0
VAL_SEED = 1
VAL_SIZE = 300  # images in the held-back validation set


def _shape_mask(kind: int, x0: int, y0: int, w: int, h: int, size: int) -> np.ndarray:
    """Boolean [size, size] mask of one shape whose bounding box starts at (x0, y0), w x h pixels."""
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float64)
    # pixel centres relative to the box, in [0, 1]
    u = (xx + 0.5 - x0) / w
    v = (yy + 0.5 - y0) / h
    inside = (u >= 0) & (u <= 1) & (v >= 0) & (v <= 1)
    if kind == 0:  # square (w == h)
        return inside
    if kind == 1:  # circle (w == h)
        return (u - 0.5) ** 2 + (v - 0.5) ** 2 <= 0.25
    # triangle, apex up: at height v the half-width is v / 2
    return inside & (np.abs(u - 0.5) <= v / 2)


def _overlaps(box: tuple[int, int, int, int], boxes: list[tuple[int, int, int, int]]) -> bool:
    """Whether inclusive pixel box ``box`` touches any of ``boxes`` (a one-pixel gap is required)."""
    x0, y0, x1, y1 = box
    return any(not (x1 < px0 or px1 < x0 or y1 < py0 or py1 < y0) for px0, py0, px1, py1 in boxes)


def make_dataset(
    n: int, seed: int, size: int = 64, *, objects: tuple[int, int] = (1, 3),
    extent: tuple[float, float] = (0.18, 0.45),
) -> tuple[np.ndarray, list[np.ndarray], list[np.ndarray]]:
    """Generate ``n`` images of ``size`` x ``size`` pixels.

    Returns ``(images, boxes, classes)``: images uint8 [n, 3, size, size] (RGB, NCHW); boxes a list of
    float32 [k, 4] arrays (normalised xmin, ymin, xmax, ymax, exact pixel extents / size); classes a
    list of int64 [k] arrays with values in {0: square, 1: circle, 2: triangle}. Each image asks for
    ``objects[0] <= k <= objects[1]`` shapes (a shape that finds no free place in 20 tries is left
    out) whose width is ``extent[0]..extent[1]`` of the side. The defaults are the example's training
    distribution (1-3 shapes of 0.18-0.45 of the side); other values draw other images, while the
    defaults keep drawing the same bytes as always.
    """
    rng = np.random.default_rng(seed)
    images = np.empty((n, 3, size, size), dtype=np.uint8)
    all_boxes: list[np.ndarray] = []
    all_classes: list[np.ndarray] = []
    yy, xx = np.mgrid[0:size, 0:size] / size
    for i in range(n):
        bg = rng.uniform(0, 255, size=3)
        grad = rng.uniform(-40, 40, size=(3, 2))
        img = bg[:, None, None] + grad[:, 0, None, None] * (xx - 0.5) + grad[:, 1, None, None] * (yy - 0.5)
        k = int(rng.integers(objects[0], objects[1] + 1))
        placed: list[tuple[int, int, int, int]] = []
        boxes, classes = [], []
        for _ in range(k):
            kind = int(rng.integers(0, 3))
            for _attempt in range(20):
                w = int(rng.integers(round(extent[0] * size), round(extent[1] * size) + 1))
                h = w if kind < 2 else int(np.clip(round(w * rng.uniform(0.8, 1.25)), 4, size))
                x0 = int(rng.integers(0, size - w + 1))
                y0 = int(rng.integers(0, size - h + 1))
                mask = _shape_mask(kind, x0, y0, w, h, size)
                ys, xs = np.nonzero(mask)
                box = (int(xs.min()), int(ys.min()), int(xs.max()), int(ys.max()))
                if not _overlaps(box, placed):
                    break
            else:
                continue
            # object colour well away from the background colour
            while True:
                col = rng.uniform(0, 255, size=3)
                if np.linalg.norm(col - bg) > 100:
                    break
            img[:, mask] = col[:, None]
            placed.append(box)
            boxes.append([box[0] / size, box[1] / size, (box[2] + 1) / size, (box[3] + 1) / size])
            classes.append(kind)
        img = img + rng.normal(0, 12, size=img.shape)
        images[i] = np.clip(np.rint(img), 0, 255).astype(np.uint8)
        all_boxes.append(np.asarray(boxes, dtype=np.float32).reshape(-1, 4))
        all_classes.append(np.asarray(classes, dtype=np.int64))
    return images, all_boxes, all_classes


def make_validation_set(size: int = 64) -> tuple[np.ndarray, list[np.ndarray], list[np.ndarray]]:
    """The held-back validation set: ``VAL_SIZE`` images at ``VAL_SEED`` (disjoint seed from training)."""
    return make_dataset(VAL_SIZE, VAL_SEED, size)


MEAN = (123.0, 117.0, 104.0)  # mxnet-ssd's RGB mean; no std scaling


def preprocess(images: np.ndarray) -> np.ndarray:
    """uint8 RGB NCHW -> float32 minus the mxnet-ssd mean (no std): what the model's `data` input expects."""
    return images.astype(np.float32) - np.asarray(MEAN, dtype=np.float32).reshape(1, 3, 1, 1)
