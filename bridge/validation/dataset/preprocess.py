"""Preprocessing declared once: a decoded image (H x W x 3 uint8 RGB) -> the model's input array, and back.

``Preprocessing`` says how images become inputs: resize (``stretch`` to the input size, ``letterbox``
keeping the aspect ratio with padding, ``shorter`` side to the input size then a centre crop, ``none``),
channel order, layout, dtype and ``(pixel * scale - mean) / std`` per channel. The same object feeds the
source and every candidate, so they see the same arrays. ``prepare`` returns the array and the ``Frame``
that maps boxes in the model's input pixels back to the original image's pixels (undoing the padding or
crop and the scale), so mAP is measured against labels in the image's own coordinates.

Defaults per source framework come from the adapter that converts it (its ``preprocessing`` attribute,
e.g. mxnet-ssd's RGB, mean 123,117,104, no std); ``describe`` states what was used in the report.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from bridge.errors import UsageError

RESIZE_MODES = ("stretch", "letterbox", "shorter", "none")
CHANNEL_ORDERS = ("RGB", "BGR")
LAYOUTS = ("NCHW", "NHWC")
LETTERBOX_FILL = 114  # the padding's pixel value before normalisation (YOLO's letterbox grey)


def parse_floats(text: str | Sequence[float] | None, option: str) -> tuple[float, ...]:
    """``123,117,104`` (or a sequence) as floats; ``1/255`` style fractions allowed."""
    if text is None or text == "":
        return ()
    items = text.split(",") if isinstance(text, str) else list(text)
    values = []
    for item in items:
        try:
            if isinstance(item, str) and "/" in item:
                num, den = item.split("/", 1)
                values.append(float(num) / float(den))
            else:
                values.append(float(item))
        except (ValueError, ZeroDivisionError):
            raise UsageError(f"{option} {text!r}: expected numbers separated by commas, e.g. 123,117,104") from None
    return tuple(values)


@dataclass(frozen=True)
class Preprocessing:
    """How an image becomes the model's input (module docstring). ``layout`` / ``dtype`` None: read from
    the model's input (a dim of 1 or 3 after the batch axis is channels first). ``origin`` says where the
    values came from, for the report."""

    resize: str = "stretch"
    channel_order: str = "RGB"
    layout: str | None = None
    dtype: str | None = None
    mean: tuple[float, ...] = ()
    std: tuple[float, ...] = ()
    scale: float = 1.0
    origin: str = "bridge's defaults"

    def __post_init__(self) -> None:
        object.__setattr__(self, "resize", str(self.resize).lower())
        object.__setattr__(self, "channel_order", str(self.channel_order).upper())
        if self.layout is not None:
            object.__setattr__(self, "layout", str(self.layout).upper())
        object.__setattr__(self, "mean", parse_floats(self.mean, "--mean"))
        object.__setattr__(self, "std", parse_floats(self.std, "--std"))
        scale = parse_floats(str(self.scale) if not isinstance(self.scale, str) else self.scale, "--scale")
        object.__setattr__(self, "scale", scale[0] if scale else 1.0)
        for value, choices, option in ((self.resize, RESIZE_MODES, "--resize"),
                                       (self.channel_order, CHANNEL_ORDERS, "--channel-order"),
                                       (self.layout, (*LAYOUTS, None), "--layout")):
            if value not in choices:
                raise UsageError(f"{option} {value!r}: choose one of {', '.join(c for c in choices if c)}")
        if any(s == 0 for s in self.std):
            raise UsageError(f"--std {','.join(map(str, self.std))}: a standard deviation of 0 divides by zero")
        for values, option in ((self.mean, "--mean"), (self.std, "--std")):
            if len(values) not in (0, 1, 3):
                raise UsageError(f"{option}: give one value or one per channel (3), not {len(values)}")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None, origin: str = "") -> Preprocessing:
        """From a manifest's / trained model's ``{"resize": ..., "channel_order": ..., "mean": [...], ...}``."""
        data = dict(data or {})
        known = {f for f in cls.__dataclass_fields__ if f != "origin"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise UsageError(f"preprocessing: unknown field(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})")
        return cls(**data, origin=origin or "given")

    def with_overrides(self, origin: str, **values: Any) -> Preprocessing:
        """These settings with every value that is not None replaced (the user's flags over the defaults)."""
        given = {k: v for k, v in values.items() if v is not None and v != () and v != ""}
        if not given:
            return self
        return replace(self, **given, origin=f"{self.origin}; {origin}: {', '.join(sorted(given))}")

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["mean"], data["std"] = list(self.mean), list(self.std)
        return data

    def describe(self) -> str:
        norm = []
        if self.scale != 1.0:
            norm.append(f"x{self.scale:g}")
        if self.mean:
            norm.append(f"- ({','.join(f'{m:g}' for m in self.mean)})")
        if self.std:
            norm.append(f"/ ({','.join(f'{s:g}' for s in self.std)})")
        return (f"{self.channel_order}, resize {self.resize}, pixels {' '.join(norm) or 'as they are (0..255)'}"
                + (f", {self.layout}" if self.layout else "") + (f", {self.dtype}" if self.dtype else "")
                + f" ({self.origin})")


@dataclass(frozen=True)
class Frame:
    """Where a model-input pixel came from in the original image: ``x_orig = (x_in - pad_x) / sx + crop_x``."""

    width: int  # original image
    height: int
    sx: float = 1.0
    sy: float = 1.0
    pad_x: float = 0.0
    pad_y: float = 0.0
    crop_x: float = 0.0
    crop_y: float = 0.0
    input_width: int = 0  # the model's input
    input_height: int = 0

    def to_original(self, boxes: np.ndarray, normalised: bool, clip: bool = True) -> np.ndarray:
        """[K, 4] corner boxes in the model's input (pixels, or [0, 1] of it when ``normalised``) -> original
        image pixels, clipped to the image (unless ``clip`` is False: keypoints, as (x, y, x, y))."""
        b = np.asarray(boxes, np.float64).reshape(-1, 4).copy()
        if normalised:
            b[:, [0, 2]] *= self.input_width
            b[:, [1, 3]] *= self.input_height
        b[:, [0, 2]] = (b[:, [0, 2]] - self.pad_x) / self.sx + self.crop_x
        b[:, [1, 3]] = (b[:, [1, 3]] - self.pad_y) / self.sy + self.crop_y
        if clip:
            with np.errstate(invalid="ignore"):
                b[:, [0, 2]] = np.clip(b[:, [0, 2]], 0, self.width)
                b[:, [1, 3]] = np.clip(b[:, [1, 3]], 0, self.height)
        return b


@dataclass(frozen=True)
class InputFrame:
    """The model input the images feed: name, layout, spatial size, channels, dtype."""

    name: str
    layout: str
    height: int
    width: int
    channels: int
    dtype: str
    batch: int | None = None  # a fixed batch size, or None (dynamic)

    def shape(self, batch: int) -> tuple[int, ...]:
        if self.layout == "NCHW":
            return (batch, self.channels, self.height, self.width)
        return (batch, self.height, self.width, self.channels)


@dataclass
class Prepared:
    """One image made ready: the model-input array (without the batch axis) and its frame."""

    array: np.ndarray
    frame: Frame
    extra: dict[str, Any] = field(default_factory=dict)


def resize_plan(mode: str, width: int, height: int, target_w: int, target_h: int
                ) -> tuple[tuple[int, int], Frame]:
    """The size to resize an image to and the frame of the final input (before padding / crop are applied)."""
    if mode == "none" or (width, height) == (target_w, target_h):
        if mode == "none" and (width, height) != (target_w, target_h):
            raise UsageError(f"an image of {width}x{height} does not fit the model's {target_w}x{target_h} input "
                             "with --resize none; choose --resize stretch, letterbox or shorter")
        return (width, height), Frame(width, height, input_width=target_w, input_height=target_h)
    if mode == "stretch":
        return (target_w, target_h), Frame(width, height, target_w / width, target_h / height,
                                           input_width=target_w, input_height=target_h)
    if mode == "letterbox":
        s = min(target_w / width, target_h / height)
        nw, nh = max(1, round(width * s)), max(1, round(height * s))
        return (nw, nh), Frame(width, height, nw / width, nh / height, (target_w - nw) // 2, (target_h - nh) // 2,
                               input_width=target_w, input_height=target_h)
    # shorter: the shorter side to the target, then a centre crop
    s = max(target_w / width, target_h / height)
    nw, nh = max(target_w, round(width * s)), max(target_h, round(height * s))
    cx, cy = (nw - target_w) // 2, (nh - target_h) // 2
    return (nw, nh), Frame(width, height, nw / width, nh / height, crop_x=cx / (nw / width), crop_y=cy / (nh / height),
                           input_width=target_w, input_height=target_h)


def prepare(image: np.ndarray, pre: Preprocessing, target: InputFrame) -> Prepared:
    """An H x W x C uint8 image (RGB, or 1 channel) as the model's input array (no batch axis) and its frame."""
    from PIL import Image

    height, width = image.shape[:2]
    (nw, nh), frame = resize_plan(pre.resize, width, height, target.width, target.height)
    pixels = image
    if (nw, nh) != (width, height):
        pil = Image.fromarray(image if image.shape[-1] != 1 else image[..., 0])
        pixels = np.asarray(pil.resize((nw, nh), Image.Resampling.BILINEAR))
        if pixels.ndim == 2:
            pixels = pixels[..., None]
    if pre.resize == "letterbox" and (nw, nh) != (target.width, target.height):
        canvas = np.full((target.height, target.width, pixels.shape[-1]), LETTERBOX_FILL, np.uint8)
        px, py = int(frame.pad_x), int(frame.pad_y)
        canvas[py:py + nh, px:px + nw] = pixels
        pixels = canvas
    elif pre.resize == "shorter" and (nw, nh) != (target.width, target.height):
        cx, cy = (nw - target.width) // 2, (nh - target.height) // 2
        pixels = pixels[cy:cy + target.height, cx:cx + target.width]
    array = pixels.astype(np.float32)
    if pre.channel_order == "BGR" and array.shape[-1] == 3:
        array = array[..., ::-1]
    if pre.scale != 1.0:
        array = array * np.float32(pre.scale)
    if pre.mean:
        array = array - np.asarray(pre.mean, np.float32)
    if pre.std:
        array = array / np.asarray(pre.std, np.float32)
    if target.layout == "NCHW":
        array = np.transpose(array, (2, 0, 1))
    dtype = np.dtype(pre.dtype or target.dtype)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        array = np.clip(np.rint(array), info.min, info.max)
    return Prepared(np.ascontiguousarray(array.astype(dtype)), frame)


def input_frame(name: str, shape: Sequence[Any] | None, dtype: str, pre: Preprocessing,
                fallback: Sequence[int] | None = None) -> InputFrame:
    """The image input's frame from its (possibly symbolic) shape; ``fallback``: a concrete sample shape
    (``--input``) for dims the graph leaves open. UsageError when the size cannot be known."""
    dims = list(shape or ())
    if fallback is not None and len(fallback) == len(dims):
        dims = [d if isinstance(d, int) and d > 0 else f for d, f in zip(dims, fallback, strict=True)]
    if len(dims) != 4:
        raise UsageError(f"--dataset: input '{name}' has shape {list(shape or [])}; images feed a 4-D input "
                         "(NCHW or NHWC)")
    layout = pre.layout
    if layout is None:
        layout = "NCHW" if dims[1] in (1, 3) else "NHWC" if dims[3] in (1, 3) else "NCHW"
    h, w, c = (dims[2], dims[3], dims[1]) if layout == "NCHW" else (dims[1], dims[2], dims[3])
    if not all(isinstance(d, int) and d > 0 for d in (h, w)):
        raise UsageError(f"--dataset: input '{name}' has no fixed height/width ({list(shape or [])}); give its "
                         f"size with --input {name}:1,3,H,W (or 1,H,W,3)")
    channels = c if isinstance(c, int) and c > 0 else 3
    if channels not in (1, 3):
        raise UsageError(f"--dataset: input '{name}' has {channels} channels ({layout}); images have 1 or 3 "
                         "(say --layout NCHW or NHWC if the layout was guessed wrong)")
    batch = dims[0] if isinstance(dims[0], int) and dims[0] > 0 else None
    if shape is not None and len(shape) == 4 and not (isinstance(shape[0], int) and shape[0] > 0):
        batch = None  # the graph's batch axis is dynamic: the sample size does not fix it
    return InputFrame(name, layout, int(h), int(w), int(channels), dtype if dtype != "unknown" else "float32", batch)


__all__ = ["CHANNEL_ORDERS", "LAYOUTS", "RESIZE_MODES", "Frame", "InputFrame", "Prepared", "Preprocessing",
           "input_frame", "parse_floats", "prepare", "resize_plan"]
