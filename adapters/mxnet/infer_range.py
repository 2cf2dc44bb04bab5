"""Resolve ``_arange(infer_range=True)`` in the symbol graph before translation, as MXNet's shape inference does.

MXNet leaves the length of such an arange open (src/operator/tensor/init_op.h, RangeShape) and fills
it in backwards from the op that consumes it: a same-shape elementwise op (ElemwiseShape) gives the
arange the shape of its other operand. GluonNLP's BERT and Transformer encoders build their position
indices that way (``F.elemwise_add(F.arange(start=0, infer_range=True), F.zeros_like(x))``).
Translation runs forward, node by node, so this module rewrites each such arange into the equivalent
``_contrib_arange_like`` of that other operand (same ``start``, ``step``, ``repeat``; the dtype is the
operand's, which MXNet's type inference forces to be the arange's too), moved to just before its
consumer so that the operand exists when it is translated. Node names do not change, so output names
and the MXNet reference still line up. Aranges this cannot resolve (consumed by broadcast ops, which
infer nothing backwards, or used before another consumer) stay as they are and are refused by the
``_arange`` translator with the reason.
"""

from __future__ import annotations

import dataclasses

from adapters.mxnet.ops_math import BINARY
from adapters.mxnet.symbol import MXNode, SymbolGraph

# MXNet's same-shape binary ops (ElemwiseShape<2, 1>): the tensor-tensor forms that are not broadcast_*
SAME_SHAPE_BINARY = frozenset(op for op in BINARY if not op.startswith("broadcast_"))


def _infers_range(node: MXNode) -> bool:
    return node.op == "_arange" and node.attrs.optional_bool("infer_range", False)


def resolve_infer_range(graph: SymbolGraph) -> SymbolGraph:
    """``graph`` with every resolvable ``_arange(infer_range=True)`` replaced (see the module docstring)."""
    consumers: dict[int, list[tuple[int, int]]] = {}
    for n in graph.nodes:
        for pos, (src, _) in enumerate(n.inputs):
            consumers.setdefault(src, []).append((n.index, pos))
    moves: dict[int, tuple[int, tuple[int, int]]] = {}  # arange -> (its first consumer, the operand giving its shape)
    for n in graph.nodes:
        if not _infers_range(n) or not consumers.get(n.index):
            continue
        first, pos = min(consumers[n.index])
        consumer = graph.nodes[first]
        if consumer.op not in SAME_SHAPE_BINARY or len(consumer.inputs) != 2:
            continue
        other = consumer.inputs[1 - pos]
        if other[0] != n.index and not _infers_range(graph.nodes[other[0]]):
            moves[n.index] = (first, other)
    if not moves:
        return graph
    order: list[int] = []
    for i in range(len(graph.nodes)):
        if i in moves:
            continue
        order += [a for a, (c, _) in moves.items() if c == i]
        order.append(i)
    new = {old: k for k, old in enumerate(order)}
    nodes = []
    for old in order:
        n = graph.nodes[old]
        if old in moves:
            src, out = moves[old][1]
            attrs = {k: v for k, v in n.raw_attrs.items() if k in ("start", "step", "repeat")}
            nodes.append(MXNode(new[old], "_contrib_arange_like", n.name, [(new[src], out)], attrs, dict(n.hidden)))
        else:
            nodes.append(MXNode(new[old], n.op, n.name, [(new[s], k) for s, k in n.inputs], dict(n.raw_attrs),
                                dict(n.hidden)))
    return dataclasses.replace(graph, nodes=nodes, heads=[(new[h], k) for h, k in graph.heads],
                               arg_nodes=[new[a] for a in graph.arg_nodes], node_row_ptr=None)
