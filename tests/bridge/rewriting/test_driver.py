"""The rewrite contract and its driver: finding nodes (subgraphs included), checks with reasons, splicing
with names kept, graph-output expansion, in-place rewrites, shared fresh names, warnings."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper

from bridge.errors import NodeError
from bridge.rewriting import Builder, Expansion, MatchResult, Rewrite, apply_rewrites
from bridge.runtimes.onnxruntime import OnnxRuntime


class ReluAsMax(Rewrite):
    """Relu(x) -> Max(x, 0): a rewrite returning new values."""

    op_type = "Relu"

    def rewrite(self, b: Builder, node: ir.Node) -> list[ir.Value]:
        b.warn(f"rewrote {node.name}")
        return [b.op("Max", node.inputs[0], b.f32(0.0))]


class RefuseNamed(ReluAsMax):
    """Fails its check on nodes whose name starts with 'keep'."""

    def check(self, node: ir.Node, opset: int) -> MatchResult:
        return MatchResult.fail("the test says keep it") if node.name.startswith("keep") else MatchResult.success()


def _model(nodes: list[onnx.NodeProto], outputs: list[str], opset: int = 17) -> ir.Model:
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs])
    return ir.serde.deserialize_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                                                        ir_version=8))


def _run(model: ir.Model, x: np.ndarray) -> dict[str, np.ndarray]:
    rt = OnnxRuntime(ir.serde.serialize_model(model))
    rt.activate()
    try:
        return rt.infer({"x": x})
    finally:
        rt.deactivate()


def test_rewrite_replaces_the_node_and_keeps_its_output_name() -> None:
    model = _model([helper.make_node("Relu", ["x"], ["y"], name="r"), helper.make_node("Neg", ["y"], ["z"], name="n")],
                   ["y", "z"])
    outcome = apply_rewrites(model, [ReluAsMax()])
    assert outcome.applied == [("ReluAsMax", "r")] and outcome.modified
    assert outcome.warnings == ["rewrote r"]
    assert [n.op_type for n in model.graph] == ["Constant", "Max", "Neg"]
    assert [o.name for o in model.graph.outputs] == ["y", "z"]
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    out = _run(model, x)
    np.testing.assert_array_equal(out["y"], np.maximum(x, 0))
    np.testing.assert_array_equal(out["z"], -np.maximum(x, 0))


def test_failed_checks_are_reasons_or_errors_when_required() -> None:
    model = _model([helper.make_node("Relu", ["x"], ["y"], name="keep_me")], ["y"])
    outcome = apply_rewrites(model, [RefuseNamed()])
    assert not outcome.modified
    assert outcome.left_alone == ["node 'keep_me' (Relu) left alone by RefuseNamed: the test says keep it"]
    strict = RefuseNamed()
    strict.required = True
    with pytest.raises(NodeError, match="keep it") as info:
        apply_rewrites(model, [strict])
    assert info.value.node == "keep_me" and info.value.op == "Relu"


def test_min_opset_is_checked_per_node() -> None:
    rule = ReluAsMax()
    rule.min_opset = 18
    outcome = apply_rewrites(_model([helper.make_node("Relu", ["x"], ["y"], name="r")], ["y"]), [rule])
    assert "needs default opset >= 18 (model: 17)" in outcome.left_alone[0]


def test_subgraphs_are_walked_and_names_stay_unique() -> None:
    then_g = helper.make_graph([helper.make_node("Relu", ["x"], ["t"], name="r_then")], "then", [],
                               [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)])
    else_g = helper.make_graph([helper.make_node("Relu", ["x"], ["e"], name="r_else")], "else", [],
                               [helper.make_tensor_value_info("e", TensorProto.FLOAT, None)])
    nodes = [helper.make_node("Constant", [], ["c"], value=helper.make_tensor("v", TensorProto.BOOL, [], [True])),
             helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g, name="if"),
             helper.make_node("Relu", ["y"], ["z"], name="r_main")]
    model = _model(nodes, ["z"])
    outcome = apply_rewrites(model, [ReluAsMax()])
    assert sorted(label for _, label in outcome.applied) == ["r_else", "r_main", "r_then"]
    assert not [n for n in model.graph.all_nodes() if n.op_type == "Relu"]
    names = [v.name for n in model.graph.all_nodes() for v in n.outputs]
    assert len(names) == len(set(names))
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    np.testing.assert_array_equal(_run(model, x)["z"], np.maximum(x, 0))


class InPlaceAlpha(Rewrite):
    op_type = "LeakyRelu"

    def rewrite(self, b: Builder, node: ir.Node) -> None:
        node.attributes["alpha"] = ir.AttrFloat32("alpha", 0.5)
        return None


def test_a_rewrite_may_keep_the_node_and_edit_it_in_place() -> None:
    model = _model([helper.make_node("LeakyRelu", ["x"], ["y"], name="l", alpha=0.1)], ["y"])
    outcome = apply_rewrites(model, [InPlaceAlpha()])
    assert outcome.modified and [n.name for n in outcome.produced] == ["l"]
    x = np.array([[-2, 2, -4], [4, -6, 6]], np.float32)
    np.testing.assert_array_equal(_run(model, x)["y"], np.where(x > 0, x, 0.5 * x))


class SplitInTwo(Rewrite):
    """Replaces a graph output by two values (as the detection lowerings' formatted outputs do)."""

    op_type = "Identity"

    def rewrite(self, b: Builder, node: ir.Node) -> Expansion:
        first, second = b.op("Neg", node.inputs[0]), b.op("Abs", node.inputs[0])
        first.name, second.name = "y_neg", "y_abs"
        return Expansion([[first, second]])


def test_an_expansion_replaces_a_graph_output_by_several() -> None:
    model = _model([helper.make_node("Identity", ["x"], ["y"], name="i")], ["y"])
    apply_rewrites(model, [SplitInTwo()])
    assert [o.name for o in model.graph.outputs] == ["y_neg", "y_abs"]
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    out = _run(model, x)
    np.testing.assert_array_equal(out["y_neg"], -x)
    np.testing.assert_array_equal(out["y_abs"], np.abs(x))


def test_an_expansion_of_a_consumed_output_is_refused() -> None:
    model = _model([helper.make_node("Identity", ["x"], ["y"], name="i"), helper.make_node("Neg", ["y"], ["z"])], ["z"])
    with pytest.raises(NodeError, match="other nodes consume it"):
        apply_rewrites(model, [SplitInTwo()])


def test_initializers_made_by_a_rewrite_take_the_output_name() -> None:
    class ConstantRelu(Rewrite):
        op_type = "Relu"

        def rewrite(self, b: Builder, node: ir.Node) -> list[ir.Value]:
            return [b.initializer(np.ones((2, 3), np.float32))]

    model = _model([helper.make_node("Relu", ["x"], ["y"], name="r"), helper.make_node("Neg", ["y"], ["z"])], ["z"])
    apply_rewrites(model, [ConstantRelu()])
    assert "y" in model.graph.initializers
    np.testing.assert_array_equal(_run(model, np.zeros((2, 3), np.float32))["z"], -np.ones((2, 3), np.float32))
