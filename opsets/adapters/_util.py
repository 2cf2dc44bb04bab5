"""Small graph-editing helpers shared by the version adapters (onnx_ir + tape based)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx_ir as ir

from bridge.passes.base import node_label
from opsets.errors import OpsetConversionError


def fail(node: ir.Node, hop: str, why: str) -> OpsetConversionError:
    """An error naming the adapter hop, the op and the node that cannot be converted."""
    return OpsetConversionError(f"cannot convert {node.op_type} node '{node_label(node)}' ({hop}): {why}")


def const(tape: ir.tape.Tape, array: np.ndarray | Sequence[int] | Sequence[float], dtype: Any = None) -> ir.Value:
    """A Constant node's output holding ``array`` (Constant nodes also work inside subgraphs)."""
    return tape.op("Constant", [], attributes={"value": ir.tensor(np.asarray(array, dtype=dtype))})


def const_array(value: ir.Value | None) -> np.ndarray | None:
    """The value's content when it is an initializer or a Constant node's output, else None."""
    if value is None:
        return None
    tensor = ir.convenience.get_const_tensor(value)
    return None if tensor is None else tensor.numpy()


def input_or_none(node: ir.Node, index: int) -> ir.Value | None:
    return node.inputs[index] if index < len(node.inputs) else None


def replace(node: ir.Node, tape: ir.tape.Tape, outputs: Sequence[ir.Value]) -> list[ir.Node]:
    """Replace ``node`` by the nodes recorded on ``tape``; ``outputs`` take the place of its outputs."""
    graph = node.graph
    assert graph is not None, "adapters only see nodes that sit in a graph"
    new_nodes = list(tape.nodes)
    for i, new in enumerate(new_nodes):
        # keep the original name on the node that produces the result; helpers get suffixed names
        new.name = node.name if i == len(new_nodes) - 1 else f"{node.name or node.op_type}_{new.op_type.lower()}_{i}"
    ir.convenience.replace_nodes_and_values(graph, node, [node], new_nodes, list(node.outputs), list(outputs))
    return new_nodes


def in_place(node: ir.Node, *, set_attrs: dict[str, ir.Attr] | None = None, drop_attrs: Sequence[str] = ()) -> list[ir.Node]:
    """Edit ``node``'s attributes in place; returns ``[node]`` for the driver."""
    for name in drop_attrs:
        node.attributes.pop(name, None)
    for name, attr in (set_attrs or {}).items():
        node.attributes[name] = attr
    return [node]


def attr_int(node: ir.Node, name: str, default: int) -> int:
    attr = node.attributes.get(name)
    return default if attr is None else int(attr.as_int())


def attr_str(node: ir.Node, name: str, default: str) -> str:
    attr = node.attributes.get(name)
    return default if attr is None else str(attr.as_string())


def attr_ints(node: ir.Node, name: str) -> list[int] | None:
    attr = node.attributes.get(name)
    return None if attr is None else [int(i) for i in attr.as_ints()]


def dtype_of(value: ir.Value | None) -> ir.DataType | None:
    return None if value is None else value.dtype


def static_shape(value: ir.Value | None) -> list[int] | None:
    """The value's shape when every dim is a known integer, else None."""
    if value is None or value.shape is None:
        return None
    dims = list(value.shape)
    return [d for d in dims if isinstance(d, int)] if all(isinstance(d, int) for d in dims) else None
