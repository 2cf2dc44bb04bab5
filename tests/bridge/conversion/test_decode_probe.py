"""The decode probe's candidate side without a framework (bridge.conversion.decode_probe): the region is cut where
provenance says, only at computed tensors; cut points map to the source's inputs by value (as is, transposed,
reshaped), an unmatched one is named; rows that differ fail at the worst row, equal ones pass; past the kept
(nms_topk) rows only the class is judged; a probe that did not run leaves its detection group vacuous."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from bridge import provenance
from bridge.conversion.decode_probe import attach, cut_model, decode_region, judge_rows, map_cuts, not_run
from bridge.validation.compare import Comparison, OutputComparison


def _stamped(node: onnx.NodeProto, source: str) -> onnx.NodeProto:
    provenance.write(node, provenance.Provenance("mxnet", source, "MultiBoxDetection" if source == "det" else "Op",
                                                 "translator test"))
    return node


def _model() -> onnx.ModelProto:
    """x -> Relu (source node 'feat') -> [det: Add(anchor const) -> Mul(const Reshape folded outside)] -> y."""
    nodes = [
        _stamped(helper.make_node("Relu", ["x"], ["feat"], name="feat"), "feat"),
        _stamped(helper.make_node("Constant", [], ["scale"], name="scale_const",
                                  value=numpy_helper.from_array(np.float32(2.0))), "det"),
        _stamped(helper.make_node("Add", ["feat", "anchor"], ["shifted"], name="det_add"), "det"),
        _stamped(helper.make_node("Mul", ["shifted", "scale"], ["y"], name="det_mul"), "det"),
    ]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 3])],
                              [numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "anchor")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_the_region_is_cut_at_computed_inputs_only() -> None:
    model = _model()
    region = decode_region(model, "det")
    assert region is not None
    assert region.cuts == ("feat",) and region.outputs == ("y",) and region.graph_outputs == {"y"}
    assert decode_region(model, "nothing") is None
    import onnxruntime as ort

    cut = cut_model(model, region, {"feat": np.zeros((2, 3), np.float32)})
    session = ort.InferenceSession(cut.SerializeToString(), providers=["CPUExecutionProvider"])
    (y,) = session.run(["y"], {"feat": np.ones((2, 3), np.float32)})
    assert np.array_equal(y, (1 + np.arange(6, dtype=np.float32).reshape(2, 3)) * 2)


def test_cut_points_map_by_value_not_by_shape() -> None:
    rng = np.random.default_rng(0)
    cls, loc = rng.random((2, 4, 5), dtype=np.float32), rng.random((2, 20), dtype=np.float32)
    cuts = {"a": np.swapaxes(cls, 1, 2).copy(), "b": loc.reshape(2, 5, 4).copy(), "c": cls.copy()}
    mapping, unmatched = map_cuts(cuts, {"cls_prob": cls, "loc_pred": loc}, 1e-5, 1e-4)
    assert mapping == {"a": ("cls_prob", "transposed (last two axes)"), "b": ("loc_pred", "reshaped"),
                       "c": ("cls_prob", "as is")} and unmatched == []
    # the right shape but other values (a wrong tensor at the cut) matches nothing and is named
    mapping, unmatched = map_cuts({"d": cls + 0.5}, {"cls_prob": cls, "loc_pred": loc}, 1e-5, 1e-4)
    assert mapping == {} and unmatched == ["d"]


def test_rows_are_judged_exactly_up_to_the_box_tolerance() -> None:
    scores = np.array([[0.9, 0.5, 0.7]], np.float32)
    rows = np.array([[[0, 0.9, 0.1, 0.1, 0.2, 0.2], [1, 0.7, 0.3, 0.3, 0.4, 0.4], [-1, 0.5, 0.5, 0.5, 0.6, 0.6]]],
                    np.float32)
    mapping = {"cls": ("cls_prob", "as is")}
    same = judge_rows("det", [rows], [scores], [rows + 1e-7], mapping, kept=3)
    assert same.passed and "anchors seen 3/3" in same.text
    moved = rows.copy()
    moved[0, 2, 4] += 0.01  # the box of the lowest-ranked (suppressed) row
    differs = judge_rows("det", [rows], [scores], [moved], mapping, kept=3)
    assert not differs.passed and "row 2 (image 0, round 0) differs by 0.01 (box)" in differs.text
    relabelled = rows.copy()
    relabelled[0, 0, 0] = 1
    assert "(class)" in judge_rows("det", [rows], [scores], [relabelled], mapping, kept=3).text


def _sorted_rows(kept: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """MXNet-like rows of one image over 6 anchors: distinct scores, the first ``kept`` sorted; the rows after them
    past nms_topk (class -1, the valid rows at those positions in anchor order, as MXNet's CPU kernel leaves them)."""
    scores = np.array([[0.9, 0.2, 0.7, 0.5, 0.3, 0.8]], np.float32)
    boxes = np.stack([np.linspace(0.0, 0.5, 6), np.linspace(0.1, 0.6, 6), np.linspace(0.4, 0.9, 6),
                      np.linspace(0.5, 1.0, 6)], axis=1).astype(np.float32)
    order = np.argsort(-scores[0], kind="stable")
    rows = np.concatenate([np.zeros((6, 1), np.float32), scores[0, :, None], boxes], axis=1)
    out = rows.copy()
    out[:kept] = rows[order[:kept]]
    out[kept:, 0] = -1
    return out[None], scores


def test_rows_past_nms_topk_are_judged_by_class_only() -> None:
    rows, scores = _sorted_rows()
    mapping = {"cls": ("cls_prob", "as is")}
    permuted = rows.copy()
    permuted[0, 3:] = rows[0, [5, 3, 4]]  # another lowering's order (and content) past the kept rows
    same = judge_rows("det", [rows], [scores], [permuted], mapping, kept=3)
    assert same.passed and "rows past the first 3 (nms_topk): class only" in same.text, same.text
    assert same.figures["rows_compared_whole"] == 3 and same.figures["rows_compared_by_class"] == 3
    assert not judge_rows("det", [rows], [scores], [permuted], mapping, kept=6).passed  # all rows kept: whole
    unsuppressed = rows.copy()
    unsuppressed[0, 4, 0] = 0  # a row past the kept ones that a consumer would take as a detection
    failed = judge_rows("det", [rows], [scores], [unsuppressed], mapping, kept=3)
    assert not failed.passed and "row 4 (image 0, round 0) differs by 1 (class)" in failed.text, failed.text
    swapped = rows.copy()
    swapped[0, [0, 1]] = rows[0, [1, 0]]  # the kept rows out of MXNet's score order
    failed = judge_rows("det", [rows], [scores], [swapped], mapping, kept=3)
    assert not failed.passed and "row 0 (image 0, round 0)" in failed.text, failed.text


def _detection_comparison() -> Comparison:
    group = OutputComparison("boxes", True, True, True, covers=["boxes", "scores", "labels"])
    return Comparison("mxnet", "onnxruntime", [group, OutputComparison("logits", True, True, True)])


def test_a_probe_that_did_not_run_leaves_its_detection_group_vacuous() -> None:
    comparison, warnings = _detection_comparison(), []
    attach(comparison, not_run("det", "no nodes stand for MultiBoxDetection 'det'"), None, warnings)
    group, logits = comparison.outputs
    assert comparison.passed and group.vacuous and not logits.vacuous
    assert "decode probe: not run (no nodes stand for MultiBoxDetection 'det')" in comparison.summary()
    assert group.decode_probe is not None and group.decode_probe["ran"] is False
    assert warnings == []  # the verdict line says it (and vacuous_warnings, once)


def test_a_probe_with_no_comparison_to_take_it_is_a_warning() -> None:
    warnings: list[str] = []
    attach(None, not_run("det", "the mxnet side failed: boom"), None, warnings)
    assert warnings == ["decode probe: not run (the mxnet side failed: boom)"]


def test_a_failed_probe_fails_its_group_and_a_passed_one_is_a_note() -> None:
    rows, scores = _sorted_rows(kept=6)
    mapping = {"cls": ("cls_prob", "as is")}
    moved = rows.copy()
    moved[0, 1, 3] += 0.05
    for got, passed in ((rows, True), (moved, False)):
        comparison, warnings = _detection_comparison(), []
        attach(comparison, judge_rows("det", [rows], [scores], [got], mapping, kept=6), None, warnings)
        group = comparison.outputs[0]
        assert group.passed is passed and not group.vacuous and "decode probe of MultiBoxDetection" in group.note
        assert warnings == []


def test_a_probe_that_reached_only_some_anchors_leaves_its_group_vacuous() -> None:
    rows, scores = _sorted_rows()
    mapping = {"cls": ("cls_prob", "as is")}
    partial = judge_rows("det", [rows], [scores], [rows], mapping, kept=3)  # one round: 3 of 6 anchors kept
    assert partial.passed and "[only 3 of 6 anchors reached a kept row]" in partial.text
    comparison, warnings = _detection_comparison(), []
    attach(comparison, partial, None, warnings)
    group = comparison.outputs[0]
    assert group.passed and group.vacuous and "reached 3 of 6 anchors only" in group.vacuous_reason
    comparison, (whole, scores) = _detection_comparison(), _sorted_rows(kept=6)
    attach(comparison, judge_rows("det", [whole], [scores], [whole], mapping, kept=6), None, warnings)
    assert not comparison.outputs[0].vacuous
