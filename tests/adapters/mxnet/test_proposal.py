"""The legacy rcnn RPN (_contrib_Proposal / _contrib_MultiProposal): converted through the bridge.contrib
Proposal node and its lowering, compared with MXNet on random inputs, on constructed score ties and on
inputs where fewer boxes survive than rpn_post_nms_top_n (MXNet repeats the kept rows)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from mxnet_testlib import export, need_mxnet, run_mxnet, run_onnx, save_symbol

from bridge.passes.contrib import LowerProposalPass


def _lowered(result: Any) -> onnx.ModelProto:
    model = ir.serde.deserialize_model(result.model)
    model = LowerProposalPass()(model).model
    proto = ir.serde.serialize_model(model)
    assert not [n for n in proto.graph.node if n.domain == "bridge.contrib"]
    onnx.checker.check_model(proto, full_check=True)
    return proto


def _inputs(rng: np.random.Generator, batch: int, a: int, h: int, w: int, stride: int, ties: bool,
            delta_scale: float) -> dict[str, np.ndarray]:
    fg = rng.random((batch, a, h, w)).astype(np.float32)
    if ties:  # a handful of distinct values: many equal scores
        fg = (np.floor(fg * 3) / 3).astype(np.float32)
    cls_prob = np.concatenate([1 - fg, fg], axis=1).astype(np.float32)
    bbox_pred = (rng.standard_normal((batch, 4 * a, h, w)) * delta_scale).astype(np.float32)
    im_info = np.array([[h * stride - 5, w * stride - 3 - 7 * i, 1.0 + 0.25 * i] for i in range(batch)], np.float32)
    return {"cls_prob": cls_prob, "bbox_pred": bbox_pred, "im_info": im_info}


CASES = [
    # op, batch, scales, ratios, H, W, pre, post, threshold, min_size, output_score, iou_loss, ties, delta
    ("Proposal", 1, (8.0, 16.0), (0.5, 1.0, 2.0), 6, 7, 60, 20, 0.7, 16, True, False, False, 0.3),
    ("Proposal", 1, (4.0, 8.0, 16.0, 32.0), (0.5, 1.0, 2.0), 5, 5, 6000, 300, 0.7, 16, False, False, False, 0.2),
    ("Proposal", 1, (2.0,), (0.5, 1.0, 2.0), 2, 2, 12, 10, 0.5, 4, True, False, True, 0.1),  # ties, repeats
    ("Proposal", 1, (8.0,), (1.0,), 4, 4, 16, 8, 0.6, 8, True, True, True, 2.0),  # iou_loss, ties
    ("MultiProposal", 2, (8.0, 16.0), (0.5, 2.0), 5, 6, 50, 15, 0.7, 16, True, False, False, 0.3),
    ("MultiProposal", 3, (4.0,), (1.0, 2.0), 3, 2, 12, 12, 0.3, 16, True, False, True, 0.5),
]


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
@pytest.mark.parametrize("seed", [0, 1])
def test_proposal_matches_mxnet(case: tuple[Any, ...], seed: int, tmp_path: Path) -> None:
    mx = need_mxnet()
    op, batch, scales, ratios, h, w, pre, post, threshold, min_size, output_score, iou_loss, ties, delta = case
    stride = 16
    a = len(scales) * len(ratios)
    feeds = _inputs(np.random.default_rng(seed), batch, a, h, w, stride, ties, delta)
    fn = getattr(mx.sym.contrib, op)
    sym = fn(mx.sym.var("cls_prob"), mx.sym.var("bbox_pred"), mx.sym.var("im_info"), name="rpn",
             rpn_pre_nms_top_n=pre, rpn_post_nms_top_n=post, threshold=threshold, rpn_min_size=min_size,
             scales=scales, ratios=ratios, feature_stride=stride, output_score=output_score, iou_loss=iou_loss)
    model = save_symbol(mx, sym, tmp_path, {}, feeds)
    result = export(model)
    (node,) = [n for n in result.model.graph.node if n.op_type == "Proposal"]
    assert {x.name for x in node.attribute} >= {"scales", "ratios", "feature_stride", "rpn_min_size", "iou_loss"}
    expected = list(run_mxnet(model, result).values())
    got = list(run_onnx(_lowered(result), feeds).values())
    assert len(got) == len(expected) == (2 if output_score else 1)
    for g, e in zip(got, expected, strict=True):
        assert g.shape == e.shape == (batch * post, g.shape[1])
        np.testing.assert_array_equal(g, e)
