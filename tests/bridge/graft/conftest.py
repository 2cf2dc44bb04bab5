"""The BlazeFace-style face detector of ``blazeface_models`` as a user meets it: the .tflite, converted to ONNX by
``bridge convert``, the anchors YAML a user writes from MediaPipe's graph, and images with known faces."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


@pytest.fixture(scope="session")
def face_tflite() -> Path:
    pytest.importorskip("tensorflow")
    pytest.importorskip("ai_edge_litert")
    import blazeface_models

    return blazeface_models.blazeface_tflite()


@pytest.fixture(scope="session")
def face_onnx(face_tflite: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The detector converted by bridge (validated against the interpreter)."""
    pytest.importorskip("tf2onnx")
    import bridge

    out = tmp_path_factory.mktemp("face") / "face.onnx"
    result = bridge.convert(face_tflite, out, validate=["onnxruntime"], isolated=False)
    assert result.passed, result
    return out


@pytest.fixture(scope="session")
def anchors_yaml(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import blazeface_models

    path = tmp_path_factory.mktemp("anchors") / "blazeface_anchors.yaml"
    path.write_text(yaml.safe_dump(blazeface_models.BLAZEFACE_ANCHORS))
    return path


@pytest.fixture(scope="session")
def faces() -> tuple[np.ndarray, list[list[dict[str, Any]]]]:
    """8 images the detector never saw in training, with their faces."""
    import blazeface_models

    return blazeface_models.face_batch(seed=99, count=8)


@pytest.fixture(scope="session")
def tflite_raw(face_tflite: Path, faces: tuple[np.ndarray, Any]) -> list[dict[str, np.ndarray]]:
    """The source's own raw outputs per image (the TFLite interpreter), what the reference decodes."""
    from adapters.tensorflow.loading import tflite_interpreter

    interp = tflite_interpreter(face_tflite)
    interp.allocate_tensors()
    (inp,) = interp.get_input_details()
    raw = []
    for image in faces[0]:
        interp.set_tensor(inp["index"], image[None])
        interp.invoke()
        raw.append({d["name"]: np.array(interp.get_tensor(d["index"])) for d in interp.get_output_details()})
    return raw
