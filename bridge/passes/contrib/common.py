"""Helpers shared by the ``bridge.contrib`` lowering passes: finding nodes, reading the attribute
contract of adapters/mxnet/contrib.py, checking the opset, and splicing the emitted nodes in."""

from __future__ import annotations

from collections.abc import Sequence

import onnx
import onnx_ir as ir

from bridge.config import CONTRIB_DOMAIN
from bridge.errors import NodeError
from bridge.passes.base import default_opset, node_label
from bridge.passes.contrib.builder import MIN_OPSET, Builder


def contrib_nodes(model: ir.Model, op_type: str) -> list[ir.Node]:
    return [n for n in model.graph if n.domain == CONTRIB_DOMAIN and n.op_type == op_type]


def _attr(node: ir.Node, name: str) -> ir.Attr:
    attr = node.attributes.get(name)
    if attr is None:
        raise NodeError(node_label(node), node.op_type,
                        f"attribute '{name}' is missing (the bridge.contrib contract has every attribute present)")
    return attr


def attr_floats(node: ir.Node, name: str) -> list[float]:
    return [float(v) for v in _attr(node, name).as_floats()]


def attr_float(node: ir.Node, name: str) -> float:
    return float(_attr(node, name).as_float())


def attr_int(node: ir.Node, name: str) -> int:
    return int(_attr(node, name).as_int())


def attr_str(node: ir.Node, name: str) -> str:
    return str(_attr(node, name).as_string())


def builder_for(model: ir.Model, node: ir.Node) -> Builder:
    opset = default_opset(model)
    if opset < MIN_OPSET:
        raise NodeError(node_label(node), node.op_type,
                        f"lowering bridge.contrib {node.op_type} needs default opset >= {MIN_OPSET} (model: {opset}); "
                        f"convert with --opset {MIN_OPSET} or higher")
    return Builder(model.graph, opset, prefix=node_label(node))


def replace_node(model: ir.Model, node: ir.Node, builder: Builder, new_outputs: Sequence[ir.Value]) -> None:
    """Insert the builder's nodes before ``node`` and let ``new_outputs`` take over its outputs (names too)."""
    graph = model.graph
    graph.insert_before(node, list(builder.nodes))
    for old, new in zip(node.outputs, new_outputs, strict=True):
        ir.convenience.replace_all_uses_with(old, new, replace_graph_outputs=True)
        name, new.name = old.name, None
        old.name = None
        new.name = name
        if new.type is None:
            new.type = old.type
        if new.shape is None:
            new.shape = old.shape
    graph.remove(node, safe=True)


def require_float32(node: ir.Node, value: ir.Value) -> None:
    if value.dtype is not None and value.dtype != ir.DataType.FLOAT:
        raise NodeError(node_label(node), node.op_type,
                        f"input '{value.name}' is {value.dtype}; the lowering supports float32 only")


def static_dims(value: ir.Value) -> list[int | None] | None:
    if value.shape is None:
        return None
    return [d if isinstance(d, int) else None for d in value.shape]


class ShapeOracle:
    """Shapes of intermediate values by onnx shape inference on a copy (computed once, on demand).

    The contrib lowerings may run before the pipeline's own shape inference, when a feature map's
    value_info is missing; inference on a serialized copy tells whether H and W are static without
    touching the model.
    """

    def __init__(self, model: ir.Model) -> None:
        self.model = model
        self._shapes: dict[str, list[int | None]] | None = None

    def dims(self, value: ir.Value) -> list[int | None] | None:
        own = static_dims(value)
        if own is not None and all(d is not None for d in own):
            return own
        if self._shapes is None:
            self._shapes = {}
            try:
                proto = ir.serde.serialize_model(self.model)
                inferred = onnx.shape_inference.infer_shapes(proto, strict_mode=False, data_prop=True)
            except Exception:  # inference is only a hint here; dynamic lowering still works without it
                return own
            g = inferred.graph
            for vi in (*g.value_info, *g.output, *g.input):
                if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
                    self._shapes[vi.name] = [d.dim_value if d.HasField("dim_value") else None
                                             for d in vi.type.tensor_type.shape.dim]
        return self._shapes.get(str(value.name), own)
