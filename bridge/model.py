"""The model container that travels through the ONNX stage: an onnx_ir Model plus where it came from.

Passes work on ``container.model`` (onnx_ir); the container keeps the facts reports need (source
framework, exporter, input specs, warnings, which passes ran and changed something) and records the
pass history in the model's metadata_props so ``bridge inspect`` can show it later.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir

from bridge.config import DynamicAxis, InputSpec
from bridge.errors import UnexpectedInputError
from bridge.io import save_model
from bridge.version import __version__

META_PREFIX = "bridge."


@dataclass
class PassRecord:
    """One pass as it ran: its name, why it is in the pipeline, whether it changed the model, time."""

    name: str
    reason: str
    modified: bool
    seconds: float


@dataclass
class ModelContainer:
    model: ir.Model
    source_framework: str
    exporter: str
    inputs: tuple[InputSpec, ...] = ()
    dynamic: tuple[DynamicAxis, ...] = ()
    warnings: list[str] = field(default_factory=list)
    history: list[PassRecord] = field(default_factory=list)

    @classmethod
    def from_proto(cls, proto: onnx.ModelProto, **kwargs: object) -> ModelContainer:
        return cls(model=ir.serde.deserialize_model(proto), **kwargs)  # type: ignore[arg-type]

    def check_inputs(self) -> None:
        """The model needs no input its source does not take: every graph input without an initializer is one
        of ``inputs`` (the source's, as the adapter declared them). Anything else is a weight or constant of
        the source that became an input on the way (the model could not run on the source's inputs):
        UnexpectedInputError naming it."""
        graph = self.model.graph
        taken = {s.name for s in self.inputs}
        extra = [str(v.name) for v in graph.inputs if v.name not in graph.initializers and v.name not in taken]
        if extra:
            raise UnexpectedInputError(
                f"the converted model needs input(s) {', '.join(repr(n) for n in extra)} that the {self.source_framework} "
                f"source does not take (its inputs: {', '.join(sorted(taken)) or 'none'}); a weight or constant of "
                "the source became an input, so the model could not run on the source's inputs")

    def to_proto(self, reuse: onnx.ModelProto | None = None) -> onnx.ModelProto:
        """The model as a ModelProto, with bridge's metadata.

        ``reuse``: the ModelProto this container was made from (``from_proto``), given up by the caller:
        it is rewritten into the result and returned, and the weight tensors the IR still has from it stay
        where they are instead of being copied (onnx_ir copies every tensor into a new proto, and upb
        frees a proto's memory only all at once, so a copy would hold the weights twice). The result is
        the same as without ``reuse``."""
        props = dict(self.model.metadata_props)
        props[META_PREFIX + "version"] = __version__
        props[META_PREFIX + "source_framework"] = self.source_framework
        props[META_PREFIX + "exporter"] = self.exporter
        props[META_PREFIX + "passes_modified"] = ",".join(r.name for r in self.history if r.modified)
        self.model.metadata_props.clear()
        self.model.metadata_props.update(props)
        self.model.ir_version = min_ir_version(self.model)  # follows the opset, not the source's IR
        if reuse is None:
            return ir.serde.serialize_model(self.model)
        return _serialize_into(self.model, reuse)


_FLOAT6 = {getattr(ir.DataType, n) for n in ("FLOAT6E2M3", "FLOAT6E3M2") if hasattr(ir.DataType, n)}


def _serialize_into(model: ir.Model, reuse: onnx.ModelProto) -> onnx.ModelProto:
    """``serialize_model(model)``, written into ``reuse`` around the top-level initializers it already holds."""
    own = {id(t) for t in reuse.graph.initializer}
    kept: list[tuple[ir.Value, ir.serde.TensorProtoTensor]] = []
    for value in model.graph.initializers.values():
        t = value.const_value
        # onnx_ir serialises such a tensor as a copy of its proto (plus the tensor's own metadata_props)
        if (isinstance(t, ir.serde.TensorProtoTensor) and id(t.raw) in own and not t.metadata_props
                and t.dtype not in _FLOAT6):
            kept.append((value, t))
    try:
        for value, _ in kept:  # a 0-byte stand-in is serialised in its place
            value.const_value = ir.Tensor(np.zeros(0, np.uint8))
        light = ir.serde.serialize_model(model)
    finally:
        for value, t in kept:
            value.const_value = t
    keep = {str(value.name): t.raw for value, t in kept}
    wanted = {id(t) for t in keep.values()}
    if sum(id(t) in wanted for t in reuse.graph.initializer) != len(keep):  # not one tensor per value: copy
        return ir.serde.serialize_model(model)
    order = {t.name: i for i, t in enumerate(light.graph.initializer)}
    fresh = [t for t in light.graph.initializer if t.name not in keep]
    # empty ``reuse`` but for the kept tensors, then merge the light model (all but those tensors) into it
    for fd, _ in reuse.ListFields():
        if fd.name != "graph":
            reuse.ClearField(fd.name)
    for fd, _ in reuse.graph.ListFields():
        if fd.name != "initializer":
            reuse.graph.ClearField(fd.name)
    inits = reuse.graph.initializer
    for i in reversed(range(len(inits))):
        if id(inits[i]) not in wanted:
            del inits[i]
    for name, t in keep.items():
        t.name = name  # as serialize_model names an initializer after its value
    inits.extend(fresh)
    inits.sort(key=lambda t: order[t.name])
    light.graph.ClearField("initializer")
    reuse.graph.MergeFrom(light.graph)
    light.ClearField("graph")
    reuse.MergeFrom(light)
    return reuse

    def save(self, path: Path) -> None:
        save_model(self.to_proto(), path)


# the IR version each element type first appeared in (onnx.proto's IR_VERSION history); older types: IR 3
_DTYPE_IR = {16: 4, 17: 9, 18: 9, 19: 9, 20: 9, 21: 10, 22: 10, 23: 11, 24: 12, 25: 13, 26: 13, 27: 14, 28: 14}


def min_ir_version(model: ir.Model) -> int:
    """The lowest IR version that holds ``model``: its opset imports (onnx.helper's release table) and the
    features it uses - initializers not listed as graph inputs (4), model-local functions, optional and
    sparse types (8), newer element types (bfloat16 4, float8 9, int4 10, ...). Node ``metadata_props``
    (bridge's provenance on every node; a field of IR 10) do not count: they are annotations that readers
    of older IRs skip as an unknown field (onnx's checker and onnxruntime accept them at any IR), and
    counting them would lift every written model to IR 10, out of reach of runtimes that read IR 8.

    A model converted to another opset must not keep the IR version of its source (an opset-28 model taken
    down to 17 at IR 14 is refused by runtimes that read opset 17 and IR up to 13)."""
    imports = [onnx.helper.make_opsetid(domain, version) for domain, version in model.opset_imports.items()]
    need = onnx.helper.find_min_ir_version_for(imports, ignore_unknown=True) if imports else 3
    if model.functions:
        need = max(need, 8)

    def value_need(value: ir.Value | None) -> int:
        if value is None:
            return 3
        kind = value.type
        if isinstance(kind, (ir.OptionalType, ir.SparseTensorType)):
            return 8
        dtype = value.dtype
        return _DTYPE_IR.get(int(dtype.value), 3) if dtype is not None else 3

    graphs = [model.graph, *(f for f in model.functions.values())]
    while graphs:
        graph = graphs.pop()
        if isinstance(graph, ir.Graph):
            listed = {v.name for v in graph.inputs}
            if any(name not in listed for name in graph.initializers):
                need = max(need, 4)
            for value in (*graph.inputs, *graph.outputs, *graph.initializers.values()):
                need = max(need, value_need(value))
        for node in graph:
            for value in node.outputs:
                need = max(need, value_need(value))
            for attr in node.attributes.values():
                if attr.type == ir.AttributeType.GRAPH:
                    graphs.append(attr.value)
                elif attr.type == ir.AttributeType.GRAPHS:
                    graphs.extend(attr.value)
                elif attr.type == ir.AttributeType.TENSOR and attr.value is not None:
                    need = max(need, _DTYPE_IR.get(int(attr.value.dtype.value), 3))
    return int(need)


def bridge_metadata(proto: onnx.ModelProto) -> dict[str, str]:
    """The ``bridge.*`` metadata a previous conversion left in a model (empty for foreign models)."""
    return {p.key[len(META_PREFIX):]: p.value for p in proto.metadata_props if p.key.startswith(META_PREFIX)}
