"""The rewrite contract and its one driver: every node-level rewrite of the ONNX stage goes through here.

A rewrite (a ``bridge.contrib`` lowering, an opset version adapter, ...) declares which nodes it is
for (``domain``, ``op_type``), checks one node (``check`` returns a ``MatchResult``; like onnxscript's
rewriter, ``MatchResult.fail(reason)`` says *why* a node is not rewritten) and returns the values
that take the place of the node's outputs (``rewrite``, built with the ``Builder`` it is handed).
Returning ``None`` keeps the node (possibly with attributes edited in place): the node itself now
has the rewritten form.

The driver does the rest, the same way for every rewrite: it finds the nodes (main graph, If/Loop/
Scan bodies, model-local functions) before touching any, runs the checks (a failed check of a
``required`` rewrite is a ``NodeError`` naming the node, otherwise a note saying why the node was
left alone), splices the new nodes in front of the old one, hands the old output names to the new
values (graph outputs and downstream references stay valid), removes the old node, and collects
the builders' warnings.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import onnx
import onnx_ir as ir

from bridge import provenance
from bridge.errors import NodeError
from bridge.rewriting.builder import Builder, existing_names

DEFAULT_DOMAINS = ("", "ai.onnx")


def node_label(node: ir.Node) -> str:
    """How every error and report names a node: its name, or op and position when the exporter left it blank."""
    if node.name:
        return node.name
    graph = node.graph
    index = list(graph).index(node) if graph is not None else -1
    return f"<unnamed {node.op_type} #{index}>"


_NO_DEFAULT = object()


def default_opset(model: ir.Model | onnx.ModelProto, missing: Any = _NO_DEFAULT) -> int:
    """The model's default-domain ('' / ai.onnx) opset version (an onnx_ir model or a ModelProto): the one
    place it is read. ``missing``: the answer for a model without that import (else ValueError)."""
    if isinstance(model, onnx.ModelProto):
        imports = {o.domain: o.version for o in model.opset_import}
    else:
        imports = dict(model.opset_imports)
    version = imports.get("", imports.get("ai.onnx"))
    if version is None:
        if missing is _NO_DEFAULT:
            raise ValueError("model imports no default-domain opset")
        return missing  # as given (None: "no default-domain import")
    return int(version)


def canonical_domain(domain: str) -> str:
    return "" if domain in DEFAULT_DOMAINS else domain


@dataclass(frozen=True)
class MatchResult:
    """Whether a rewrite applies to a node; ``reason`` says why not."""

    reason: str | None = None

    @property
    def ok(self) -> bool:
        return self.reason is None

    @classmethod
    def success(cls) -> MatchResult:
        return cls(None)

    @classmethod
    def fail(cls, reason: str) -> MatchResult:
        return cls(reason)


class Rewrite(ABC):
    """One node-level rewrite. Subclasses set ``op_type`` (and ``domain``), implement ``rewrite``."""

    domain: str = ""
    op_type: str = ""
    # True: a node this rewrite is for but cannot rewrite is an error (e.g. a contrib op no runtime runs)
    required: bool = False
    # the lowest default-domain opset the emitted nodes need (checked per node, reported as the reason)
    min_opset: int | None = None

    @property
    def rewrite_name(self) -> str:
        return type(self).__name__

    def matches(self, node: ir.Node) -> bool:
        return node.op_type == self.op_type and canonical_domain(node.domain) == canonical_domain(self.domain)

    def check(self, node: ir.Node, opset: int) -> MatchResult:
        """Preconditions beyond the op type; the default checks only ``min_opset``."""
        if self.min_opset is not None and opset < self.min_opset:
            return MatchResult.fail(f"needs default opset >= {self.min_opset} (model: {opset}); "
                                    f"convert with --opset {self.min_opset} or higher")
        return MatchResult.success()

    @abstractmethod
    def rewrite(self, b: Builder, node: ir.Node) -> Sequence[ir.Value] | Expansion | None:
        """The values replacing ``node.outputs`` (same count, same order), an ``Expansion``, or None to keep ``node``."""


@dataclass(frozen=True)
class Expansion:
    """A rewrite result that widens graph outputs: ``outputs[i]`` replaces the node's output i by zero
    or more values (named by the rewrite). Allowed only for outputs nothing else consumes: a graph output
    is replaced in place by the values, an unused output is dropped."""

    outputs: Sequence[Sequence[ir.Value]]


@dataclass
class RewriteOutcome:
    """What one driver run did."""

    applied: list[tuple[str, str]] = field(default_factory=list)  # (rewrite name, node label)
    produced: list[ir.Node] = field(default_factory=list)  # nodes that now carry the rewritten form
    left_alone: list[str] = field(default_factory=list)  # "node 'X' (Op): reason"
    warnings: list[str] = field(default_factory=list)

    @property
    def modified(self) -> bool:
        return bool(self.applied)


Selector = Callable[[ir.Node], Rewrite | None]


def all_graphs(model: ir.Model) -> Iterable[ir.Graph | ir.Function]:
    """The main graph, every subgraph (If/Loop/Scan bodies, at any depth) and every model-local function."""
    yield from model.graphs()
    for function in model.functions.values():
        yield function
        for node in function.all_nodes():
            for attr in node.attributes.values():
                if attr.type == ir.AttributeType.GRAPH:
                    yield attr.as_graph()
                elif attr.type == ir.AttributeType.GRAPHS:
                    yield from attr.as_graphs()


def apply_rewrites(model: ir.Model, rewrites: Sequence[Rewrite] | Selector, *, opset: int | None = None,
                   by: str | None = None) -> RewriteOutcome:
    """Run ``rewrites`` (a list, first match wins, or a selector ``node -> Rewrite | None``) over ``model``.

    Provenance: the new nodes of a rewrite take the source of the node they replace and name the rewrite
    (the pass runner adds the pass); a node a rewrite keeps but edits records ``by`` (the pass, else the
    rewrite) among the passes that rewrote it."""
    select: Selector = rewrites if callable(rewrites) else _first_match(rewrites)
    opset = default_opset(model) if opset is None else opset
    outcome = RewriteOutcome()
    # every node is found before any is rewritten: new nodes are never rewritten again in the same run
    targets = [(graph, node, rewrite) for graph in all_graphs(model) for node in list(graph)
               if (rewrite := select(node)) is not None]
    taken: dict[int, set[str]] = {}
    for graph, node, rewrite in targets:
        label = node_label(node)
        verdict = rewrite.check(node, opset)
        if not verdict.ok:
            if rewrite.required:
                raise NodeError(label, node.op_type, f"{rewrite.rewrite_name}: {verdict.reason}")
            outcome.left_alone.append(f"node '{label}' ({node.op_type}) left alone by {rewrite.rewrite_name}: "
                                      f"{verdict.reason}")
            continue
        names = taken.setdefault(id(graph), _names_of(model, graph))
        builder = Builder(_as_graph(graph), opset, prefix=label, taken=names, model=model)
        values = rewrite.rewrite(builder, node)
        outcome.applied.append((rewrite.rewrite_name, label))
        outcome.warnings.extend(builder.warnings)
        provenance.inherit(builder.nodes, node, rewrite.rewrite_name)
        if values is None:  # the node keeps its place and form; helper nodes it now reads go in front
            provenance.add_rewritten_by(node, by or rewrite.rewrite_name)
            if builder.nodes:
                graph.insert_before(node, list(builder.nodes))
            for init in builder.initializers:
                _as_graph(graph).register_initializer(init)
            outcome.produced.extend([*builder.nodes, node])
            continue
        if isinstance(values, Expansion):
            _expand(graph, node, builder, values)
        else:
            splice(graph, node, builder.nodes, values, builder.initializers)
        outcome.produced.extend(builder.nodes)
    return outcome


def splice(graph: ir.Graph | ir.Function, node: ir.Node, new_nodes: Sequence[ir.Node], new_outputs: Sequence[ir.Value],
           initializers: Sequence[ir.Value] = ()) -> None:
    """Insert ``new_nodes`` before ``node``; ``new_outputs`` take over its outputs (names too); drop ``node``."""
    if len(new_outputs) != len(node.outputs):
        raise ValueError(f"rewrite of {node_label(node)} returned {len(new_outputs)} values for "
                         f"{len(node.outputs)} outputs")
    if new_nodes:
        graph.insert_before(node, list(new_nodes))
    for old, new in zip(node.outputs, new_outputs, strict=True):
        ir.convenience.replace_all_uses_with(old, new, replace_graph_outputs=True)
        name, new.name = old.name, None
        old.name = None
        new.name = name
        if new.type is None:
            new.type = old.type
        if new.shape is None:
            new.shape = old.shape
    for init in initializers:  # registered under their final names
        _as_graph(graph).register_initializer(init)
    graph.remove(node, safe=True)


def _expand(graph: ir.Graph | ir.Function, node: ir.Node, builder: Builder, expansion: Expansion) -> None:
    label = node_label(node)
    if len(expansion.outputs) != len(node.outputs):
        raise ValueError(f"rewrite of {label} expanded {len(expansion.outputs)} of {len(node.outputs)} outputs")
    outputs = graph.outputs
    for old, _ in zip(node.outputs, expansion.outputs, strict=True):
        if old.uses():
            raise NodeError(label, node.op_type, f"the rewrite replaces output '{old.name}' by several values, "
                            "but other nodes consume it")
    if builder.nodes:
        graph.insert_before(node, list(builder.nodes))
    for init in builder.initializers:
        _as_graph(graph).register_initializer(init)
    for old, new in zip(node.outputs, expansion.outputs, strict=True):
        if old in outputs:
            index = list(outputs).index(old)
            outputs.pop(index)
            for offset, value in enumerate(new):
                outputs.insert(index + offset, value)
    graph.remove(node, safe=True)


def _first_match(rewrites: Sequence[Rewrite]) -> Selector:
    def select(node: ir.Node) -> Rewrite | None:
        return next((r for r in rewrites if r.matches(node)), None)

    return select


def _names_of(model: ir.Model, graph: ir.Graph | ir.Function) -> set[str]:
    # names must be unique model-wide (a subgraph may read outer-scope values by name)
    names = existing_names(model.graph)
    if graph is not model.graph:
        names |= existing_names(_as_graph(graph))
    return names


def _as_graph(graph: ir.Graph | ir.Function) -> ir.Graph:
    return graph.graph if isinstance(graph, ir.Function) else graph
