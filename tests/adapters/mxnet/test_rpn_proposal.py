"""GluonCV's RPN proposal (``RPNProposal``: clip, min-size mask, ``where(invalid, ones_like(invalid) * -1, x)``,
concat, box_nms, top-N slice) and the R-CNN head's split + second box_nms, through ``bridge convert``: the
``ones_like`` / ``zeros_like`` outputs keep their input's shape, so the box_nms they feed and everything after it
(a split over the batch, the second box_nms) have static shapes and are lowered; detections match MXNet.

GluonCV's Faster R-CNN / Mask R-CNN graphs hold this block; a shapeless ``ones_like`` made box_nms refuse
("the last axis of data (box width, e.g. 6) must be static")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from mxnet_testlib import need_mxnet

from bridge import api

N, POST = 64, 16


def rpn_proposal(mx: Any, fill: str, min_size: float) -> Any:
    F = mx.sym
    score, roi = F.var("score"), F.var("roi")  # [1, N, 1], [1, N, 4] corner boxes
    window = F.ones_like(F.slice_axis(roi, axis=1, begin=0, end=1)) * 63.0  # BBoxClipToImage's [1, 1, 4]
    roi = F.broadcast_minimum(F.maximum(roi, 0.0), window)
    xmin, ymin, xmax, ymax = F.split(roi, num_outputs=4, axis=-1)
    invalid = (xmax - xmin < min_size) + (ymax - ymin < min_size)

    def minus_ones(like: Any) -> Any:  # GluonCV writes ones_like(x) * -1; zeros_like(x) - 1 is the same
        return getattr(F, fill)(like) * -1 if fill == "ones_like" else getattr(F, fill)(like) - 1

    score = F.where(invalid, minus_ones(invalid), score)
    invalid4 = F.broadcast_axes(invalid, axis=2, size=4)
    roi = F.where(invalid4, minus_ones(invalid4), roi)
    pre = F.concat(score, roi, dim=-1)
    nms = F.contrib.box_nms(pre, overlap_thresh=0.7, topk=N, coord_start=1, score_index=0, id_index=-1,
                            force_suppress=True)
    proposals = F.slice_axis(nms, axis=1, begin=0, end=POST)
    # the R-CNN head's per-image split and a second box_nms over (id, score, box) rows, as GluonCV's
    # MultiPerClassDecoder path does: the split and this box_nms need the proposals' static shape
    (rois,) = [F.split(proposals, num_outputs=1, axis=0, squeeze_axis=True)]
    ids = F.floor(F.slice_axis(rois, axis=-1, begin=1, end=2) / 16.0)
    scores = F.slice_axis(rois, axis=-1, begin=0, end=1)
    boxes = F.slice_axis(rois, axis=-1, begin=1, end=None)
    rows = F.concat(ids, scores, boxes, dim=-1)
    return F.contrib.box_nms(F.expand_dims(rows, axis=0), overlap_thresh=0.5, topk=POST, coord_start=2,
                             score_index=1, id_index=0, name="detections")


@pytest.mark.parametrize("fill", ["ones_like", "zeros_like"])
@pytest.mark.parametrize("min_size", [1.0, 12.0])
def test_rpn_proposal_with_filled_like_masks_converts_and_matches_mxnet(tmp_path: Path, fill: str,
                                                                        min_size: float) -> None:
    mx = need_mxnet()
    rpn_proposal(mx, fill, min_size).save(str(tmp_path / "rpn-symbol.json"))
    rng = np.random.default_rng(3)
    xy = rng.uniform(-4, 50, (1, N, 2))
    roi = np.concatenate([xy, xy + rng.uniform(0.5, 24, (1, N, 2))], -1).astype(np.float32)
    score = rng.permutation(N).reshape(1, N, 1).astype(np.float32) / N  # distinct: no NMS ties
    feeds = tmp_path / "feeds.npz"
    np.savez(feeds, score=score, roi=roi)
    result = api.convert(str(tmp_path / "rpn-symbol.json"), tmp_path / "rpn.onnx",
                         inputs=[f"score:1,{N},1", f"roi:1,{N},4"], feeds=feeds)
    assert result.passed, [c.summary() for c in result.validation]
    converted = onnx.load(tmp_path / "rpn.onnx")
    assert not [n.op_type for n in converted.graph.node if n.domain not in ("", "ai.onnx")]
    (out,) = converted.graph.output
    assert [d.dim_value for d in out.type.tensor_type.shape.dim] == [1, POST, 6]
