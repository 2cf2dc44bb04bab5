"""Models with large-valued outputs, built in code (importable as ``large_valued_models``), for the tolerance
rule's tests (``tests/bridge/validation/test_tolerance_routes.py``) and the mutation suite.

Two correct runtimes differ on such outputs by float32 rounding that follows the magnitude of what was summed, so
elements near zero differ by far more than ``atol`` while the output's range is 1e2-1e3 (issue 35, item 4):

- ``seg_logits()`` (``large_valued_models.py:seg_logits``, a PyTorch source): a plain conv net (six 3x3
  conv + ReLU, 3 -> 256 channels, stride 4 overall) ending in a 3x3 conv to 21 per-pixel class logits that reach
  ~1.5e3 on image-like inputs (``seg_images``, [N, 3, 128, 128] in [0, 1]); PyTorch (oneDNN) and onnxruntime
  (MLAS) sum in different orders.
- ``palm_tflite()``: a BlazePalm-shaped detector head as MediaPipe ships it (192 x 192 RGB fed in [-1, 1];
  ``regressors`` [1, 2016, 18] = box + 7 keypoints in pixels, reaching ~500, and ``classificators`` [1, 2016, 1]
  logits; no signature, MediaPipe's tensor names), converted with ``tf.lite.TFLiteConverter`` and cached under
  ``tests/.cache/tolerance/`` keyed by the code that decides its weights; TFLite (XNNPACK) and onnxruntime sum
  in different orders. ``palm_images`` gives its feeds ([N, 192, 192, 3], [-1, 1] or [0, 1]).

Weights are seeded He-normal (variance-preserving through ReLU, so the values keep the magnitude trained
detectors reach): the rounding studied depends on magnitudes and reduction lengths, not on what was learned.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

CACHE = Path(__file__).resolve().parent / ".cache" / "tolerance"
SEG_SIDE, SEG_CLASSES = 128, 21
SEG_CHANNELS = (3, 32, 64, 96, 128, 192, 256)
SEG_STRIDES = (2, 1, 2, 1, 1, 1)
SEG_LOGIT_SCALE = 600.0  # the head's weights x this: logits reach ~1.5e3 (the reported model's reach 1.7e3)
PALM_SIDE = 192
PALM_ANCHORS = ((24, 2), (12, 6))  # (grid, anchors per cell): 24 x 24 x 2 + 12 x 12 x 6 = 2016, as BlazePalm


def images(count: int, side: int, seed: int) -> np.ndarray:
    """Image-like RGB [count, side, side, 3] in [0, 1]: a smooth gradient, four flat rectangles, sensor noise."""
    rng = np.random.default_rng(seed)
    yy, xx = (np.mgrid[0:side, 0:side] / side)[..., None]
    out = np.empty((count, side, side, 3), np.float32)
    for k in range(count):
        img = rng.uniform(0, 1, 3) + rng.uniform(-0.5, 0.5, 3) * xx + rng.uniform(-0.5, 0.5, 3) * yy
        for _ in range(4):
            w = int(rng.integers(side // 6, side // 2))
            x0, y0 = rng.integers(0, side - w, 2)
            img[y0:y0 + w, x0:x0 + w] = rng.uniform(0, 1, 3)
        out[k] = np.clip(img + rng.normal(0, 0.03, img.shape), 0, 1)
    return out


def seg_images(count: int, seed: int) -> np.ndarray:
    """``seg_logits``' inputs: [count, 3, 128, 128] in [0, 1]."""
    return np.ascontiguousarray(images(count, SEG_SIDE, seed).transpose(0, 3, 1, 2))


def seg_logits() -> Any:
    """The segmentation-logits net (module docstring), seeded; a ``file.py:factory`` for bridge."""
    import torch

    generator = torch.Generator().manual_seed(0)
    layers: list[Any] = []
    for k, stride in enumerate(SEG_STRIDES):
        conv = torch.nn.Conv2d(SEG_CHANNELS[k], SEG_CHANNELS[k + 1], 3, stride, 1)
        _he(conv, generator)
        layers += [conv, torch.nn.ReLU()]
    head = torch.nn.Conv2d(SEG_CHANNELS[-1], SEG_CLASSES, 3, 1, 1)
    _he(head, generator, SEG_LOGIT_SCALE)
    return torch.nn.Sequential(*layers, head).eval()


def _he(conv: Any, generator: Any, gain: float = 1.0) -> None:
    import torch

    fan_in = conv.weight.shape[1] * conv.weight.shape[2] * conv.weight.shape[3]
    with torch.no_grad():
        conv.weight.copy_(torch.randn(conv.weight.shape, generator=generator) * (2 / fan_in) ** 0.5 * gain)
        conv.bias.copy_(torch.randn(conv.bias.shape, generator=generator) * 0.1 * gain)


def palm_images(count: int, seed: int, value_range: tuple[float, float] = (-1.0, 1.0)) -> np.ndarray:
    """``palm_tflite``'s inputs: [count, 192, 192, 3] scaled to ``value_range`` (MediaPipe feeds [-1, 1])."""
    lo, hi = value_range
    return (images(count, PALM_SIDE, seed) * (hi - lo) + lo).astype(np.float32)


def _palm_keras() -> Any:
    import keras

    keras.utils.set_random_seed(5)
    inp = keras.Input((PALM_SIDE, PALM_SIDE, 3), batch_size=1, name="input")

    def conv(x: Any, filters: int, stride: int = 1) -> Any:
        return keras.layers.Conv2D(filters, 3, strides=stride, padding="same", activation="relu",
                                   kernel_initializer="he_normal")(x)

    x = conv(conv(inp, 32, 2), 32)  # 96
    x = conv(conv(x, 64, 2), 64)  # 48
    x24 = conv(conv(conv(x, 128, 2), 128), 128)  # 24
    x12 = conv(conv(conv(x24, 256, 2), 256), 256)  # 12
    heads = []
    for feat, (grid, per_cell) in zip((x24, x12), PALM_ANCHORS, strict=True):
        cells = grid * grid * per_cell
        reg = keras.layers.Conv2D(per_cell * 18, 1, kernel_initializer="he_normal")(feat)
        cls = keras.layers.Conv2D(per_cell, 1, kernel_initializer="he_normal")(feat)
        heads.append((keras.layers.Reshape((cells, 18))(reg), keras.layers.Reshape((cells, 1))(cls)))
    # box + keypoint offsets in pixels of the 192 px input; score logits of the size trained heads give
    reg = keras.layers.Rescaling(float(PALM_SIDE), name="regressors")(keras.layers.Concatenate(axis=1)([h[0] for h in heads]))
    cls = keras.layers.Rescaling(10.0, name="classificators")(keras.layers.Concatenate(axis=1)([h[1] for h in heads]))
    return keras.Model(inp, [reg, cls])


def _fingerprint() -> str:
    import inspect

    from blazeface_models import _mediapipe_names

    parts = [inspect.getsource(f) for f in (_palm_keras, _mediapipe_names)] + [repr((PALM_SIDE, PALM_ANCHORS))]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:12]


def palm_tflite() -> Path:
    """The BlazePalm-shaped .tflite (module docstring), built on first use (~1 min) and cached."""
    path = CACHE / f"palm_{_fingerprint()}.tflite"
    if path.is_file():
        return path
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf
    from blazeface_models import _mediapipe_names

    content = _mediapipe_names(tf.lite.TFLiteConverter.from_keras_model(_palm_keras()).convert())
    CACHE.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=CACHE, suffix=".tmp")
    with os.fdopen(fd, "wb") as f:
        f.write(content)
    os.replace(tmp, path)
    return path
