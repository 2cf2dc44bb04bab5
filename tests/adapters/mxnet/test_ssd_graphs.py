"""Whole mxnet-ssd-style graphs built with mx.sym: backbones + multibox head, cut at the SSD points
(loc/cls compared with MXNet, anchors checked as bridge.contrib MultiBoxPrior), and a full deploy graph
ending in MultiBoxDetection."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from mxnet_testlib import Model, assert_close, export, need_mxnet, run_mxnet, run_onnx

NUM_CLASSES = 3
CUTS = "multibox_loc_pred,multibox_cls_pred,multibox_anchors"


def conv(mx: Any, x: Any, name: str, filters: int, stride: int = 1, group: int = 1, bn: bool = False,
         relu: bool = True) -> Any:
    k = 3 if group > 1 or stride > 1 or filters > 4 else 1
    y = mx.sym.Convolution(x, kernel=(k, k), pad=(k // 2, k // 2), stride=(stride, stride), num_filter=filters,
                           num_group=group, no_bias=bn, name=name)
    if bn:
        y = mx.sym.BatchNorm(y, fix_gamma=False, eps=1e-5, name=f"{name}_bn")
    return mx.sym.Activation(y, act_type="relu", name=f"{name}_relu") if relu else y


def vgg_like(mx: Any, data: Any) -> list[Any]:
    x = conv(mx, data, "conv1", 8)
    x = mx.sym.Pooling(x, kernel=(2, 2), stride=(2, 2), pool_type="max", name="pool1")
    relu4_3 = conv(mx, x, "conv4_3", 8)
    norm = mx.sym.L2Normalization(relu4_3, mode="channel", name="relu4_3_norm")
    scale = mx.sym.var("relu4_3_scale", shape=(1, 8, 1, 1), init=mx.init.Constant(20))
    scaled = mx.sym.broadcast_mul(norm, scale, name="relu4_3_scaled")
    x = mx.sym.Pooling(relu4_3, kernel=(3, 3), stride=(2, 2), pool_type="max", pooling_convention="full", name="pool5")
    relu7 = conv(mx, x, "fc7", 8)
    return [scaled, relu7]


def mobilenet_like(mx: Any, data: Any) -> list[Any]:
    x = conv(mx, data, "conv0", 8, stride=2, bn=True)
    x = conv(mx, x, "conv1_dw", 8, group=8, bn=True)
    f1 = conv(mx, x, "conv1_pw", 16, bn=True)
    x = conv(mx, f1, "conv2_dw", 16, stride=2, group=16, bn=True)
    f2 = conv(mx, x, "conv2_pw", 16, bn=True)
    return [f1, f2]


def resnet_like(mx: Any, data: Any) -> list[Any]:
    x = conv(mx, data, "stem", 8, stride=2, bn=True)
    y = conv(mx, x, "res1_a", 8, bn=True)
    y = conv(mx, y, "res1_b", 8, bn=True, relu=False)
    x = mx.sym.Activation(mx.sym.elemwise_add(x, y, name="res1_add"), act_type="relu", name="res1_relu")
    f2 = conv(mx, x, "res2", 8, stride=2, bn=True)
    return [x, f2]


def multibox_head(mx: Any, feats: list[Any]) -> tuple[Any, Any, Any]:
    # layout of zhreshold/mxnet-ssd symbol/common.py multibox_layer
    sizes = [(0.2, 0.272), (0.37, 0.447)]
    ratios = [(1, 2, 0.5), (1, 2, 0.5, 3)]
    loc_layers, cls_layers, anchor_layers = [], [], []
    for i, feat in enumerate(feats):
        a = len(sizes[i]) + len(ratios[i]) - 1
        loc = mx.sym.Convolution(feat, kernel=(3, 3), pad=(1, 1), num_filter=4 * a, name=f"f{i}_loc_pred_conv")
        loc_layers.append(mx.sym.Flatten(mx.sym.transpose(loc, axes=(0, 2, 3, 1))))
        cls = mx.sym.Convolution(feat, kernel=(3, 3), pad=(1, 1), num_filter=a * (NUM_CLASSES + 1),
                                 name=f"f{i}_cls_pred_conv")
        cls_layers.append(mx.sym.Flatten(mx.sym.transpose(cls, axes=(0, 2, 3, 1))))
        anchors = mx.sym.contrib.MultiBoxPrior(feat, sizes=sizes[i], ratios=ratios[i], clip=False,
                                               steps=(-1.0, -1.0) if i else (0.125, 0.125), name=f"f{i}_anchors")
        anchor_layers.append(mx.sym.Flatten(anchors))
    loc_preds = mx.sym.Concat(*loc_layers, num_args=len(loc_layers), dim=1, name="multibox_loc_pred")
    cls_preds = mx.sym.Concat(*cls_layers, num_args=len(cls_layers), dim=1)
    cls_preds = mx.sym.Reshape(cls_preds, shape=(0, -1, NUM_CLASSES + 1))
    cls_preds = mx.sym.transpose(cls_preds, axes=(0, 2, 1), name="multibox_cls_pred")
    anchor_boxes = mx.sym.Concat(*anchor_layers, num_args=len(anchor_layers), dim=1)
    anchor_boxes = mx.sym.Reshape(anchor_boxes, shape=(0, -1, 4), name="multibox_anchors")
    return loc_preds, cls_preds, anchor_boxes


def save_checkpoint(mx: Any, sym: Any, tmp: Path, shape: tuple[int, ...]) -> Model:
    mod = mx.mod.Module(sym, label_names=None, context=mx.cpu())
    mod.bind(data_shapes=[("data", shape)], for_training=False)
    mx.random.seed(3)
    mod.init_params(initializer=mx.init.Normal(0.2))
    args, aux = mod.get_params()
    rng = np.random.default_rng(0)
    for k, v in aux.items():  # non-trivial BatchNorm statistics
        aux[k] = mx.nd.array(rng.uniform(0.5, 1.5, v.shape) if k.endswith("var") else rng.normal(0, 0.1, v.shape))
    for k, v in args.items():
        if k.endswith(("gamma", "beta")):
            args[k] = mx.nd.array(rng.uniform(0.5, 1.5, v.shape) if k.endswith("gamma") else rng.normal(0, .1, v.shape))
    mod.set_params(args, aux)
    mod.save_checkpoint(str(tmp / "ssd"), 2)
    x = rng.normal(size=shape).astype(np.float32)
    return Model(tmp / "ssd-symbol.json", None, {"data": x})


BACKBONES = {"vgg": vgg_like, "mobilenet": mobilenet_like, "resnet": resnet_like}


@pytest.mark.parametrize("backbone", sorted(BACKBONES))
def test_backbone_with_multibox_head_cut(backbone: str, tmp_path: Path) -> None:
    mx = need_mxnet()
    data = mx.sym.var("data")
    loc, cls, anchors = multibox_head(mx, BACKBONES[backbone](mx, data))
    sym = mx.sym.Group([loc, cls, anchors])
    model = save_checkpoint(mx, sym, tmp_path, (1, 3, 32, 32))
    model.outputs = CUTS
    result = export(model)
    assert result.output_names == ("multibox_loc_pred_output", "multibox_cls_pred_output", "multibox_anchors_output")
    got = run_onnx_without_contrib(result.model, model.feeds)
    ref = run_mxnet(model, result)
    assert_close({k: got[k] for k in result.output_names[:2]},
                 {k: ref[k] for k in result.output_names[:2]}, rtol=1e-4, atol=1e-5)
    # anchors: one contrib MultiBoxPrior per feature layer with every attribute and the right shape
    priors = [n for n in result.model.graph.node if n.domain == "bridge.contrib"]
    assert [n.op_type for n in priors] == ["MultiBoxPrior", "MultiBoxPrior"]
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in priors[0].attribute}
    np.testing.assert_array_equal(np.float32(attrs["sizes"]), np.float32([0.2, 0.272]))
    np.testing.assert_array_equal(np.float32(attrs["steps"]), np.float32([0.125, 0.125]))
    assert attrs["clip"] == 0 and list(attrs["offsets"]) == [0.5, 0.5] and list(attrs["ratios"]) == [1, 2, 0.5]
    shapes = _shapes(result.model)
    n_total = ref["multibox_anchors_output"].shape[1]
    feat_hw = [ref_shape[2] * ref_shape[3] for ref_shape in _feature_shapes(mx, model, priors)]
    assert shapes[priors[0].output[0]] == [1, feat_hw[0] * 4, 4]
    assert shapes[priors[1].output[0]] == [1, feat_hw[1] * 5, 4]
    assert shapes["multibox_anchors_output"] == [1, n_total, 4]
    assert shapes["multibox_cls_pred_output"] == [1, NUM_CLASSES + 1, n_total]


def test_full_ssd_deploy_graph(tmp_path: Path) -> None:
    mx = need_mxnet()
    data = mx.sym.var("data")
    loc, cls, anchors = multibox_head(mx, vgg_like(mx, data))
    cls_prob = mx.sym.SoftmaxActivation(cls, mode="channel", name="cls_prob")
    det = mx.sym.contrib.MultiBoxDetection(cls_prob, loc, anchors, name="detection", nms_threshold=0.45,
                                           force_suppress=False, variances=(0.1, 0.1, 0.2, 0.2), nms_topk=400)
    model = save_checkpoint(mx, det, tmp_path, (1, 3, 32, 32))
    result = export(model)
    m = result.model
    onnx.checker.check_model(m)  # contrib ops have no schema: the non-full check
    assert any(o.domain == "bridge.contrib" and o.version == 1 for o in m.opset_import)
    (det_node,) = [n for n in m.graph.node if n.op_type == "MultiBoxDetection"]
    assert det_node.domain == "bridge.contrib" and det_node.name == "detection"
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in det_node.attribute}
    assert attrs["nms_topk"] == 400 and attrs["force_suppress"] == 0 and attrs["clip"] == 1
    assert np.float32(attrs["nms_threshold"]) == np.float32(0.45) and np.float32(attrs["threshold"]) == np.float32(0.01)
    ref = run_mxnet(model, result)
    assert result.output_names == ("detection_output",)
    assert _shapes(m)["detection_output"] == list(ref["detection_output"].shape)
    assert any("lowering" in n for n in result.notes)


def run_onnx_without_contrib(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run the standard-ONNX part: drop the graph outputs that depend on bridge.contrib nodes."""
    contrib_out = {o for n in model.graph.node if n.domain == "bridge.contrib" for o in n.output}
    tainted = set(contrib_out)
    for n in model.graph.node:
        if tainted & set(n.input):
            tainted |= set(n.output)
    m = onnx.ModelProto()
    m.CopyFrom(model)
    keep = [o for o in m.graph.output if o.name not in tainted]
    del m.graph.output[:]
    m.graph.output.extend(keep)
    nodes = [n for n in m.graph.node if not (set(n.output) & tainted)]
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    del m.opset_import[1:]
    return run_onnx(m, feeds)


def _shapes(model: onnx.ModelProto) -> dict[str, list[int | None]]:
    out = {}
    for vi in [*model.graph.value_info, *model.graph.output]:
        dims = vi.type.tensor_type.shape.dim
        out[vi.name] = [d.dim_value if d.HasField("dim_value") else None for d in dims]
    return out


def _feature_shapes(mx: Any, model: Model, priors: list[onnx.NodeProto]) -> list[tuple[int, ...]]:
    sym = mx.sym.load(str(model.symbol)).get_internals()
    shapes = []
    for p in priors:
        feat = sym[p.name + "_output"].get_children()[0]
        _, out_shapes, _ = feat.infer_shape(data=model.feeds["data"].shape)
        shapes.append(out_shapes[0])
    return shapes
