"""Opset conversion keeps initializers that are also graph inputs (older exporters' ``keep_initializers_as_inputs``,
the IR < 4 convention): both the value and the input entry, on every path (our adapters, onnxscript's and onnx's
converters, a plain copy), in models with If/Loop bodies that read outer weights, large (stood in while onnx's
C++ converter runs) and small.

Differential: the weight-sharing conversion against the plain one (the whole model serialised through the
converter) gives the same signature, the same initializers and the same numbers; and the converted model,
fed only its true inputs, reproduces the source in onnxruntime.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import opsets.conversion as conversion
from opsets.conversion import convert_opset

RNG = np.random.default_rng(0)


def _conv_softmax(opset: int, ir_version: int, big: bool) -> onnx.ModelProto:
    """Conv (weight w, bias b) + Softmax over axis 1 (changes at 13: a stock or adapter hop)."""
    channels = 64 if big else 4  # 64x3x3x3 floats: 6.9 KB, stood in for onnx's converter; 4x3x3x3: 432 B
    w = RNG.standard_normal((channels, 3, 3, 3)).astype(np.float32)
    b = RNG.standard_normal(channels).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Softmax", ["c"], ["y"], axis=1)]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8]),
              helper.make_tensor_value_info("w", TensorProto.FLOAT, list(w.shape)),
              helper.make_tensor_value_info("b", TensorProto.FLOAT, list(b.shape))]
    graph = helper.make_graph(nodes, "conv", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels, 8, 8])],
                              initializer=[numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=ir_version)


def _if_outer_weight(opset: int, ir_version: int, big: bool) -> onnx.ModelProto:
    """If(cond) whose branches MatMul the input by an outer weight that is also a graph input."""
    k = 32 if big else 4
    w = RNG.standard_normal((4, k)).astype(np.float32)
    out = helper.make_tensor_value_info("r", TensorProto.FLOAT, [2, k])
    then = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["r"])], "then", [], [out])
    other = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Neg", ["m"], ["r"])],
                              "else", [], [out])
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
             helper.make_node("Greater", ["s", "zero"], ["cond"]),
             helper.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=other)]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4]),
              helper.make_tensor_value_info("w", TensorProto.FLOAT, [4, k]),
              helper.make_tensor_value_info("zero", TensorProto.FLOAT, [])]
    graph = helper.make_graph(nodes, "if", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, k])],
                              initializer=[numpy_helper.from_array(w, "w"),
                                           numpy_helper.from_array(np.array(0, np.float32), "zero")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=ir_version)


def _loop_outer_weight(opset: int, ir_version: int, big: bool) -> onnx.ModelProto:
    """Loop (3 trips) whose body adds an outer weight (also a graph input) to the carried value."""
    n = 512 if big else 8
    w = RNG.standard_normal(n).astype(np.float32)
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]), helper.make_node("Add", ["v_in", "w"], ["v_out"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_in", TensorProto.FLOAT, [n])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_out", TensorProto.FLOAT, [n])])
    nodes = [helper.make_node("Loop", ["trips", "", "x"], ["y"], body=body)]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n]),
              helper.make_tensor_value_info("trips", TensorProto.INT64, []),
              helper.make_tensor_value_info("w", TensorProto.FLOAT, [n])]
    graph = helper.make_graph(nodes, "loop", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n])],
                              initializer=[numpy_helper.from_array(np.array(3, np.int64), "trips"),
                                           numpy_helper.from_array(w, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=ir_version)


# (family, source opset, IR version, targets): IR 3 (opset <= 8, every initializer must be an input) and
# initializers-as-inputs at later IRs; up and down, through our adapters and both stock converters
CASES = [
    ("conv", 8, 3, [9, 13, 17]),
    ("conv", 9, 4, [8, 11, 13]),
    ("conv", 11, 6, [9, 13, 17]),
    ("conv", 13, 7, [11, 17]),
    ("conv", 17, 8, [13, 11, 21]),
    ("conv", 18, 8, [21, 23]),  # up from 18: onnxscript's converter, in onnx_ir
    ("if", 8, 3, [11, 13]),
    ("if", 11, 6, [13, 17]),
    ("if", 13, 7, [16, 17]),
    ("loop", 11, 6, [13, 17]),
    ("loop", 13, 7, [16, 17]),
    ("if", 18, 8, [21]),
    ("loop", 18, 8, [21]),
]
FAMILIES = {"conv": _conv_softmax, "if": _if_outer_weight, "loop": _loop_outer_weight}
PARAMS = [pytest.param(f, o, v, t, big, id=f"{f}-opset{o}-ir{v}-to{t}-{'large' if big else 'small'}")
          for f, o, v, targets in CASES for t in targets for big in (True, False)]


def _feeds(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    inits = {t.name for t in model.graph.initializer}
    rng = np.random.default_rng(1)
    feeds = {}
    for vi in model.graph.input:
        if vi.name not in inits:  # only the true inputs: a weight is a default, not an input
            shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
            feeds[vi.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"]).run(None, feeds)


def _plain(func, model: ir.Model):  # type: ignore[no-untyped-def]
    """The conversion before weights were shared: the whole model serialised through ``func``."""
    return func(ir.serde.serialize_model(model))


def _signature(model: onnx.ModelProto) -> tuple[list[str], list[str]]:
    return [i.name for i in model.graph.input], sorted(t.name for t in model.graph.initializer)


@pytest.mark.parametrize(("family", "opset", "ir_version", "target", "big"), PARAMS)
def test_initializers_as_inputs_survive_conversion(family: str, opset: int, ir_version: int, target: int, big: bool,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    source = FAMILIES[family](opset, ir_version, big)
    onnx.checker.check_model(source)
    shared = ir.serde.serialize_model(convert_opset(ir.serde.deserialize_model(source), target))
    monkeypatch.setattr(conversion, "call_without_weights", _plain)
    plain = ir.serde.serialize_model(convert_opset(ir.serde.deserialize_model(source), target))
    assert shared.opset_import[0].version == target
    assert _signature(shared) == _signature(plain) == _signature(source)
    feeds = _feeds(source)
    want = _run(source, feeds)
    for got in (_run(shared, feeds), _run(plain, feeds)):
        for a, b in zip(got, want, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
