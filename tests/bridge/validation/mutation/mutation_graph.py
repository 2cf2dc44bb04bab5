"""Reading and editing ONNX graphs for the mutation operators: constants, producers and consumers, the values
upstream of a tensor, and splicing new nodes after a value while the graph keeps its output names.

Edits work on ``onnx.ModelProto`` (what bridge writes and validate reads); a mutant is always a deep copy of the
converted base with one edit. ``Editor`` keeps the name bookkeeping (fresh names, renaming a value's producer,
re-sorting the nodes topologically) in one place so each operator states only its bug.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

WEIGHT_CONSUMERS = {"Conv", "ConvTranspose", "Gemm", "MatMul", "BatchNormalization", "InstanceNormalization",
                    "LayerNormalization", "QLinearConv", "ConvInteger", "MatMulInteger"}


def subgraphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    found: list[onnx.GraphProto] = []
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.GRAPH:
            found.append(attr.g)
        elif attr.type == onnx.AttributeProto.GRAPHS:
            found.extend(attr.graphs)
    return found


def node_reads(node: onnx.NodeProto) -> set[str]:
    """The values a node reads: its inputs and the outer-scope values its subgraphs capture."""
    names = {i for i in node.input if i}
    for sub in subgraphs(node):
        inner = {o for n in sub.node for o in n.output} | {i.name for i in sub.input} | {i.name for i in sub.initializer}
        for n in sub.node:
            names |= {v for v in node_reads(n) if v not in inner}
    return names


def constants(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    """Initializers and Constant-node outputs of the (top-level) graph, by value name."""
    values = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and node.attribute:
            attr = node.attribute[0]
            value = helper.get_attribute_value(attr)
            if attr.name == "value":
                values[node.output[0]] = numpy_helper.to_array(value)
            elif attr.name in ("value_float", "value_floats"):
                values[node.output[0]] = np.asarray(value, np.float32)
            elif attr.name in ("value_int", "value_ints"):
                values[node.output[0]] = np.asarray(value, np.int64)
    return values


def producers(graph: onnx.GraphProto) -> dict[str, onnx.NodeProto]:
    return {o: n for n in graph.node for o in n.output if o}


def consumers(graph: onnx.GraphProto) -> dict[str, list[onnx.NodeProto]]:
    found: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node_reads(node):
            found.setdefault(name, []).append(node)
    return found


def upstream(graph: onnx.GraphProto, names: Iterable[str]) -> set[str]:
    """Every value ``names`` are computed from (themselves included), walking producers backwards."""
    made = producers(graph)
    seen: set[str] = set()
    todo = [n for n in names if n]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        node = made.get(name)
        if node is not None:
            todo.extend(node_reads(node))
    return seen


def ops(graph: onnx.GraphProto, *op_types: str) -> list[onnx.NodeProto]:
    return [n for n in graph.node if n.op_type in op_types and n.domain in ("", "ai.onnx")]


def node_label(node: onnx.NodeProto) -> str:
    return f"{node.op_type} '{node.name or node.output[0]}'"


def spread(items: Sequence[Any], count: int = 3) -> list[Any]:
    """Up to ``count`` items spread over ``items`` (first, middle, last)."""
    if len(items) <= count:
        return list(items)
    picks = sorted({round(k * (len(items) - 1) / (count - 1)) for k in range(count)})
    return [items[k] for k in picks]


def value_shapes(model: onnx.ModelProto) -> dict[str, list[int | None]]:
    """value name -> dims (None for an unknown dim) after shape inference, where known."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:
        inferred = model
    shapes: dict[str, list[int | None]] = {}
    for vi in itertools.chain(inferred.graph.input, inferred.graph.value_info, inferred.graph.output):
        t = vi.type.tensor_type
        if t.HasField("shape"):
            shapes[vi.name] = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
    for init in inferred.graph.initializer:
        shapes[init.name] = list(init.dims)
    return shapes


class Editor:
    """One mutant under construction: a deep copy of the base model and helpers that keep names unique."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self.model = copy.deepcopy(model)
        self.graph = self.model.graph
        self._taken = {v for n in self.graph.node for v in [*n.input, *n.output]} | \
            {i.name for i in self.graph.initializer} | {i.name for i in self.graph.input} | \
            {o.name for o in self.graph.output}
        self._count = itertools.count()
        self.opset = next((o.version for o in self.model.opset_import if o.domain in ("", "ai.onnx")), 1)

    def fresh(self, hint: str) -> str:
        while True:
            name = f"mutant/{hint}_{next(self._count)}"
            if name not in self._taken:
                self._taken.add(name)
                return name

    def const(self, value: Any, hint: str = "const", dtype: Any = None) -> str:
        """A new initializer holding ``value``; returns its name."""
        name = self.fresh(hint)
        self.graph.initializer.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    def node(self, op: str, inputs: Sequence[str], outputs: int | Sequence[str] = 1, **attrs: Any) -> list[str]:
        """Append a node (``sort()`` puts it in place); returns its output names."""
        names = [self.fresh(op.lower()) for _ in range(outputs)] if isinstance(outputs, int) else list(outputs)
        self.graph.node.append(helper.make_node(op, list(inputs), names, name=self.fresh(op), **attrs))
        return names

    def op(self, op: str, *inputs: str, **attrs: Any) -> str:
        return self.node(op, inputs, 1, **attrs)[0]

    def reduce_max(self, value: str, axes: Sequence[int] | None, keepdims: int) -> str:
        """ReduceMax over ``axes`` (None: all) in the model's opset (axes an attribute before opset 18)."""
        if axes is None:
            return self.op("ReduceMax", value, keepdims=keepdims)
        if self.opset >= 18:
            return self.op("ReduceMax", value, self.const(np.asarray(axes, np.int64), "axes"), keepdims=keepdims)
        return self.op("ReduceMax", value, axes=list(axes), keepdims=keepdims)

    def replace_constant(self, node: onnx.NodeProto, index: int, value: Any) -> None:
        """``node`` reads ``value`` (a new initializer) at input ``index`` instead (other readers keep theirs)."""
        old = node.input[index] if index < len(node.input) else ""
        dtype = constants(self.graph)[old].dtype if old and old in constants(self.graph) else None
        name = self.const(value, "constant", dtype=dtype)
        while len(node.input) <= index:
            node.input.append("")
        node.input[index] = name

    def scale_initializer(self, name: str, fn: Callable[[np.ndarray], np.ndarray]) -> None:
        """Replace the constant ``name`` (initializer or Constant node) by ``fn`` of its value, in place."""
        for k, init in enumerate(self.graph.initializer):
            if init.name == name:
                value = numpy_helper.to_array(init)
                self.graph.initializer[k].CopyFrom(numpy_helper.from_array(np.asarray(fn(value), value.dtype), name))
                return
        for node in self.graph.node:
            if node.op_type == "Constant" and node.output[0] == name:
                value = constants(self.graph)[name]
                del node.attribute[:]
                node.attribute.append(helper.make_attribute("value", numpy_helper.from_array(
                    np.asarray(fn(value), value.dtype))))
                return
        raise KeyError(name)

    def intercept(self, name: str, *, readers_keep_original: bool = False) -> str:
        """Rename the producer of ``name`` (a node output or an initializer) to a new value and return that
        name: the caller then computes ``name`` from it with new nodes, so every reader (graph outputs
        included, which keep their names) sees the edited value - or, ``readers_keep_original``, only the graph
        outputs do (an edit placed after a graph output, whose other readers inside the graph are unaffected)."""
        pre = self.fresh(name.rsplit("/", 1)[-1] + "_before")
        if any(i.name == name for i in self.graph.input):
            raise ValueError(f"cannot intercept graph input {name}")
        found = False
        for node in self.graph.node:
            for k, out in enumerate(node.output):
                if out == name:
                    node.output[k], found = pre, True
            if readers_keep_original:
                for k, inp in enumerate(node.input):
                    if inp == name:
                        node.input[k] = pre
                if any(name in node_reads(n) for sub in subgraphs(node) for n in sub.node):
                    raise ValueError(f"{name} is read inside a subgraph of {node.name}")
        for init in self.graph.initializer:
            if init.name == name:
                init.name, found = pre, True
        if not found:
            raise KeyError(f"no producer of {name}")
        return pre

    def set_meta(self, key: str, value: str | None) -> None:
        """Set (or with None remove) the model metadata entry ``key``."""
        kept = [p for p in self.model.metadata_props if p.key != key]
        del self.model.metadata_props[:]
        self.model.metadata_props.extend(kept)
        if value is not None:
            self.model.metadata_props.add(key=key, value=value)

    def finish(self) -> onnx.ModelProto:
        """The mutant: nodes sorted topologically, stale inferred shapes of inner values dropped (the graph
        outputs keep their declared shapes, as a converter writes them), checked by onnx."""
        _toposort(self.graph)
        del self.graph.value_info[:]
        onnx.checker.check_model(self.model)
        return self.model


def _toposort(graph: onnx.GraphProto) -> None:
    known = {i.name for i in graph.input} | {i.name for i in graph.initializer} | {""}
    nodes = list(graph.node)
    made = {o for n in nodes for o in n.output}
    ordered: list[onnx.NodeProto] = []
    pending = nodes
    while pending:
        rest = []
        for node in pending:
            if all(r in known or r not in made for r in node_reads(node)):
                ordered.append(node)
                known.update(node.output)
            else:
                rest.append(node)
        if len(rest) == len(pending):
            raise ValueError(f"mutant graph has a cycle at {[n.name for n in rest][:5]}")
        pending = rest
    del graph.node[:]
    graph.node.extend(ordered)
