"""LowerBoxNMSPass / LowerBoxDecodePass (GluonCV exports) against MXNet's box_nms and box_decode:
class-aware NMS as MXNet does it (id_index, background_id, force_suppress, topk, valid_thresh,
corner/center formats), batch 2 with a dynamic batch axis."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np
import pytest
from contrib_testlib import contrib_model, lower, run_ort

from bridge.passes.contrib import LowerBoxDecodePass, LowerBoxNMSPass
from bridge.validation.detection.matching import Detections, compare_detections

B, N = 2, 48
NMS_DEFAULTS: dict[str, Any] = dict(overlap_thresh=0.5, valid_thresh=0.0, topk=-1, coord_start=2, score_index=1,
                                    id_index=-1, background_id=-1, force_suppress=0, in_format="corner",
                                    out_format="corner")
NMS_CASES: list[dict[str, Any]] = [
    {},  # class-agnostic (no id column)
    dict(id_index=0),  # GluonCV SSD: class-aware
    dict(id_index=0, force_suppress=1),
    dict(id_index=0, topk=12, valid_thresh=0.2),
    dict(id_index=0, background_id=0, overlap_thresh=0.3),
    dict(id_index=0, overlap_thresh=0.45, valid_thresh=0.01, topk=400),  # GluonCV's settings
    dict(id_index=0, out_format="center"),
    dict(id_index=0, in_format="center"),
    dict(topk=0),  # MXNet: output = input
]


def _nms_data(seed: int, leading: tuple[int, ...] = (B,)) -> np.ndarray:
    rng = np.random.default_rng(seed)
    count = int(np.prod(leading)) * N
    ids = rng.integers(-1, 4, (count, 1)).astype(np.float32)
    scores = (rng.permutation(count) / count).reshape(count, 1).astype(np.float32)  # well separated
    xy = rng.random((count, 2)).astype(np.float32) * 0.6
    wh = rng.random((count, 2)).astype(np.float32) * 0.4 + 0.05
    return np.concatenate([ids, scores, xy, xy + wh], -1).reshape(*leading, N, 6).astype(np.float32)


def _dets(rows: np.ndarray, fmt: str) -> list[Detections]:
    out = []
    for r in rows.reshape(-1, N, 6):
        keep = r[:, 1] >= 0
        box = r[keep, 2:6].astype(np.float64)
        if fmt == "center":
            box = np.concatenate([box[:, :2] - box[:, 2:] / 2, box[:, :2] + box[:, 2:] / 2], 1)
        out.append(Detections(box, r[keep, 1], r[keep, 0].astype(np.int64)))
    return out


@pytest.mark.parametrize("attrs", NMS_CASES, ids=lambda a: ",".join(f"{k}={v}" for k, v in a.items()) or "agnostic")
def test_box_nms_matches_mxnet(mx: ModuleType, attrs: dict[str, Any]) -> None:
    a = {**NMS_DEFAULTS, **attrs}
    data = _nms_data(7)
    model = contrib_model("box_nms", {"data": ["batch", N, 6]}, {"out": ["batch", N, 6]}, **a)
    (got,) = run_ort(lower(model, LowerBoxNMSPass()), {"data": data})
    ref = mx.nd.contrib.box_nms(mx.nd.array(data), **a).asnumpy()
    cmp = compare_detections(_dets(ref, a["out_format"]), _dets(got, a["out_format"]))
    assert cmp.passed and cmp.matched > 0, cmp.summary()
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-6)  # rows in MXNet's order, -1 padding
    if a["in_format"] == a["out_format"]:  # rows are copied, not computed: bit for bit
        np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("in_format", ["corner", "center"])
def test_box_nms_inverted_boxes_never_suppress(mx: ModuleType, in_format: str) -> None:
    """Boxes with x2 < x1 or y2 < y1 (center format: negative w or h) - what random weights decode - have
    area 0 in MXNet and suppress nothing; ONNX NMS would sort their corners and suppress with them."""
    rng = np.random.default_rng(3)
    data = _nms_data(9)
    flip = rng.random((B, N)) < 0.6  # crowded, mostly inverted boxes of one class: many would overlap
    data[..., 0] = 1.0
    data[..., 2:6] = data[..., 2:6] * 0.2 + 0.3
    if in_format == "center":
        data[..., 4:6] = np.where(flip[..., None], -1, 1) * (data[..., 4:6] - data[..., 2:4])
    else:
        data[..., 2:6] = np.where(flip[..., None], data[..., [4, 3, 2, 5]], data[..., 2:6])
    a = {**NMS_DEFAULTS, "id_index": 0, "overlap_thresh": 0.3, "in_format": in_format, "out_format": in_format}
    model = contrib_model("box_nms", {"data": ["batch", N, 6]}, {"out": ["batch", N, 6]}, **a)
    (got,) = run_ort(lower(model, LowerBoxNMSPass()), {"data": data})
    ref = mx.nd.contrib.box_nms(mx.nd.array(data), **a).asnumpy()
    assert (ref[..., 1] >= 0).sum() > flip.sum()  # every inverted box kept, and some others
    np.testing.assert_array_equal(got, ref)


def test_box_nms_reads_columns_without_n_sized_copies() -> None:
    """Only the score and id columns are N-sized work (contiguous rows of the transposed data); the box
    coordinates are sliced from the K candidate rows, and the only Pad is the final -1 fill (no padded copy
    of all N rows with a sentinel row): onnxruntime copies width-1 columns row by row (bench nms_ops)."""
    a = {**NMS_DEFAULTS, "id_index": 0, "topk": 12}
    lowered = lower(contrib_model("box_nms", {"data": [B, N, 6]}, {"out": [B, N, 6]}, **a), LowerBoxNMSPass())
    ops = [n.op_type for n in lowered.graph.node]
    assert ops.count("Transpose") == 1 and ops.count("Pad") == 1, ops


def test_box_nms_keeps_leading_axes(mx: ModuleType) -> None:
    a = {**NMS_DEFAULTS, "id_index": 0, "topk": 20}
    data = _nms_data(8, leading=(2, 3))
    model = contrib_model("box_nms", {"data": [2, 3, N, 6]}, {"out": [2, 3, N, 6]}, **a)
    (got,) = run_ort(lower(model, LowerBoxNMSPass()), {"data": data})
    np.testing.assert_allclose(got, mx.nd.contrib.box_nms(mx.nd.array(data), **a).asnumpy(), rtol=0, atol=1e-6)


def test_box_nms_differs_from_class_agnostic_nms(mx: ModuleType) -> None:
    # the point of lowering id_index: overlapping boxes of different classes both survive
    data = np.array([[[0, 0.9, 0.1, 0.1, 0.5, 0.5], [1, 0.8, 0.1, 0.1, 0.5, 0.5]]], np.float32)
    model = contrib_model("box_nms", {"data": [1, 2, 6]}, {"out": [1, 2, 6]}, **{**NMS_DEFAULTS, "id_index": 0})
    (got,) = run_ort(lower(model, LowerBoxNMSPass()), {"data": data})
    assert (got[0, :, 1] > 0).sum() == 2


def test_box_nms_width_known_only_through_inference_is_learned(mx: ModuleType) -> None:
    """GluonCV's per-class layout with a dynamic batch: box_nms reads a Concat of id, score and box columns
    whose [batch, N, 6] no exporter recorded. The lowering learns the width from shape inference (it used to
    refuse: "the last axis of data ... must be static") and matches MXNet at two batch sizes."""
    from contrib_testlib import CONTRIB
    from onnx import TensorProto, helper

    a = {**NMS_DEFAULTS, "id_index": 0, "topk": 20, "valid_thresh": 0.01}
    columns = {"ids": 1, "scores": 1, "boxes": 4}
    node = helper.make_node("box_nms", ["data"], ["out"], name="box_nms_0", domain=CONTRIB, **a)
    graph = helper.make_graph(
        [helper.make_node("Concat", list(columns), ["data"], axis=-1), node], "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", N, w]) for n, w in columns.items()],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", N, 6])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(CONTRIB, 1)])
    model.ir_version = 8
    lowered = lower(model, LowerBoxNMSPass())
    for batch in (1, 3):
        data = _nms_data(9, leading=(batch,))
        (got,) = run_ort(lowered, {"ids": data[..., :1], "scores": data[..., 1:2], "boxes": data[..., 2:]})
        np.testing.assert_allclose(got, mx.nd.contrib.box_nms(mx.nd.array(data), **a).asnumpy(), rtol=0, atol=1e-6)


DECODE_CASES: list[dict[str, Any]] = [
    {},
    dict(format="corner"),
    dict(std0=0.1, std1=0.1, std2=0.2, std3=0.2),
    dict(clip=0.5, format="corner", std2=2.0, std3=2.0),
]


@pytest.mark.parametrize("attrs", DECODE_CASES, ids=lambda a: ",".join(f"{k}={v}" for k, v in a.items()) or "defaults")
def test_box_decode_matches_mxnet_bit_exact(mx: ModuleType, attrs: dict[str, Any]) -> None:
    a = {**dict(std0=1.0, std1=1.0, std2=1.0, std3=1.0, clip=-1.0, format="center"), **attrs}
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((B, N, 4)) * 0.5).astype(np.float32)
    xy, wh = rng.random((1, N, 2)) * 300, rng.random((1, N, 2)) * 80 + 4  # pixels, as GluonCV
    anchors = np.concatenate([xy, wh] if a["format"] == "center" else [xy, xy + wh], -1).astype(np.float32)
    model = contrib_model("box_decode", {"data": ["batch", N, 4], "anchors": [1, N, 4]}, {"out": ["batch", N, 4]}, **a)
    (got,) = run_ort(lower(model, LowerBoxDecodePass()), {"data": x, "anchors": anchors})
    ref = mx.nd.contrib.box_decode(mx.nd.array(x), mx.nd.array(anchors), **a).asnumpy()
    assert np.array_equal(got, ref), np.abs(got - ref).max()
