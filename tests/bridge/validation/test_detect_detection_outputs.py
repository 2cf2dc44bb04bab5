"""detect_detection_outputs: graph outputs fed by NonMaxSuppression are recognised as detector groups
(torchvision-style gathers, TF combined-NMS padding, MXNet / YOLO rows, raw NMS indices, NMS in an If)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper
from support import make_model

from bridge.validation.compare import compare_outputs
from bridge.validation.detection.layouts import DetectionSpec, detect_detection_outputs

F, I64, I32 = TP.FLOAT, TP.INT64, TP.INT32
NMS_CONSTS = [helper.make_tensor("max_out", I64, [1], [100]), helper.make_tensor("iou_thr", F, [1], [0.5]),
              helper.make_tensor("score_thr", F, [1], [0.05])]


def _vi(name: str, elem: int, shape: list[int | str | None] | None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def _nms(boxes: str, scores: str, out: str = "selected") -> onnx.NodeProto:
    return helper.make_node("NonMaxSuppression", [boxes, scores, "max_out", "iou_thr", "score_thr"], [out])


def torchvision_like(names: tuple[str, str, str] = ("boxes", "scores", "labels")) -> onnx.ModelProto:
    """Per-image boxes [N, 4], scores [N], labels [N] in; NMS indices gather the surviving rows; plus an
    unrelated 'features' output."""
    b, s, lab = names
    nodes = [
        helper.make_node("Unsqueeze", ["in_boxes", "ax0"], ["b3"]),
        helper.make_node("Unsqueeze", ["in_scores", "ax01"], ["s3"]),
        _nms("b3", "s3"),
        helper.make_node("Gather", ["selected", "col2"], ["keep"], axis=1),
        helper.make_node("Gather", ["in_boxes", "keep"], [b], axis=0),
        helper.make_node("Gather", ["in_scores", "keep"], [s], axis=0),
        helper.make_node("Gather", ["in_labels", "keep"], [lab], axis=0),
        helper.make_node("Relu", ["in_scores"], ["features"]),
    ]
    inits = [*NMS_CONSTS, helper.make_tensor("ax0", I64, [1], [0]), helper.make_tensor("ax01", I64, [2], [0, 1]),
             helper.make_tensor("col2", I64, [], [2])]
    return make_model(nodes, [_vi("in_boxes", F, ["N", 4]), _vi("in_scores", F, ["N"]), _vi("in_labels", I64, ["N"])],
                      [_vi(b, F, None), _vi(s, F, None), _vi(lab, I64, None), _vi("features", F, None)],
                      initializers=inits)


def _derived(outputs: list[tuple[str, int, list[int | str | None]]], extra: list[onnx.NodeProto] | None = None,
             nms_in_if: bool = False) -> onnx.ModelProto:
    """A graph whose listed outputs each depend on an NMS result (declared types carry the layout)."""
    nodes = list(extra or [])
    if nms_in_if:
        then = helper.make_graph([_nms("boxes_in", "scores_in", "sel_then")], "then", [], [_vi("sel_then", I64, [None, 3])])
        other = helper.make_graph([helper.make_node("Constant", [], ["sel_else"], value=helper.make_tensor(
            "e", I64, [0, 3], []))], "else", [], [_vi("sel_else", I64, [0, 3])])
        nodes.append(helper.make_node("If", ["flag"], ["selected"], then_branch=then, else_branch=other))
    else:
        nodes.append(_nms("boxes_in", "scores_in"))
    nodes += [helper.make_node("Cast", ["selected"], ["self"], to=F),
              helper.make_node("ReduceSum", ["self"], ["total"], keepdims=0)]
    inputs = [_vi("boxes_in", F, [1, 8, 4]), _vi("scores_in", F, [1, 3, 8]), _vi("flag", TP.BOOL, [])]
    outs = []
    for name, elem, shape in outputs:
        nodes += [helper.make_node("ConstantOfShape", ["shape_" + name], ["zero_" + name],
                                   value=helper.make_tensor("v", F, [1], [0.0])),
                  helper.make_node("Add", ["zero_" + name, "total"], ["f_" + name]),
                  helper.make_node("Cast", ["f_" + name], [name], to=elem)]
        outs.append(_vi(name, elem, shape))
    inits = NMS_CONSTS + [helper.make_tensor("shape_" + n, I64, [len(sh)], [d if isinstance(d, int) else 1 for d in sh])
                          for n, _, sh in outputs]
    return make_model(nodes, inputs, outs, initializers=inits)


def test_torchvision_style_gathers_are_one_group() -> None:
    assert detect_detection_outputs(torchvision_like()) == [
        DetectionSpec("boxes-scores-labels", {"boxes": "boxes", "scores": "scores", "labels": "labels"})]


def test_roles_come_from_rank_and_type_when_names_say_nothing() -> None:
    specs = detect_detection_outputs(torchvision_like(("3421", "3422", "3423")))
    assert [dict(s.outputs) for s in specs] == [{"boxes": "3421", "scores": "3422", "labels": "3423"}]


def test_a_detected_spec_compares_a_real_run_order_insensitively() -> None:
    model = torchvision_like()
    (spec,) = detect_detection_outputs(model)
    rng = np.random.default_rng(0)
    xy = rng.uniform(0, 100, (30, 2)).astype(np.float32)
    feeds = {"in_boxes": np.c_[xy, xy + 8], "in_scores": rng.permutation(30).astype(np.float32) / 30,
             "in_labels": rng.integers(0, 3, 30)}
    out = dict(zip([o.name for o in model.graph.output],
                   ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds),
                   strict=True))
    assert len(out["scores"]) > 5
    order = np.argsort(out["boxes"][:, 0])  # another runtime listing the same detections in another order
    cand = {**out, **{k: out[k][order] for k in ("boxes", "scores", "labels")}}
    comp = compare_outputs(out, cand, detection_outputs=[spec])
    assert comp.passed and [o.name for o in comp.outputs] == ["boxes", "features"]
    assert not compare_outputs(out, cand).passed  # elementwise, the order difference fails


def test_tf_combined_nms_outputs() -> None:
    model = _derived([("nmsed_boxes", F, [1, 10, 4]), ("nmsed_scores", F, [1, 10]), ("nmsed_classes", F, [1, 10]),
                      ("valid_detections", I32, [1])])
    assert detect_detection_outputs(model) == [DetectionSpec("boxes-scores-classes", {
        "boxes": "nmsed_boxes", "scores": "nmsed_scores", "labels": "nmsed_classes", "num": "valid_detections"})]


def test_tf_combined_nms_outputs_without_name_hints() -> None:
    model = _derived([("o1", F, [1, 10, 4]), ("o2", F, [1, 10]), ("o3", F, [1, 10]), ("o4", I32, [1])])
    assert [dict(s.outputs) for s in detect_detection_outputs(model)] == [
        {"boxes": "o1", "scores": "o2", "labels": "o3", "num": "o4"}]


@pytest.mark.parametrize("prefix", ["maskrcnn0_", "fasterrcnn0_", "net_"])
@pytest.mark.parametrize("masks", [True, False])
def test_gluoncv_rcnn_outputs(prefix: str, masks: bool) -> None:
    """GluonCV's R-CNN returns (ids, scores, boxes[, masks]) named after its block ("maskrcnn0_slice_axis4_output"):
    the shared block prefix is no role hint, and two float per-row outputs before the boxes are ids, then scores."""
    outputs = [(f"{prefix}slice_axis4_output", F, [1, 6, 1]), (f"{prefix}slice_axis5_output", F, [1, 6, 1]),
               (f"{prefix}slice_axis6_output", F, [1, 6, 4])]
    if masks:
        outputs.append((f"{prefix}sigmoid1_output", F, [1, 6, 14, 14]))
    (spec,) = detect_detection_outputs(_derived(outputs))
    expected = {"labels": outputs[0][0], "scores": outputs[1][0], "boxes": outputs[2][0]}
    if masks:
        expected["masks"] = outputs[3][0]
    assert spec.layout == "boxes-scores-labels" and dict(spec.outputs) == expected


@pytest.mark.parametrize(("shape", "layout"), [([1, 8, 6], "mxnet"), ([5, 7], "yolo")])
def test_single_rows_outputs(shape: list[int], layout: str) -> None:
    (spec,) = detect_detection_outputs(_derived([("dets", F, shape)]))
    assert spec.layout == layout and dict(spec.outputs) == {"detections": "dets"}


def test_nms_inside_an_if_branch_still_feeds_the_outputs() -> None:
    model = _derived([("boxes", F, [5, 4]), ("scores", F, [5]), ("labels", I64, [5])], nms_in_if=True)
    (spec,) = detect_detection_outputs(model)
    assert spec.layout == "boxes-scores-labels" and set(spec.outputs) == {"boxes", "scores", "labels"}


def test_raw_nms_indices_with_their_inputs_as_outputs() -> None:
    nodes = [helper.make_node("Identity", ["raw_boxes"], ["decoded"]), helper.make_node("Identity", ["raw_scores"], ["probs"]),
             _nms("decoded", "probs"), helper.make_node("Identity", ["selected"], ["selected_indices"])]
    model = make_model(nodes, [_vi("raw_boxes", F, [1, 8, 4]), _vi("raw_scores", F, [1, 3, 8])],
                       [_vi("selected_indices", I64, [None, 3]), _vi("decoded", F, [1, 8, 4]), _vi("probs", F, [1, 3, 8])],
                       initializers=NMS_CONSTS)
    assert detect_detection_outputs(model) == [DetectionSpec("indices", {
        "selected_indices": "selected_indices", "boxes": "decoded", "scores": "probs"})]


def test_models_without_nms_have_no_detection_outputs() -> None:
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", F, [2])], [_vi("y", F, [2])])
    assert detect_detection_outputs(model) == []
