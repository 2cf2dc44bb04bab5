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
