"""Tiny TensorFlow sources built once per session: Keras (.keras/.h5), SavedModel (NMS heads), GraphDef, TFLite.

TensorFlow is slow to import and to save models, so everything here is session-scoped and the
adapter is registered for the session (bridge's registry does not list it until it is wired).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before TF's first import: no C++ INFO banners
pytest.importorskip("tensorflow")
pytest.importorskip("tf2onnx")


@pytest.fixture(scope="session", autouse=True)
def tf_adapter_registered() -> Iterator[None]:
    import adapters

    previous = adapters._ADAPTERS.get("tensorflow")
    adapters.register_adapter("tensorflow", "adapters.tensorflow:TensorFlowAdapter")
    yield
    if previous is None:
        adapters._ADAPTERS.pop("tensorflow", None)
    else:
        adapters._ADAPTERS["tensorflow"] = previous


def conv_bn_upsample(batch: int | None = 1) -> Any:
    """Conv -> BatchNorm (non-trivial statistics) -> ReLU -> 2x nearest upsample, plus a pooled head."""
    import keras
    import numpy as np

    keras.utils.set_random_seed(0)
    inp = keras.Input((16, 16, 3), batch_size=batch, name="img")
    x = keras.layers.Conv2D(4, 3, padding="same", name="conv")(inp)
    bn = keras.layers.BatchNormalization(name="bn")
    x = bn(x)
    x = keras.layers.ReLU(name="relu")(x)
    up = keras.layers.UpSampling2D(2, name="up")(x)
    pooled = keras.layers.GlobalAveragePooling2D(name="gap")(up)
    model = keras.Model(inp, [up, pooled], name="tiny")
    rng = np.random.default_rng(1)
    gamma, beta, mean, var = bn.get_weights()
    bn.set_weights([rng.uniform(0.5, 1.5, gamma.shape), rng.normal(0, 0.1, beta.shape),
                    rng.normal(0, 0.1, mean.shape), rng.uniform(0.5, 2, var.shape)])
    return model


@pytest.fixture(scope="session")
def tf_sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    root = tmp_path_factory.mktemp("tf_sources")
    model = conv_bn_upsample(batch=1)
    model.save(root / "tiny.keras")
    model.save(root / "tiny.h5")
    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    (root / "tiny.tflite").write_bytes(converter.convert())

    module = DetectionHeads()
    tf.saved_model.save(module, str(root / "nms_saved_model"), signatures={
        "serving_default": module.nms_v3, "nms_v4": module.nms_v4, "nms_v5": module.nms_v5,
        "combined": module.combined,
    })
    frozen = convert_variables_to_constants_v2(module.nms_v3.get_concrete_function())
    (root / "nms_v3.pb").write_bytes(frozen.graph.as_graph_def().SerializeToString())
    return {"keras": root / "tiny.keras", "h5": root / "tiny.h5", "tflite": root / "tiny.tflite",
            "saved_model": root / "nms_saved_model", "graph_def": root / "nms_v3.pb"}


def _detection_heads() -> type:
    import tensorflow as tf

    box_spec = tf.TensorSpec([None, 4], tf.float32, name="boxes")
    score_spec = tf.TensorSpec([None], tf.float32, name="scores")

    class Heads(tf.Module):
        """The four TF NMS ops tf2onnx maps to ONNX NonMaxSuppression (V3, V4 padded, V5 with scores, Combined)."""

        @tf.function(input_signature=[box_spec, score_spec])
        def nms_v3(self, boxes: Any, scores: Any) -> dict[str, Any]:
            idx = tf.image.non_max_suppression(boxes, scores, 6, iou_threshold=0.5, score_threshold=0.2)
            return {"boxes_out": tf.gather(boxes, idx), "scores_out": tf.gather(scores, idx)}

        @tf.function(input_signature=[box_spec, score_spec])
        def nms_v4(self, boxes: Any, scores: Any) -> dict[str, Any]:
            # raw op: tf.image.non_max_suppression_padded is a pure-TF implementation in TF 2
            idx, valid = tf.raw_ops.NonMaxSuppressionV4(boxes=boxes, scores=scores, max_output_size=6,
                                                        iou_threshold=0.5, score_threshold=0.2,
                                                        pad_to_max_output_size=True)
            return {"indices": idx, "valid": valid}

        @tf.function(input_signature=[box_spec, score_spec])
        def nms_v5(self, boxes: Any, scores: Any) -> dict[str, Any]:
            idx, sel_scores = tf.image.non_max_suppression_with_scores(boxes, scores, 6, iou_threshold=0.5,
                                                                       score_threshold=0.2)
            return {"boxes_out": tf.gather(boxes, idx), "scores_out": sel_scores}

        @tf.function(input_signature=[tf.TensorSpec([1, None, 1, 4], tf.float32, name="boxes"),
                                      tf.TensorSpec([1, None, 3], tf.float32, name="scores")])
        def combined(self, boxes: Any, scores: Any) -> dict[str, Any]:
            b, s, c, n = tf.image.combined_non_max_suppression(boxes, scores, 4, 8, iou_threshold=0.5,
                                                               score_threshold=0.2)
            return {"det_boxes": b, "det_scores": s, "det_classes": c, "num": n}

    return Heads


def DetectionHeads() -> Any:
    return _detection_heads()()


def random_boxes(n: int, seed: int = 0) -> tuple[Any, Any]:
    """``n`` valid (y1, x1, y2, x2) boxes in [0, 1] with some overlap, and distinct scores."""
    import numpy as np

    rng = np.random.default_rng(seed)
    centre = rng.uniform(0.2, 0.8, (n, 2))
    size = rng.uniform(0.1, 0.3, (n, 2))
    boxes = np.concatenate([centre - size / 2, centre + size / 2], axis=1).astype(np.float32)
    scores = rng.permutation(np.linspace(0.05, 0.95, n)).astype(np.float32)
    return boxes, scores


@pytest.fixture(scope="session")
def make_boxes() -> Any:
    return random_boxes


@pytest.fixture(scope="session")
def keras_factory() -> Any:
    return conv_bn_upsample
