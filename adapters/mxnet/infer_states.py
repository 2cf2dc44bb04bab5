"""Resolve the unknown (0) batch dim of RNN begin states in the symbol graph before translation.

A Gluon RNN layer called without states inside a hybridized block makes its own:
``_zeros(shape=(L*D, 0, H))`` (rnn_layer.py, begin_state), where 0 means "unknown" and MXNet's shape
inference fills it in backwards from the consumer: the RNN op gives its states the batch of its data
(src/operator/rnn-inl.h, RNNShape: state [L*D, N, H] for data [T, N, I]). Translation runs forward, so
this module gives each such fill node the RNN's data as an input and the attribute ``__dims_like__``
(the fill's 0 dims take that input's dims at the same axes), and moves it to just before its consumer
so that the data exists when it is translated. Node names do not change, so output names and the MXNet
reference still line up. Fills this cannot resolve stay as they are and are refused by their translator.
"""

from __future__ import annotations

from adapters.mxnet.symbol import MXNode, SymbolGraph, consumers_of, move_before_consumers

FILLS = frozenset({"_zeros", "_ones", "_full"})
DIMS_LIKE = "__dims_like__"
_RNN_STATES = (2, 3)  # RNN inputs: data, parameters, state, state_cell


def _has_unknown_dims(node: MXNode) -> bool:
    return node.op in FILLS and not node.inputs and any(d == 0 for d in node.attrs.optional_ints("shape"))


def resolve_rnn_states(graph: SymbolGraph) -> SymbolGraph:
    """``graph`` with every resolvable RNN begin state fill reading the RNN's data (see the module docstring)."""
    consumers = consumers_of(graph)
    moves: dict[int, tuple[int, tuple[int, int]]] = {}  # fill -> (its first consumer, the RNN's data)
    for n in graph.nodes:
        if not _has_unknown_dims(n) or not consumers.get(n.index):
            continue
        first, pos = min(consumers[n.index])
        consumer = graph.nodes[first]
        if consumer.op == "RNN" and pos in _RNN_STATES and len(n.attrs.optional_ints("shape")) == 3:
            moves[n.index] = (first, consumer.inputs[0])

    def reading_data(n: MXNode, index: int, data: tuple[int, int]) -> MXNode:
        return MXNode(index, n.op, n.name, [data], {**n.raw_attrs, DIMS_LIKE: "True"}, dict(n.hidden))

    return move_before_consumers(graph, moves, reading_data)
