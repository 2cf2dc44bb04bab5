"""The protocol of a reduced-precision variant builder (one per target), and what a build reports.

A builder makes the variant of its target's artefact from the validated fp32 ONNX file: ``precisions`` it
can build (with the reason for those it cannot in ``refused``), the ``runtime`` that runs the variant,
where it goes (``destination``: beside the target's fp32 artefact, named ``<stem>.<precision><suffix>``),
``build`` (staged in a folder beside the destination, with the calibration and the nodes to keep float
besides the float region of ``bridge.precision.regions``; ``workdir`` is shared by every round, so what a
round computed - the pre-processed model, the calibration ranges - is reused),
and ``commit`` (moved into place once the variant passed). ``keeps_layers_float`` says whether it can keep
chosen layers float, i.e. whether the accuracy-aware fallback can work on it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from bridge.precision.calibration import Calibration


def file_size(path: Path) -> int:
    """Bytes on disk of an artefact: a file, an IR's .xml + .bin, or a folder's files."""
    path = Path(path)
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    size = path.stat().st_size if path.exists() else 0
    if path.suffix == ".xml" and path.with_suffix(".bin").exists():
        size += path.with_suffix(".bin").stat().st_size
    return size


def variant_path(artefact: Path, precision: str) -> Path:
    """``X.onnx`` -> ``X.int8.onnx`` (an IR ``X.xml`` -> ``X.int8.xml``, ``X.tflite`` -> ``X.int8.tflite``)."""
    return artefact.with_name(f"{artefact.stem}.{precision}{artefact.suffix}")


@dataclass
class VariantBuild:
    """A built variant: its file, how it was made, which nodes run in reduced precision and which stay float."""

    path: Path
    precision: str
    method: str  # e.g. "onnxruntime static QDQ, per-channel int8 weights, uint8 activations, MinMax"
    quantized: list[str] = field(default_factory=list)  # nodes (ONNX names) computing in reduced precision
    kept_float: list[str] = field(default_factory=list)  # nodes the fallback / --keep-float kept float
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"path": str(self.path), "precision": self.precision, "method": self.method,
                "quantized_nodes": len(self.quantized), "kept_float": self.kept_float, "notes": self.notes,
                "seconds": round(self.seconds, 3), "size_bytes": file_size(self.path)}


class VariantBuilder(Protocol):
    target: str  # the target (bridge.targets) whose artefact this builder varies
    runtime: str  # the runtime that runs the variant
    precisions: tuple[str, ...]  # the reduced precisions it builds
    refused: Mapping[str, str]  # precision -> why this target has no such variant
    keeps_layers_float: bool  # the fallback can keep chosen layers float

    def destination(self, output: Path, artefacts: Mapping[str, Path], precision: str) -> Path: ...

    def build(self, fp32: Path, precision: str, staging: Path, *, calibration: Calibration | None,
              keep_float: Sequence[str], workdir: Path) -> VariantBuild: ...

    def commit(self, staged: Path, destination: Path) -> Path: ...


__all__ = ["VariantBuild", "VariantBuilder", "file_size", "variant_path"]
