"""The ONNX target: the converted .onnx file is the artefact; onnxruntime runs it."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import onnx

from bridge.runtimes import Runtime, get_runtime
from bridge.targets.base import TargetResult, onnx_output


class OnnxTarget:
    name = "onnx"
    artefact = False  # writes something besides the validated .onnx
    runtimes = ("onnxruntime",)
    default_runtimes = ("onnxruntime",)
    options = ()

    def place(self, output: Path, artefact_dir: Path | None, options: Mapping[str, Any]) -> tuple[Path, dict[str, Path]]:
        return onnx_output(output), {}

    def export(self, model: onnx.ModelProto, staging: Path) -> TargetResult | None:
        return None  # the validated ONNX model itself is written by convert

    def commit(self, staged: Path, destination: Path) -> Path:
        return destination

    def runtime(self, name: str, model: Any, workdir: Path) -> Runtime:
        return get_runtime(name, model)
