"""Shared fixtures of the dataset tests: colour images with COCO labels (classifier, segmenter) and the grafted
BlazeFace-style face detector with procedural face images (keypoints)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import yaml
from dataset_models import CLASSES

from bridge.validation.dataset.labels import write_coco

Image = pytest.importorskip("PIL.Image")
# the face detector's graft, as a user writes it for MediaPipe's BlazeFace (tests/bridge/graft)
GRAFT = dict(boxes="regressors", scores="classificators", decode="linear", scales=128, box_format="cxcywh",
             box_columns="0:4", keypoint_columns="4:16", score_activation="sigmoid", score_clip=100.0, score=0.5,
             iou=0.3, max_det=50, nms="weighted")


@pytest.fixture(scope="session")
def images(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """40 noisy single-colour images whose class is their colour's index, with COCO labels."""
    folder = tmp_path_factory.mktemp("colours")
    rng = np.random.default_rng(0)
    palette = rng.uniform(0, 255, (CLASSES, 3))
    names, classes = [], []
    for k in range(40):
        c = k % CLASSES
        img = np.clip(palette[c] + rng.normal(0, 20, (8, 8, 3)), 0, 255).astype(np.uint8)
        Image.fromarray(img).save(folder / f"{k:03d}.png")
        names.append(f"{k:03d}.png")
        classes.append(np.array([c]))
    labels = folder.parent / (folder.name + "-labels.json")
    write_coco(labels, names, [(8, 8)] * len(names), [np.array([[0, 0, 8, 8.0]])] * len(names), classes,
               [f"colour{c}" for c in range(CLASSES)], first_id=0)
    return folder, labels



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
