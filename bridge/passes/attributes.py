"""Integer attributes outside the range the ONNX operator spec allows, named before any runtime runs the node.

A ``ConvTranspose`` with ``group=0`` passes a structural check, and onnxruntime then divides by it while
loading the model: the process dies of SIGFPE and the user learns nothing about which node is wrong. The
ONNX checker's strict inference catches a few such values, but its message names neither the node nor
(for some ops) the attribute. ``check_model_attributes`` (for an ONNX source and a model given to
``bridge debug --model``) and ``CheckAttributesPass`` (first in the ONNX stage) refuse them with a
``NodeError`` naming the node, the op and the attribute, worded like every other invalid-attribute error
(``attribute 'group' is 0; it must be at least 1``).

The limits are the spec's (onnx/defs: "group ... must be positive", strides/dilations/kernel_shape along
each axis >= 1, blocksize >= 1, ...), kept as one table keyed by op; values the spec leaves open
(negative pads) are left to the runtimes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import onnx
import onnx_ir as ir

from bridge.errors import NodeError
from bridge.passes.base import BridgePass
from bridge.rewriting.driver import node_label

_CONV = {"group": 1, "strides": 1, "dilations": 1, "kernel_shape": 1}
_POOL = {"kernel_shape": 1, "strides": 1, "dilations": 1}
# op -> attribute -> the smallest value each of its entries may take (default domain only)
MINIMUMS: Mapping[str, Mapping[str, int]] = {
    "Conv": _CONV, "ConvInteger": _CONV, "QLinearConv": _CONV, "DeformConv": {**_CONV, "offset_group": 1},
    "ConvTranspose": _CONV,
    "MaxPool": _POOL, "AveragePool": _POOL, "LpPool": _POOL, "MaxRoiPool": {"pooled_shape": 1},
    "DepthToSpace": {"blocksize": 1}, "SpaceToDepth": {"blocksize": 1}, "LRN": {"size": 1},
    "Col2Im": {"strides": 1, "dilations": 1},
}
_WHY = {"group": " (the input channels are split into 'group' groups)",
        "blocksize": " (the spatial dims are divided by it)"}


def attribute_problem(op_type: str, domain: str, attrs: Mapping[str, int | Sequence[int]]) -> tuple[str, str] | None:
    """(attribute, message) for the first integer attribute below the spec's minimum, else None."""
    if domain not in ("", "ai.onnx"):
        return None
    for name, minimum in MINIMUMS.get(op_type, {}).items():
        value = attrs.get(name)
        if value is None:
            continue
        values = [value] if isinstance(value, int) else list(value)
        bad = [v for v in values if v < minimum]
        if bad:
            must = "it must" if isinstance(value, int) else "each entry must"
            return name, f"attribute '{name}' is {value if isinstance(value, int) else values}; {must} be at least " \
                         f"{minimum}{_WHY.get(name, '')}"
    return None


def _int_attrs_of_proto(node: onnx.NodeProto) -> dict[str, int | list[int]]:
    out: dict[str, int | list[int]] = {}
    for a in node.attribute:
        if a.type == onnx.AttributeProto.INT:
            out[a.name] = int(a.i)
        elif a.type == onnx.AttributeProto.INTS:
            out[a.name] = [int(v) for v in a.ints]
    return out


def _proto_nodes(graph: onnx.GraphProto) -> Iterator[tuple[onnx.NodeProto, int]]:
    for index, node in enumerate(graph.node):
        yield node, index
        for a in node.attribute:
            for sub in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                yield from _proto_nodes(sub)


def check_model_attributes(model: onnx.ModelProto) -> None:
    """NodeError (node, op, attribute) for the first node of ``model`` (subgraphs included) whose integer
    attribute is outside the spec's range; the same labels as ``bridge.rewriting.node_label``."""
    for node, index in _proto_nodes(model.graph):
        found = attribute_problem(node.op_type, node.domain, _int_attrs_of_proto(node))
        if found is not None:
            label = node.name or f"<unnamed {node.op_type} #{index}>"
            raise NodeError(label, node.op_type, f"node '{label}' ({node.op_type}): {found[1]}")


def _int_attrs_of_ir(node: ir.Node) -> dict[str, int | list[int]]:
    out: dict[str, int | list[int]] = {}
    for name, attr in node.attributes.items():
        if attr.type == ir.AttributeType.INT:
            out[name] = int(attr.as_int())
        elif attr.type == ir.AttributeType.INTS:
            out[name] = [int(v) for v in attr.as_ints()]
    return out


class CheckAttributesPass(BridgePass):
    """Refuses (NodeError naming node, op, attribute) an integer attribute outside the spec's range; changes nothing."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        for node in model.graph.all_nodes():
            found = attribute_problem(node.op_type, node.domain, _int_attrs_of_ir(node))
            if found is not None:
                raise NodeError(node_label(node), node.op_type, found[1])
        return ir.passes.PassResult(model, modified=False)
