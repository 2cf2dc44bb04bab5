"""The adapter contract: a framework's model goes in, an ONNX model (plus how it was made) comes out.

Each adapter also offers a reference runner - the source framework itself behind the Runtime
protocol - so validation can compare the converted model against the framework's own outputs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import onnx

from bridge.config import ExportSpec, InputSpec, Source
from bridge.runtimes.base import Runtime


@dataclass
class ExportResult:
    """An exported ONNX model and the facts a report needs about how it was produced."""

    model: onnx.ModelProto
    exporter: str  # e.g. "torch.onnx (dynamo)", "mxnet symbol reader"
    inputs: tuple[InputSpec, ...]  # the concrete sample shapes actually used for export
    output_names: tuple[str, ...]
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # e.g. why a fallback exporter was used
    seconds: float = 0.0


class Adapter(Protocol):
    """Framework -> ONNX. ``claims`` must be cheap and must not import the framework for file sources."""

    framework: str

    def claims(self, source: Source) -> bool: ...

    def export(self, source: Source, spec: ExportSpec) -> ExportResult: ...

    def reference_runner(self, source: Source, export: ExportResult) -> Runtime: ...
