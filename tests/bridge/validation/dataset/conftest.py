"""Shared fixtures of the dataset tests: colour images with COCO labels (classifier, segmenter) and the grafted
BlazeFace-style face detector with procedural face images (keypoints)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import yaml
from dataset_models import write_colour_images

Image = pytest.importorskip("PIL.Image")
# the face detector's graft, as a user writes it for MediaPipe's BlazeFace (tests/bridge/graft)
GRAFT = dict(boxes="regressors", scores="classificators", decode="linear", scales=128, box_format="cxcywh",
             box_columns="0:4", keypoint_columns="4:16", score_activation="sigmoid", score_clip=100.0, score=0.5,
             iou=0.3, max_det=50, nms="weighted")


@pytest.fixture(scope="session")
def images(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """40 noisy single-colour images whose class is their colour's index, with COCO labels."""
    return write_colour_images(tmp_path_factory.mktemp("colours"))


@pytest.fixture(scope="session")
def faces(tmp_path_factory: pytest.TempPathFactory) -> tuple[onnx.ModelProto, Path]:
    """The grafted face detector and 24 procedural face images (PNG) it never saw in training."""
    pytest.importorskip("tensorflow")
    pytest.importorskip("ai_edge_litert")
    pytest.importorskip("tf2onnx")
    import blazeface_models

    import bridge
    from bridge.graft import graft_nms

    folder = tmp_path_factory.mktemp("faces")
    face = folder / "face.onnx"
    assert bridge.convert(blazeface_models.blazeface_tflite(), face, validate=["onnxruntime"], isolated=False).passed
    anchors = folder / "anchors.yaml"
    anchors.write_text(yaml.safe_dump(blazeface_models.BLAZEFACE_ANCHORS))
    grafted = graft_nms(face, anchors=str(anchors), **GRAFT)  # type: ignore[arg-type]
    images = folder / "images"
    images.mkdir()
    batch, _truth = blazeface_models.face_batch(seed=7, count=24)
    for k, img in enumerate(batch):
        Image.fromarray(np.round((img + 1) * 127.5).clip(0, 255).astype(np.uint8)).save(images / f"{k:02d}.png")
    return grafted, images
