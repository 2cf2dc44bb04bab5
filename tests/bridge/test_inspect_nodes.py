"""Per-node type and shape inference (``bridge inspect --nodes``): every node's inferred types, and the
node where inference loses a dim or the rank although its inputs are known."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from support import make_model

from bridge.inspection import infer_node_types


def _vi(name: str, shape: list[int | str] | None, elem: int = TensorProto.FLOAT) -> object:
    return helper.make_tensor_value_info(name, elem, shape)


CASES = [
    # nodes, inputs, initializers, expected {node: loses-substring or ""}
    ([helper.make_node("Relu", ["x"], ["r"], name="relu"), helper.make_node("Sigmoid", ["r"], ["y"], name="sig")],
     [_vi("x", ["N", 3])], [], {"relu": "", "sig": ""}),  # a named (user) dim is not a lost dim
    ([helper.make_node("NonZero", ["x"], ["nz"], name="nz"), helper.make_node("Transpose", ["nz"], ["y"], name="tr")],
     [_vi("x", [2, 3])], [], {"nz": "dim(s) 1 of 'nz'", "tr": ""}),
    ([helper.make_node("Shape", ["s"], ["shp"], name="shape"), helper.make_node("Reshape", ["x", "shp"], ["y"], name="rs")],
     [_vi("x", [2, 3]), _vi("s", [2, 3, 1])], [], {"shape": "", "rs": ""}),
    ([helper.make_node("Reshape", ["x", "t"], ["y"], name="rs")],
     [_vi("x", [6]), _vi("t", [2], TensorProto.INT64)], [], {"rs": "dim(s) 0, 1 of 'y'"}),
    ([helper.make_node("Add", ["x", "c"], ["y"], name="add")], [_vi("x", [2, 2])],
     [numpy_helper.from_array(np.ones((2, 2), np.float32), "c")], {"add": ""}),
]


@pytest.mark.parametrize(("nodes", "inputs", "inits", "expected"), CASES)
def test_node_types_flag_where_inference_loses_a_dim(nodes: list, inputs: list, inits: list,
                                                     expected: dict[str, str]) -> None:
    model = make_model(nodes, inputs, [helper.make_empty_tensor_value_info(nodes[-1].output[0])], initializers=inits)
    found = {n.name: n for n in infer_node_types(model)}
    assert list(found) == [n.name for n in nodes]
    for name, loses in expected.items():
        if loses:
            assert loses in found[name].loses
        else:
            assert found[name].loses == ""
    first = found[nodes[0].name]
    assert all(i.shape is not None for i in first.inputs)  # graph inputs always have their declared types
