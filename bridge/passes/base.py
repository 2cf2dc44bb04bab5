"""Shared helpers for ONNX-stage passes (all passes follow onnx_ir's pass contract).

``graph_fingerprint`` gives wrapped library passes an honest ``modified`` flag; ``node_label`` is
how every pass names a node in an error (name, or op and position when the exporter left it blank).
"""

from __future__ import annotations

import hashlib

import onnx_ir as ir


def node_label(node: ir.Node) -> str:
    if node.name:
        return node.name
    graph = node.graph
    index = list(graph).index(node) if graph is not None else -1
    return f"<unnamed {node.op_type} #{index}>"


def graph_fingerprint(model: ir.Model) -> str:
    """A digest of the graph's structure and shapes: equal before/after a pass iff nothing visible changed."""
    h = hashlib.sha1()
    for graph in model.graphs():
        for node in graph:
            h.update(f"{node.domain}:{node.op_type}:{node.name}".encode())
            h.update(repr([v.name if v is not None else "" for v in node.inputs]).encode())
            h.update(repr([(v.name, str(v.shape), str(v.dtype)) for v in node.outputs]).encode())
            h.update(repr(sorted((k, str(a.value)) for k, a in node.attributes.items())).encode())
        h.update(repr(sorted(graph.initializers)).encode())
        h.update(repr([(v.name, str(v.shape)) for v in (*graph.inputs, *graph.outputs)]).encode())
    h.update(repr(sorted(model.opset_imports.items())).encode())
    return h.hexdigest()


def default_opset(model: ir.Model) -> int:
    """The model's default-domain ('' / ai.onnx) opset version."""
    version = model.opset_imports.get("", model.opset_imports.get("ai.onnx"))
    if version is None:
        raise ValueError("model imports no default-domain opset")
    return int(version)


def all_values(model: ir.Model) -> list[ir.Value]:
    """Every value of the main graph: inputs, node outputs (including graph outputs), initializers."""
    graph = model.graph
    seen: dict[int, ir.Value] = {}
    for v in graph.inputs:
        seen[id(v)] = v
    for node in graph:
        for v in node.outputs:
            seen[id(v)] = v
    for v in graph.initializers.values():
        seen[id(v)] = v
    return list(seen.values())
