"""The model container that travels through the ONNX stage: an onnx_ir Model plus where it came from.

Passes work on ``container.model`` (onnx_ir); the container keeps the facts reports need (source
framework, exporter, input specs, warnings, which passes ran and changed something) and records the
pass history in the model's metadata_props so ``bridge inspect`` can show it later.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import onnx
import onnx_ir as ir

from bridge.config import DynamicAxis, InputSpec
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

    def to_proto(self) -> onnx.ModelProto:
        props = dict(self.model.metadata_props)
        props[META_PREFIX + "version"] = __version__
        props[META_PREFIX + "source_framework"] = self.source_framework
        props[META_PREFIX + "exporter"] = self.exporter
        props[META_PREFIX + "passes_modified"] = ",".join(r.name for r in self.history if r.modified)
        self.model.metadata_props.clear()
        self.model.metadata_props.update(props)
        return ir.serde.serialize_model(self.model)

    def save(self, path: Path) -> None:
        save_model(self.to_proto(), path)


def bridge_metadata(proto: onnx.ModelProto) -> dict[str, str]:
    """The ``bridge.*`` metadata a previous conversion left in a model (empty for foreign models)."""
    return {p.key[len(META_PREFIX):]: p.value for p in proto.metadata_props if p.key.startswith(META_PREFIX)}
