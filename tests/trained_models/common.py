"""What every trained test model shares: the procedural dataset, its files, preprocessing as data, COCO mAP.

The images come from one generator, ``examples/mxnet_ssd/shapes.py`` (coloured squares, circles and
triangles on noisy tinted backgrounds; exact boxes known by construction; deterministic by seed). A
model's folder holds its held-out images as png files, their ground truth as COCO json (bbox
``[x, y, w, h]`` in pixels, ``category_id`` = the class id the model emits) and a feeds .npz of the
first few of them, preprocessed. Preprocessing is data (``Preprocessing``: resize, channel order,
layout, dtype, mean, std) and ``preprocess`` is the one function that applies it, so the feeds, the
build-time evaluation and the tests' evaluation of converted models use the same recipe.

mAP is pycocotools' (COCOeval, bbox): ``map50`` = AP@0.5, ``map50_95`` = AP@[.5:.95] (101-point
interpolation, maxDets 100), the numbers users know from COCO.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import io
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]
SHAPES_FILE = REPO / "examples" / "mxnet_ssd" / "shapes.py"
CLASS_NAMES = ("square", "circle", "triangle")
IMAGE_SIZE = 64
# the new detectors' images: 2-6 shapes of 0.16-0.32 of the side (10-20 px at 64 px), 4 per image on average
DETECTION_OBJECTS = (2, 6)
DETECTION_EXTENT = (0.16, 0.32)
TRAIN_SEED = 100  # training images
HELDOUT_SEED = 101  # held-out images: evaluated, written as png + COCO json; the feeds are its first FEED_COUNT
HELDOUT_SIZE = 300
FEED_COUNT = 8


@functools.cache
def shapes() -> ModuleType:
    """The example's dataset generator (examples/ is not a package: loaded by path)."""
    spec = importlib.util.spec_from_file_location("trained_models_shapes", SHAPES_FILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class ShapeSet:
    """Images uint8 [n, 3, H, W] RGB; per image normalised xyxy boxes [k, 4] and class ids [k] (0..2)."""

    images: np.ndarray
    boxes: list[np.ndarray]
    classes: list[np.ndarray]

    def __len__(self) -> int:
        return len(self.images)


def make_shapes(n: int, seed: int, size: int = IMAGE_SIZE, objects: tuple[int, int] = DETECTION_OBJECTS,
                extent: tuple[float, float] = DETECTION_EXTENT) -> ShapeSet:
    images, boxes, classes = shapes().make_dataset(n, seed, size, objects=objects, extent=extent)
    return ShapeSet(images, boxes, classes)


# -- preprocessing as data ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Preprocessing:
    """How an RGB uint8 image becomes the model's input: ``(pixel - mean) / std`` per channel (mean and std
    in 0-255 units, in ``channel_order``), ``layout`` NCHW or NHWC, float32; images are already
    ``size`` x ``size`` (``resize`` "stretch" to that size for other images)."""

    size: tuple[int, int]
    mean: tuple[float, float, float]
    std: tuple[float, float, float] = (1.0, 1.0, 1.0)
    channel_order: str = "RGB"
    layout: str = "NCHW"
    resize: str = "stretch"
    dtype: str = "float32"

    def as_dict(self) -> dict[str, Any]:
        return {"resize": self.resize, "size": list(self.size), "channel_order": self.channel_order,
                "layout": self.layout, "dtype": self.dtype, "mean": list(self.mean), "std": list(self.std)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Preprocessing:
        return cls(size=tuple(data["size"]), mean=tuple(data["mean"]), std=tuple(data["std"]),  # type: ignore[arg-type]
                   channel_order=data["channel_order"], layout=data["layout"], resize=data["resize"],
                   dtype=data["dtype"])


def preprocess(images: np.ndarray, prep: Preprocessing | Mapping[str, Any]) -> np.ndarray:
    """uint8 RGB NCHW images of the model's size -> the model's input array."""
    if not isinstance(prep, Preprocessing):
        prep = Preprocessing.from_dict(prep)
    if tuple(images.shape[2:]) != tuple(prep.size):
        raise ValueError(f"images are {list(images.shape[2:])}, the model takes {list(prep.size)} (resize first)")
    x = images.astype(np.float32)
    if prep.channel_order == "BGR":
        x = x[:, ::-1]
    x = (x - np.asarray(prep.mean, np.float32).reshape(1, 3, 1, 1)) / np.asarray(prep.std, np.float32).reshape(1, 3, 1, 1)
    if prep.layout == "NHWC":
        x = x.transpose(0, 2, 3, 1)
    return np.ascontiguousarray(x.astype(prep.dtype))


# -- grid detectors' targets ----------------------------------------------------------------------------

GRID_STRIDE = 8  # the grid detectors' (torch, Keras) cell size in pixels: an 8 x 8 grid on 64 x 64 images


def grid_centres(size: int = IMAGE_SIZE) -> np.ndarray:
    """[G * G, 2] (x, y) pixel centres of the grid's cells, row-major."""
    g = size // GRID_STRIDE
    ys, xs = np.meshgrid(np.arange(g), np.arange(g), indexing="ij")
    return ((np.stack([xs, ys], -1).reshape(-1, 2) + 0.5) * GRID_STRIDE).astype(np.float32)


def grid_targets(data: ShapeSet, centre_only: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each image's cells' assigned class (-1 none) [n, G*G], that box in pixels (xyxy) [n, G*G, 4] and a score
    target in (0.5, 0.95] [n, G*G] (0 for unassigned cells).

    A box is assigned to the cell holding its centre (YOLO's rule, ``centre_only``) and, otherwise, also to
    every cell whose centre lies inside it (FCOS's centre sampling: several cells per object, so NMS has
    duplicates to remove); a cell two boxes claim keeps the first. The score target falls with the cell
    centre's distance from the box centre, as FCOS's centre-ness / GFL's quality targets do: an object's
    cells get distinct scores (NMS chooses among them by a margin, not by a float32 tie at 1.0) and the
    best stays below saturation."""
    size = data.images.shape[-1]
    g = size // GRID_STRIDE
    centres = grid_centres(size)
    classes = np.full((len(data), g * g), -1, np.int64)
    boxes = np.zeros((len(data), g * g, 4), np.float32)
    quality = np.zeros((len(data), g * g), np.float32)
    for i, (bs, cs) in enumerate(zip(data.boxes, data.classes, strict=True)):
        for box, cls in zip(bs * size, cs, strict=True):
            gx, gy = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2
            cells = [int(min(gy // GRID_STRIDE, g - 1) * g + min(gx // GRID_STRIDE, g - 1))]
            if not centre_only:
                inside = (centres[:, 0] > box[0]) & (centres[:, 0] < box[2]) & (centres[:, 1] > box[1]) & \
                    (centres[:, 1] < box[3])
                cells += [int(c) for c in np.flatnonzero(inside) if c != cells[0]]
            for c in cells:
                if classes[i, c] < 0:
                    off = max(abs(centres[c, 0] - gx) / (box[2] - box[0]), abs(centres[c, 1] - gy) / (box[3] - box[1]))
                    classes[i, c] = cls
                    boxes[i, c] = box
                    quality[i, c] = 0.95 - 0.45 * min(2 * off, 1.0)
    return classes, boxes, quality


# -- files -------------------------------------------------------------------------------------------

def write_images(folder: Path, images: np.ndarray) -> list[str]:
    """``images`` (uint8 NCHW RGB) as ``folder/0000.png``, ...; returns the file names in order."""
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    names = []
    for i, img in enumerate(images):
        name = f"{i:04d}.png"
        Image.fromarray(np.ascontiguousarray(img.transpose(1, 2, 0))).save(folder / name)
        names.append(name)
    return names


def read_images(folder: Path) -> tuple[list[str], np.ndarray]:
    """The png files of ``folder`` in name order, as uint8 NCHW RGB."""
    from PIL import Image

    names = sorted(p.name for p in folder.glob("*.png"))
    return names, np.stack([np.asarray(Image.open(folder / n).convert("RGB")).transpose(2, 0, 1) for n in names])


def coco_detection_labels(data: ShapeSet, file_names: Sequence[str], category_ids: Sequence[int]) -> dict[str, Any]:
    """COCO ground truth: one annotation per shape, bbox [x, y, w, h] in pixels; class k is ``category_ids[k]``."""
    h, w = data.images.shape[2:]
    images, annotations = [], []
    for image_id, (name, boxes, classes) in enumerate(zip(file_names, data.boxes, data.classes, strict=True), start=1):
        images.append({"id": image_id, "file_name": name, "width": int(w), "height": int(h)})
        for box, cls in zip(boxes, classes, strict=True):
            x1, y1, x2, y2 = (float(v) for v in box * np.array([w, h, w, h]))
            annotations.append({"id": len(annotations) + 1, "image_id": image_id, "category_id": int(category_ids[cls]),
                                "bbox": [x1, y1, x2 - x1, y2 - y1], "area": (x2 - x1) * (y2 - y1), "iscrowd": 0})
    return {"images": images, "annotations": annotations,
            "categories": [{"id": int(category_ids[k]), "name": n} for k, n in enumerate(CLASS_NAMES)]}


def write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


# -- metrics -----------------------------------------------------------------------------------------

def coco_map(labels: Mapping[str, Any], detections: Sequence[Any]) -> dict[str, float]:
    """pycocotools mAP of per-image detections (objects with pixel xyxy ``boxes``, ``scores``, ``classes`` =
    category ids), image k being ``labels["images"][k]``. Returns ``map50`` and ``map50_95``."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    if len(detections) != len(labels["images"]):
        raise ValueError(f"{len(detections)} images of detections for {len(labels['images'])} labelled images")
    results = []
    for image, d in zip(labels["images"], detections, strict=True):
        for (x1, y1, x2, y2), score, cls in zip(np.asarray(d.boxes, np.float64), d.scores, d.classes, strict=True):
            results.append({"image_id": image["id"], "category_id": int(cls), "score": float(score),
                            "bbox": [float(x1), float(y1), float(x2 - x1), float(y2 - y1)]})
    if not results:
        return {"map50": 0.0, "map50_95": 0.0}
    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints its progress and summary
        gt = COCO()
        gt.dataset = json.loads(json.dumps(labels))
        gt.createIndex()
        evaluation = COCOeval(gt, gt.loadRes(results), "bbox")
        evaluation.evaluate()
        evaluation.accumulate()
        evaluation.summarize()
    return {"map50": round(float(evaluation.stats[1]), 4), "map50_95": round(float(evaluation.stats[0]), 4)}


def score_separation(detections: Sequence[Any], floor: float = 0.05, tie: float = 1e-5) -> dict[str, float]:
    """How far apart an image's detection scores (over ``floor``) are: the median over images of the smallest gap
    between two of its scores, and how many pairs are nearer than ``tie`` (near-ties a converter's float error
    could reorder)."""
    gaps, ties = [], 0
    for d in detections:
        s = np.sort(np.asarray(d.scores)[np.asarray(d.scores) > floor])
        if len(s) > 1:
            diff = np.diff(s)
            gaps.append(float(diff.min()))
            ties += int((diff < tie).sum())
    return {"median_min_score_gap": round(float(np.median(gaps)), 6) if gaps else 0.0, "near_tied_pairs": ties}


def scaled(detections: Sequence[Any], scale: float) -> list[Any]:
    """Detections with boxes multiplied by ``scale`` (normalised -> pixels)."""
    from dataclasses import replace

    return [replace(d, boxes=np.asarray(d.boxes) * scale) for d in detections]


def read_detections(spec: Mapping[str, Any], outputs: Mapping[str, np.ndarray], images: int, side: str = "candidate",
                    box_scale: float = 1.0) -> list[Any]:
    """Per-image detections of one run, read with bridge's own layout reader (``spec``: a DetectionSpec dict);
    images left out at the end of a batch-index layout are empty; boxes times ``box_scale``."""
    from bridge.validation.detection.boxes import Detections
    from bridge.validation.detection.layouts import DetectionSpec

    dets = DetectionSpec.from_dict(spec).read(outputs, side)
    if len(dets) > images:
        raise ValueError(f"{len(dets)} images of detections for {images} inputs")
    dets = list(dets) + [Detections(np.zeros((0, 4)), np.zeros(0), np.zeros(0, np.int64))] * (images - len(dets))
    return scaled(dets, box_scale) if box_scale != 1.0 else dets


def write_heldout(out: Path, data: ShapeSet, prep: Preprocessing, input_name: str, category_ids: Sequence[int]
                  ) -> dict[str, Any]:
    """``out/images/*.png``, ``out/labels.json`` (COCO) and ``out/feeds.npz`` (the first FEED_COUNT images,
    preprocessed, keyed ``input_name``); returns the labels."""
    names = write_images(out / "images", data.images)
    labels = coco_detection_labels(data, names, category_ids)
    write_json(out / "labels.json", labels)
    np.savez_compressed(out / "feeds.npz", **{input_name: preprocess(data.images[:FEED_COUNT], prep)})
    return labels


__all__ = ["CLASS_NAMES", "FEED_COUNT", "HELDOUT_SEED", "HELDOUT_SIZE", "IMAGE_SIZE", "REPO", "TRAIN_SEED",
           "Preprocessing", "ShapeSet", "coco_detection_labels", "coco_map", "make_shapes", "preprocess",
           "read_detections", "read_images", "score_separation", "write_heldout", "write_images", "write_json"]
