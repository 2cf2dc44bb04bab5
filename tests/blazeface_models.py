"""TFLite sources as face / palm detectors ship them, built in code (importable as ``blazeface_models``).

- ``blazeface_tflite()``: a BlazeFace-style face detector (128 x 128 RGB in [-1, 1]; a small conv backbone and
  two heads, 16 x 16 x 2 and 8 x 8 x 6 anchors = 896; ``regressors`` [1, 896, 16] = box (x, y, w, h) + 6
  keypoints (x, y), in pixels relative to the anchor centre, and ``classificators`` [1, 896, 1] logits), trained
  briefly on procedural faces (``draw_faces``) against MediaPipe's BlazeFace anchors (``BLAZEFACE_ANCHORS``) and
  linear encoding (scale 128), converted with ``tf.lite.TFLiteConverter`` and renamed as MediaPipe's files are
  (input ``input``, outputs ``regressors`` then ``classificators``, no signature). Trained once (seeded) and
  cached under ``tests/.cache/graft/`` keyed by the source of the code that decides its weights.
- ``detector_tflite(path)``: that detector untrained, batch 1, MediaPipe's names (cheap; no training).
- ``sparse_tflite(path)``: a conv + dense model whose weights are mostly zeros, converted with
  ``tf.lite.Optimize.EXPERIMENTAL_SPARSITY``: its weights are stored sparse and expanded by ``DENSIFY`` ops.
- ``custom_op_tflite(path)``: a conv backbone ending in ``erfinv`` (no TFLite builtin), converted with
  ``allow_custom_ops``: a CUSTOM op ``Erfinv``, as MediaPipe's segmentation models end in
  ``Convolution2DTransposeBias``.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

CACHE = Path(__file__).resolve().parent / ".cache" / "graft"
SIZE = 128
SCALE = 128.0
NUM_KEYPOINTS = 6
BLAZEFACE_ANCHORS = {  # mediapipe/modules/face_detection/face_detection_short_range.pbtxt, as YAML
    "generator": "ssd", "num_layers": 4, "min_scale": 0.1484375, "max_scale": 0.75, "input_size_height": 128,
    "input_size_width": 128, "anchor_offset_x": 0.5, "anchor_offset_y": 0.5, "strides": [8, 16, 16, 16],
    "aspect_ratios": [1.0], "fixed_anchor_size": True, "interpolated_scale_aspect_ratio": 1.0,
}


def blazeface_anchor_centers() -> np.ndarray:
    """The 896 anchor centres (x, y) of BLAZEFACE_ANCHORS, by the plain rule (16 x 16 x 2, then 8 x 8 x 6)."""
    rows = []
    for grid, per_cell in ((16, 2), (8, 6)):
        for y in range(grid):
            for x in range(grid):
                rows += [((x + 0.5) / grid, (y + 0.5) / grid)] * per_cell
    return np.array(rows, np.float32)


def draw_faces(rng: np.random.Generator, max_faces: int = 2) -> tuple[np.ndarray, list[dict[str, Any]]]:
    """An RGB image [128, 128, 3] in [0, 1] with 1..max_faces cartoon faces (skin ellipse, eyes, nose, mouth,
    ears) on a noisy gradient, and per face its box (x1, y1, x2, y2) and 6 keypoints (x, y), normalised:
    eye (image left), eye (image right), nose, mouth, ear (image left), ear (image right)."""
    yy, xx = np.mgrid[0:SIZE, 0:SIZE].astype(np.float32) + 0.5
    base = rng.uniform(0.1, 0.9, 3)
    slope = rng.uniform(-0.3, 0.3, (2, 3))
    img = base + (xx[..., None] / SIZE - 0.5) * slope[0] + (yy[..., None] / SIZE - 0.5) * slope[1]
    img = img + rng.normal(0, 0.04, img.shape)
    faces: list[dict[str, Any]] = []
    for _ in range(int(rng.integers(1, max_faces + 1))):
        for _attempt in range(20):
            w = rng.uniform(22, 60)
            h = w * rng.uniform(1.1, 1.3)
            cx, cy = rng.uniform(w / 2 + 4, SIZE - w / 2 - 4), rng.uniform(h / 2 + 2, SIZE - h / 2 - 2)
            box = np.array([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2])
            if all(_iou(box, f["pixels"]) == 0 for f in faces):
                break
        else:
            continue
        skin = np.array([0.9, 0.68, 0.52]) * rng.uniform(0.6, 1.1)
        ear = ((xx - (cx - w / 2)) / (0.12 * w)) ** 2 + ((yy - cy) / (0.2 * h)) ** 2 <= 1
        ear |= ((xx - (cx + w / 2)) / (0.12 * w)) ** 2 + ((yy - cy) / (0.2 * h)) ** 2 <= 1
        head = ((xx - cx) / (w / 2)) ** 2 + ((yy - cy) / (h / 2)) ** 2 <= 1
        img[ear | head] = skin
        eyes = [(cx - 0.22 * w, cy - 0.12 * h), (cx + 0.22 * w, cy - 0.12 * h)]
        for ex, ey in eyes:
            img[((xx - ex) ** 2 + (yy - ey) ** 2) <= (0.08 * w) ** 2] = (0.05, 0.05, 0.1)
        nose = (cx, cy + 0.06 * h)
        img[((xx - nose[0]) ** 2 + (yy - nose[1]) ** 2) <= (0.05 * w) ** 2] = skin * 0.6
        mouth = (cx, cy + 0.26 * h)
        img[(np.abs(xx - mouth[0]) <= 0.16 * w) & (np.abs(yy - mouth[1]) <= 0.03 * h + 0.5)] = (0.55, 0.1, 0.12)
        points = np.array([*eyes, nose, mouth, (cx - w / 2, cy), (cx + w / 2, cy)], np.float64)
        faces.append({"pixels": box, "box": box / SIZE, "keypoints": points / SIZE})
    return np.clip(img, 0, 1).astype(np.float32), faces


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    inter = max(0.0, min(a[2], b[2]) - max(a[0], b[0])) * max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return float(inter / union) if union > 0 else 0.0


def face_batch(seed: int, count: int) -> tuple[np.ndarray, list[list[dict[str, Any]]]]:
    """``count`` images as the model takes them ([count, 128, 128, 3] in [-1, 1]) and their faces."""
    rng = np.random.default_rng(seed)
    images, truth = [], []
    for _ in range(count):
        img, faces = draw_faces(rng)
        images.append(img * 2 - 1)
        truth.append(faces)
    return np.stack(images).astype(np.float32), truth


def _targets(truth: list[list[dict[str, Any]]]) -> tuple[np.ndarray, np.ndarray]:
    """Training targets per anchor: regressors (MediaPipe linear encoding, pixels) + a positive mask column
    [B, 896, 17], and score targets [B, 896, 1]. An anchor is positive for a face when its centre lies within a
    quarter of the face's size from the face centre, on the layer that fits the face (16 x 16 for faces under
    40 px, 8 x 8 above 32 px)."""
    centers = blazeface_anchor_centers()
    layer = np.array([0] * 512 + [1] * 384)
    reg = np.zeros((len(truth), 896, 17), np.float32)
    cls = np.zeros((len(truth), 896, 1), np.float32)
    for i, faces in enumerate(truth):
        for face in faces:
            x1, y1, x2, y2 = face["box"]
            cx, cy, w, h = (x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1
            fits = (layer == 0) & (w * SIZE < 40) | (layer == 1) & (w * SIZE > 32)
            near = (np.abs(centers[:, 0] - cx) < w / 4) & (np.abs(centers[:, 1] - cy) < h / 4) & fits
            for a in np.flatnonzero(near):
                ax, ay = centers[a]
                kp = (face["keypoints"] - [ax, ay]) * SCALE
                reg[i, a, :16] = [(cx - ax) * SCALE, (cy - ay) * SCALE, w * SCALE, h * SCALE, *kp.reshape(-1)]
                reg[i, a, 16] = 1.0
                cls[i, a, 0] = 1.0
    return reg, cls


def _keras_model(batch: int | None) -> Any:
    """The detector; trained with an open batch, converted with batch 1 (as MediaPipe's models are)."""
    import keras

    keras.utils.set_random_seed(7)
    inp = keras.Input((SIZE, SIZE, 3), batch_size=batch, name="input")

    def conv(x: Any, filters: int, stride: int = 1) -> Any:
        return keras.layers.Conv2D(filters, 3, strides=stride, padding="same", activation="relu")(x)

    x = conv(conv(inp, 16, 2), 24)  # 64
    x = conv(conv(x, 32, 2), 32)  # 32
    x16 = conv(conv(x, 48, 2), 48)  # 16
    x8 = conv(conv(x16, 64, 2), 64)  # 8
    heads = []
    for feat, cells, per_cell in ((x16, 256, 2), (x8, 64, 6)):
        heads.append((keras.layers.Reshape((cells * per_cell, 16))(keras.layers.Conv2D(per_cell * 16, 1)(feat)),
                      keras.layers.Reshape((cells * per_cell, 1))(keras.layers.Conv2D(per_cell, 1)(feat))))
    reg = keras.layers.Rescaling(32.0, name="regressors")(keras.layers.Concatenate(axis=1)([h[0] for h in heads]))
    cls = keras.layers.Concatenate(axis=1, name="classificators")([h[1] for h in heads])
    return keras.Model(inp, [reg, cls])


def _train(model: Any) -> None:
    import keras
    import tensorflow as tf

    def reg_loss(y_true: Any, y_pred: Any) -> Any:
        mask = y_true[..., 16:]
        err = keras.losses.huber(y_true[..., :16, None] / SCALE, y_pred[..., None] / SCALE, delta=0.1)
        return tf.reduce_sum(tf.reduce_sum(err, -1) * mask[..., 0]) / tf.maximum(tf.reduce_sum(mask), 1.0) * 50.0

    def cls_loss(y_true: Any, y_pred: Any) -> Any:
        bce = tf.nn.sigmoid_cross_entropy_with_logits(labels=y_true, logits=y_pred)
        return tf.reduce_mean(bce * (1.0 + 30.0 * y_true))

    images, truth = face_batch(seed=11, count=1200)
    reg, cls = _targets(truth)
    model.compile(optimizer=keras.optimizers.Adam(2e-3), loss=[reg_loss, cls_loss])
    model.fit(images, [reg, cls], batch_size=32, epochs=14, verbose=0, shuffle=True)


def _mediapipe_names(content: bytes) -> bytes:
    """The flatbuffer with MediaPipe's tensor names and output order, and no signature (as their files are)."""
    import flatbuffers
    from ai_edge_litert import schema_py_generated as schema

    model = schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(content, 0))
    graph = model.subgraphs[0]
    graph.tensors[graph.inputs[0]].name = b"input"
    for index in graph.outputs:
        graph.tensors[index].name = b"classificators" if graph.tensors[index].shape[-1] == 1 else b"regressors"
    graph.outputs = sorted(graph.outputs, key=lambda i: graph.tensors[i].name != b"regressors")
    model.signatureDefs = []
    builder = flatbuffers.Builder(len(content) + 1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def _fingerprint() -> str:
    """The cache key: the code that decides the trained weights (not this file's other helpers or docs)."""
    import inspect

    parts = [inspect.getsource(f) for f in (draw_faces, _iou, face_batch, _targets, _keras_model, _train,
                                            _mediapipe_names, blazeface_anchor_centers)]
    parts.append(repr((SIZE, SCALE, NUM_KEYPOINTS)))
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:12]


def blazeface_tflite() -> Path:
    """The trained BlazeFace-style .tflite (module docstring), built on first use and cached."""
    path = CACHE / f"blazeface_{_fingerprint()}.tflite"
    if path.is_file():
        return path
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    trained = _keras_model(None)
    _train(trained)
    model = _keras_model(1)
    model.set_weights(trained.get_weights())
    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    content = _mediapipe_names(converter.convert())
    CACHE.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=CACHE, suffix=".tmp")
    with os.fdopen(fd, "wb") as f:
        f.write(content)
    os.replace(tmp, path)
    return path


def detector_tflite(path: Path) -> Path:
    """The same detector untrained (seeded weights), converted at batch 1 with MediaPipe's names: a cheap .tflite
    shaped as the real ones are, for tests about the file rather than its detections."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    converter = tf.lite.TFLiteConverter.from_keras_model(_keras_model(1))
    path.write_bytes(_mediapipe_names(converter.convert()))
    return path


def sparse_tflite(path: Path) -> Path:
    """A conv + dense model with 70-80 % zero weights, converted with EXPERIMENTAL_SPARSITY (DENSIFY ops)."""
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(3)
    inp = keras.Input((8, 8, 8), batch_size=1, name="x")
    conv = keras.layers.Conv2D(32, 1, name="conv")
    dense = keras.layers.Dense(16, name="dense")
    features = conv(inp)
    model = keras.Model(inp, [features, dense(keras.layers.Flatten()(keras.layers.ReLU()(features)))])
    rng = np.random.default_rng(3)
    for layer, keep in ((conv, 0.3), (dense, 0.2)):
        w, b = layer.get_weights()
        layer.set_weights([w * (rng.random(w.shape) < keep), b + rng.normal(0, 0.1, b.shape)])
    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    converter.optimizations = [tf.lite.Optimize.EXPERIMENTAL_SPARSITY]
    path.write_bytes(converter.convert())
    return path


def custom_op_tflite(path: Path) -> Path:
    """conv -> relu -> conv -> tanh -> erfinv (a CUSTOM op 'Erfinv': no TFLite builtin) -> x 2."""
    import tensorflow as tf

    rng = np.random.default_rng(5)
    w1 = tf.constant(rng.standard_normal((3, 3, 3, 8)).astype(np.float32) * 0.3)
    w2 = tf.constant(rng.standard_normal((3, 3, 8, 4)).astype(np.float32) * 0.3)

    class Segmenter(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([1, 16, 16, 3], tf.float32, name="image")])
        def __call__(self, image: Any) -> dict[str, Any]:
            features = tf.nn.relu(tf.nn.conv2d(image, w1, 1, "SAME"))
            logits = tf.nn.conv2d(features, w2, 1, "SAME", name="logits")
            return {"mask": tf.math.erfinv(tf.tanh(logits) * 0.9) * 2.0}

    module = Segmenter()
    converter = tf.lite.TFLiteConverter.from_concrete_functions([module.__call__.get_concrete_function()], module)
    converter.allow_custom_ops = True
    path.write_bytes(converter.convert())
    return path
