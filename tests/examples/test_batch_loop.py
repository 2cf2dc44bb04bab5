"""examples/batch_loop: a detector whose traced graph fixes the batch (a loop over the images) exported at
batch 1 and run over batches of 2 and 3 images gives each image's detections, padded and counted."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
from support import REPO

from bridge import api

torch = pytest.importorskip("torch", reason="PyTorch not installed (pip install 'bridge[torch]')")
ort = pytest.importorskip("onnxruntime")
sys.path.insert(0, str(REPO / "tests" / "adapters" / "pytorch"))
import detectors  # noqa: E402  (registers the bridge_test::nms op)


def _example() -> object:
    spec = importlib.util.spec_from_file_location("run_batches", REPO / "examples" / "batch_loop" / "run_batches.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _rows(boxes: np.ndarray, scores: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Detections as rows sorted by (label, score): eager torch lists them by score, onnxruntime by class."""
    rows = np.concatenate([labels[:, None].astype(np.float64), scores[:, None], boxes], axis=1)
    return rows[np.lexsort((rows[:, 1], rows[:, 0]))]


@pytest.mark.parametrize("batch", [2, 3])
def test_batch_one_export_runs_batches_image_by_image(tmp_path: Path, batch: int) -> None:
    model = detectors.TinyDetector("torchvision").eval()
    names = detectors.OUTPUT_NAMES["torchvision"]
    result = api.convert(model, tmp_path / "det.onnx", inputs=["images:1,3,32,32"], exporter="torchscript",
                         input_kind="image", output_names=names, isolated=False)
    assert result.passed
    session = ort.InferenceSession(str(tmp_path / "det.onnx"), providers=["CPUExecutionProvider"])
    images = detectors.images(batch, seed=batch).numpy()
    out = _example().run_batches(session, {"images": images}, pad=-1)  # type: ignore[attr-defined]
    counts = out["boxes_count"]
    assert out["boxes"].shape == (batch, counts.max(), 4) and out["scores"].shape == (batch, counts.max())
    assert (counts > 0).all()
    for b in range(batch):
        with torch.no_grad():
            ref = [t.numpy() for t in model(torch.from_numpy(images[b:b + 1]))]
        k = counts[b]
        assert k == len(ref[0]) and (out["scores"][b, k:] == -1).all()
        np.testing.assert_allclose(_rows(out["boxes"][b, :k], out["scores"][b, :k], out["labels"][b, :k]),
                                   _rows(*ref), atol=1e-4)


def test_outputs_with_a_batch_axis_are_concatenated(tmp_path: Path) -> None:
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten()).eval()
    api.convert(model, tmp_path / "c.onnx", inputs=["input:1,3,8,8"], validate=[], isolated=False)
    session = ort.InferenceSession(str(tmp_path / "c.onnx"), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).standard_normal((3, 3, 8, 8)).astype(np.float32)
    out = _example().run_batches(session, {"input": x})  # type: ignore[attr-defined]
    assert set(out) == {"output"}  # no counts: every image gives one row
    with torch.no_grad():
        np.testing.assert_allclose(out["output"], model(torch.from_numpy(x)).numpy(), atol=1e-5)
