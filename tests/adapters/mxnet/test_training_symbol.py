"""A training checkpoint symbol (mxnet-ssd's train symbol: SoftmaxOutput whose label comes from MultiBoxTarget)
cut at its inference output: the loss heads' label inputs are ignored at inference, so the training-only
branch behind them (MultiBoxTarget, the label variable) is not needed, and the cut converts and matches MXNet."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from mxnet_testlib import export, need_mxnet, save_symbol

import bridge


def _train_symbol(mx: Any, loss_op: str) -> Any:
    data = mx.sym.var("data")
    feat = mx.sym.Activation(mx.sym.Convolution(data, kernel=(3, 3), pad=(1, 1), num_filter=8, name="conv"),
                             act_type="relu")
    anchors = mx.sym.contrib.MultiBoxPrior(feat, sizes=(0.3, 0.6), ratios=(1.0, 2.0), name="anchors")
    cls = mx.sym.Convolution(feat, kernel=(3, 3), pad=(1, 1), num_filter=3 * 3, name="cls")
    cls = mx.sym.reshape(mx.sym.transpose(cls, axes=(0, 2, 3, 1)), shape=(0, -1, 3))
    cls_preds = mx.sym.transpose(cls, axes=(0, 2, 1), name="cls_preds")
    loc = mx.sym.Convolution(feat, kernel=(3, 3), pad=(1, 1), num_filter=3 * 4, name="loc")
    loc_preds = mx.sym.flatten(mx.sym.transpose(loc, axes=(0, 2, 3, 1)), name="loc_preds")
    label = mx.sym.var("label")
    tmp = mx.sym.contrib.MultiBoxTarget(anchors, label, cls_preds, overlap_threshold=0.5, name="multibox_target")
    loc_target, loc_mask, cls_target = tmp[0], tmp[1], tmp[2]
    if loss_op == "SoftmaxOutput":
        cls_prob = mx.sym.SoftmaxOutput(cls_preds, label=cls_target, ignore_label=-1, use_ignore=True,
                                        multi_output=True, normalization="valid", name="cls_prob")
    else:
        target = mx.sym.broadcast_add(cls_preds * 0, cls_target.reshape((0, 1, -1)))
        cls_prob = mx.sym.softmax(mx.sym.LinearRegressionOutput(cls_preds, label=target, name="reg"), axis=1,
                                  name="cls_prob")
    loc_loss = mx.sym.MakeLoss(mx.sym.smooth_l1(loc_mask * (loc_preds - loc_target), scalar=1.0), name="loc_loss")
    det = mx.sym.contrib.MultiBoxDetection(cls_prob, loc_preds, anchors, nms_threshold=0.45, name="detection")
    return mx.sym.Group([cls_prob, loc_loss, mx.sym.MakeLoss(cls_target, grad_scale=0, name="cls_label"), det])


@pytest.mark.parametrize("loss_op", ["SoftmaxOutput", "LinearRegressionOutput"])
def test_training_symbol_cut_at_the_detections(loss_op: str, tmp_path: Path) -> None:
    mx = need_mxnet()
    sym = _train_symbol(mx, loss_op)
    rng = np.random.default_rng(0)
    feeds = {"data": rng.standard_normal((1, 3, 6, 6)).astype(np.float32)}
    shapes = {"data": (1, 3, 6, 6), "label": (1, 2, 5)}
    arg_shapes, _, _ = sym.infer_shape(**shapes)
    params = {n: (rng.standard_normal(s) * 0.3).astype(np.float32)
              for n, s in zip(sym.list_arguments(), arg_shapes, strict=True) if n not in shapes}
    model = save_symbol(mx, sym, tmp_path, params, feeds, outputs="detection_output")
    result = export(model)
    assert [i.name for i in result.model.graph.input if i.name in ("data", "label")] == ["data"]
    assert not [n for n in result.model.graph.node if "MultiBoxTarget" in n.op_type]
    converted = bridge.convert(str(model.symbol), tmp_path / "det.onnx", inputs=["data:1,3,6,6"],
                               weights=model.params, options={"outputs": "detection_output"}, validate=["onnxruntime"])
    assert converted.passed


@pytest.mark.parametrize("loss_op", ["SoftmaxOutput", "LogisticRegressionOutput", "LinearRegressionOutput",
                                     "MAERegressionOutput"])
def test_shapes_given_for_a_loss_heads_label_are_accepted_and_left_out(loss_op: str, tmp_path: Path) -> None:
    """A Gluon block ending in a loss head, exported as MXNet's exporter wants it: a shape for every variable,
    the label's too. The label is not read at inference; its --input is accepted (with a warning) and the
    model still matches MXNet. A name the symbol does not have at all stays a usage error."""
    mx = need_mxnet()
    data, label = mx.sym.var("data0"), mx.sym.var("data1")
    sym = getattr(mx.sym, loss_op)(data, label, name="head")
    rng = np.random.default_rng(1)
    feeds = tmp_path / "feeds.npz"
    np.savez(feeds, data0=rng.standard_normal((3, 5)).astype(np.float32))
    model = save_symbol(mx, sym, tmp_path, {}, {"data0": np.zeros((3, 5), np.float32)})
    converted = bridge.convert(str(model.symbol), tmp_path / "head.onnx", inputs=["data0:3,5", "data1:3,5"],
                               feeds=feeds, validate=["onnxruntime"])
    assert converted.passed, [c.summary() for c in converted.validation]
    assert [i.name for i in converted.inputs] == ["data0"]
    assert any("data1" in w and "not read" in w for w in converted.warnings), converted.warnings
    with pytest.raises(bridge.errors.UsageError, match="no such input"):
        bridge.convert(str(model.symbol), tmp_path / "x.onnx", inputs=["data0:3,5", "labels:3,5"], validate=[])
