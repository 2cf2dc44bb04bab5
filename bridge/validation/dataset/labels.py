"""Ground truth for the dataset's images: a COCO json, or a folder of PASCAL VOC xml files.

Labels are matched to the dataset's images by file name (the image's path relative to the dataset
folder, else its base name when that is unique); for an ``.npz`` of ready inputs, by position (COCO
images in id order, VOC files in name order). Boxes are kept in the image's own pixels as corners
(COCO ``[x, y, w, h]`` -> ``x, y, x + w, y + h``; VOC's 1-based inclusive ``xmin..xmax`` -> ``xmin - 1,
xmax``). VOC ``difficult`` objects and COCO ``iscrowd`` regions are *crowd* boxes: pycocotools ignores
detections on them instead of counting them wrong.

Model class ids name the labels' categories as ``classes`` says: ``index`` (class k is the k-th category,
COCO in id order, VOC by name; what mxnet-ssd, YOLO and most trained-from-a-list models do), ``id``
(class k is COCO category id k, as torchvision's COCO detectors report), or category names in class
order (``square,circle,triangle``). Everything is held in a few flat arrays (no Python object per box), so
10,000 images of labels cost a few hundred kB.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np

from bridge.errors import BadInputFileError, UsageError


@dataclass(frozen=True)
class Truth:
    """One image's ground truth: corner boxes [K, 4] in pixels, model class ids [K], crowd flags [K]."""

    boxes: np.ndarray
    classes: np.ndarray
    crowd: np.ndarray
    width: int
    height: int


@dataclass
class Labels:
    """Per dataset image (by index) its ground truth, in flat arrays; ``names``: model class id -> name."""

    names: dict[int, str]
    offsets: np.ndarray  # [N + 1]: image i's boxes are rows offsets[i]:offsets[i+1]
    boxes: np.ndarray  # [M, 4] float32
    classes: np.ndarray  # [M] int32
    crowd: np.ndarray  # [M] bool
    sizes: np.ndarray  # [N, 2] int32 (width, height); 0 when the labels do not say
    notes: list[str] = field(default_factory=list)

    def truth(self, index: int) -> Truth:
        a, b = int(self.offsets[index]), int(self.offsets[index + 1])
        w, h = (int(v) for v in self.sizes[index])
        return Truth(self.boxes[a:b].astype(np.float64), self.classes[a:b].astype(np.int64), self.crowd[a:b], w, h)

    def image_class(self, index: int) -> int:
        """A classifier's label of image ``index``: the class of its first non-crowd box (-1: none)."""
        t = self.truth(index)
        real = t.classes[~t.crowd]
        return int(real[0]) if len(real) else -1

    def __len__(self) -> int:
        return len(self.sizes)


def load_labels(path: Path, image_names: Sequence[str], classes: str = "index", by_position: bool = False) -> Labels:
    """The labels of ``image_names`` (the dataset's order) from a COCO json or a VOC xml folder."""
    if path.is_dir():
        return _voc(path, image_names, classes, by_position)
    return _coco(path, image_names, classes, by_position)


def _class_map(categories: list[tuple[Any, str]], classes: str, where: str) -> tuple[dict[Any, int], dict[int, str]]:
    """category key -> model class id, and class id -> name, by the ``classes`` rule (module docstring)."""
    mode = classes.strip()
    if mode == "index":
        ordered = sorted(categories, key=lambda c: (c[0] if not isinstance(c[0], str) else 0, c[1]))
        return {key: k for k, (key, _n) in enumerate(ordered)}, {k: n for k, (_key, n) in enumerate(ordered)}
    if mode == "id":
        if any(not isinstance(key, int) for key, _n in categories):
            raise UsageError(f"--classes id: {where} has no numeric category ids (VOC names its classes); use "
                             "--classes index or list the names in class order")
        return {key: int(key) for key, _n in categories}, {int(key): n for key, n in categories}
    wanted = [n.strip() for n in mode.split(",") if n.strip()]
    by_name = {n: key for key, n in categories}
    unknown = [n for n in wanted if n not in by_name]
    if unknown:
        raise UsageError(f"--classes: {', '.join(unknown)} not a category of {where} (categories: "
                         f"{', '.join(sorted(by_name))})")
    return {by_name[n]: k for k, n in enumerate(wanted)}, dict(enumerate(wanted))


def _match(image_names: Sequence[str], label_names: Sequence[str], where: str, by_position: bool) -> list[int | None]:
    """For each dataset image, the index of its labels entry (None: the labels do not list it)."""
    if by_position:
        if len(label_names) < len(image_names):
            raise UsageError(f"--labels {where}: {len(label_names)} images labelled, the dataset has "
                             f"{len(image_names)} (ready inputs are matched to labels by position)")
        return list(range(len(image_names)))
    exact = {PurePosixPath(n).as_posix(): k for k, n in enumerate(label_names)}
    base: dict[str, list[int]] = {}
    for k, n in enumerate(label_names):
        base.setdefault(PurePosixPath(n).name, []).append(k)
    found: list[int | None] = []
    for name in image_names:
        hit = exact.get(name)
        if hit is None:
            options = base.get(PurePosixPath(name).name, [])
            hit = options[0] if len(options) == 1 else None
        found.append(hit)
    missing = [n for n, k in zip(image_names, found, strict=True) if k is None]
    if missing:
        raise UsageError(f"--labels {where}: {len(missing)} of the {len(image_names)} dataset images are not "
                         f"labelled there (e.g. {', '.join(missing[:3])}); labels are matched by file name")
    return found


def _coco(path: Path, image_names: Sequence[str], classes: str, by_position: bool) -> Labels:
    try:
        with path.open(encoding="utf-8") as fh:
            data = json.load(fh)
        images = sorted(data["images"], key=lambda im: im["id"])
        categories = [(int(c["id"]), str(c.get("name", c["id"]))) for c in data.get("categories", [])]
        annotations = data.get("annotations", [])
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise BadInputFileError(f"--labels {path}: not a COCO json (images, annotations, categories): {exc}") from None
    if not categories:  # categories from the annotations themselves
        categories = [(c, str(c)) for c in sorted({int(a["category_id"]) for a in annotations})]
    to_class, names = _class_map(categories, classes, str(path))
    where = _match(image_names, [str(im.get("file_name", im["id"])) for im in images], str(path), by_position)
    row_of = {im["id"]: k for k, im in enumerate(images)}
    per_image: dict[int, list[tuple[list[float], int, bool]]] = {}
    dropped = 0
    for a in annotations:
        k = row_of.get(a.get("image_id"))
        if k is None:
            continue
        cls = to_class.get(int(a["category_id"]))
        if cls is None:
            dropped += 1
            continue
        if "bbox" not in a:  # a classification label: a whole-image box
            im = images[k]
            box = [0.0, 0.0, float(im.get("width", 0)), float(im.get("height", 0))]
        else:
            x, y, w, h = (float(v) for v in a["bbox"])
            box = [x, y, x + w, y + h]
        per_image.setdefault(k, []).append((box, cls, bool(a.get("iscrowd", 0))))
    sizes = [(int(images[k].get("width", 0)), int(images[k].get("height", 0))) if k is not None else (0, 0)
             for k in where]
    labels = _pack([per_image.get(k, []) if k is not None else [] for k in where], sizes, names)
    if dropped:
        labels.notes.append(f"{dropped} annotations of categories the model's classes do not name were left out")
    return labels


def _voc(folder: Path, image_names: Sequence[str], classes: str, by_position: bool) -> Labels:
    files = sorted(folder.rglob("*.xml"))
    if not files:
        raise UsageError(f"--labels {folder}: no VOC .xml file in the folder")
    parsed = []
    for f in files:
        try:
            root = ET.parse(f).getroot()
        except (ET.ParseError, OSError) as exc:
            raise BadInputFileError(f"--labels {f}: not a VOC annotation ({exc})") from None
        name = (root.findtext("filename") or f.stem).strip()
        size = root.find("size")
        w = int(float(size.findtext("width") or 0)) if size is not None else 0
        h = int(float(size.findtext("height") or 0)) if size is not None else 0
        objects = []
        for obj in root.iter("object"):
            corners = obj.find("bndbox")
            if corners is None:
                continue
            try:
                x1, y1, x2, y2 = (float(corners.findtext(k) or "nan") for k in ("xmin", "ymin", "xmax", "ymax"))
            except ValueError as exc:
                raise BadInputFileError(f"--labels {f}: a box that is not numbers ({exc})") from None
            objects.append(((obj.findtext("name") or "").strip(), [x1 - 1, y1 - 1, x2, y2],
                            (obj.findtext("difficult") or "0").strip() == "1"))
        parsed.append((name, (w, h), objects))
    categories = [(n, n) for n in sorted({o[0] for _n, _s, objs in parsed for o in objs})]
    to_class, names = _class_map(categories, classes, str(folder))
    keys = [p[0] for p in parsed]
    if not by_position:  # an xml names its image; match names without suffix too (2007_000027 -> .jpg)
        stems = {PurePosixPath(n).stem: n for n in image_names}
        keys = [k if k in set(image_names) or PurePosixPath(k).name in {PurePosixPath(n).name for n in image_names}
                else stems.get(PurePosixPath(k).stem, k) for k in keys]
    where = _match(image_names, keys, str(folder), by_position)
    boxes: list[list[tuple[list[float], int, bool]]] = []
    dropped = 0
    for k in where:
        rows = []
        for name, box, difficult in parsed[k][2] if k is not None else []:
            if name in to_class:
                rows.append((box, to_class[name], difficult))
            else:
                dropped += 1
        boxes.append(rows)
    labels = _pack(boxes, [parsed[k][1] if k is not None else (0, 0) for k in where], names)
    if dropped:
        labels.notes.append(f"{dropped} objects of classes the model's classes do not name were left out")
    return labels


def _pack(per_image: list[list[tuple[list[float], int, bool]]], sizes: list[tuple[int, int]], names: dict[int, str]
          ) -> Labels:
    counts = np.asarray([len(r) for r in per_image], np.int64)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    rows = [r for image in per_image for r in image]
    return Labels(names, offsets, np.asarray([r[0] for r in rows], np.float32).reshape(-1, 4),
                  np.asarray([r[1] for r in rows], np.int32), np.asarray([r[2] for r in rows], bool),
                  np.asarray(sizes, np.int32).reshape(-1, 2))


def write_coco(path: Path, file_names: Sequence[str], sizes: Sequence[tuple[int, int]], boxes: Sequence[np.ndarray],
               classes: Sequence[np.ndarray], category_names: Sequence[str], first_id: int = 1) -> None:
    """Write ground truth as a COCO json: ``boxes[i]`` corner pixels [K, 4] of image ``file_names[i]``,
    ``classes[i]`` indices into ``category_names`` (category ids from ``first_id``)."""
    from bridge.io import atomic_write_text

    annotations: list[dict[str, object]] = []
    for image, (bx, cl) in enumerate(zip(boxes, classes, strict=True)):
        for b, c in zip(np.asarray(bx, np.float64).reshape(-1, 4), np.asarray(cl).reshape(-1), strict=True):
            annotations.append({"id": len(annotations) + 1, "image_id": image + 1, "category_id": int(c) + first_id,
                                "bbox": [float(b[0]), float(b[1]), float(b[2] - b[0]), float(b[3] - b[1])],
                                "area": float((b[2] - b[0]) * (b[3] - b[1])), "iscrowd": 0})
    data = {"images": [{"id": k + 1, "file_name": n, "width": int(w), "height": int(h)}
                       for k, (n, (w, h)) in enumerate(zip(file_names, sizes, strict=True))],
            "categories": [{"id": k + first_id, "name": n} for k, n in enumerate(category_names)],
            "annotations": annotations}
    atomic_write_text(path, json.dumps(data))


__all__ = ["Labels", "Truth", "load_labels", "write_coco"]
