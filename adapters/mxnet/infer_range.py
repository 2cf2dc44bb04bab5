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

from adapters.mxnet.ops_math import BINARY
from adapters.mxnet.symbol import MXNode, SymbolGraph, consumers_of, move_before_consumers

# MXNet's same-shape binary ops (ElemwiseShape<2, 1>): the tensor-tensor forms that are not broadcast_*
SAME_SHAPE_BINARY = frozenset(op for op in BINARY if not op.startswith("broadcast_"))


def _infers_range(node: MXNode) -> bool:
    return node.op == "_arange" and node.attrs.optional_bool("infer_range", False)


def resolve_infer_range(graph: SymbolGraph) -> SymbolGraph:
    """``graph`` with every resolvable ``_arange(infer_range=True)`` replaced (see the module docstring)."""
    consumers = consumers_of(graph)
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

    def arange_like(n: MXNode, index: int, operand: tuple[int, int]) -> MXNode:
        attrs = {k: v for k, v in n.raw_attrs.items() if k in ("start", "step", "repeat")}
        return MXNode(index, "_contrib_arange_like", n.name, [operand], attrs, dict(n.hidden))

    return move_before_consumers(graph, moves, arange_like)
