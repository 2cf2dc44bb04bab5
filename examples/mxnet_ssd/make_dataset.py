"""Write procedural "coloured shapes" images as PNG files with their COCO labels, for ``--dataset`` / ``--labels``.

    python examples/mxnet_ssd/make_dataset.py out/shapes            # 300 images at seed 1 (the validation set)
    python examples/mxnet_ssd/make_dataset.py out/big --count 10000 --seed 7

Writes ``DIR/images/000000.png ...`` (RGB, 64x64 by default) and ``DIR/labels.json`` (COCO: boxes in pixels,
categories 1 square, 2 circle, 3 triangle - the model's classes 0, 1, 2 by position). Images are generated
and written a chunk at a time, so any count fits in memory. Deterministic by seed (``shapes.make_dataset``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from shapes import CLASS_NAMES, VAL_SEED, VAL_SIZE, make_dataset  # noqa: E402

CHUNK = 500


def write_dataset(folder: Path, count: int = VAL_SIZE, seed: int = VAL_SEED, size: int = 64) -> tuple[Path, Path]:
    """The images folder and the labels file of ``count`` images (chunks at seeds ``seed``, ``seed`` + 1, ...)."""
    from PIL import Image

    from bridge.validation.dataset.labels import write_coco

    images = folder / "images"
    images.mkdir(parents=True, exist_ok=True)
    names, boxes, classes = [], [], []
    for chunk, first in enumerate(range(0, count, CHUNK)):
        n = min(CHUNK, count - first)
        # the first chunk at ``seed`` itself: 300 images at seed 1 are the example's validation set
        pixels, chunk_boxes, chunk_classes = make_dataset(n, seed + chunk * 1000, size)
        for k in range(n):
            name = f"{first + k:06d}.png"
            Image.fromarray(np.transpose(pixels[k], (1, 2, 0))).save(images / name)
            names.append(name)
        boxes += [np.asarray(b, np.float64) * size for b in chunk_boxes]
        classes += chunk_classes
    labels = folder / "labels.json"
    write_coco(labels, names, [(size, size)] * count, boxes, classes, CLASS_NAMES)
    return images, labels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--count", type=int, default=VAL_SIZE)
    parser.add_argument("--seed", type=int, default=VAL_SEED)
    args = parser.parse_args()
    images, labels = write_dataset(args.folder, args.count, args.seed)
    print(f"{args.count} images in {images}, labels in {labels}")


if __name__ == "__main__":
    main()
