"""A toy runtime and a toy target, added through their registries only (see test_registries_only.py)."""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import onnx

from bridge.config import Option
from bridge.runtimes.base import Runtime
from bridge.runtimes.onnxruntime import OnnxRuntime
from bridge.targets.base import TargetResult, onnx_output


class ToyRuntime(OnnxRuntime):
    """Runs what the toy target writes (an ONNX file under another name) through onnxruntime."""

    name = "toy"


class ToyTarget:
    name = "toy"
    artefact = True
    runtimes = ("toy",)
    default_runtimes = ("toy",)
    options = (Option("toy_file", Path | None, None, "where the toy artefact goes"),)

    def place(self, output: Path, artefact_dir: Path | None, options: Mapping[str, Any]) -> tuple[Path, dict[str, Path]]:
        folder = artefact_dir if artefact_dir is not None else output.parent
        given = options.get("toy_file")
        return onnx_output(output), {"toy_model": Path(given) if given else folder / f"{output.stem}.toy"}

    def export(self, model: onnx.ModelProto, staging: Path) -> TargetResult:
        path = staging / "model.toy"
        onnx.save(model, path)
        return TargetResult(target="toy", path=path, converter="toy 0", opset_in=17, opset_out=17)

    def commit(self, staged: Path, destination: Path) -> Path:
        shutil.move(staged, destination)
        return destination

    def runtime(self, name: str, model: Any, workdir: Path) -> Runtime:
        return ToyRuntime(model)


class WrongAfterTheCutTarget(ToyTarget):
    """A toy target whose converter also shifts one kept box (``pinning_models.break_a_box`` on ``det_boxes``):
    in the artefact it writes and in any artefact it makes for validation - an artefact wrong after the cut."""

    def export(self, model: onnx.ModelProto, staging: Path) -> TargetResult:
        return super().export(_broken(model), staging)

    def runtime(self, name: str, model: Any, workdir: Path) -> Runtime:
        return ToyRuntime(_broken(model))


def _broken(model: Any) -> onnx.ModelProto:
    from pinning_models import break_a_box

    proto = onnx.load(str(model)) if isinstance(model, (str, Path)) else onnx.ModelProto.FromString(
        model.SerializeToString())
    break_a_box(proto, "det_boxes")
    return proto
