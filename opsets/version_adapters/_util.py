"""Attribute and constant readers shared by the version adapters, and their error.

Adapters build nodes with ``bridge.rewriting.Builder`` and return the new values; the rewrite driver
(``opsets.conversion`` calls it per hop) splices them. ``Rewritten`` is what an adapter returns:
the values replacing the node's outputs, or None when the node keeps its place (edited in place,
e.g. with ``in_place``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx_ir as ir

from bridge.rewriting import node_label
from opsets.errors import OpsetConversionError

Rewritten = Sequence[ir.Value] | None


def fail(node: ir.Node, hop: str, why: str) -> OpsetConversionError:
    """An error naming the adapter hop, the op and the node that cannot be converted."""
    return OpsetConversionError(f"cannot convert {node.op_type} node '{node_label(node)}' ({hop}): {why}")


def const_array(value: ir.Value | None) -> np.ndarray | None:
    """The value's content when it is an initializer or a Constant node's output, else None."""
    if value is None:
        return None
    tensor = ir.convenience.get_const_tensor(value)
    return None if tensor is None else tensor.numpy()


def input_or_none(node: ir.Node, index: int) -> ir.Value | None:
    return node.inputs[index] if index < len(node.inputs) else None


def in_place(node: ir.Node, *, set_attrs: dict[str, ir.Attr] | None = None, drop_attrs: Sequence[str] = ()) -> Rewritten:
    """Edit ``node``'s attributes in place; returns None (the node keeps its place) for the driver."""
    for name in drop_attrs:
        node.attributes.pop(name, None)
    for name, attr in (set_attrs or {}).items():
        node.attributes[name] = attr
    return None


def dtype_of(value: ir.Value | None) -> ir.DataType | None:
    return None if value is None else value.dtype


def static_shape(value: ir.Value | None) -> list[int] | None:
    """The value's shape when every dim is a known integer, else None."""
    if value is None or value.shape is None:
        return None
    dims = list(value.shape)
    return [d for d in dims if isinstance(d, int)] if all(isinstance(d, int) for d in dims) else None
