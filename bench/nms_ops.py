"""GluonCV-style ``box_nms`` and ``bridge graft-nms`` against MXNet's own C++ ``box_nms`` on the same boxes.

GluonCV detectors (SSD, YOLOv3) end in ``box_nms`` over a per-class layout: every (anchor, class) pair is a
row ``[class id, score, x1, y1, x2, y2]`` of a [B, N * C, 6] tensor (id -1 and score 0 where the class
probability is not over 0.01, as GluonCV's ``MultiPerClassDecoder`` writes it), NMS per class at
IoU 0.45 over the ``topk`` = 400 best rows. Three sizes as the GluonCV models have them: SSD300
(8,732 anchors x 20 classes), SSD512 (24,564 x 20), YOLOv3 320 (6,300 x 80).

Two ways bridge offers of doing that job in plain ONNX, each timed against ``mx.nd.contrib.box_nms`` on
the same tensors, interleaved rounds, medians:

* ``box_nms``: a one-node ``bridge.contrib`` box_nms model through the pipeline's lowering
  (``LowerBoxNMSPass``) + folding, as a converted GluonCV export has it; MXNet's operator with the same
  attributes; the outputs must be identical (max |diff| reported, parity flag).
* ``graft-nms``: ``bridge.graft.graft_nms`` on a headless model whose outputs are the decoded boxes
  [B, N, 4] and class probabilities [B, N, C + 1] (class 0 background), every class, no per-class cap,
  the 100 best detections; MXNet's ``box_nms`` with every valid row a candidate (``topk`` = the valid
  count: topk=-1's result without its quadratic pass over invalid rows) does the same job on the per-class layout.
  Parity: the 100 best (class, score, box) of both agree.

Inputs are synthetic but shaped like a trained detector's: a background class that wins almost
everywhere, and ~5% of anchors on one of 20 objects per image (boxes jittered around the object, one
confident class), so a few thousand rows are valid and NMS has real clusters to suppress.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnx import TensorProto, helper

from bench.ssd_bench import ort_session
from bridge.bench.timing import Timing, interleaved


@dataclass(frozen=True)
class NMSCase:
    name: str
    anchors: int
    classes: int  # foreground classes


CASES = (NMSCase("gluoncv_ssd300", 8_732, 20), NMSCase("gluoncv_ssd512", 24_564, 20),
         NMSCase("gluoncv_yolo3_320", 6_300, 80))
QUICK_CASES = (NMSCase("tiny", 500, 4),)

# GluonCV's SSD / YOLOv3 defaults (gluoncv/model_zoo/ssd/ssd.py, yolo/yolo3.py)
GLUONCV_BOX_NMS: dict[str, Any] = {"overlap_thresh": 0.45, "valid_thresh": 0.01, "topk": 400, "coord_start": 2, "score_index": 1,
                   "id_index": 0, "background_id": -1, "force_suppress": 0, "in_format": "corner",
                   "out_format": "corner"}
MAX_DET = 100


def detector_outputs(case: NMSCase, batch: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Decoded corner boxes [B, N, 4] and softmax class probabilities [B, N, C + 1] (class 0 background)."""
    rng = np.random.default_rng(seed)
    n, c = case.anchors, case.classes
    centre = rng.random((batch, n, 2))
    half = rng.uniform(0.02, 0.2, (batch, n, 2))
    logits = rng.normal(0.0, 1.0, (batch, n, c + 1))
    logits[..., 0] += 8.0  # background wins almost everywhere: most rows fall under 0.01
    on_object = rng.random((batch, n)) < 0.05
    for i in range(batch):
        objects_centre = rng.random((20, 2))
        objects_half = rng.uniform(0.05, 0.2, (20, 2))
        objects_class = rng.integers(1, c + 1, 20)
        idx = np.flatnonzero(on_object[i])
        which = rng.integers(0, 20, idx.size)
        centre[i, idx] = objects_centre[which] + rng.normal(0, 0.01, (idx.size, 2))
        half[i, idx] = objects_half[which] * rng.uniform(0.85, 1.15, (idx.size, 2))
        logits[i, idx, objects_class[which]] += 11.0 + rng.normal(0, 1.5, idx.size)
    boxes = np.clip(np.concatenate([centre - half, centre + half], -1), 0.0, 1.0).astype(np.float32)
    e = np.exp(logits - logits.max(-1, keepdims=True))
    probs = (e / e.sum(-1, keepdims=True)).astype(np.float32)
    return boxes, probs


def per_class_rows(boxes: np.ndarray, probs: np.ndarray, thresh: float = 0.01) -> np.ndarray:
    """GluonCV's MultiPerClassDecoder + concat: [B, C * N, 6] rows (id, score, box), class-major."""
    fg = probs[..., 1:]  # [B, N, C]
    mask = fg > thresh
    ids = np.where(mask, np.arange(fg.shape[-1], dtype=np.float32)[None, None, :], np.float32(-1))
    scores = np.where(mask, fg, np.float32(0))
    per_class = [np.concatenate([ids[..., k:k + 1], scores[..., k:k + 1], boxes], -1) for k in range(fg.shape[-1])]
    return np.concatenate(per_class, 1).astype(np.float32)


def lowered_box_nms(rows_shape: tuple[int, ...], attrs: dict[str, Any]) -> bytes:
    """One bridge.contrib box_nms node lowered as the conversion pipeline lowers it, serialized."""
    from bridge.passes.cleanup import FoldConstantsPass
    from bridge.passes.contrib import LowerBoxNMSPass

    node = helper.make_node("box_nms", ["data"], ["out"], name="nms", domain="bridge.contrib", **attrs)
    vi = helper.make_tensor_value_info
    graph = helper.make_graph([node], "box_nms", [vi("data", TensorProto.FLOAT, list(rows_shape))],
                              [vi("out", TensorProto.FLOAT, list(rows_shape))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("bridge.contrib", 1)])
    model.ir_version = 8
    irm = ir.serde.deserialize_model(model)
    for p in (LowerBoxNMSPass(), FoldConstantsPass()):
        irm = p(irm).model
    return ir.serde.serialize_model(irm).SerializeToString()


def grafted(boxes_shape: tuple[int, ...], probs_shape: tuple[int, ...]) -> bytes:
    """A headless detector (outputs = decoded boxes and class probabilities) with bridge's NMS grafted on."""
    from bridge.graft import graft_nms

    vi = helper.make_tensor_value_info
    graph = helper.make_graph(
        [helper.make_node("Identity", ["in_boxes"], ["boxes"]), helper.make_node("Identity", ["in_probs"], ["scores"])],
        "headless", [vi("in_boxes", TensorProto.FLOAT, list(boxes_shape)), vi("in_probs", TensorProto.FLOAT, list(probs_shape))],
        [vi("boxes", TensorProto.FLOAT, list(boxes_shape)), vi("scores", TensorProto.FLOAT, list(probs_shape))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    out = graft_nms(model, boxes="boxes", scores="scores", iou=GLUONCV_BOX_NMS["overlap_thresh"],
                    score=GLUONCV_BOX_NMS["valid_thresh"], max_per_class=None, max_det=MAX_DET, background_class=0)
    return out.SerializeToString()


def _top_rows(mx_rows: np.ndarray, k: int) -> list[np.ndarray]:
    """The first k valid rows (id >= 0) of each image of box_nms output (already in score order)."""
    return [image[image[:, 0] >= 0][:k] for image in mx_rows]


def graft_agrees(mx_rows: np.ndarray, graft_out: list[np.ndarray]) -> bool:
    """The grafted model's best detections equal MXNet's first box_nms rows: class, score and box."""
    det_boxes, det_scores, det_classes, num = graft_out
    for i, ref in enumerate(_top_rows(mx_rows, MAX_DET)):
        k = int(num[i])
        if k != len(ref):
            return False
        got = np.concatenate([(det_classes[i, :k] - 1)[:, None].astype(np.float32), det_scores[i, :k, None],
                              det_boxes[i, :k]], 1)
        if not np.array_equal(got, ref):
            return False
    return True


@dataclass
class NMSOpRow:
    way: str  # "box_nms" | "graft-nms"
    case: NMSCase
    batch: int
    valid_rows: int  # rows over the score threshold, all images
    bridge: Timing
    mxnet: Timing
    parity: bool
    max_diff: float | None = None

    @property
    def ratio(self) -> float:
        return self.mxnet.median / self.bridge.median


def bench_nms_ops(mx: Any, case: NMSCase, batch: int, *, threads: int, rounds: int) -> list[NMSOpRow]:
    boxes, probs = detector_outputs(case, batch)
    rows = per_class_rows(boxes, probs)
    valid = int((rows[..., 0] >= 0).sum())
    nd_rows = mx.nd.array(rows)
    box_nms_sess = ort_session(lowered_box_nms(rows.shape, GLUONCV_BOX_NMS), threads)
    graft_sess = ort_session(grafted(boxes.shape, probs.shape), threads)
    # every valid row is a candidate: topk = the valid count gives topk=-1's result, and spares MXNet's
    # kernel the O(rows^2) pass over invalid rows that topk=-1 costs it (38 s on gluoncv_ssd300)
    all_rows = {**GLUONCV_BOX_NMS, "topk": max(int((rows[..., 0] >= 0).sum(1).max()), 1)}

    def mx_box_nms() -> np.ndarray:
        return mx.nd.contrib.box_nms(nd_rows, **GLUONCV_BOX_NMS).asnumpy()

    def mx_all() -> np.ndarray:
        return mx.nd.contrib.box_nms(nd_rows, **all_rows).asnumpy()

    def ort_box_nms() -> np.ndarray:
        return box_nms_sess.run(None, {"data": rows})[0]

    def ort_graft() -> list[np.ndarray]:
        return graft_sess.run(None, {"in_boxes": boxes, "in_probs": probs})

    ref, got = mx_box_nms(), ort_box_nms()
    diff = float(np.abs(ref - got).max())
    graft_ok = graft_agrees(mx_all(), ort_graft())
    ways: dict[str, Callable[[], object]] = {"mx_box_nms": mx_box_nms, "ort_box_nms": ort_box_nms,
                                             "mx_all": mx_all, "ort_graft": ort_graft}
    t = interleaved(ways, rounds)
    return [NMSOpRow("box_nms", case, batch, valid, t["ort_box_nms"], t["mx_box_nms"], diff == 0.0, diff),
            NMSOpRow("graft-nms", case, batch, valid, t["ort_graft"], t["mx_all"], graft_ok)]


__all__ = ["CASES", "QUICK_CASES", "NMSOpRow", "bench_nms_ops", "detector_outputs", "per_class_rows"]
