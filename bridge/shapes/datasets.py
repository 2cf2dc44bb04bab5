"""Sizes of a dataset, read cheaply: image heights/widths from file headers, box counts from annotations.

Shape buckets are chosen from statistics of the inputs a model will see, so only the sizes are needed,
never the pixels. Image headers are parsed here (PNG IHDR, JPEG SOFn, PPM/PGM/PBM, BMP, and .npy via
numpy's header reader, all without decoding); Pillow is used for other formats only if installed.

Annotation file (JSON, a subset of COCO so COCO files work as they are)::

    {"images": [{"id": 1, "file_name": "a.jpg", "height": 480, "width": 640}, ...],
     "annotations": [{"image_id": 1, "bbox": [x, y, w, h], "category_id": 3}, ...]}

Each image contributes its height/width and its number of boxes (annotations with its ``image_id``);
the box count is the batch a per-box second stage (a classifier or recogniser on crops) sees.

Hostile input: a header is a claim, not a fact (a 50-byte PNG can declare 100000 x 100000 pixels).
Every declared size, from a header or an annotation file, is checked against ``MAX_IMAGE_PIXELS``
before anything downstream sizes an array from it (bucket models are validated on inputs of the
bucket's size); a larger claim is an ``ImageTooLargeError`` (exit 3) naming the file, the declared
size and the limit. It is not skipped like an unreadable file: the data set is wrong and the
statistics must not quietly leave it out.
"""

from __future__ import annotations

import json
import logging
import struct
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bridge.errors import BadInputFileError, SourceNotFoundError, UsageError
from bridge.shapes.common import Progress, quiet

logger = logging.getLogger(__name__)

IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".ppm", ".pgm", ".pbm", ".pnm", ".bmp", ".npy"})
# 2**28 = 268,435,456 pixels (16384 x 16384): well above any camera frame, and at float32 x 3 channels
# already 3 GiB per input, which is what validating a bucket of that size would allocate
MAX_IMAGE_PIXELS = 2**28


class ImageTooLargeError(BadInputFileError):
    """A header (or annotation) declares more pixels than ``MAX_IMAGE_PIXELS``: never allocated, never skipped."""


def check_declared_size(path: Path | str, height: int, width: int, limit: int = MAX_IMAGE_PIXELS) -> tuple[int, int]:
    """(height, width) if plausible; ImageTooLargeError over ``limit`` pixels, BadInputFileError if not positive."""
    if height <= 0 or width <= 0:
        raise BadInputFileError(f"{path}: declared size {height}x{width} (height x width) is not positive")
    if height * width > limit:
        raise ImageTooLargeError(f"{path}: declares {height}x{width} pixels (height x width, {height * width:,} "
                                 f"pixels), over the limit of {limit:,} pixels; the header is corrupt or hostile "
                                 "(sizes are read from headers only, nothing was decoded)")
    return height, width


@dataclass(frozen=True)
class Sample:
    """One dataset item: where it came from, its height/width (None if unknown) and box count."""

    source: str
    height: int | None = None
    width: int | None = None
    boxes: int | None = None


def _png(head: bytes, path: Path) -> tuple[int, int]:
    if len(head) < 24 or head[12:16] != b"IHDR":
        raise BadInputFileError(f"{path}: PNG without an IHDR chunk")
    width, height = struct.unpack(">II", head[16:24])
    return height, width


def _jpeg(path: Path) -> tuple[int, int]:
    """Walk the JPEG markers to the first SOFn (frame header: precision, height, width)."""
    with path.open("rb") as f:
        if f.read(2) != b"\xff\xd8":
            raise BadInputFileError(f"{path}: not a JPEG (no SOI marker)")
        while True:
            byte = f.read(1)
            while byte and byte != b"\xff":
                byte = f.read(1)
            while byte == b"\xff":
                byte = f.read(1)
            if not byte:
                break
            marker = byte[0]
            if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
                continue  # markers without a length
            length_bytes = f.read(2)
            if len(length_bytes) < 2:
                break
            (length,) = struct.unpack(">H", length_bytes)
            if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
                data = f.read(5)
                if len(data) < 5:
                    break
                _, height, width = struct.unpack(">BHH", data)
                return height, width
            f.seek(length - 2, 1)
    raise BadInputFileError(f"{path}: JPEG without a frame header (SOFn)")


def _pnm(path: Path) -> tuple[int, int]:
    """Netpbm: magic P1-P6, then width and height as ASCII, '#' comments allowed between tokens."""
    with path.open("rb") as f:
        data = f.read(4096)
    tokens: list[bytes] = []
    for line in data.split(b"\n"):
        line = line.split(b"#", 1)[0]
        tokens += line.split()
        if len(tokens) >= 3:
            break
    if len(tokens) < 3 or tokens[0] not in (b"P1", b"P2", b"P3", b"P4", b"P5", b"P6"):
        raise BadInputFileError(f"{path}: not a PPM/PGM/PBM file")
    try:
        return int(tokens[2]), int(tokens[1])
    except ValueError:
        raise BadInputFileError(f"{path}: unreadable PNM header") from None


def _bmp(head: bytes, path: Path) -> tuple[int, int]:
    if len(head) < 26:
        raise BadInputFileError(f"{path}: truncated BMP header")
    width, height = struct.unpack("<ii", head[18:26])
    return abs(height), abs(width)


def npy_hw(shape: Sequence[int], path: Path | str = "") -> tuple[int, int]:
    """(H, W) of an array: 2-D is HW; 3-D is HWC when the last dim is 1/3/4, else CHW when the first is."""
    if len(shape) == 2:
        return int(shape[0]), int(shape[1])
    if len(shape) == 3:
        if shape[-1] in (1, 3, 4):
            return int(shape[0]), int(shape[1])
        if shape[0] in (1, 3, 4):
            return int(shape[1]), int(shape[2])
    raise BadInputFileError(f"{path}: array of shape {list(shape)} is not an image (HW, HWC or CHW)")


def _npy(path: Path) -> tuple[int, int]:
    with path.open("rb") as f:
        try:
            version = np.lib.format.read_magic(f)
            shape, _, _ = (np.lib.format.read_array_header_1_0(f) if version == (1, 0)
                           else np.lib.format.read_array_header_2_0(f))
        except ValueError as exc:
            raise BadInputFileError(f"{path}: not a .npy file ({exc})") from exc
    return npy_hw(shape, path)


def read_image_size(path: str | Path, max_pixels: int = MAX_IMAGE_PIXELS) -> tuple[int, int]:
    """(height, width) of an image file from its header, checked by ``check_declared_size``.

    BadInputFileError if it cannot be read; ImageTooLargeError if it claims more than ``max_pixels``.
    """
    path = Path(path)
    return check_declared_size(path, *_header_size(path), limit=max_pixels)


def _header_size(path: Path) -> tuple[int, int]:
    try:
        with path.open("rb") as f:
            head = f.read(32)
    except OSError as exc:
        raise BadInputFileError(f"{path}: {exc.strerror}") from exc
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return _png(head, path)
    if head.startswith(b"\xff\xd8"):
        return _jpeg(path)
    if head[:1] == b"P" and head[1:2] in b"123456" and len(head) > 2:
        return _pnm(path)
    if head.startswith(b"BM"):
        return _bmp(head, path)
    if head.startswith(b"\x93NUMPY"):
        return _npy(path)
    try:
        from PIL import Image  # optional: only for formats the header readers above do not know
    except ImportError:
        raise BadInputFileError(f"{path}: unknown image format (PNG, JPEG, PPM/PGM, BMP and .npy are read "
                                "without Pillow; install Pillow for others)") from None
    try:
        with Image.open(path) as im:  # lazy: reads the header, decodes nothing until .load()
            w, h = im.size
            return int(h), int(w)
    except Exception as exc:
        raise BadInputFileError(f"{path}: unreadable image ({exc})") from exc


def scan_images(folder: Path, progress: Progress = quiet,
                max_pixels: int = MAX_IMAGE_PIXELS) -> tuple[list[Sample], list[str]]:
    """Sizes of every image under ``folder`` (recursively); unreadable files are listed, not fatal,
    but a declared size over ``max_pixels`` is (ImageTooLargeError)."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
    samples, skipped = [], []
    for k, p in enumerate(files):
        if k and k % 500 == 0:
            progress(f"read {k}/{len(files)} image headers")
        try:
            h, w = read_image_size(p, max_pixels)
        except ImageTooLargeError:
            raise
        except BadInputFileError as exc:
            skipped.append(str(exc))
            continue
        samples.append(Sample(str(p.relative_to(folder)), h, w))
    return samples, skipped


def read_annotations(path: Path, max_pixels: int = MAX_IMAGE_PIXELS) -> list[Sample]:
    """Samples from a COCO-like annotation file (see the module docstring for the format)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadInputFileError(f"{path}: not a readable JSON annotation file ({exc})") from exc
    except RecursionError:
        raise BadInputFileError(f"{path}: nested too deeply to be a COCO-like annotation file") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("images"), list):
        raise BadInputFileError(f"{path}: expected an object with an 'images' list (COCO-like; see "
                                "`bridge shapes buckets --help`)")
    counts: Counter[Any] = Counter()
    for k, ann in enumerate(doc.get("annotations") or []):
        if not isinstance(ann, dict) or not isinstance(ann.get("image_id"), int | str):
            raise BadInputFileError(f"{path}: annotations[{k}] has no image_id (an integer or a string)")
        counts[ann["image_id"]] += 1
    samples = []
    for k, img in enumerate(doc["images"]):
        if not isinstance(img, dict) or not isinstance(img.get("id"), int | str):
            raise BadInputFileError(f"{path}: images[{k}] has no id (an integer or a string)")
        try:
            h = int(img["height"]) if img.get("height") is not None else None
            w = int(img["width"]) if img.get("width") is not None else None
        except (TypeError, ValueError, OverflowError):  # a string, a list, NaN or 1e400 (inf)
            h = w = -1
        if (h is None) != (w is None) or (h is not None and w is not None and (h <= 0 or w <= 0)):
            raise BadInputFileError(f"{path}: images[{k}] needs both a positive integer height and width (or neither)")
        if h is not None and w is not None:
            check_declared_size(f"{path}: images[{k}] ({img.get('file_name', img['id'])})", h, w, max_pixels)
        samples.append(Sample(str(img.get("file_name", img["id"])), h, w, counts.get(img["id"], 0)))
    return samples


def load_samples(data: str | Path, progress: Progress = quiet,
                 max_pixels: int = MAX_IMAGE_PIXELS) -> tuple[list[Sample], list[str]]:
    """Samples from an image folder or an annotation JSON; (samples, warnings)."""
    path = Path(data)
    if path.is_dir():
        samples, skipped = scan_images(path, progress, max_pixels)
        warnings = [f"{len(skipped)} file(s) skipped: " + "; ".join(skipped[:3])] if skipped else []
    elif path.is_file():
        if path.suffix.lower() != ".json":
            raise UsageError(f"--data {path}: give an image folder or a .json annotation file")
        samples, warnings = read_annotations(path, max_pixels), []
    else:
        raise SourceNotFoundError(f"--data {path}: no such file or folder")
    if not samples:
        raise UsageError(f"--data {path}: no images found (PNG, JPEG, PPM/PGM, BMP, .npy)")
    return samples, warnings


def limit_side(h: int, w: int, limit: int | None) -> tuple[int, int]:
    """Scale (h, w) so the longer side is at most ``limit`` (aspect kept), as detectors' preprocessing does."""
    if not limit or max(h, w) <= limit:
        return h, w
    scale = limit / max(h, w)
    return max(1, round(h * scale)), max(1, round(w * scale))
