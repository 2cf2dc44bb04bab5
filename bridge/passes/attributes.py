"""Attributes the ONNX operator spec does not allow (a value out of range, the wrong kind, a name the op does
not take, an element type that is none), named before any runtime runs the node.

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

The kinds come from the op's schema at the model's opset (``onnx.defs``): an attribute of the wrong kind
(a Constant ``value`` that is an INT, a Loop ``body`` that is not a GRAPH), one the op does not take, or a
required one missing is named with what the op takes - the ONNX checker refuses the same nodes, but in
words ("==> Context: Bad node spec for node") that name neither the attribute's problem nor what to
write. The checker stays the authority: a node is refused here only when ``onnx.checker.check_node``
refuses it too. An element-type attribute (``Cast(to)``, ``dtype`` of the random and EyeLike ops) must
name a type ONNX defines: ``to=0`` (UNDEFINED) passes the checker and crashes shape inference later.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

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


# attributes that hold an element type (TensorProto.DataType), by op (default domain)
ELEMENT_TYPE_ATTRS: Mapping[str, str] = {
    "Cast": "to", "EyeLike": "dtype", "RandomNormal": "dtype", "RandomUniform": "dtype", "RandomNormalLike": "dtype",
    "RandomUniformLike": "dtype", "Multinomial": "dtype", "Bernoulli": "dtype",
}
_DATA_TYPES = frozenset(v for v in onnx.TensorProto.DataType.values() if v != onnx.TensorProto.UNDEFINED)
_KINDS = {int(v): k for k, v in onnx.AttributeProto.AttributeType.items()}
_KIND_WORDS = {"FLOAT": "a float", "INT": "an integer", "STRING": "a string", "TENSOR": "a tensor", "GRAPH": "a graph",
               "SPARSE_TENSOR": "a sparse tensor", "TYPE_PROTO": "a type", "FLOATS": "a list of floats",
               "INTS": "a list of integers", "STRINGS": "a list of strings", "TENSORS": "a list of tensors",
               "GRAPHS": "a list of graphs", "SPARSE_TENSORS": "a list of sparse tensors",
               "TYPE_PROTOS": "a list of types", "UNDEFINED": "of no kind (UNDEFINED)"}


def _schema_kind(declared: Any) -> int:
    """The AttributeProto type code of a schema attribute (onnx's AttrType is an IntEnum its stubs do not say)."""
    return int(declared.type)


def _kind(code: int) -> str:
    name = _KINDS.get(code, str(code))
    return f"{_KIND_WORDS.get(name, 'of an unknown kind')} ({name})"


def schema_problem(op_type: str, domain: str, opset: int | None, kinds: Mapping[str, int],
                   ints: Mapping[str, int | Sequence[int]]) -> tuple[str, str] | None:
    """(attribute, message) for the first attribute the op's schema at ``opset`` refuses: of another kind,
    unknown to the op, required and missing, or an element type that is none. ``kinds``: attribute name ->
    AttributeProto type code; ``ints``: the integer attributes' values. None when the op has no schema here
    (a custom domain, an op newer than onnx) or nothing is wrong."""
    if domain in ("", "ai.onnx") and op_type in ELEMENT_TYPE_ATTRS:
        name = ELEMENT_TYPE_ATTRS[op_type]
        value = ints.get(name)
        if isinstance(value, int) and value not in _DATA_TYPES:
            what = "UNDEFINED" if value == onnx.TensorProto.UNDEFINED else "not a type ONNX defines"
            return name, (f"attribute '{name}' is {value} ({what}); it must be an ONNX element type "
                          f"(1 FLOAT, 7 INT64, 9 BOOL, ...: onnx.TensorProto.DataType)")
    if opset is None or domain not in ("", "ai.onnx", "ai.onnx.ml"):
        return None
    try:
        schema = onnx.defs.get_schema(op_type, opset, "" if domain == "ai.onnx" else domain)
    except onnx.defs.SchemaError:
        return None
    takes = schema.attributes
    for name, code in kinds.items():
        declared = takes.get(name)
        if declared is None:
            offered = ", ".join(sorted(takes)) or "none"
            return name, (f"attribute '{name}' is not one {op_type} takes at opset {opset} (its attributes: "
                          f"{offered})")
        if _schema_kind(declared) != code:
            return name, (f"attribute '{name}' is {_kind(code)}, but {op_type} takes it as "
                          f"{_kind(_schema_kind(declared))}")
    for name, declared in takes.items():
        if declared.required and name not in kinds:
            return name, f"attribute '{name}' is missing; {op_type} requires it ({_kind(_schema_kind(declared))})"
    return None


def _checker_refuses(node: onnx.NodeProto, opsets: Mapping[str, int]) -> bool:
    """Whether onnx's own node check refuses ``node`` (the authority on what the spec allows)."""
    ctx = onnx.checker.C.CheckerContext()
    ctx.ir_version = onnx.IR_VERSION
    ctx.opset_imports = dict(opsets)
    try:
        onnx.checker.check_node(node, ctx)
    except Exception:  # ValidationError, or a crash on what it cannot read: refused either way
        return True
    return False


def _opset_of(opsets: Mapping[str, int], domain: str) -> int | None:
    return opsets.get(domain, opsets.get("ai.onnx") if domain == "" else opsets.get("") if domain == "ai.onnx"
                      else None)


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


def proto_node_problem(node: onnx.NodeProto, opsets: Mapping[str, int]) -> tuple[str, str] | None:
    """(attribute, message) for what is wrong with ``node``'s attributes (range, kind, name, element type)."""
    ints = _int_attrs_of_proto(node)
    found = attribute_problem(node.op_type, node.domain, ints)
    if found is not None:
        return found
    kinds = {a.name: int(a.type) for a in node.attribute if not a.ref_attr_name}
    found = schema_problem(node.op_type, node.domain, _opset_of(opsets, node.domain), kinds, ints)
    if found is not None and (found[0] == ELEMENT_TYPE_ATTRS.get(node.op_type) or _checker_refuses(node, opsets)):
        return found
    return None


def check_model_attributes(model: onnx.ModelProto) -> None:
    """NodeError (node, op, attribute) for the first node of ``model`` (subgraphs included) whose attribute
    the spec does not allow (``proto_node_problem``); the same labels as ``bridge.rewriting.node_label``."""
    opsets = {o.domain: o.version for o in model.opset_import}
    for node, index in _proto_nodes(model.graph):
        found = proto_node_problem(node, opsets)
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
    """Refuses (NodeError naming node, op, attribute) an attribute the spec does not allow; changes nothing."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        opsets = dict(model.opset_imports)
        for node in model.graph.all_nodes():
            ints = _int_attrs_of_ir(node)
            found = attribute_problem(node.op_type, node.domain, ints)
            if found is None:
                kinds = {name: int(attr.type.value) for name, attr in node.attributes.items()
                         if not attr.is_ref()}
                found = schema_problem(node.op_type, node.domain, _opset_of(opsets, node.domain), kinds, ints)
                if found is not None and found[0] != ELEMENT_TYPE_ATTRS.get(node.op_type) \
                        and not _checker_refuses(ir.serde.serialize_node(node), opsets):
                    found = None  # the checker lets it through (an op that allows other attributes)
            if found is not None:
                raise NodeError(node_label(node), node.op_type, found[1])
        return ir.passes.PassResult(model, modified=False)
