"""Graph surgery for the upstream tie proof (``bridge.validation.pinning``): the candidate with the source's values
given to its selections' decisions, and nothing else.

``decision_pinned_model`` is the model the proof runs. A *pin* is a tensor the source also returns, upstream of a
selection op's decision inputs (TopK's scores, NonMaxSuppression's boxes and scores, ArgMax's input, a
comparison's float inputs). The source's value of a pin reaches **only the selections**: the nodes between the
pins and each decision input are copied (outputs renamed ``<name>__bridge_decision``), the copies read the
pins' source values (graph inputs ``<pin>__bridge_source``), and the selection op reads the copy. Every other
consumer - the box decode, the gathers of the selected rows, the outputs - keeps reading the candidate's own
tensors. TopK's values output, the one selection output that carries data, is recomputed from the candidate's
own scores at the selected indices (``GatherElements``). So a pinned run shows the candidate's own numbers at
the source's choices: geometry (anchors, decoded boxes) and scores are compared with the tolerance and the box
tolerance, never replaced by the source's.

``pinned_model`` replaces tensors for every consumer; the proof uses it only for selection *outputs* (a TopK's
indices in the source's order of exactly tied scores), which are decisions themselves.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper

from bridge.validation.graph import output_value_infos

UNPINNED_SUFFIX = "__bridge_unpinned"  # a pinned tensor's producer keeps its other outputs; this one is renamed
DECISION_SUFFIX = "__bridge_decision"  # a node copied into a selection's decision path: its renamed outputs
SOURCE_SUFFIX = "__bridge_source"  # the graph input holding a pin's source value (decisions only)
VALUES_SUFFIX = "__bridge_decided_values"  # a TopK's own values output, replaced by the candidate's scores


@dataclass(frozen=True)
class DecisionSite:
    """One selection op's decision inputs in a decision-pinned model."""

    node: str
    op: str
    inputs: tuple[str, ...]  # the candidate's own tensors the op read before
    reads: tuple[str, ...]  # what it reads now (the same name where no pin is upstream)


def subgraph_names(node: onnx.NodeProto) -> set[str]:
    """Every tensor name a node's subgraphs read (outer-scope values they use are inputs of the node too)."""
    names: set[str] = set()
    for attr in node.attribute:
        graphs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
        for g in graphs:
            for n in g.node:
                names.update(i for i in n.input if i)
                names |= subgraph_names(n)
    return names


def graph_input_names(model: onnx.ModelProto) -> set[str]:
    inits = {t.name for t in model.graph.initializer}
    return {i.name for i in model.graph.input if i.name not in inits}


def _rename_in_subgraphs(node: onnx.NodeProto, renames: Mapping[str, str]) -> None:
    """Outer-scope reads inside ``node``'s subgraphs follow ``renames`` (names a subgraph defines itself stay)."""
    for attr in node.attribute:
        graphs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
        for g in graphs:
            own = {i.name for i in g.input} | {t.name for t in g.initializer} | {o for n in g.node for o in n.output}
            for n in g.node:
                n.input[:] = [renames.get(i, i) if i not in own else i for i in n.input]
                _rename_in_subgraphs(n, {k: v for k, v in renames.items() if k not in own})


def _toposort(graph: onnx.GraphProto) -> None:
    """Reorder ``graph``'s nodes so each comes after the producers of everything it reads (stable otherwise)."""
    nodes = list(graph.node)
    producer = {o: k for k, n in enumerate(nodes) for o in n.output if o}
    reads = [{i for i in (*n.input, *subgraph_names(n)) if i in producer} for n in nodes]
    placed: list[int] = []
    done: set[int] = set()
    visiting: set[int] = set()
    for start in range(len(nodes)):
        stack: list[tuple[int, bool]] = [(start, False)]
        while stack:
            k, expanded = stack.pop()
            if k in done:
                continue
            if expanded:
                visiting.discard(k)
                done.add(k)
                placed.append(k)
                continue
            if k in visiting:  # a cycle cannot come from copying acyclic paths; keep the order it had
                continue
            visiting.add(k)
            stack.append((k, True))
            stack.extend((producer[i], False) for i in sorted(reads[k], key=lambda n: -producer[n])
                         if producer[i] not in done)
    del graph.node[:]
    graph.node.extend(nodes[k] for k in placed)


def _prune(model: onnx.ModelProto, outputs: Sequence[str]) -> None:
    """Keep only the nodes, initializers, inputs and value infos ``outputs`` need."""
    g = model.graph
    producer = {o: k for k, n in enumerate(g.node) for o in n.output if o}
    needed_nodes: set[int] = set()
    needed: set[str] = set()
    stack = list(outputs)
    while stack:
        name = stack.pop()
        if name in needed:
            continue
        needed.add(name)
        k = producer.get(name)
        if k is None or k in needed_nodes:
            continue
        needed_nodes.add(k)
        stack.extend(i for i in (*g.node[k].input, *subgraph_names(g.node[k])) if i)
    kept = [n for k, n in enumerate(g.node) if k in needed_nodes]
    del g.node[:]
    g.node.extend(kept)
    inits = [t for t in g.initializer if t.name in needed]
    del g.initializer[:]
    g.initializer.extend(inits)
    inputs = [i for i in g.input if i.name in needed]
    del g.input[:]
    g.input.extend(inputs)
    vi = [v for v in g.value_info if v.name in needed]
    del g.value_info[:]
    g.value_info.extend(vi)


def _set_outputs(model: onnx.ModelProto, outputs: Sequence[str]) -> None:
    """``model``'s graph outputs become ``outputs``, each typed (an untyped output fails a target's converter)."""
    declared = output_value_infos(model, list(dict.fromkeys(outputs)))
    del model.graph.output[:]
    model.graph.output.extend(declared)


def _add_input(graph: onnx.GraphProto, name: str, value: np.ndarray) -> None:
    arr = np.asarray(value)
    graph.input.append(helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(arr.dtype), list(arr.shape)))


def decision_pinned_model(model: onnx.ModelProto, pins: Mapping[str, np.ndarray],
                          sites: Iterable[tuple[int, str, Sequence[int]]], outputs: Sequence[str],
                          ) -> tuple[onnx.ModelProto, list[DecisionSite]]:
    """``model`` whose selection ops decide on the source's values of ``pins`` (name -> value, for dtype and
    shape), everything else computed by the candidate (module docstring).

    ``sites``: (node position in the graph, op type, decision input positions) of each selection op. Returns the model (outputs
    ``outputs``, which may name the renamed decision tensors) and, per site, what its decision inputs read now.
    Raises ValueError for a decision path through a node whose subgraph reads a copied tensor under its own
    name (it cannot be told apart)."""
    pinned = onnx.ModelProto()
    pinned.CopyFrom(model)
    g = pinned.graph
    producer = {o: k for k, n in enumerate(g.node) for o in n.output if o}
    renamed: dict[str, str] = {p: p + SOURCE_SUFFIX for p in pins}
    memo: dict[str, bool] = {p: True for p in pins}  # tensor -> a pin is upstream of it (on a node path)
    copied: set[int] = set()
    copies: list[onnx.NodeProto] = []

    def downstream_of_pin(name: str) -> bool:
        stack = [name]
        while stack:  # iterative post-order over producers (decision paths can be thousands of nodes long)
            t = stack.pop()
            if t in memo:
                continue
            k = producer.get(t)
            if k is None:
                memo[t] = False
                continue
            node = g.node[k]
            pending = [i for i in node.input if i and i not in memo]
            if pending:
                stack.append(t)
                stack.extend(pending)
                continue
            memo[t] = any(memo.get(i, False) for i in node.input if i)
            if memo[t] and k not in copied:
                copied.add(k)
                copies.append(_copy(node))
        return memo[name]

    def _copy(node: onnx.NodeProto) -> onnx.NodeProto:
        for o in node.output:
            if o:
                renamed.setdefault(o, o + DECISION_SUFFIX)
        if subgraph_names(node) & set(renamed):
            raise ValueError(f"the decision path runs through {node.op_type} '{node.name}', whose subgraph reads a "
                             "tensor the source's values replace there")
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        copy.name = (node.name or node.op_type) + DECISION_SUFFIX
        copy.input[:] = [renamed.get(i, i) for i in node.input]
        # a pin among the outputs is read from its source value; the copy's own value of it goes unused
        copy.output[:] = [(o + DECISION_SUFFIX if o in pins else renamed[o]) if o else o for o in node.output]
        _rename_in_subgraphs(copy, renamed)
        return copy

    result: list[DecisionSite] = []
    topk_values: list[tuple[onnx.NodeProto, str]] = []
    for position, op, positions in sites:
        if not 0 <= position < len(model.graph.node):
            continue
        node = g.node[position]  # copies are appended after the loop: positions still hold
        name = node.name or f"<unnamed {node.op_type} #{position}>"
        before = tuple(node.input[i] for i in positions if i < len(node.input) and node.input[i])
        reads = []
        for i in positions:
            if i >= len(node.input) or not node.input[i]:
                continue
            t = node.input[i]
            if downstream_of_pin(t):
                node.input[i] = renamed[t]
            reads.append(node.input[i])
        result.append(DecisionSite(name, op, before, tuple(reads)))
        if op == "TopK" and before and reads and reads[0] != before[0]:
            topk_values.append((node, before[0]))
    g.node.extend(copies)
    for node, scores in topk_values:  # the kept scores are the candidate's own, at the indices decided
        values, indices = node.output[0], node.output[1] if len(node.output) > 1 else ""
        if not values or not indices:
            continue
        axis = next((a.i for a in node.attribute if a.name == "axis"), -1)
        node.output[0] = values + VALUES_SUFFIX
        g.node.append(helper.make_node("GatherElements", [scores, indices], [values], axis=axis,
                                       name=(node.name or "TopK") + VALUES_SUFFIX))
    for pin, value in pins.items():
        _add_input(g, renamed[pin], value)
    _toposort(g)  # before the outputs are typed: shape inference reads the nodes in order
    _set_outputs(pinned, outputs)
    _prune(pinned, list(outputs))
    return pinned, result


def pinned_model(model: onnx.ModelProto, pins: Mapping[str, np.ndarray], outputs: Sequence[str]) -> onnx.ModelProto:
    """``model`` with the tensors ``pins`` (name -> a value, for dtype and shape) as graph inputs for *every*
    consumer, outputs ``outputs``, and only the nodes, initializers and inputs those outputs still need: what
    only fed a pin is gone, so the pinned run cannot compute the pin's own value anywhere. The proof replaces
    only selection outputs this way (decisions); a selection's inputs go through ``decision_pinned_model``."""
    pinned = onnx.ModelProto()
    pinned.CopyFrom(model)
    g = pinned.graph
    for node in g.node:  # a producer with other outputs stays; its pinned output is renamed away
        for i, o in enumerate(node.output):
            if o in pins:
                node.output[i] = o + UNPINNED_SUFFIX
    inputs = [i for i in g.input if i.name not in pins]
    del g.input[:]
    g.input.extend(inputs)
    for name, value in pins.items():
        _add_input(g, name, value)
    _set_outputs(pinned, outputs)
    _prune(pinned, [o for o in outputs if o not in pins] + [o for o in outputs if o in pins])
    return pinned
