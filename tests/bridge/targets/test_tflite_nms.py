"""ONNX NonMaxSuppression on LiteRT's builtin kernel selects what onnxruntime selects: zero-area and
non-finite-area boxes (clipped boxes of saturated or random-weight SSDs) are selected once, not again and
again until max_output_size; the kernel's zero padding is cut off; IoU exactly at the threshold is kept
(ONNX suppresses IoU > threshold, the kernel IoU >= threshold); max_output_boxes_per_class caps the
selection in score order."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from deploy_models import onnxruntime_outputs, require_litert
from onnx import TensorProto, helper
from support import make_model

from bridge.runtimes import activated
from bridge.runtimes.litert import LiteRtRuntime
from bridge.targets.tflite import export_tflite

require_litert()

N, C = 24, 2


def nms_model() -> onnx.ModelProto:
    """boxes [B, N, 4], scores [B, C, N], limit [1], iou [1], score threshold [1] -> NonMaxSuppression."""
    f32, i64 = TensorProto.FLOAT, TensorProto.INT64
    return make_model(
        [helper.make_node("NonMaxSuppression", ["boxes", "scores", "limit", "iou", "floor"], ["selected"], name="nms")],
        [helper.make_tensor_value_info("boxes", f32, ["B", N, 4]), helper.make_tensor_value_info("scores", f32, ["B", C, N]),
         helper.make_tensor_value_info("limit", i64, [1]), helper.make_tensor_value_info("iou", f32, [1]),
         helper.make_tensor_value_info("floor", f32, [1])],
        [helper.make_tensor_value_info("selected", i64, ["K", 3])])


@pytest.fixture(scope="module")
def tflite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return export_tflite(nms_model(), tmp_path_factory.mktemp("nms") / "nms.tflite").path


def _boxes(batch: int, seed: int, zero_area: float) -> np.ndarray:
    """Overlapping boxes in a 4 x 4 field; a share ``zero_area`` of them flattened (clipped) to zero area."""
    rng = np.random.default_rng(seed)
    low = rng.uniform(0, 3, (batch, N, 2))
    high = low + rng.uniform(0.5, 1.5, (batch, N, 2))
    flat = rng.uniform(size=(batch, N)) < zero_area
    axis = rng.integers(0, 2, (batch, N))
    high[..., 0] = np.where(flat & (axis == 0), low[..., 0], high[..., 0])
    high[..., 1] = np.where(flat & (axis == 1), low[..., 1], high[..., 1])
    return np.concatenate([low, high], -1).astype(np.float32)


def _scores(batch: int, seed: int) -> np.ndarray:
    """Distinct scores (a tie between overlapping boxes may legitimately go either way); -inf: not a candidate."""
    rng = np.random.default_rng(seed + 100)
    s = rng.permutation(batch * C * N).reshape(batch, C, N).astype(np.float32) / (batch * C * N)
    s[rng.uniform(size=s.shape) < 0.2] = -np.inf
    return s


def _case(name: str) -> dict[str, np.ndarray]:
    batch, limit, iou, floor = 2, N, 0.45, float(np.finfo(np.float32).min)
    boxes, scores = _boxes(batch, 0, 0.0), _scores(batch, 0)
    if name == "zero-area boxes scored highest":
        boxes = _boxes(batch, 1, 0.5)
        top = np.argsort(-scores, axis=-1)[..., :3]
        for b in range(batch):
            for c in range(C):
                boxes[b, top[b, c]] = [1.0, 1.0, 1.0, 2.0]  # zero width: IoU 0 with everything, itself included
    elif name == "non-finite area":
        boxes[:, :4, 2] = np.inf
    elif name == "limit below the selections":
        boxes, limit = _boxes(batch, 2, 0.4), 5
    elif name == "score threshold":
        floor = 0.5
    elif name == "IoU exactly at the threshold":
        boxes[:, 0], boxes[:, 1] = [0, 0, 1, 1], [0, 0, 1, 2]  # IoU 1/2 exactly
        scores[:, :, :2] = [0.99, 0.98]
        iou = 0.5
    return {"boxes": boxes, "scores": scores, "limit": np.array([limit], np.int64),
            "iou": np.array([iou], np.float32), "floor": np.array([floor], np.float32)}


CASES = ["overlapping boxes", "zero-area boxes scored highest", "non-finite area", "limit below the selections",
         "score threshold", "IoU exactly at the threshold"]


@pytest.mark.parametrize("case", CASES)
def test_litert_nms_selects_what_onnxruntime_selects(tflite: Path, case: str) -> None:
    feeds = _case(case)
    want = onnxruntime_outputs(nms_model(), feeds)["selected"]
    with activated(LiteRtRuntime(tflite)) as rt:
        got = rt.infer(feeds)["selected"]
    assert len(want) > 0
    # the same rows, per (batch, class) in the same order: descending score
    assert got.tolist() == want.tolist(), case
