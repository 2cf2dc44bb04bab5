"""SoftmaxLastAxisPass: Softmax(Transpose(y, perm), axis=a) becomes Transpose(Softmax(y, -1), perm) exactly when
perm[a] is y's last axis; outputs equal through onnxruntime; other layouts, old opsets and shared
Transposes are handled (left alone, or the Transpose kept for its other readers). TransposePairPass:
Transpose pairs composing to the identity vanish, others stay; outputs bit-identical."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from bridge.passes.layout import SoftmaxLastAxisPass, TransposePairPass


def _model(perm: list[int], axis: int, opset: int = 17, extra_reader: bool = False) -> onnx.ModelProto:
    shape = [2, 5, 7, 3][: len(perm)]
    out_shape = [shape[p] for p in perm]
    nodes = [helper.make_node("Transpose", ["y"], ["t"], perm=perm, name="tr"),
             helper.make_node("Softmax", ["t"], ["p"], axis=axis, name="sm")]
    outputs = [helper.make_tensor_value_info("p", TensorProto.FLOAT, out_shape)]
    if extra_reader:
        nodes.append(helper.make_node("Relu", ["t"], ["r"]))
        outputs.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, out_shape))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _run(model: onnx.ModelProto, y: np.ndarray) -> list[np.ndarray]:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"y": y})


@pytest.mark.parametrize(("perm", "axis", "expect"), [
    ([0, 2, 1], 1, True),  # the SSD pattern: [B, N, C] -> [B, C, N], softmax over C
    ([0, 2, 1], -2, True),
    ([2, 0, 1], 0, True),
    ([0, 2, 1], 2, False),  # already last-axis
    ([0, 2, 1], 0, False),  # perm[0] is not the last axis of y
    ([0, 3, 1, 2], 1, True),  # NHWC-style 4-D
])
@pytest.mark.parametrize("extra_reader", [False, True])
def test_rewrite_only_where_it_makes_a_last_axis_softmax(perm: list[int], axis: int, expect: bool,
                                                         extra_reader: bool) -> None:
    model = _model(perm, axis, extra_reader=extra_reader)
    y = np.random.default_rng(0).standard_normal([2, 5, 7, 3][: len(perm)]).astype(np.float32)
    result = SoftmaxLastAxisPass()(ir.serde.deserialize_model(model))
    assert result.modified == expect
    out = ir.serde.serialize_model(result.model)
    onnx.checker.check_model(out, full_check=True)
    ops = [n.op_type for n in out.graph.node]
    if expect:
        softmax = next(n for n in out.graph.node if n.op_type == "Softmax")
        assert softmax.input[0] == "y" and helper.get_attribute_value(softmax.attribute[0]) == len(perm) - 1
        assert ops.count("Transpose") == 1 + int(extra_reader)  # the original stays only for its other reader
    else:
        assert ops == [n.op_type for n in model.graph.node]
    assert [o.name for o in out.graph.output] == [o.name for o in model.graph.output]
    for got, ref in zip(_run(out, y), _run(model, y), strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize(("perm", "axis"), [([0, 2, 1], 1), ([2, 0, 1], 0), ([0, 3, 1, 2], 1)])
def test_the_moved_softmax_is_recorded_as_the_old_output_transposed(perm: list[int], axis: int) -> None:
    """The moved Softmax's output is the old output ``p`` (a source's tensor, by name) in y's layout: recorded as
    ``transpose(p, inverse perm)``, which the values bear out; an alias tool (pinning, debug) serves it so."""
    from bridge.conversion.sources import AliasedTaps
    from bridge.provenance import tensor_aliases

    model = _model(perm, axis)
    y = np.random.default_rng(1).standard_normal([2, 5, 7, 3][: len(perm)]).astype(np.float32)
    out = ir.serde.serialize_model(SoftmaxLastAxisPass()(ir.serde.deserialize_model(model)).model)
    aliases = tensor_aliases({p.key: p.value for p in out.metadata_props})
    softmax = next(n for n in out.graph.node if n.op_type == "Softmax").output[0]
    assert list(aliases) == [softmax] and aliases[softmax]["of"] == "p"
    probe = onnx.ModelProto.FromString(out.SerializeToString())
    probe.graph.output.append(helper.make_tensor_value_info(softmax, TensorProto.FLOAT, None))
    moved, p = _run(probe, y)[1], _run(model, y)[0]
    np.testing.assert_array_equal(moved, np.transpose(p, aliases[softmax]["perm"]))

    class Taps:  # the source's side: it has "p" only
        framework, granularity = "toy", "every layer"

        def names(self) -> set[str]:
            return {"p"}

        def run(self, feeds: dict, names: list) -> dict:
            assert names == ["p"]
            return {"p": p}

        def describe(self, tensor: str) -> None:
            return None

    served = AliasedTaps(Taps(), aliases)
    assert served.names() == {"p", softmax}
    np.testing.assert_array_equal(served.run({}, [softmax])[softmax], moved)


def test_opset_12_softmax_is_left_alone() -> None:
    model = _model([0, 2, 1], 1, opset=12)
    assert not SoftmaxLastAxisPass()(ir.serde.deserialize_model(model)).modified


def _pair_model(first: list[int], second: list[int], *, first_read: bool = False,
                pair_is_output: bool = False) -> onnx.ModelProto:
    shape = [2, 5, 7, 3][: len(first)]
    mid = [shape[p] for p in first]
    out_shape = [mid[p] for p in second]
    nodes = [helper.make_node("Transpose", ["y"], ["t1"], perm=first, name="t1"),
             helper.make_node("Transpose", ["t1"], ["t2"], perm=second, name="t2")]
    outputs = [helper.make_tensor_value_info("t2", TensorProto.FLOAT, out_shape)]
    if not pair_is_output:
        nodes.append(helper.make_node("Relu", ["t2"], ["r"], name="relu"))
        outputs = [helper.make_tensor_value_info("r", TensorProto.FLOAT, out_shape)]
    if first_read:
        nodes.append(helper.make_node("Neg", ["t1"], ["n"], name="neg"))
        outputs.append(helper.make_tensor_value_info("n", TensorProto.FLOAT, mid))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize(("first", "second", "expect"), [
    ([0, 2, 1], [0, 2, 1], True),  # the class-last read of Transpose(Softmax): [B, N, C] -> [B, C, N] -> back
    ([2, 0, 1], [1, 2, 0], True),  # inverse cycles
    ([0, 3, 1, 2], [0, 2, 3, 1], True),  # NCHW <-> NHWC
    ([2, 0, 1], [2, 0, 1], False),  # composes to another permutation
    ([0, 2, 1], [1, 0, 2], False),
])
@pytest.mark.parametrize("first_read", [False, True])
def test_transpose_pairs_cancel_only_when_they_compose_to_identity(first: list[int], second: list[int], expect: bool,
                                                                   first_read: bool) -> None:
    model = _pair_model(first, second, first_read=first_read)
    y = np.random.default_rng(1).standard_normal([2, 5, 7, 3][: len(first)]).astype(np.float32)
    result = TransposePairPass()(ir.serde.deserialize_model(model))
    assert result.modified == expect
    out = ir.serde.serialize_model(result.model)
    onnx.checker.check_model(out, full_check=True)
    ops = [n.op_type for n in out.graph.node]
    if expect:
        assert ops.count("Transpose") == int(first_read)  # the first stays only for its other reader
        assert next(n for n in out.graph.node if n.op_type == "Relu").input[0] == "y"
    else:
        assert ops == [n.op_type for n in model.graph.node]
    for got, ref in zip(_run(out, y), _run(model, y), strict=True):
        np.testing.assert_array_equal(got, ref)


def test_nodes_without_inputs_and_transposes_of_inputs_are_passed_over() -> None:
    nodes = [helper.make_node("RandomUniform", [], ["u"], shape=[2, 3], name="noise"),
             helper.make_node("Transpose", ["y"], ["t"], perm=[1, 0], name="t"),
             helper.make_node("Add", ["u", "t"], ["s"], name="add")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2])],
                              [helper.make_tensor_value_info("s", TensorProto.FLOAT, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    assert not TransposePairPass()(ir.serde.deserialize_model(model)).modified


def test_a_pair_ending_in_a_graph_output_is_left_alone() -> None:
    model = _pair_model([0, 2, 1], [0, 2, 1], pair_is_output=True)
    result = TransposePairPass()(ir.serde.deserialize_model(model))
    assert not result.modified
    assert [o.name for o in ir.serde.serialize_model(result.model).graph.output] == ["t2"]
