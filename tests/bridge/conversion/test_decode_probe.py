"""The decode probe's candidate side without a framework (bridge.conversion.decode_probe): the region is cut where
provenance says, only at computed tensors; cut points map to the source's inputs by value (as is, transposed,
reshaped), an unmatched one is named; rows that differ fail at the worst row, equal ones pass."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from bridge import provenance
from bridge.conversion.decode_probe import cut_model, decode_region, judge_rows, map_cuts


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
