"""Property: any model ``bridge convert`` writes with success loads in onnxruntime and, fed ONLY the source's true
inputs (graph inputs without an initializer in the source), reproduces the source within tolerance.

Hypothesis draws small ONNX models from a family of ops (elementwise, weighted Add/Mul/MatMul/Gemm, Softmax,
reductions and Clip in their per-opset forms, an If whose branches read an outer weight), source opsets 8-17,
IR styles (IR 3 with every initializer an input; initializers listed as inputs at later IRs; plain), weights
over and under the 1 KB stand-in threshold, and a target opset. A conversion may refuse (a BridgeError); what
it writes must hold. The default run is a few dozen deterministic examples; ``BRIDGE_PROPERTY_EXAMPLES=N``
runs N with random seeds.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from bridge import api
from bridge.errors import BridgeError

EXAMPLES = int(os.environ.get("BRIDGE_PROPERTY_EXAMPLES", "0") or 0)
BATCH = 2


@dataclass
class Graph:
    """A chain of nodes on a [BATCH, width] float tensor, built op by op at a given opset."""

    opset: int
    rng: np.random.Generator
    nodes: list[onnx.NodeProto] = field(default_factory=list)
    inits: list[onnx.TensorProto] = field(default_factory=list)
    current: str = "x"
    width: int = 0
    count: int = 0

    def fresh(self, hint: str) -> str:
        self.count += 1
        return f"{hint}{self.count}"

    def weight(self, shape: tuple[int, ...], *, dtype: type = np.float32) -> str:
        name = self.fresh("w")
        self.inits.append(numpy_helper.from_array(self.rng.standard_normal(shape).astype(dtype), name))
        return name

    def const(self, values: list[int] | np.ndarray, dtype: type = np.int64) -> str:
        name = self.fresh("c")
        self.inits.append(numpy_helper.from_array(np.asarray(values, dtype=dtype), name))
        return name

    def emit(self, op: str, inputs: list[str], **attrs: object) -> None:
        out = self.fresh(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], **attrs))
        self.current = out


def add_op(g: Graph, op: str, wide: bool) -> None:
    x = g.current
    if op in ("Relu", "Sigmoid", "Tanh", "Abs", "Neg"):
        g.emit(op, [x])
    elif op == "LeakyRelu":
        g.emit(op, [x], alpha=0.3)
    elif op in ("Add", "Mul"):
        g.emit(op, [x, g.weight((g.width,))])
    elif op == "MatMul":
        k = 96 if wide else 3  # [width, 96] floats: over 1 KB
        g.emit(op, [x, g.weight((g.width, k))])
        g.width = k
    elif op == "Gemm":
        k = 80 if wide else 4
        g.emit(op, [x, g.weight((k, g.width)), g.weight((k,))], transB=1, alpha=0.5)
        g.width = k
    elif op == "Softmax":
        g.emit(op, [x], axis=1)
    elif op in ("ReduceSum", "ReduceMean"):
        as_input = g.opset >= (13 if op == "ReduceSum" else 18)
        if as_input:
            g.emit(op, [x, g.const([1])], keepdims=1)
        else:
            g.emit(op, [x], axes=[1], keepdims=1)
        g.width = 1
    elif op == "Clip":
        if g.opset >= 11:
            g.emit(op, [x, g.const(np.array(-0.5, np.float32), np.float32), g.const(np.array(0.7, np.float32),
                                                                                    np.float32)])
        else:
            g.emit(op, [x], min=-0.5, max=0.7)
    elif op == "If":  # both branches read an outer weight (also a graph input in the IR-3 style)
        w = g.weight((g.width,))
        out_then, out_else = g.fresh("then"), g.fresh("else")
        then = helper.make_graph([helper.make_node("Add", [x, w], [out_then])], "then", [],
                                 [helper.make_tensor_value_info(out_then, TensorProto.FLOAT, [BATCH, g.width])])
        other = helper.make_graph([helper.make_node("Mul", [x, w], [out_else])], "else", [],
                                  [helper.make_tensor_value_info(out_else, TensorProto.FLOAT, [BATCH, g.width])])
        total = g.fresh("sum")
        g.nodes.append(helper.make_node("ReduceSum", [x], [total], keepdims=0))  # all axes: the same at every opset
        cond = g.fresh("cond")
        g.nodes.append(helper.make_node("Greater", [total, g.const(np.array(0, np.float32), np.float32)], [cond]))
        g.emit("If", [cond], then_branch=then, else_branch=other)
    else:
        raise AssertionError(op)


OPS = ["Relu", "Sigmoid", "Tanh", "Abs", "Neg", "LeakyRelu", "Add", "Mul", "MatMul", "Gemm", "Softmax",
       "ReduceSum", "ReduceMean", "Clip", "If"]
STYLES = ["ir3", "listed", "plain"]
IR_OF = {8: 4, 9: 4, 11: 6, 13: 7, 17: 8}


@st.composite
def cases(draw: st.DrawFn) -> tuple[onnx.ModelProto, int]:
    opset = draw(st.sampled_from(sorted(IR_OF)))
    style = draw(st.sampled_from(STYLES if opset == 8 else STYLES[1:]))
    target = draw(st.sampled_from([o for o in (9, 11, 13, 17) if o != opset] + [opset]))
    ops = draw(st.lists(st.sampled_from(OPS), min_size=1, max_size=4))
    wide = draw(st.booleans())
    g = Graph(opset, np.random.default_rng(draw(st.integers(0, 2**16))), width=400 if wide else 5)
    for op in ops:
        add_op(g, op, draw(st.booleans()))
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [BATCH, 400 if wide else 5])]
    if style in ("ir3", "listed"):  # every initializer also a graph input, the older exporters' way
        inputs += [helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in g.inits]
    graph = helper.make_graph(g.nodes, "prop", inputs,
                              [helper.make_tensor_value_info(g.current, TensorProto.FLOAT, [BATCH, g.width])],
                              initializer=g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              ir_version=3 if style == "ir3" else IR_OF[opset])
    return model, target


def _session(model: onnx.ModelProto | Path) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    data = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    return ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])


def _true_inputs(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    inits = {t.name for t in model.graph.initializer}
    rng = np.random.default_rng(7)
    return {vi.name: rng.standard_normal([d.dim_value for d in vi.type.tensor_type.shape.dim]).astype(np.float32)
            for vi in model.graph.input if vi.name not in inits}


@settings(max_examples=EXAMPLES or 30, derandomize=not EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(case=cases())
def test_written_models_run_on_the_true_inputs_and_match(case: tuple[onnx.ModelProto, int], tmp_path: Path) -> None:
    source, target = case
    onnx.checker.check_model(source, full_check=True)
    src, out = tmp_path / "source.onnx", tmp_path / "written.onnx"
    out.unlink(missing_ok=True)
    onnx.save(source, src)
    try:
        api.convert(src, out, opset=target, isolated=False)
    except BridgeError as exc:
        if os.environ.get("BRIDGE_PROPERTY_LOG"):
            with open(os.environ["BRIDGE_PROPERTY_LOG"], "a") as log:
                log.write(f"{type(exc).__name__}: {str(exc)[:300]}\n")
        return  # refused (with a reason): nothing written, nothing promised
    feeds = _true_inputs(source)
    session = _session(out)  # loads in onnxruntime
    assert {i.name for i in session.get_inputs()} <= set(feeds), "the written model needs an input the source lacks"
    got = session.run(None, feeds)
    want = _session(source).run(None, feeds)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
