"""ONNX graph facts localisation needs, and runs of a model with its intermediate tensors as outputs.

``tap`` marks intermediate tensors as graph outputs (Polygraphy's ``--onnx-outputs mark all``) and runs
the model in onnxruntime, a chunk of tensors at a time (``chunks``: bounded by a byte budget estimated
from shape inference), so only the chunk being compared is ever held in memory. ``frontier`` walks
back from a tensor to the nearest tensors both sides can produce: those are the "inputs" whose
agreement makes a divergent tensor the culprit. Initializers are read from the model, not run. Used by
``bridge debug`` and by the upstream tie proof (``bridge.validation.pinning``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from bridge import provenance
from bridge.config import CONTRIB_DOMAIN

DEFAULT_BUDGET_BYTES = 256 * 2**20  # tensors fetched per run (both sides): keeps big models' runs bounded
UNKNOWN_TENSOR_BYTES = 4 * 2**20  # a tensor whose shape inference could not size counts as this much
MAX_TENSORS_PER_RUN = 512


@dataclass(frozen=True)
class NodeFacts:
    """One ONNX node as a report names it: name, op (with domain), attributes, inputs and outputs, and
    its provenance (the source node it stands for, what made it) when the model carries it."""

    name: str
    op: str
    attributes: dict[str, Any]
    inputs: list[str]
    outputs: list[str]
    provenance: provenance.Provenance | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "op": self.op, "attributes": self.attributes, "inputs": self.inputs,
                "outputs": self.outputs, "provenance": self.provenance.to_dict() if self.provenance else None}


def _attr_value(attr: onnx.AttributeProto) -> Any:
    if attr.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
        return "<subgraph>"
    value = onnx.helper.get_attribute_value(attr)
    if isinstance(value, onnx.TensorProto):
        arr = numpy_helper.to_array(value)
        return arr.tolist() if arr.size <= 16 else f"<tensor {arr.dtype}{list(arr.shape)}>"
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, list):
        return [v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in value][:32]
    return value


def node_facts(node: onnx.NodeProto, index: int = 0) -> NodeFacts:
    op = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}::{node.op_type}"
    return NodeFacts(node.name or f"<unnamed {node.op_type} #{index}>", op,
                     {a.name: _attr_value(a) for a in node.attribute}, list(node.input), list(node.output),
                     provenance.read(node))


class GraphIndex:
    """Producers, order and constants of a model's main graph (subgraph-internal tensors are not tapped)."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self.model = model
        g = model.graph
        self.initializers = {t.name for t in g.initializer}
        self.inputs = [i.name for i in g.input if i.name not in self.initializers]
        self.outputs = [o.name for o in g.output]
        self.producer: dict[str, int] = {}
        self.order: list[str] = []  # node-produced tensors, in node (topological) order
        for k, node in enumerate(g.node):
            for o in node.output:
                if o:
                    self.producer[o] = k
                    self.order.append(o)
        self.position = {name: i for i, name in enumerate(self.order)}
        # tensors computed by (or downstream of) custom-domain ops: onnxruntime cannot compute them
        self.tainted: set[str] = set()
        for node in g.node:
            if node.domain == CONTRIB_DOMAIN or any(i in self.tainted for i in node.input):
                self.tainted.update(o for o in node.output if o)

    @property
    def runnable(self) -> bool:
        """False while custom-domain ops (``bridge.contrib``) are present: onnxruntime has no kernel for them."""
        return not any(n.domain == CONTRIB_DOMAIN for n in self.model.graph.node)

    def node_of(self, tensor: str) -> NodeFacts | None:
        k = self.producer.get(tensor)
        return None if k is None else node_facts(self.model.graph.node[k], k)

    def node_names(self) -> set[str]:
        return {n.name for n in self.model.graph.node if n.name}

    def frontier(self, tensor: str, compared: set[str]) -> tuple[list[str], list[int]]:
        """The nearest compared tensors (or graph inputs) upstream of ``tensor``, and the nodes in between.

        Constants (initializers, constant-only subgraphs) are not part of the frontier: they are the
        same on both sides by construction or belong to the region being judged.
        """
        start = self.producer.get(tensor)
        if start is None:
            return [], []
        seen_nodes: set[int] = set()
        found: list[str] = []
        stack = [start]
        while stack:
            k = stack.pop()
            if k in seen_nodes:
                continue
            seen_nodes.add(k)
            for i in self.model.graph.node[k].input:
                if not i or i in self.initializers:
                    continue
                if i in compared or i in self.inputs:
                    if i not in found:
                        found.append(i)
                elif i in self.producer:
                    stack.append(self.producer[i])
        found.sort(key=lambda n: self.position.get(n, -1))
        return found, sorted(seen_nodes)

    def initializer_values(self, names: Iterable[str]) -> dict[str, np.ndarray]:
        wanted = set(names)
        return {t.name: numpy_helper.to_array(t) for t in self.model.graph.initializer if t.name in wanted}

    def estimated_bytes(self) -> dict[str, int]:
        """Bytes of each node-produced tensor from shape inference (UNKNOWN_TENSOR_BYTES where it cannot tell)."""
        try:
            inferred = onnx.shape_inference.infer_shapes(self.model, strict_mode=False)
        except Exception:
            inferred = self.model
        sizes: dict[str, int] = {}
        for vi in (*inferred.graph.value_info, *inferred.graph.output):
            t = vi.type.tensor_type
            dims = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim] if t.HasField("shape") else None
            if dims is None or None in dims or not t.elem_type:
                continue
            try:
                item = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t.elem_type)).itemsize
            except Exception:
                item = 4
            count = 1
            for d in dims:
                count *= int(d or 0)
            sizes[vi.name] = count * item
        return sizes


def chunks(names: Sequence[str], sizes: Mapping[str, int], budget: int = DEFAULT_BUDGET_BYTES) -> Iterator[list[str]]:
    """``names`` in order, split so each chunk's estimated bytes stay under ``budget`` (at least one name)."""
    chunk: list[str] = []
    used = 0
    for name in names:
        size = sizes.get(name, UNKNOWN_TENSOR_BYTES)
        if chunk and (used + size > budget or len(chunk) >= MAX_TENSORS_PER_RUN):
            yield chunk
            chunk, used = [], 0
        chunk.append(name)
        used += size
    if chunk:
        yield chunk


def output_value_infos(model: onnx.ModelProto, names: Sequence[str]) -> list[onnx.ValueInfoProto]:
    """Graph-output declarations of ``names`` in ``model``: each its own declaration (value info, output, input,
    initializer) when that has a type, else the element type ONNX shape inference gives it (the shape left to the
    runtime), else the name alone (an op inference does not know). A target's converter checks the model it takes:
    onnx-tf rejects an output declared without a type."""
    g = model.graph
    declared: dict[str, onnx.ValueInfoProto] = {}
    for t in g.initializer:
        declared[t.name] = onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
    for vi in (*g.input, *g.output, *g.value_info):
        if vi.type.WhichOneof("value") is not None:
            declared[vi.name] = vi
    if any(n not in declared for n in names):
        try:
            inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False).graph
        except Exception:  # inference is a help here: without it the outputs go untyped, as before
            inferred = onnx.GraphProto()
        for vi in (*inferred.output, *inferred.value_info):
            elem = vi.type.tensor_type.elem_type if vi.type.WhichOneof("value") == "tensor_type" else 0
            if vi.name not in declared and elem:
                declared[vi.name] = onnx.helper.make_tensor_value_info(vi.name, elem, None)
    out = []
    for name in names:
        vi = onnx.ValueInfoProto()
        if name in declared:
            vi.CopyFrom(declared[name])
        else:
            vi.name = name
        out.append(vi)
    return out


def with_outputs(model: onnx.ModelProto, names: Sequence[str]) -> onnx.ModelProto:
    """A copy of ``model`` whose graph outputs are ``names``, typed as far as the model or shape inference tells
    (``output_value_infos``)."""
    tapped = onnx.ModelProto()
    tapped.CopyFrom(model)
    del tapped.graph.output[:]
    tapped.graph.output.extend(output_value_infos(model, names))
    return tapped


class OnnxTaps:
    """Runs a model in onnxruntime returning any of its node-produced tensors (and initializers, read)."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self.index = GraphIndex(model)

    def available(self) -> set[str]:
        """What ``run`` can return: node outputs upstream of any bridge.contrib op, and the constants."""
        return (set(self.index.order) - self.index.tainted) | self.index.initializers

    def _runnable_model(self) -> onnx.ModelProto:
        """The model without its bridge.contrib nodes and everything downstream of them."""
        model = self.index.model
        if not self.index.tainted:
            return model
        pruned = onnx.ModelProto()
        pruned.CopyFrom(model)
        del pruned.graph.node[:]
        pruned.graph.node.extend(n for n in model.graph.node if not any(o in self.index.tainted for o in n.output))
        return pruned

    def run(self, feeds: Mapping[str, np.ndarray], names: Sequence[str]) -> dict[str, np.ndarray]:
        from bridge.runtimes.onnxruntime import OnnxRuntime

        produced = [n for n in names if n in self.index.producer and n not in self.index.tainted]
        values = self.index.initializer_values(n for n in names if n not in self.index.producer)
        if produced:
            runtime = OnnxRuntime(with_outputs(self._runnable_model(), produced), log_severity=3)
            runtime.activate()
            try:
                feed = {k: v for k, v in feeds.items() if k in self.index.inputs}
                values.update(zip(produced, runtime.session.run(produced, feed), strict=True))
            finally:
                runtime.deactivate()
        return values
