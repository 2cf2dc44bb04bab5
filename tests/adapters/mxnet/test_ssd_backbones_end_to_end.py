"""mxnet-ssd-style SSDs of several backbones through `bridge convert`: plain ONNX (no bridge.contrib op left,
full checker passes) whose detections match MXNet's, detection by detection, at batch 2.

Inputs are scaled so the random-weight heads do not saturate: saturated softmax scores tie at exactly 1.0,
and NMS order among exact ties is implementation-defined (see bridge/passes/contrib/detection.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from mxnet_testlib import need_mxnet
from test_ssd_graphs import BACKBONES, multibox_head, save_checkpoint

from bridge import api


@pytest.mark.parametrize("backbone", sorted(BACKBONES))
@pytest.mark.parametrize("force_suppress", [False, True])
def test_full_ssd_converts_to_plain_onnx_matching_mxnet(tmp_path: Path, backbone: str, force_suppress: bool) -> None:
    mx = need_mxnet()
    data = mx.sym.var("data")
    loc, cls, anchors = multibox_head(mx, BACKBONES[backbone](mx, data))
    cls_prob = mx.sym.SoftmaxActivation(cls, mode="channel", name="cls_prob")
    det = mx.sym.contrib.MultiBoxDetection(cls_prob, loc, anchors, name="detection", nms_threshold=0.45,
                                           force_suppress=force_suppress, threshold=0.3, nms_topk=50)
    model = save_checkpoint(mx, det, tmp_path, (2, 3, 32, 32))
    feeds = tmp_path / "feeds.npz"
    np.savez(feeds, data=np.random.default_rng(5).normal(0, 0.5, (2, 3, 32, 32)).astype(np.float32))
    result = api.convert(model.symbol, tmp_path / "ssd.onnx", inputs=["data:2,3,32,32"], feeds=feeds)
    converted = onnx.load(tmp_path / "ssd.onnx")
    assert not [n.op_type for n in converted.graph.node if n.domain not in ("", "ai.onnx")]
    onnx.checker.check_model(converted, full_check=True)
    ((out,),) = [c.outputs for c in result.validation]
    assert result.passed and out.note.startswith("detection-aware (mxnet)"), out.note
    assert " 0 matched" not in out.note  # real detections were compared, not two empty sets
    assert "LowerMultiBoxDetectionPass" in api.inspect(tmp_path / "ssd.onnx").bridge["passes_modified"]
