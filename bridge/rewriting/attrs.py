"""The attribute readers of ONNX nodes (``onnx_ir.Node``) for every rewrite: lowerings, version adapters, passes.

One family, whose names say what a missing attribute means (the same words as the MXNet adapter's
``Attrs``):

* ``required_<type>(node, name)``: the attribute must be there (e.g. the ``bridge.contrib`` contract has
  every attribute present); a missing one is a ``NodeError`` naming the node;
* ``optional_<type>(node, name, default)``: the attribute's value, or ``default`` when absent (ONNX's
  own defaults, passed by the caller from the operator's schema).
"""

from __future__ import annotations

import onnx_ir as ir

from bridge.errors import NodeError
from bridge.rewriting.driver import node_label


def _required(node: ir.Node, name: str) -> ir.Attr:
    attr = node.attributes.get(name)
    if attr is None:
        raise NodeError(node_label(node), node.op_type, f"attribute '{name}' is missing")
    return attr


def required_int(node: ir.Node, name: str) -> int:
    return int(_required(node, name).as_int())


def required_float(node: ir.Node, name: str) -> float:
    return float(_required(node, name).as_float())


def required_str(node: ir.Node, name: str) -> str:
    return str(_required(node, name).as_string())


def required_ints(node: ir.Node, name: str) -> list[int]:
    return [int(v) for v in _required(node, name).as_ints()]


def required_floats(node: ir.Node, name: str) -> list[float]:
    return [float(v) for v in _required(node, name).as_floats()]


def optional_int(node: ir.Node, name: str, default: int) -> int:
    attr = node.attributes.get(name)
    return default if attr is None else int(attr.as_int())


def optional_float(node: ir.Node, name: str, default: float) -> float:
    attr = node.attributes.get(name)
    return default if attr is None else float(attr.as_float())


def optional_str(node: ir.Node, name: str, default: str) -> str:
    attr = node.attributes.get(name)
    return default if attr is None else str(attr.as_string())


def optional_ints(node: ir.Node, name: str, default: list[int] | None = None) -> list[int] | None:
    attr = node.attributes.get(name)
    return default if attr is None else [int(v) for v in attr.as_ints()]


def optional_floats(node: ir.Node, name: str, default: list[float] | None = None) -> list[float] | None:
    attr = node.attributes.get(name)
    return default if attr is None else [float(v) for v in attr.as_floats()]
