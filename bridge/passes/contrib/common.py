"""``LoweringPass``: the base of every ``bridge.contrib`` lowering, plus the shape helpers they share (their
attribute readers are ``bridge.rewriting.attrs``' ``required_*``: the contrib contract has every attribute).

A lowering is one class: a pass (so the pipeline can list it with its reason) that is also a
``bridge.rewriting.Rewrite`` for one contrib op. It declares the op, the inputs that must be present
and float, and implements ``lower(b, node)`` returning the new values (``rewrite`` wraps it for
float16); the rewrite driver finds
the nodes (subgraphs included), checks them, splices and collects warnings. ``requires`` fails before
anything is rewritten when a node cannot be lowered (opset < 13, a float64 or integer input, a missing
input); ``ensures`` checks that no node of the op is left.

float16 models (MXNet's ``cast(float16)`` deployments): the float inputs are cast to float32, the op is
lowered as for float32, and its float outputs are cast back to float16 - so the result is the float32
result rounded once, which is at least as close to the exact value as MXNet's own float16 kernels.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence

import onnx
import onnx_ir as ir

from bridge.config import CONTRIB_DOMAIN
from bridge.errors import NodeError
from bridge.passes.base import BridgePass
from bridge.rewriting import (
    F32,
    MIN_OPSET,
    Builder,
    Expansion,
    MatchResult,
    Rewrite,
    all_graphs,
    apply_rewrites,
    default_opset,
    node_label,
)
from bridge.rewriting.protos import call_without_weights


class LoweringPass(BridgePass, Rewrite):
    """Lower every ``bridge.contrib`` node of ``op_type`` to standard ONNX (subclasses set the class attributes)."""

    domain = CONTRIB_DOMAIN
    required = True  # a contrib op left in the model runs nowhere: failing to lower it is an error
    min_opset = MIN_OPSET
    input_names: tuple[str, ...] = ()  # inputs that must be present, in order (named in errors)
    float32_inputs: tuple[int, ...] = ()  # inputs computed in float32 (float16 ones are cast to it and back)
    dtype_from: int = 0  # the input whose float dtype the float outputs take (MXNet: outputs follow data)

    def nodes(self, model: ir.Model) -> list[ir.Node]:
        return [node for graph in all_graphs(model) for node in graph if self.matches(node)]

    def check(self, node: ir.Node, opset: int) -> MatchResult:
        verdict = super().check(node, opset)
        if not verdict.ok:
            return verdict
        present = [v for v in node.inputs[: len(self.input_names)]]
        if len(present) < len(self.input_names) or any(v is None for v in present):
            return MatchResult.fail(f"needs inputs {', '.join(self.input_names)}")
        for index in self.float32_inputs:
            value = node.inputs[index] if index < len(node.inputs) else None
            if value is not None and value.dtype is not None and value.dtype not in _FLOATS:
                return MatchResult.fail(f"input '{value.name}' is {value.dtype}; the lowering supports float32 and "
                                        "float16 only")
        return MatchResult.success()

    def rewrite(self, b: Builder, node: ir.Node) -> Sequence[ir.Value] | Expansion:
        """``lower`` in float32; float16 inputs are cast up first and float outputs cast back (module docstring)."""
        source = node.inputs[self.dtype_from] if self.dtype_from < len(node.inputs) else None
        if source is None or source.dtype != ir.DataType.FLOAT16:
            return self.lower(b, node)
        for index in self.float32_inputs:
            value = node.inputs[index] if index < len(node.inputs) else None
            if value is not None and value.dtype == ir.DataType.FLOAT16:
                wide = b.cast(value, F32)
                wide.type, wide.shape = ir.TensorType(F32), value.shape  # lowerings read static dims
                node.replace_input_with(index, wide)  # the node is dropped once lowered
        result = self.lower(b, node)
        if isinstance(result, Expansion):
            return Expansion([[_to_half(b, v) for v in values] for values in result.outputs])
        return [_to_half(b, v) for v in result]

    @abstractmethod
    def lower(self, b: Builder, node: ir.Node) -> Sequence[ir.Value] | Expansion:
        """The standard-ONNX values replacing the node's outputs, computed in float32."""

    def requires(self, model: ir.Model) -> None:
        opset = default_opset(model)
        for node in self.nodes(model):
            verdict = self.check(node, opset)
            if not verdict.ok:
                raise NodeError(node_label(node), node.op_type, f"lowering bridge.contrib {node.op_type}: {verdict.reason}")

    def ensures(self, model: ir.Model) -> None:
        left = [node_label(n) for n in self.nodes(model)]
        if left:
            raise NodeError(left[0], self.op_type, f"{len(left)} {self.op_type} node(s) were not lowered: {left}")

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        outcome = apply_rewrites(model, [self], by=type(self).__name__)
        self.warnings.extend(outcome.warnings)
        return ir.passes.PassResult(model, outcome.modified)


_FLOATS = (ir.DataType.FLOAT, ir.DataType.FLOAT16)


def _to_half(b: Builder, value: ir.Value) -> ir.Value:
    """A float32 (or not yet typed: the lowerings' float results) value cast to float16; others unchanged."""
    if value.dtype not in (None, ir.DataType.FLOAT):
        return value
    half = b.cast(value, ir.DataType.FLOAT16)
    if value.name and not value.name.startswith(b.prefix):  # a named graph output (Expansion): the cast takes the name
        name, value.name = value.name, None
        half.name = name
    half.type = ir.TensorType(ir.DataType.FLOAT16)
    half.shape = value.shape
    return half


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
                inferred = call_without_weights(
                    lambda proto: onnx.shape_inference.infer_shapes(proto, strict_mode=False, data_prop=True),
                    self.model)
            except Exception:  # inference is only a hint here; dynamic lowering still works without it
                return own
            g = inferred.graph
            for vi in (*g.value_info, *g.output, *g.input):
                if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
                    self._shapes[vi.name] = [d.dim_value if d.HasField("dim_value") else None
                                             for d in vi.type.tensor_type.shape.dim]
        return self._shapes.get(str(value.name), own)

