"""Issue 38.14's decision, kept as a differential test: an untrained legacy MXNet SSD (bench.ssd_models
``mobilenet_like_256_untrained``: 24,512 anchors x 20 classes, nms_topk 400, force_suppress) detects other boxes in
onnxruntime than in MXNet, and the cause is the runtimes' softmax rounding, not the MultiBoxDetection lowering.

Stage by stage on uniform [0, 1] inputs, MXNet's internal outputs (``get_internals``) against the converted model's
tensors (extra ONNX outputs on the nodes whose provenance is ``cls_prob`` / ``detection``):

- class probabilities: every one is 1/21 to a few ulps, and the two runtimes' differ by a few float32 ulps;
- decoded boxes before NMS: the float64 decode of MXNet's loc_pred and anchors, to float32 rounding;
- the top-400 cut: the scores there are tied to the ulp (hundreds of anchors within a few ulps of it), so each
  runtime's rounding picks other anchors - and a numpy MultiBoxDetection (notes/mxnet-ssd.md: stable sort, top-k,
  greedy NMS at IoU >= t) fed each runtime's *own* probabilities reproduces that runtime's kept anchors exactly.

So the lowering is exact given its inputs; the verdict must prove the tie (``bridge.validation.pinning``:
the source's own scores tie every changed choice), not excuse a conversion error.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from support import mxnet_available

import bridge

pytestmark = pytest.mark.slow

VARIANCES = (0.1, 0.1, 0.2, 0.2)


def _decode(loc: np.ndarray, anchors: np.ndarray) -> np.ndarray:
    """MultiBoxDetection's decode in float64, clipped to [0, 1]: [B, N, 4]."""
    loc = loc.reshape(loc.shape[0], -1, 4).astype(np.float64)
    a = anchors[0].astype(np.float64)
    aw, ah = a[:, 2] - a[:, 0], a[:, 3] - a[:, 1]
    ax, ay = (a[:, 0] + a[:, 2]) / 2, (a[:, 1] + a[:, 3]) / 2
    ox, oy = loc[..., 0] * VARIANCES[0] * aw + ax, loc[..., 1] * VARIANCES[1] * ah + ay
    ow, oh = np.exp(loc[..., 2] * VARIANCES[2]) * aw / 2, np.exp(loc[..., 3] * VARIANCES[3]) * ah / 2
    return np.clip(np.stack([ox - ow, oy - oh, ox + ow, oy + oh], -1), 0, 1)


def _iou(box: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    iw = np.clip(np.minimum(box[2], boxes[:, 2]) - np.maximum(box[0], boxes[:, 0]), 0, None)
    ih = np.clip(np.minimum(box[3], boxes[:, 3]) - np.maximum(box[1], boxes[:, 1]), 0, None)
    inter = iw * ih
    union = (box[2] - box[0]) * (box[3] - box[1]) + (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1]) - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1), 0)


def _multibox(prob: np.ndarray, boxes: np.ndarray, attrs: dict[str, Any]) -> tuple[np.ndarray, list[int]]:
    """One image of MXNet 1.9.1's MultiBoxDetection (force_suppress): the top-k order and the kept anchors."""
    score = prob[1:].max(0)
    valid = np.flatnonzero(score >= float(attrs["threshold"]))
    order = valid[np.argsort(-score[valid], kind="stable")][:int(attrs["nms_topk"])]
    alive, keep = np.ones(len(order), bool), []
    for i in range(len(order)):
        if alive[i]:
            keep.append(int(order[i]))
            rest = np.arange(i + 1, len(order))
            rest = rest[alive[rest]]
            alive[rest[_iou(boxes[order[i]], boxes[order[rest]]) >= float(attrs["nms_threshold"])]] = False
    return order, keep


def _kept(det: np.ndarray) -> np.ndarray:
    return det[det[:, 0] >= 0]


def test_near_tied_softmax_decides_the_cut_and_the_lowering_is_exact(tmp_path: Path) -> None:
    if not mxnet_available():
        pytest.skip("needs mxnet")
    import onnxruntime as ort

    from bench.ssd_models import build, mxnet_import

    mx = mxnet_import(1)
    built = build(mx, "mobilenet_like_256_untrained", tmp_path / "cache")
    attrs = next(n for n in json.loads(built.symbol.read_text())["nodes"]
                 if n["op"] == "_contrib_MultiBoxDetection")["attrs"]
    assert attrs["force_suppress"] == "True"
    x = np.random.default_rng(0).uniform(0, 1, (1, 3, 256, 256)).astype(np.float32)

    saved = mx.nd.load(str(built.params))
    internals = mx.sym.load(str(built.symbol)).get_internals()
    group = mx.sym.Group([internals[n] for n in ("cls_prob_output", "multibox_loc_pred_output",
                                                   "multibox_anchors_output", "detection_output")])
    ex = group.bind(mx.cpu(), {**{k[4:]: v for k, v in saved.items() if k.startswith("arg:")}, "data": mx.nd.array(x)},
                    aux_states={k[4:]: v for k, v in saved.items() if k.startswith("aux:")}, grad_req="null")
    m_prob, m_loc, m_anchors, m_det = (o.asnumpy() for o in ex.forward(is_train=False))

    out = tmp_path / "m.onnx"
    bridge.convert(str(built.symbol), out, weights=str(built.params), inputs=["data:1,3,256,256"], validate=[])
    model = onnx.load(out)
    by_op = {}  # the lowering's nodes by op, found by their provenance (bridge.source.node)
    for n in model.graph.node:
        source = {p.key: p.value for p in n.metadata_props}.get("bridge.source.node")
        by_op.setdefault((source, n.op_type), []).append(n)
    ((softmax,), (topk,), (nms,)) = (by_op[("cls_prob", "Softmax")], by_op[("detection", "TopK")],
                                     by_op[("detection", "NonMaxSuppression")])
    taps = {"prob": softmax.output[0], "top": topk.output[1], "boxes": nms.input[0], "det": "detection_output"}
    model.graph.output.extend(onnx.helper.make_empty_tensor_value_info(t) for t in taps.values()
                              if t not in {o.name for o in model.graph.output})
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    o = dict(zip([t.name for t in sess.get_outputs()], sess.run(None, {"data": x}), strict=True))
    o_prob = o[taps["prob"]]  # [B, N, C+1] in the conversion when a pass moved its Transpose away
    o_prob = o_prob if o_prob.shape == m_prob.shape else o_prob.transpose(0, 2, 1)

    # class probabilities: all 1/21 to ~1e-7, the runtimes a few ulps apart
    ulp = float(np.spacing(np.float32(1 / 21)))
    assert np.abs(m_prob - 1 / 21).max() < 1e-6
    prob_ulps = np.abs(m_prob.astype(np.float64) - o_prob).max() / ulp
    assert 0 < prob_ulps <= 8, prob_ulps
    # decoded boxes before NMS (the top-k rows onnxruntime visits): MXNet's decode to float32 rounding
    m_boxes = _decode(m_loc, m_anchors)[0]
    top = o[taps["top"]][0]
    assert np.abs(o[taps["boxes"]][0] - m_boxes[top]).max() < 1e-6
    # the cut: MXNet's own scores tie hundreds of anchors within 8 ulps of the 400th, and the runtimes' top-400
    # sets differ there only
    m_order, m_keep = _multibox(m_prob[0], m_boxes, attrs)
    m_score = m_prob[0, 1:].max(0).astype(np.float64)
    cut = m_score[m_order[-1]]
    assert (np.abs(m_score - cut) <= 8 * ulp).sum() > 400
    swapped = np.asarray(sorted(set(m_order.tolist()) ^ set(top.tolist())))
    assert swapped.size > 20 and np.abs(m_score[swapped] - cut).max() <= 8 * ulp
    # a numpy MultiBoxDetection reproduces each runtime's kept anchors from that runtime's own probabilities
    _, o_keep = _multibox(o_prob[0], m_boxes, attrs)
    for det, keep in ((m_det[0], m_keep), (o[taps["det"]][0], o_keep)):
        rows = _kept(det)
        assert len(rows) == len(keep)
        np.testing.assert_allclose(rows[:, 2:], m_boxes[keep], atol=1e-6)
    assert set(m_keep) != set(o_keep)  # and they differ: the rounding, not the lowering, decides
