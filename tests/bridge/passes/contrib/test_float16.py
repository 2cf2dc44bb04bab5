"""float16 models through every contrib lowering: inputs cast to float32, lowered as for float32, float
outputs cast back - so the float16 result equals the float32 lowering's result rounded once, and the
outputs keep the model's float16 type."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from contrib_testlib import contrib_model, corner_anchors, lower, run_ort, separated_probs
from onnx import TensorProto

from bridge.passes.contrib import (
    LowerBoxDecodePass,
    LowerBoxNMSPass,
    LowerMultiBoxDetectionPass,
    LowerMultiBoxPriorPass,
)

B, C, N = 2, 3, 24


def _half(model: onnx.ModelProto) -> onnx.ModelProto:
    half = onnx.ModelProto()
    half.CopyFrom(model)
    for vi in (*half.graph.input, *half.graph.output):
        vi.type.tensor_type.elem_type = TensorProto.FLOAT16
    return half


def _nms_rows(rng: np.random.Generator) -> np.ndarray:
    count = B * N
    ids = rng.integers(0, 3, (count, 1))
    scores = (rng.permutation(count) / count).reshape(count, 1)
    xy = rng.random((count, 2)) * 0.6
    return np.concatenate([ids, scores, xy, xy + rng.random((count, 2)) * 0.4 + 0.05], -1).reshape(B, N, 6)


def _case(op: str) -> tuple[onnx.ModelProto, Any, dict[str, np.ndarray]]:
    rng = np.random.default_rng(3)
    if op == "box_nms":
        model = contrib_model("box_nms", {"data": [B, N, 6]}, {"out": [B, N, 6]}, overlap_thresh=0.5,
                              valid_thresh=0.0, topk=-1, coord_start=2, score_index=1, id_index=0, background_id=-1,
                              force_suppress=0, in_format="corner", out_format="corner")
        return model, LowerBoxNMSPass(), {"data": _nms_rows(rng)}
    if op == "box_decode":
        model = contrib_model("box_decode", {"data": [B, N, 4], "anchors": [1, N, 4]}, {"out": [B, N, 4]},
                              std0=0.1, std1=0.1, std2=0.2, std3=0.2, clip=-1.0, format="corner")
        return model, LowerBoxDecodePass(), {"data": rng.standard_normal((B, N, 4)) * 0.5,
                                             "anchors": corner_anchors(rng, N)}
    if op == "MultiBoxDetection":
        model = contrib_model("MultiBoxDetection", {"cls_prob": [B, C + 1, N], "loc_pred": [B, 4 * N],
                                                    "anchors": [1, N, 4]}, {"detections": [B, N, 6]},
                              clip=1, threshold=0.01, background_id=0, nms_threshold=0.5, force_suppress=0,
                              variances=[0.1, 0.1, 0.2, 0.2], nms_topk=-1)
        return model, LowerMultiBoxDetectionPass(), {
            "cls_prob": separated_probs(rng, B, C, N), "loc_pred": rng.standard_normal((B, 4 * N)) * 0.5,
            "anchors": corner_anchors(rng, N)}
    model = contrib_model("MultiBoxPrior", {"data": [1, 2, 4, 6]}, {"anchors": [1, 4 * 6 * 2, 4]},
                          sizes=[0.2, 0.4], ratios=[1.0], clip=0, steps=[-1.0, -1.0], offsets=[0.5, 0.5])
    return model, LowerMultiBoxPriorPass(), {"data": rng.standard_normal((1, 2, 4, 6))}


@pytest.mark.parametrize("op", ["box_nms", "box_decode", "MultiBoxDetection", "MultiBoxPrior"])
def test_float16_is_the_float32_result_rounded_once(op: str) -> None:
    model, lowering, feeds = _case(op)
    half_feeds = {k: v.astype(np.float16) for k, v in feeds.items()}
    (expected,) = run_ort(lower(model, type(lowering)()), {k: v.astype(np.float32) for k, v in half_feeds.items()})
    lowered = lower(_half(model), type(lowering)())
    (got,) = run_ort(lowered, half_feeds)
    assert got.dtype == np.float16 and lowered.graph.output[0].type.tensor_type.elem_type == TensorProto.FLOAT16
    np.testing.assert_array_equal(got, expected.astype(np.float16))


def test_float64_is_still_refused_naming_the_input() -> None:
    model, lowering, _ = _case("box_decode")
    for vi in model.graph.input:
        vi.type.tensor_type.elem_type = TensorProto.DOUBLE
    with pytest.raises(Exception, match="Pre-condition") as info:
        lower(model, lowering)
    assert "supports float32 and float16 only" in str(info.value.__cause__)
