"""Tiny ONNX models for the debug tests (built in code)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def foldable_model() -> onnx.ModelProto:
    """x[2,4] -> MatMul(w) -> Relu -> Add(k) -> Tanh -> y, where k = Mul(c1, c2) is a constant subgraph
    (FoldConstantsPass turns node 'scale' into the constant 'k')."""
    c1 = numpy_helper.from_array(np.full((1, 4), 2.0, np.float32), "c1")
    c2 = numpy_helper.from_array(np.arange(4, dtype=np.float32).reshape(1, 4), "c2")
    w = numpy_helper.from_array(np.linspace(-1, 1, 16, dtype=np.float32).reshape(4, 4), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="matmul"),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("Mul", ["c1", "c2"], ["k"], name="scale"),
             helper.make_node("Add", ["r", "k"], ["s"], name="add"),
             helper.make_node("Tanh", ["s"], ["y"], name="tanh")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], initializer=[c1, c2, w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model
