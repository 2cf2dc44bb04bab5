"""Node provenance: which source framework node and op an ONNX node comes from, and what made it.

Every node of a model bridge writes carries these ``metadata_props`` (ONNX's per-node string map):

* ``bridge.source.framework`` - the framework of the source model (``mxnet``, ``torch``, ``onnx``, ...);
* ``bridge.source.node`` / ``bridge.source.op`` - the source framework's node and op the node stands for
  (an MXNet symbol node, a PyTorch module scope and aten op; for exporters that leave no trace of their
  own, the node's name and op as the exporter wrote them);
* ``bridge.made_by`` - ``"<kind> <name>"``: the ``translator`` (MXNet adapter), ``exporter`` or ``pass``
  that created the node; ``bridge.rewrite`` names the rewrite a pass applied through the rewriting
  driver (e.g. ``MultiBoxPriorLowering``);
* ``bridge.rewritten_by`` - passes that edited the node in place afterwards, comma-separated.

Writers: the MXNet translators' emitter (``adapters.mxnet.context``), adapters whose exporter records
source scopes, the rewriting driver and builder (new nodes inherit the source of the node they replace),
and the pass runner (``bridge.passes.pipeline``), which stamps exported nodes that carry nothing yet and
attributes any node a pass created without provenance. Readers: ``bridge inspect --nodes`` and
``bridge debug``'s culprit attribution. ``strip`` removes it all (``--strip-provenance``).

A leaf: it imports onnx and onnx_ir only, and works on both ``onnx.NodeProto`` and ``onnx_ir.Node``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import onnx
import onnx_ir as ir

PREFIX = "bridge."
FRAMEWORK = "bridge.source.framework"
SOURCE_NODE = "bridge.source.node"
SOURCE_OP = "bridge.source.op"
MADE_BY = "bridge.made_by"
REWRITE = "bridge.rewrite"
REWRITTEN_BY = "bridge.rewritten_by"
KEYS = (FRAMEWORK, SOURCE_NODE, SOURCE_OP, MADE_BY, REWRITE, REWRITTEN_BY)

TRANSLATOR = "translator"
EXPORTER = "exporter"
PASS = "pass"

AnyNode = ir.Node | onnx.NodeProto


@dataclass(frozen=True)
class Provenance:
    """One node's provenance (empty strings where unknown)."""

    framework: str = ""
    node: str = ""
    op: str = ""
    made_by: str = ""  # "<kind> <name>": "translator adapters.mxnet.ops_nn:Convolution", "pass FoldConstantsPass"
    rewrite: str = ""
    rewritten_by: tuple[str, ...] = ()

    @property
    def kind(self) -> str:
        """``translator``, ``exporter`` or ``pass`` (empty when unknown)."""
        return self.made_by.partition(" ")[0]

    @property
    def maker(self) -> str:
        """The name of the translator, exporter or pass (``made_by`` without its kind)."""
        return self.made_by.partition(" ")[2]

    @property
    def from_export(self) -> bool:
        """Made by the adapter (a translator or the exporter), not by a pass of the ONNX stage."""
        return self.kind in (TRANSLATOR, EXPORTER)

    def source(self) -> str:
        """``mxnet node 'conv1' (Convolution)``, or '' when the source node is unknown."""
        if not self.node:
            return ""
        op = f" ({self.op})" if self.op else ""
        return f"{self.framework} node '{self.node}'{op}".strip()

    def describe(self) -> str:
        """One line for reports: source node, what made it, which passes edited it."""
        parts = [p for p in (self.source(), f"made by {self.made_by}" if self.made_by else "") if p]
        if self.rewrite:
            parts.append(f"rewrite {self.rewrite}")
        if self.rewritten_by:
            parts.append(f"rewritten by {', '.join(self.rewritten_by)}")
        return "; ".join(parts)

    def to_props(self) -> dict[str, str]:
        props = {FRAMEWORK: self.framework, SOURCE_NODE: self.node, SOURCE_OP: self.op, MADE_BY: self.made_by,
                 REWRITE: self.rewrite, REWRITTEN_BY: ",".join(self.rewritten_by)}
        return {k: v for k, v in props.items() if v}

    def to_dict(self) -> dict[str, object]:
        return {"framework": self.framework, "node": self.node, "op": self.op, "made_by": self.made_by,
                "rewrite": self.rewrite, "rewritten_by": list(self.rewritten_by)}

    @classmethod
    def from_props(cls, props: Mapping[str, str]) -> Provenance | None:
        if not any(k in props for k in KEYS):
            return None
        rewritten = props.get(REWRITTEN_BY, "")
        return cls(props.get(FRAMEWORK, ""), props.get(SOURCE_NODE, ""), props.get(SOURCE_OP, ""),
                   props.get(MADE_BY, ""), props.get(REWRITE, ""),
                   tuple(p for p in rewritten.split(",") if p))


def made_by(kind: str, name: str) -> str:
    return f"{kind} {name}"


# -- per node -----------------------------------------------------------------------------------------

def _props(node: AnyNode) -> dict[str, str]:
    if isinstance(node, onnx.NodeProto):
        return {p.key: p.value for p in node.metadata_props}
    return dict(node.metadata_props)


def read(node: AnyNode) -> Provenance | None:
    """The node's provenance, or None when it carries none."""
    return Provenance.from_props(_props(node))


def write(node: AnyNode, prov: Provenance) -> None:
    """Replace the node's provenance by ``prov`` (other metadata is kept)."""
    new = prov.to_props()
    if isinstance(node, onnx.NodeProto):
        kept = [(p.key, p.value) for p in node.metadata_props if p.key not in KEYS]
        del node.metadata_props[:]
        for key, value in [*kept, *new.items()]:
            entry = node.metadata_props.add()
            entry.key, entry.value = key, value
        return
    for key in KEYS:
        node.metadata_props.pop(key, None)
    node.metadata_props.update(new)


def add_rewritten_by(node: AnyNode, pass_name: str) -> None:
    """Record that ``pass_name`` edited ``node`` in place."""
    prov = read(node) or Provenance()
    if pass_name not in prov.rewritten_by and made_by(PASS, pass_name) != prov.made_by:
        write(node, Provenance(prov.framework, prov.node, prov.op, prov.made_by, prov.rewrite,
                               (*prov.rewritten_by, pass_name)))


def inherit(nodes: Iterable[ir.Node], origin: ir.Node, rewrite: str) -> None:
    """New ``nodes`` replacing ``origin`` take its source; ``rewrite`` names the rewrite that built them
    (the pass that ran it is filled in by ``attribute_new_nodes``)."""
    prov = read(origin) or Provenance()
    for node in nodes:
        if node is origin:
            continue
        write(node, Provenance(prov.framework, prov.node, prov.op, "", rewrite))


# -- per model ----------------------------------------------------------------------------------------

def ir_nodes(model: ir.Model) -> Iterator[ir.Node]:
    """Every node: main graph, subgraphs at any depth, model-local functions (and their subgraphs)."""
    yield from model.graph.all_nodes()
    for function in model.functions.values():
        yield from function.all_nodes()


def proto_nodes(model: onnx.ModelProto) -> Iterator[onnx.NodeProto]:
    """Every NodeProto of ``model``: main graph, subgraphs at any depth, functions."""
    def walk(nodes: Iterable[onnx.NodeProto]) -> Iterator[onnx.NodeProto]:
        for node in nodes:
            yield node
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    yield from walk(attr.g.node)
                for g in attr.graphs:
                    yield from walk(g.node)
    yield from walk(model.graph.node)
    for function in model.functions:
        yield from walk(function.node)


def stamp_export(model: ir.Model, framework: str, exporter: str) -> int:
    """Nodes that carry no provenance yet came from the exporter unchanged: their source is their own name
    and op as exported. Returns how many were stamped."""
    count = 0
    for node in ir_nodes(model):
        if read(node) is None:
            op = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}::{node.op_type}"
            write(node, Provenance(framework, node.name or "", op, made_by(EXPORTER, exporter)))
            count += 1
    return count


@dataclass(frozen=True)
class Before:
    """What the model looked like before a pass, as far as provenance needs: node identities, and the node
    that produced each named value (read only if a pass re-creates it)."""

    ids: frozenset[int]
    by_output: Mapping[tuple[str, str], ir.Node]  # (value name, producer's op) -> producer


def before(model: ir.Model) -> Before:
    ids = set()
    by_output: dict[tuple[str, str], ir.Node] = {}
    for node in ir_nodes(model):
        ids.add(id(node))
        for value in node.outputs:
            if value.name:
                by_output[(value.name, node.op_type)] = node
    return Before(frozenset(ids), by_output)


def attribute_new_nodes(model: ir.Model, earlier: Before, pass_name: str) -> None:
    """Give every node ``pass_name`` created its provenance.

    A node that is new (not in ``earlier``) and carries no ``made_by`` is the pass's. When it produces a
    value a node of the same op produced before the pass (a converter that re-creates every node, e.g.
    onnx's version converter), it is that node carried over: it keeps that node's provenance. Otherwise its source is
    the one the rewriting driver copied onto it, or that of a neighbour (the node consuming its output,
    else the node producing its input): a node a pass inserts serves the node it is wired to.
    """
    new = [n for n in ir_nodes(model) if id(n) not in earlier.ids]
    pending: list[ir.Node] = []
    for node in new:
        prov = read(node)
        if prov is not None and prov.made_by:
            continue
        carried = next((found for v in node.outputs if (key := (str(v.name), node.op_type)) in earlier.by_output
                        and (found := read(earlier.by_output[key])) is not None), None)
        if carried is not None and prov is None:
            write(node, carried)
            continue
        if prov is not None and (prov.node or prov.framework):
            write(node, Provenance(prov.framework, prov.node, prov.op, made_by(PASS, pass_name),
                                   "" if prov.rewrite == pass_name else prov.rewrite))
            continue
        pending.append(node)
    # consumers first (a chain of inserted nodes takes the source it feeds), repeated until nothing more is
    # learnt: a node deep in an inserted chain learns its source from neighbours stamped in an earlier round
    while pending:
        left = []
        for node in reversed(pending):
            source = _neighbour(node)
            if source.node:
                _stamp_pass(node, source, pass_name)
            else:
                left.append(node)
        if len(left) == len(pending):
            break
        pending = left[::-1]
    for node in pending:
        _stamp_pass(node, Provenance(), pass_name)


def _stamp_pass(node: ir.Node, source: Provenance, pass_name: str) -> None:
    rewrite = (read(node) or Provenance()).rewrite
    write(node, Provenance(source.framework, source.node, source.op, made_by(PASS, pass_name),
                           "" if rewrite == pass_name else rewrite))


def _neighbour(node: ir.Node) -> Provenance:
    for value in node.outputs:
        for user, _ in value.uses():
            prov = read(user)
            if prov is not None and prov.node:
                return prov
    for given in node.inputs:
        producer = given.producer() if given is not None else None
        prov = read(producer) if producer is not None else None
        if prov is not None and prov.node:
            return prov
    return Provenance()


def by_node_name(model: onnx.ModelProto) -> dict[str, Provenance]:
    """Provenance of each named main-graph node."""
    out: dict[str, Provenance] = {}
    for node in model.graph.node:
        prov = read(node)
        if node.name and prov is not None:
            out[node.name] = prov
    return out


def missing(model: onnx.ModelProto) -> list[str]:
    """Nodes (main graph, subgraphs, functions) without provenance: what a writer forgot to stamp."""
    return [node.name or f"<unnamed {node.op_type}>" for node in proto_nodes(model) if read(node) is None]


def strip(model: onnx.ModelProto) -> int:
    """Remove the provenance of every node (in place): bridge's keys and the exporter's own per-node
    metadata (torch.onnx's scopes and stack traces), for a bare model. Returns how many nodes had some."""
    count = 0
    for node in proto_nodes(model):
        if len(node.metadata_props):
            count += 1
            del node.metadata_props[:]
    return count


# tensors a pass computed in another layout than the tensor they stand for: {tensor: {"of": name, "perm": [...]}},
# the tensor is ``transpose(of, perm)``. A pass that moves a Transpose across a named tensor (SoftmaxLastAxisPass)
# records it, so tools comparing by name (pinning, bridge debug) still find the source's tensor there.
TENSOR_ALIASES_META = "bridge.tensor_aliases"


def tensor_aliases(metadata: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """The aliases recorded in a model's metadata (``TENSOR_ALIASES_META``), or none."""
    raw = metadata.get(TENSOR_ALIASES_META)
    return dict(json.loads(raw)) if raw else {}


def record_tensor_alias(metadata: dict[str, str], tensor: str, of: str, perm: Sequence[int]) -> None:
    """Record that ``tensor`` is ``transpose(of, perm)`` (an alias of an alias resolves to the first name)."""
    aliases = tensor_aliases(metadata)
    base = aliases.get(of)
    if base is not None:  # of = transpose(base, p): tensor = transpose(base, p[perm])
        of, perm = base["of"], [base["perm"][i] for i in perm]
    aliases[tensor] = {"of": of, "perm": [int(p) for p in perm]}
    metadata[TENSOR_ALIASES_META] = json.dumps(aliases, sort_keys=True)
