"""The float-region rule: trunk layers and what feeds them are quantized; the decode, NMS / TopK inputs and every
index, shape or geometry path stay float - found from the graph's structure, on graphs built here and on the
example SSD as bridge converts it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from support import make_model

from bridge.precision.regions import split_region

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "mxnet_ssd"


def _w(name: str, *shape: int) -> onnx.TensorProto:
    return numpy_helper.from_array(np.random.default_rng(len(name)).normal(0, 0.1, shape).astype(np.float32), name)


def _detector() -> onnx.ModelProto:
    """x -> conv1 -> relu -> conv2 (boxes head) / conv3 (scores head); boxes + anchors (decode, a Concat of
    anchors), scores -> Sigmoid -> TopK; a count as Cast(bool) -> MatMul (index arithmetic); NMS."""
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2"], ["boxes_raw"], name="box_head"),
        helper.make_node("Conv", ["r1", "w3"], ["scores_raw"], name="score_head"),
        helper.make_node("Reshape", ["boxes_raw", "shape4"], ["boxes_flat"], name="boxes_reshape"),
        helper.make_node("Concat", ["anchors_a", "anchors_b"], ["anchors"], name="anchors_concat", axis=1),
        helper.make_node("Add", ["boxes_flat", "anchors"], ["boxes"], name="decode_add"),
        helper.make_node("Reshape", ["scores_raw", "shape1"], ["scores_flat"], name="scores_reshape"),
        helper.make_node("Sigmoid", ["scores_flat"], ["scores"], name="scores_sigmoid"),
        helper.make_node("Greater", ["scores", "thresh"], ["keep"], name="keep_mask"),
        helper.make_node("Cast", ["keep"], ["keep_f"], name="keep_cast", to=TensorProto.FLOAT),
        helper.make_node("MatMul", ["keep_f", "ones"], ["count"], name="count_matmul"),
        helper.make_node("TopK", ["scores", "k"], ["top_scores", "top_idx"], name="topk", axis=2),
        helper.make_node("NonMaxSuppression", ["boxes", "scores", "maxk", "iou"], ["selected"], name="nms"),
    ]
    inits = [_w("w1", 8, 3, 3, 3), _w("w2", 8, 8, 1, 1), _w("w3", 2, 8, 1, 1),
             numpy_helper.from_array(np.array([1, 16, 4], np.int64), "shape4"),
             numpy_helper.from_array(np.array([1, 1, 32], np.int64), "shape1"),
             numpy_helper.from_array(np.zeros((1, 8, 4), np.float32), "anchors_a"),
             numpy_helper.from_array(np.zeros((1, 8, 4), np.float32), "anchors_b"),
             numpy_helper.from_array(np.float32(0.5), "thresh"),
             numpy_helper.from_array(np.ones((32, 1), np.float32), "ones"),
             numpy_helper.from_array(np.array([5], np.int64), "k"),
             numpy_helper.from_array(np.array([5], np.int64), "maxk"),
             numpy_helper.from_array(np.array([0.5], np.float32), "iou")]
    return make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
                      [helper.make_tensor_value_info(n, t, None) for n, t in
                       (("selected", TensorProto.INT64), ("count", TensorProto.FLOAT),
                        ("top_scores", TensorProto.FLOAT))], opset=17, initializers=inits)


def test_trunk_and_what_feeds_it_are_quantized_the_rest_stays_float() -> None:
    region = split_region(_detector())
    assert region.trunk == ["conv1", "box_head", "score_head"]
    assert set(region.quantized) == {"conv1", "relu1", "box_head", "score_head"}
    # the decode, the anchors' Concat, the scores, TopK, NMS and the Cast(bool) -> MatMul count stay float
    assert {"decode_add", "anchors_concat", "scores_sigmoid", "topk", "nms", "count_matmul", "keep_cast",
            "boxes_reshape"} <= set(region.float)
    assert region.head_tensors == ["boxes_raw", "scores_raw"]


def test_a_matmul_on_features_is_a_trunk_layer_and_keep_float_is_honoured() -> None:
    model = _detector()
    # a learned projection of the box features (MatMul with a constant on a feature tensor) is a trunk layer
    model.graph.node.insert(5, helper.make_node("MatMul", ["boxes_flat", "proj"], ["boxes_proj"], name="proj"))
    model.graph.initializer.append(_w("proj", 4, 4))
    next(n for n in model.graph.node if n.name == "decode_add").input[0] = "boxes_proj"
    region = split_region(model)
    assert "proj" in region.trunk and "boxes_reshape" in region.quantized  # it feeds a trunk layer now
    # a product of two feature tensors after the heads (no constant weight) is not a trunk layer: it stays float
    model.graph.node.append(helper.make_node("MatMul", ["boxes", "top_scores_t"], ["pair"], name="pair_matmul"))
    model.graph.node.insert(len(model.graph.node) - 1, helper.make_node("Transpose", ["top_scores"], ["top_scores_t"],
                                                                        name="scores_t", perm=[0, 2, 1]))
    assert "pair_matmul" in split_region(model).float
    kept = split_region(model, keep_float=["box_head"])
    assert "box_head" not in kept.quantized and "box_head" in kept.float


def test_geometry_inputs_stay_float_even_upstream_of_a_trunk_layer() -> None:
    """RoiAlign's boxes come from a decode; the second-stage conv after it is a trunk layer, yet only the feature
    map (RoiAlign's data input) is on its quantized path - not the boxes."""
    nodes = [helper.make_node("Conv", ["x", "w1"], ["feat"], name="backbone", pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["feat", "w2"], ["deltas"], name="rpn_head"),
             helper.make_node("ReduceMean", ["deltas"], ["roi_raw"], name="rois_reduce", axes=[2, 3], keepdims=0),
             helper.make_node("Add", ["roi_raw", "base"], ["rois"], name="rois_decode"),
             helper.make_node("RoiAlign", ["feat", "rois", "batch_idx"], ["pooled"], name="roi_align",
                              output_height=2, output_width=2),
             helper.make_node("Conv", ["pooled", "w3"], ["cls"], name="box_classifier")]
    inits = [_w("w1", 4, 3, 3, 3), _w("w2", 4, 4, 1, 1), _w("w3", 2, 4, 2, 2),
             numpy_helper.from_array(np.zeros((1, 4), np.float32), "base"),
             numpy_helper.from_array(np.zeros(1, np.int64), "batch_idx")]
    model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                       [helper.make_tensor_value_info("cls", TensorProto.FLOAT, None)], opset=17, initializers=inits)
    region = split_region(model)
    assert {"backbone", "roi_align", "box_classifier"} <= set(region.quantized)
    assert {"rois_decode", "rois_reduce"} <= set(region.float)


@pytest.fixture(scope="module")
def ssd_onnx(tmp_path_factory: pytest.TempPathFactory) -> onnx.ModelProto:
    from bridge import api

    out = tmp_path_factory.mktemp("ssd") / "ssd.onnx"
    api.convert(str(EXAMPLE / "model-symbol.json"), out, inputs=["data:1,3,64,64"], validate=[])
    return onnx.load(str(out))


def test_the_converted_ssd_quantizes_its_convolutions_only(ssd_onnx: onnx.ModelProto) -> None:
    region = split_region(ssd_onnx)
    convs = {n.name for n in ssd_onnx.graph.node if n.op_type == "Conv"}
    assert set(region.trunk) == convs and len(convs) == 11
    ops = {n.name: n.op_type for n in ssd_onnx.graph.node}
    assert {ops[n] for n in region.quantized} <= {"Conv", "BatchNormalization", "Relu"}
    float_ops = {ops[n] for n in region.float}
    assert {"NonMaxSuppression", "TopK", "Softmax", "Exp"} <= float_ops  # decode and NMS
    assert len(region.head_tensors) == 4  # loc and cls of both feature layers


def test_pre_processing_an_nms_model_leaves_nothing_in_the_cwd(ssd_onnx: onnx.ModelProto, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """onnxruntime's symbolic shape inference gives up on NMS's data-dependent shapes and dumps
    sym_shape_infer_temp.onnx + <uuid>.data into the cwd; pre_process runs it in a temporary directory."""
    from bridge.precision.onnx_int8 import pre_process

    model = tmp_path / "in" / "ssd.onnx"
    model.parent.mkdir()
    onnx.save(ssd_onnx, str(model))
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    prepared = pre_process(Path("../in/ssd.onnx"), Path("../work/ssd.pre.onnx"))
    assert any("symbolic shape inference could not finish" in note for note in prepared.notes)  # the dump path ran
    assert prepared.path == (tmp_path / "work" / "ssd.pre.onnx") and prepared.path.is_file()
    assert list(cwd.iterdir()) == [] and [p.name for p in (tmp_path / "work").iterdir()] == ["ssd.pre.onnx"]
