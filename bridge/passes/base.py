"""The base of bridge's ONNX-stage passes and helpers they share (all follow onnx_ir's pass contract).

``BridgePass`` declares the warnings channel: a pass appends plain-words warnings to ``warnings``
(reset at the start of every run); the pipeline runner collects them into the conversion's warnings.
``graph_fingerprint`` gives wrapped library passes an honest ``modified`` flag. Nodes are named in
errors with ``bridge.rewriting.node_label``.
"""

from __future__ import annotations

import hashlib

import onnx_ir as ir


class BridgePass(ir.passes.InPlacePass):
    """An in-place pass with a declared warnings channel the pipeline reads after every run."""

    def __init__(self) -> None:
        super().__init__()
        self.warnings: list[str] = []

    def __call__(self, model_or_result: ir.Model | ir.passes.PassResult, /) -> ir.passes.PassResult:
        self.warnings = []
        return super().__call__(model_or_result)


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
