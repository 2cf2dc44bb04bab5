"""Loop/If 16 -> 13 -> 11 and Scan 16 -> 11: the same node, when no newer value type flows through it.

Opset 16 only widened these ops' value types to optionals, and opset 13 Loop's and If's to sequences
(onnx/defs/controlflow; the bodies and the semantics did not change), so a node whose inputs, outputs and
subgraph inputs/outputs all have types of the older schema is already in its older form; the bodies' own
nodes are converted by the same hop like any other node. A value of a newer type has no older form and is
refused naming the node and the value.
"""

from __future__ import annotations

from collections.abc import Iterable

import onnx_ir as ir

from bridge.rewriting import Builder
from opsets.registry import register
from opsets.version_adapters._util import Rewritten, fail


def _has(type_: ir.TypeProtocol | None, kinds: tuple[type, ...]) -> bool:
    while type_ is not None:
        if isinstance(type_, kinds):
            return True
        type_ = getattr(type_, "elem_type", None) if isinstance(type_, (ir.SequenceType, ir.OptionalType)) else None
    return False


def _same_node(node: ir.Node, hop: str, sequences: bool = True) -> Rewritten:
    """None (the node stays as it is) when no value of the node or its subgraphs has an optional type (nor a
    sequence type unless ``sequences``); else the error naming the value."""
    kinds: tuple[type, ...] = (ir.OptionalType,) if sequences else (ir.OptionalType, ir.SequenceType)
    older = "opset 16" if sequences else "opset 13 (sequences) or 16 (optionals)"
    values: list[Iterable[ir.Value | None]] = [node.inputs, node.outputs]
    for attr in node.attributes.values():
        if isinstance(attr, ir.Attr) and attr.type == ir.AttributeType.GRAPH:
            graph = attr.as_graph()
            values += [graph.inputs, graph.outputs]
    for group in values:
        for value in group:
            if value is not None and _has(value.type, kinds):
                raise fail(node, hop, f"value '{value.name}' has type {value.type}, which needs {older} or newer")
    return None


@register("Loop", 16, 13)
def loop_16_13(b: Builder, node: ir.Node) -> Rewritten:
    return _same_node(node, "loop_16_13")


@register("If", 16, 13)
def if_16_13(b: Builder, node: ir.Node) -> Rewritten:
    return _same_node(node, "if_16_13")


@register("Scan", 16, 11)
def scan_16_11(b: Builder, node: ir.Node) -> Rewritten:
    return _same_node(node, "scan_16_11")


@register("Loop", 13, 11)
def loop_13_11(b: Builder, node: ir.Node) -> Rewritten:
    return _same_node(node, "loop_13_11", sequences=False)


@register("If", 13, 11)
def if_13_11(b: Builder, node: ir.Node) -> Rewritten:
    return _same_node(node, "if_13_11", sequences=False)
