"""FoldConstantsPass: constant folding and dead-node removal with onnxscript's folder and onnx_ir passes.

Exporters leave Shape->Gather->Concat chains on static shapes, Constant nodes and unused outputs;
folding them makes static shapes visible to shape inference and keeps the graph small.

This runs onnxscript's constant folder (the one torch.onnx uses) but deliberately *not*
``onnxscript.optimizer.optimize``'s peephole rewrite rules: they fuse patterns without regard to
the target opset - e.g. Max/Min back into Clip, undoing the integer-Clip legalisation that opsets/
does below opset 12 (onnxruntime has no integer Clip kernel there). Custom-domain nodes
(bridge.contrib) are never folded: a later pass lowers them.

Control flow. The folder trusts the shapes recorded on values: ``Shape`` of a static value becomes a
constant, a ``Concat`` operand with a 0-sized axis is dropped. Inside a Loop or Scan body those
records describe one iteration at best - exporters annotate a loop-carried value with the shape of
its initial value (a mask list that starts empty, ``[0, 1, 28, 28]``) - so folding on them rewrites
``Concat(carried, new)`` into ``new`` and the loop returns one row instead of all. Before folding,
every value whose contents vary per iteration (loop-carried state, the iteration number, scan slices,
and everything computed from them, in nested bodies too, including outer-scope captures) and every
Loop/Scan result and what is computed from it loses the dims of its recorded shape (its rank is
kept). What folds inside a body is then exactly what is the same on every iteration.

Opset. onnxscript's rules emit some ops in their newest spelling whatever the model's opset: a
``ConcatFromSequence(new_axis=1)`` becomes ``Unsqueeze`` with an axes *input* (opset 13), a
``SplitToSequence`` becomes ``Split`` with ``num_outputs`` (opset 18) and ``Squeeze`` with an axes input.
The nodes a fold created are spelled back for the model's opset afterwards (axes/split as attributes
below 13, explicit split sizes below 18).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import onnx_ir as ir
from onnx_ir.passes.common import (
    DeduplicateInitializersPass,
    LiftConstantsToInitializersPass,
    RemoveUnusedNodesPass,
)
from onnxscript.optimizer import fold_constants_ir

from bridge.config import CONTRIB_DOMAIN
from bridge.errors import BridgeInternalError
from bridge.limits import fold_fits
from bridge.passes.base import graph_fingerprint
from bridge.rewriting.driver import DEFAULT_DOMAINS, default_opset

_ROUNDS = 2  # folding can expose new dead nodes and vice versa; two rounds reach the fixpoint in practice
_ITERATING = frozenset({"Loop", "Scan"})


def _should_fold(node: ir.Node) -> bool | None:
    if not fold_fits(node):  # the folder would allocate past --max-memory before checking the result's size
        return False
    return False if node.domain == CONTRIB_DOMAIN else None  # None: onnxscript's default rules


def _subgraphs(node: ir.Node) -> Iterator[ir.Graph]:
    for attr in node.attributes.values():
        if isinstance(attr, ir.Attr) and not attr.is_ref():
            if attr.type == ir.AttributeType.GRAPH:
                yield attr.as_graph()
            elif attr.type == ir.AttributeType.GRAPHS:
                yield from attr.as_graphs()


def _forget_dims(value: ir.Value, keep: set[int]) -> None:
    if id(value) not in keep and value.shape is not None and any(not isinstance(d, ir.SymbolicDim) or d.value
                                                                 for d in value.shape):
        value.shape = ir.Shape([ir.SymbolicDim(None)] * len(value.shape))


def _state_inputs(node: ir.Node, body: ir.Graph) -> list[ir.Value]:
    """The body inputs that carry state from one iteration to the next (their shapes may change)."""
    if node.op_type == "Loop":
        return list(body.inputs[2:])
    num_scan = node.attributes.get_int("num_scan_inputs", 0) or 0
    return list(body.inputs[: len(body.inputs) - num_scan])


def forget_varying_shapes(model: ir.Model) -> None:
    """Clear the recorded dims of every value whose shape may differ between loop iterations or from
    what the exporter recorded for a loop's result (see the module docstring). Graph inputs and the
    main graph's outputs keep theirs: they are the model's interface."""
    main = model.graph
    keep = {id(v) for v in (*main.inputs, *main.outputs)}
    _relax(main, set(), keep)


def _relax(graph: ir.Graph, varying: set[int], keep: set[int]) -> set[int]:
    """Walk ``graph`` in order, growing ``varying`` (value ids) and clearing dims of varying values.
    Returns the ids of varying values from enclosing scopes that ``graph`` (or its bodies) reads."""
    outer = frozenset(varying) - {id(v) for v in graph.inputs}
    read: set[int] = set()
    for node in graph:
        ids = {id(v) for v in node.inputs if v is not None}
        read |= ids & outer
        iterates = node.domain in ("", "ai.onnx") and node.op_type in _ITERATING
        captures = False
        for body in _subgraphs(node):
            inner = set(varying)
            if iterates:
                inner.update(id(v) for v in body.inputs)  # iteration number, condition, state, scan slices
                for v in _state_inputs(node, body):
                    _forget_dims(v, keep)
            captured = _relax(body, inner, keep)
            captures |= bool(captured)
            read |= captured & outer
        if iterates or captures or ids & varying:
            for v in node.outputs:
                varying.add(id(v))
                _forget_dims(v, keep)
    return read


@contextmanager
def _split_shapes_hidden(model: ir.Model) -> Iterator[None]:
    """onnxscript's SplitToSequence rule reads a non-constant ``split`` as constant when its shape is
    known but not 1-D (it crashes on a scalar); hide such shapes while folding so the rule declines."""
    hidden: list[tuple[ir.Value, ir.Shape]] = []
    for node in model.graph.all_nodes():
        if node.op_type != "SplitToSequence" or len(node.inputs) < 2:
            continue
        split = node.inputs[1]
        if split is not None and split.const_value is None and split.shape is not None and len(split.shape) != 1:
            hidden.append((split, split.shape))
            split.shape = None
    try:
        yield
    finally:
        for value, shape in hidden:
            if value.shape is None:
                value.shape = shape


def _const_ints(value: ir.Value | None) -> list[int] | None:
    if value is None or value.const_value is None:
        return None
    return [int(x) for x in value.const_value.numpy().reshape(-1)]


def _respell(node: ir.Node, opset: int) -> None:
    """Rewrite ``node`` (made by a fold) into the spelling the model's opset ``opset`` accepts, in place."""
    if node.domain not in DEFAULT_DOMAINS:
        return
    if node.op_type == "Split" and opset < 18 and "num_outputs" in node.attributes:
        data = node.inputs[0]
        axis = node.attributes.get_int("axis", 0) or 0
        count = node.attributes.get_int("num_outputs", len(node.outputs)) or len(node.outputs)
        dim = data.shape[axis] if data is not None and data.shape is not None else None
        if not isinstance(dim, int) or dim % count:  # the rule only emits num_outputs for an even split
            raise BridgeInternalError(f"folding made a Split with num_outputs at opset {opset} on an unknown size")
        node.attributes.pop("num_outputs")
        sizes = ir.Value(name=f"{node.outputs[0].name}_sizes", const_value=ir.tensor([dim // count] * count))
        sizes.type, sizes.shape = ir.TensorType(ir.DataType.INT64), ir.Shape([count])
        assert node.graph is not None
        node.graph.register_initializer(sizes)
        node.resize_inputs(2)
        node.replace_input_with(1, sizes)
    if opset >= 13:
        return
    attribute = {"Unsqueeze": "axes", "Squeeze": "axes", "Split": "split"}.get(node.op_type)
    if attribute is None or len(node.inputs) < 2 or node.inputs[1] is None:
        return
    values = _const_ints(node.inputs[1])
    if values is None:
        raise BridgeInternalError(f"folding made {node.op_type} with a non-constant {attribute} at opset {opset}")
    node.attributes[attribute] = ir.AttrInt64s(attribute, values)
    node.resize_inputs(1)


def _fold(model: ir.Model) -> None:
    """One round of onnxscript's folder, with the nodes it created spelled for the model's opset."""
    before = {id(n) for n in model.graph.all_nodes()}
    with _split_shapes_hidden(model):
        fold_constants_ir(model, onnx_shape_inference=False, should_fold=_should_fold)
    opset = default_opset(model, missing=None)
    if opset is not None and opset < 18:
        for node in list(model.graph.all_nodes()):
            if id(node) not in before:
                _respell(node, opset)


class FoldConstantsPass(ir.passes.InPlacePass):
    def call(self, model: ir.Model) -> ir.passes.PassResult:
        before = graph_fingerprint(model)
        forget_varying_shapes(model)
        for _ in range(_ROUNDS):
            _fold(model)
            RemoveUnusedNodesPass()(model)
        LiftConstantsToInitializersPass(lift_all_constants=True, size_limit=0)(model)
        DeduplicateInitializersPass()(model)
        return ir.passes.PassResult(model, modified=graph_fingerprint(model) != before)
