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


def conv_stack(weights: list[np.ndarray], *, split: bool = False, tamper: tuple[str, int] | None = None
               ) -> onnx.ModelProto:
    """x -> (Conv 3x3 'conv<i>' -> Relu 'relu<i>') per weight -> ReduceMean -> y, every tensor named as
    its node. ``split``: each Conv sums two half-channel Convs (the same function, another float32
    accumulation order). ``tamper``: ("weight", i) scales one weight of conv<i> by 1.5, ("op", i) makes
    relu<i> an Abs."""
    nodes, inits = [], []
    x = "x"
    for i, w in enumerate(weights):
        if tamper == ("weight", i):
            w = w.copy()
            w[0, 0, 0, 0] *= 1.5
        if split:
            half = w.shape[1] // 2
            inits += [numpy_helper.from_array(w[:, :half], f"w{i}a"), numpy_helper.from_array(w[:, half:], f"w{i}b")]
            nodes += [helper.make_node("Split", [x], [f"xa{i}", f"xb{i}"], axis=1, name=f"split{i}"),
                      helper.make_node("Conv", [f"xa{i}", f"w{i}a"], [f"ca{i}"], pads=[1] * 4, name=f"conv{i}a"),
                      helper.make_node("Conv", [f"xb{i}", f"w{i}b"], [f"cb{i}"], pads=[1] * 4, name=f"conv{i}b"),
                      helper.make_node("Add", [f"ca{i}", f"cb{i}"], [f"conv{i}"], name=f"conv{i}")]
        else:
            inits.append(numpy_helper.from_array(w, f"w{i}"))
            nodes.append(helper.make_node("Conv", [x, f"w{i}"], [f"conv{i}"], pads=[1] * 4, name=f"conv{i}"))
        nodes.append(helper.make_node("Abs" if tamper == ("op", i) else "Relu", [f"conv{i}"], [f"relu{i}"],
                                      name=f"relu{i}"))
        x = f"relu{i}"
    nodes.append(helper.make_node("ReduceMean", [x], ["y"], keepdims=0, axes=[1, 2, 3], name="mean"))
    shape = [1, weights[0].shape[1], 24, 24]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model
