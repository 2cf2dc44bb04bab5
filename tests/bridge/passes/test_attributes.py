"""Integer attributes outside the ONNX spec's range (ConvTranspose group=0 kills onnxruntime with SIGFPE while it
loads the model) are refused naming the node, the op and the attribute: in the ONNX stage (CheckAttributesPass,
first), for an ONNX source (the adapter, before its reference runs it) and for ``bridge debug --model``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from support import make_model

from bridge.errors import NodeError, PassFailedError
from bridge.model import ModelContainer
from bridge.passes.attributes import MINIMUMS, attribute_problem, check_model_attributes
from bridge.passes.pipeline import conversion_pipeline, run_pipeline


def _conv_transpose(name: str = "up", **attrs: object) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 6, 6])
    w = onnx.numpy_helper.from_array(np.ones((2, 1, 3, 3), np.float32), "w")
    return make_model([helper.make_node("ConvTranspose", ["x", "w"], ["y"], name=name, **attrs)], [x], [y],
                      initializers=[w])


# every (op, attribute) of the table, one value below its minimum
BELOW = [(op, attr, minimum) for op, attrs in MINIMUMS.items() for attr, minimum in attrs.items()]


@pytest.mark.parametrize(("op", "attr", "minimum"), BELOW)
def test_every_limit_names_the_attribute_and_the_bound(op: str, attr: str, minimum: int) -> None:
    value: int | list[int] = minimum - 1 if attr in ("group", "blocksize", "size", "offset_group") else [1, minimum - 1]
    found = attribute_problem(op, "", {attr: value})
    assert found is not None and found[0] == attr
    assert f"attribute '{attr}' is " in found[1] and f"at least {minimum}" in found[1]
    ok: int | list[int] = minimum if isinstance(value, int) else [minimum, minimum]
    assert attribute_problem(op, "", {attr: ok}) is None


def test_custom_domains_and_other_ops_are_left_alone() -> None:
    assert attribute_problem("ConvTranspose", "bridge.contrib", {"group": 0}) is None
    assert attribute_problem("Relu", "", {"group": 0}) is None
    assert attribute_problem("Conv", "", {"pads": [-1, -1, 0, 0]}) is None  # the spec leaves pads open


@pytest.mark.parametrize(("name", "label"), [("up", "up"), ("", "<unnamed ConvTranspose #0>")])
def test_the_stage_fails_naming_pass_node_op_and_attribute(name: str, label: str) -> None:
    container = ModelContainer.from_proto(_conv_transpose(name, group=0), source_framework="onnx", exporter="test")
    with pytest.raises(PassFailedError) as err:
        run_pipeline(container, conversion_pipeline(opset=17))
    text = str(err.value)
    assert err.value.pass_name == "CheckAttributesPass" and err.value.node == label and err.value.op == "ConvTranspose"
    assert f"at node '{label}' (ConvTranspose): attribute 'group' is 0; it must be at least 1" in text


def test_a_node_in_a_subgraph_is_found() -> None:
    bad = helper.make_node("SpaceToDepth", ["x"], ["z"], name="inner", blocksize=0)
    branch = helper.make_graph([bad], "then", [], [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["z2"])], "else", [],
                              [helper.make_tensor_value_info("z2", TensorProto.FLOAT, None)])
    model = make_model([helper.make_node("If", ["c"], ["y"], name="if", then_branch=branch, else_branch=other)],
                       [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                        helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 2, 2])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    with pytest.raises(NodeError) as err:
        check_model_attributes(model)
    assert (err.value.node, err.value.op) == ("inner", "SpaceToDepth")
    assert "node 'inner' (SpaceToDepth): attribute 'blocksize' is 0" in str(err.value)


def test_a_valid_model_passes_untouched() -> None:
    model = _conv_transpose(group=1, strides=[1, 1])
    before = model.SerializeToString()
    check_model_attributes(model)
    assert model.SerializeToString() == before


def test_an_onnx_source_is_refused_before_its_reference_runs(tmp_path: Path) -> None:
    from adapters.onnx import OnnxFileAdapter
    from bridge.config import ExportSpec, Source

    onnx.save(_conv_transpose("", group=0), tmp_path / "ct.onnx")
    with pytest.raises(NodeError) as err:
        OnnxFileAdapter().export(Source(location=str(tmp_path / "ct.onnx")), ExportSpec())
    assert str(tmp_path / "ct.onnx") in str(err.value)
    assert "node '<unnamed ConvTranspose #0>' (ConvTranspose): attribute 'group' is 0" in str(err.value)


# ---- kinds, names and element types from the op's schema (issue 38, 12) ------------------------------------

def _with_attr(node: onnx.NodeProto, name: str, kind: int, **value: object) -> onnx.NodeProto:
    attr = onnx.AttributeProto(name=name, type=kind)  # type: ignore[arg-type]
    for field, v in value.items():
        (getattr(attr, field).extend(v) if isinstance(v, list) else setattr(attr, field, v))
    node.attribute.append(attr)
    return node


def _one_node(node: onnx.NodeProto, opset: int = 17) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    inits = [onnx.numpy_helper.from_array(np.array(2, np.int64), "trip"),
             onnx.numpy_helper.from_array(np.array(True), "cond")] if node.op_type == "Loop" else []
    return make_model([node], [x], [y], initializers=inits, opset=opset)


A = onnx.AttributeProto
SCHEMA_CASES = [
    (helper.make_node("Cast", ["x"], ["y"], name="n", to=0), "attribute 'to' is 0 (UNDEFINED); it must be an ONNX "
                                                             "element type"),
    (helper.make_node("Cast", ["x"], ["y"], name="n", to=999), "attribute 'to' is 999 (not a type ONNX defines)"),
    (helper.make_node("EyeLike", ["x"], ["y"], name="n", dtype=0), "attribute 'dtype' is 0 (UNDEFINED)"),
    (_with_attr(helper.make_node("Constant", [], ["y"], name="n"), "value", A.INT, i=3),
     "attribute 'value' is an integer (INT), but Constant takes it as a tensor (TENSOR)"),
    (_with_attr(helper.make_node("Constant", [], ["y"], name="n"), "value", A.FLOATS, floats=[1.0]),
     "attribute 'value' is a list of floats (FLOATS), but Constant takes it as a tensor (TENSOR)"),
    (_with_attr(helper.make_node("Loop", ["trip", "cond", "x"], ["y"], name="n"), "body", A.INT, i=1),
     "attribute 'body' is an integer (INT), but Loop takes it as a graph (GRAPH)"),
    (_with_attr(helper.make_node("Relu", ["x"], ["y"], name="n"), "alpha", A.FLOAT, f=0.1),
     "attribute 'alpha' is not one Relu takes at opset 17 (its attributes: none)"),
    (_with_attr(helper.make_node("LeakyRelu", ["x"], ["y"], name="n"), "alpha", A.STRING, s=b"0.1"),
     "attribute 'alpha' is a string (STRING), but LeakyRelu takes it as a float (FLOAT)"),
    (helper.make_node("Cast", ["x"], ["y"], name="n"), "attribute 'to' is missing; Cast requires it"),
]


@pytest.mark.parametrize(("node", "words"), SCHEMA_CASES, ids=[w.split(",")[0][:40] for _, w in SCHEMA_CASES])
def test_an_attribute_the_schema_refuses_is_named_with_what_the_op_takes(node: onnx.NodeProto, words: str) -> None:
    model = _one_node(node)
    with pytest.raises(NodeError) as err:
        check_model_attributes(model)
    assert f"node 'n' ({node.op_type}): {words}" in str(err.value)
    container = ModelContainer.from_proto(model, source_framework="onnx", exporter="test")
    with pytest.raises(PassFailedError) as failed:  # the ONNX stage's first pass says the same, for any adapter
        run_pipeline(container, conversion_pipeline(opset=17))
    assert failed.value.pass_name == "CheckAttributesPass" and words in str(failed.value)


def test_an_op_of_an_older_opset_is_judged_by_its_own_schema() -> None:
    relu5 = _with_attr(helper.make_node("Relu", ["x"], ["y"], name="n"), "consumed_inputs", A.INTS, ints=[0])
    check_model_attributes(_one_node(relu5, opset=5))  # Relu-1..5 take consumed_inputs (INTS)
    wrong = _with_attr(helper.make_node("Relu", ["x"], ["y"], name="n"), "consumed_inputs", A.INT, i=0)
    with pytest.raises(NodeError, match=r"'consumed_inputs' is an integer \(INT\), but Relu takes it as a list"):
        check_model_attributes(_one_node(wrong, opset=5))


def test_the_checker_stays_the_authority_on_ops_that_take_other_attributes() -> None:
    """LayerNormalization-17 allows unchecked attributes (onnx/defs): an extra one is not refused here."""
    node = helper.make_node("LayerNormalization", ["x", "s"], ["y"], name="n", axis=-1, exporter_note=1)
    model = make_model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
                       initializers=[onnx.numpy_helper.from_array(np.ones(3, np.float32), "s")], opset=17)
    onnx.checker.check_model(model)
    check_model_attributes(model)
