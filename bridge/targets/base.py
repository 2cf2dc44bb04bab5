"""The Target protocol, and what every target (ONNX -> another format) reports back: where it wrote, how,
and what to know."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import onnx

from bridge.config import Option
from bridge.errors import UsageError
from bridge.runtimes.base import Runtime


def onnx_output(output: Path) -> Path:
    """``-o`` as the .onnx path every target writes (UsageError for another suffix)."""
    if output.suffix.lower() != ".onnx":
        raise UsageError(f"-o '{output}': the output of convert is an .onnx file")
    return output


@dataclass
class TargetResult:
    """A converted artefact and the facts a report needs about how it was produced.

    ``input_names`` / ``output_names`` map each ONNX tensor name to the name it has in the target
    format (the TF target turns e.g. ``input.1`` or ``x:0`` into signature keys ``input_1``, ``x_0``).
    """

    target: str  # e.g. "tensorflow (SavedModel)"
    path: Path
    converter: str  # e.g. "onnx-tf 1.10.0"
    opset_in: int
    opset_out: int
    input_names: dict[str, str] = field(default_factory=dict)
    output_names: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["path"] = str(self.path)
        return d


class Target(Protocol):
    """One delivery format. ``place`` names the files it delivers: the .onnx path and its own artefacts
    (name -> path), from ``-o``, ``--artefact-dir`` and its own ``options`` (declared ``Option``s, its
    option group); ``export`` stages the artefact in ``staging`` (None: the .onnx itself is the artefact),
    ``commit`` moves a validated artefact to ``destination``, ``runtime`` runs the model in this format
    for validation (building the artefact in ``workdir`` when activated).

    Two optional methods: ``configure(values) -> dict`` returns conversion option values the target's own
    options imply (or raises ``UsageError`` for a combination it cannot build), applied in
    ``bridge.conversion.options.build_config``; ``onnx_stage_steps() -> tuple[Step, ...]`` adds the target's
    rewrites to the ONNX stage right after the lowerings (``bridge.passes.pipeline.conversion_pipeline``),
    so the .onnx and the artefact are validated with the same outputs."""

    name: str
    artefact: bool  # True: writes an artefact of its own (e.g. a SavedModel folder) besides the .onnx
    runtimes: tuple[str, ...]  # runtimes that run this target's artefact
    default_runtimes: tuple[str, ...]  # what `bridge convert --to NAME` validates in by default
    options: tuple[Option, ...]  # this target's own convert options

    def place(self, output: Path, artefact_dir: Path | None, options: Mapping[str, Any]
              ) -> tuple[Path, dict[str, Path]]: ...

    def export(self, model: onnx.ModelProto, staging: Path) -> TargetResult | None: ...

    def commit(self, staged: Path, destination: Path) -> Path: ...

    def runtime(self, name: str, model: Any, workdir: Path) -> Runtime: ...
