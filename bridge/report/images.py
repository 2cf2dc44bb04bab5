"""Pictures for the HTML report, drawn with Pillow: detection overlays and per-element error histograms.

Takes plain data (numpy images, box lists, histogram counts) and returns PNG bytes, so the report layer
never runs a model. Pillow comes with the ``report`` extra (``bridge.errors.install_command("report")``); without
it ``available()`` is False and the report says the pictures were left out.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

REFERENCE_COLOUR = (0, 160, 60)  # green: the source framework's boxes
CANDIDATE_COLOUR = (220, 40, 200)  # magenta: the converted model's boxes
UNMATCHED_COLOUR = (255, 60, 0)  # marks boxes without a partner on the other side (drawn dashed)
OVERLAY_SIDE = 320  # rendered image size (longest side), px


@dataclass
class Box:
    """One detection in image coordinates of the drawn picture's source (pixels, or normalised when ``normalised``)."""

    x1: float
    y1: float
    x2: float
    y2: float
    label: int
    score: float
    matched: bool = True


@dataclass
class Overlay:
    """An input image with reference and candidate boxes (``image``: H x W x 3 uint8)."""

    title: str
    image: np.ndarray
    reference: list[Box] = field(default_factory=list)
    candidate: list[Box] = field(default_factory=list)
    normalised: bool = True


def available() -> bool:
    try:
        import PIL  # noqa: F401
    except ImportError:
        return False
    return True


def as_display_image(array: np.ndarray) -> np.ndarray:
    """A model input (C x H x W or H x W x C, any range) as H x W x 3 uint8, stretched to its min..max."""
    a = np.asarray(array, dtype=np.float64)
    if a.ndim == 2:
        a = a[None]
    if a.ndim != 3:
        raise ValueError(f"cannot show a tensor of shape {list(a.shape)} as an image")
    if a.shape[0] in (1, 3) and a.shape[-1] not in (1, 3):
        a = np.transpose(a, (1, 2, 0))
    if a.shape[-1] == 1:
        a = np.repeat(a, 3, axis=-1)
    finite = a[np.isfinite(a)]
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    scaled = (np.nan_to_num(a, nan=lo) - lo) / (hi - lo if hi > lo else 1.0)
    return (np.clip(scaled, 0, 1) * 255).astype(np.uint8)


def _png(image: Any) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format="PNG", optimize=True)
    return buf.getvalue()


def _dashed_rectangle(draw: Any, box: Sequence[float], colour: tuple[int, int, int], width: int, dash: int = 6) -> None:
    x1, y1, x2, y2 = box
    for (ax, ay, bx, by) in ((x1, y1, x2, y1), (x2, y1, x2, y2), (x2, y2, x1, y2), (x1, y2, x1, y1)):
        length = max(abs(bx - ax), abs(by - ay), 1.0)
        steps = int(length // dash) + 1
        for k in range(0, steps, 2):
            t0, t1 = k / steps, min((k + 1) / steps, 1.0)
            draw.line((ax + (bx - ax) * t0, ay + (by - ay) * t0, ax + (bx - ax) * t1, ay + (by - ay) * t1),
                      fill=colour, width=width)


def render_overlay(overlay: Overlay, side: int = OVERLAY_SIDE) -> bytes:
    """The image scaled to ``side`` px with reference boxes (green) and converted boxes (magenta, inset by
    2 px so coinciding boxes stay visible); boxes without a partner are dashed with an orange-red corner."""
    from PIL import Image, ImageDraw

    img = Image.fromarray(overlay.image)
    # mostly grey, a little colour: the boxes' colours must stand out on any image
    img = Image.blend(img.convert("L").convert("RGB"), img, 0.3)
    h, w = overlay.image.shape[:2]
    scale = side / max(h, w)
    img = img.resize((max(1, round(w * scale)), max(1, round(h * scale))), Image.Resampling.NEAREST)
    draw = ImageDraw.Draw(img)
    sx = img.width if overlay.normalised else scale
    sy = img.height if overlay.normalised else scale
    for boxes, colour, inset in ((overlay.reference, REFERENCE_COLOUR, 0), (overlay.candidate, CANDIDATE_COLOUR, 2)):
        for b in boxes:
            if not all(np.isfinite(v) for v in (b.x1, b.y1, b.x2, b.y2)):
                continue
            rect = (b.x1 * sx + inset, b.y1 * sy + inset, b.x2 * sx - inset, b.y2 * sy - inset)
            rect = (min(rect[0], rect[2]), min(rect[1], rect[3]), max(rect[0], rect[2]), max(rect[1], rect[3]))
            if b.matched:
                draw.rectangle(rect, outline=colour, width=3)
            else:  # dashed in its side's colour, with an orange-red corner marker
                _dashed_rectangle(draw, rect, colour, 3)
                draw.rectangle((rect[0] - 3, rect[1] - 3, rect[0] + 4, rect[1] + 4), fill=UNMATCHED_COLOUR)
            label = f"{b.label}:{b.score:.2f}"
            at = (rect[0] + 4, rect[1] + 3) if colour == REFERENCE_COLOUR else (rect[0] + 4, rect[3] - 14)
            draw.rectangle(draw.textbbox(at, label), fill=(255, 255, 255))
            draw.text(at, label, fill=colour)
    return _png(img)


def render_histogram(edges: Sequence[float], counts: Sequence[int], title: str, width: int = 420,
                     height: int = 180) -> bytes:
    """A bar chart of per-element |error| counts over log-spaced bins (``edges`` has len(counts)+1 values)."""
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(img)
    left, right, top, bottom = 44, width - 8, 18, height - 28
    draw.text((left, 2), title, fill=(0, 0, 0))
    draw.line((left, bottom, right, bottom), fill=(0, 0, 0))
    draw.line((left, top, left, bottom), fill=(0, 0, 0))
    peak = max(counts, default=0)
    if peak and counts:
        bar = (right - left) / len(counts)
        for k, c in enumerate(counts):
            if c:
                y = bottom - (bottom - top) * (np.log1p(c) / np.log1p(peak))
                draw.rectangle((left + k * bar + 1, y, left + (k + 1) * bar - 1, bottom - 1), fill=(200, 60, 60))
        draw.text((2, top), f"{peak}", fill=(0, 0, 0))
        draw.text((2, bottom - 10), "0", fill=(0, 0, 0))
        draw.text((left, bottom + 4), f"{edges[0]:.1e}", fill=(0, 0, 0))
        draw.text((right - 52, bottom + 4), f"{edges[-1]:.1e}", fill=(0, 0, 0))
        draw.text(((left + right) // 2 - 40, bottom + 14), "|error| (log bins)", fill=(80, 80, 80))
    else:
        draw.text((left + 10, (top + bottom) // 2), "no element differs", fill=(0, 0, 0))
    return _png(img)
