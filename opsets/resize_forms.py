"""Which nearest-Resize forms pick exactly the same source pixels as asymmetric + floor.

asymmetric + floor (``src = floor(x / s)``) is Upsample's nearest and the form every runtime
accepts. Another (coordinate mode, nearest_mode) pair is interchangeable with it exactly when
both map every output index to the same input index. The maps follow the ONNX Resize spec
(onnx/defs/tensor/defs.cc, "coordinate_transformation_mode"; onnxruntime's upsamplebase.h
rounds the same way), computed per axis for integer upscales only:

- half_pixel (and pytorch_half_pixel, half_pixel_symmetric at an exact integer upscale) gives
  ``src = k + (r + 0.5)/s - 0.5`` for ``x = k*s + r``: the offset stays strictly inside
  (-0.5, 0.5), so both round_prefer_* modes give ``k`` (floor/ceil do not).
- align_corners depends on the input length, so it needs a static input dim.
For non-integer scales ties at .5 appear and float32 rounding decides; we never claim those.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

# The maps of the half_pixel family and asymmetric are periodic in the input length (they depend on
# x mod s only, and floor's k never needs clamping), so these lengths cover every case but align_corners.
_PROBE_LENGTHS = (1, 2, 3, 5, 8)


def _round(src: np.ndarray, rounding: str) -> np.ndarray:
    if rounding == "floor":
        return np.floor(src)
    if rounding == "ceil":
        return np.ceil(src)
    frac = src - np.floor(src)
    if rounding == "round_prefer_floor":
        return np.where(frac == 0.5, np.floor(src), np.round(src))
    if rounding == "round_prefer_ceil":
        return np.where(frac == 0.5, np.ceil(src), np.round(src))
    raise ValueError(rounding)


def source_indices(coord: str, rounding: str, in_len: int, scale: float, dtype: type = np.float32) -> np.ndarray | None:
    """Input index of every output index along one axis (None: a mode we do not model)."""
    out_len = int(np.floor(in_len * scale))
    x: np.ndarray = np.arange(out_len, dtype=dtype)
    s = dtype(scale)
    if coord in ("half_pixel", "half_pixel_symmetric"):
        src = (x + dtype(0.5)) / s - dtype(0.5)
    elif coord == "pytorch_half_pixel":
        src = (x + dtype(0.5)) / s - dtype(0.5) if out_len > 1 else np.zeros_like(x)
    elif coord == "align_corners":
        src = x * dtype(in_len - 1) / dtype(out_len - 1) if out_len > 1 else np.zeros_like(x)
    elif coord == "asymmetric":
        src = x / s
    elif coord == "tf_half_pixel_for_nn":
        src = (x + dtype(0.5)) / s
    else:
        return None
    return np.clip(_round(src, rounding), 0, in_len - 1).astype(np.int64)


def asymmetric_floor_equivalent(coord: str, rounding: str, scales: Sequence[float] | np.ndarray,
                                in_shape: Sequence[object] | None = None) -> str | None:
    """None when nearest (coord, rounding) at ``scales`` equals asymmetric + floor; else the reason why not."""
    scales = np.asarray(scales, dtype=np.float64)
    if coord == "asymmetric" and rounding == "floor":
        return None
    if np.any(scales < 1) or np.any(scales != np.round(scales)):
        return f"scales {scales.tolist()} are not all integer upscales (>= 1), where {coord}/{rounding} and asymmetric/floor differ"
    for axis, scale in enumerate(scales):
        if scale == 1 and coord != "tf_half_pixel_for_nn":
            continue  # every modelled mode maps x -> x at scale 1 (tf_half_pixel_for_nn shifts by 0.5)
        dim = in_shape[axis] if in_shape is not None and axis < len(in_shape) else None
        if coord == "align_corners" and not isinstance(dim, int):
            return f"align_corners depends on the input length and axis {axis} is not static"
        lengths = (dim,) if isinstance(dim, int) else _PROBE_LENGTHS
        for n in lengths:
            want = np.floor(np.arange(int(n * scale)) / scale).astype(np.int64)
            for dtype in (np.float32, np.float64):
                got = source_indices(coord, rounding, int(n), float(scale), dtype)
                if got is None:
                    return f"coordinate_transformation_mode={coord} is not modelled"
                if not np.array_equal(got, want):
                    return f"{coord}/{rounding} picks different pixels than asymmetric/floor at scale {scale:g}"
    return None
