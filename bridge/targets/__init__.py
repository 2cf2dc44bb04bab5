"""Targets: the formats a converted model is delivered in, behind one ``Target`` protocol, and their registry.

The registry is the only list of targets. Each target says which runtimes run what it writes
(``runtimes``), which of them validate it by default (``default_runtimes``), exports a staged artefact
(``export``) and moves it into place once validation passed (``commit``). ``candidate_runtime`` gives
validation a runtime for any registered runtime name from the converted ONNX model: directly when the
runtime runs ONNX, else through the target whose artefact it runs (e.g. TensorFlow runs the TF
target's SavedModel, converted into a work folder). Target modules import their framework lazily.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

from bridge.registry import LazyRegistry
from bridge.runtimes import Runtime, get_runtime
from bridge.targets.base import Target, TargetResult

# name -> "module:Class"; imported only when asked for, so `import bridge.targets` stays framework-free
_REGISTRY = LazyRegistry({
    "onnx": "bridge.targets.onnx:OnnxTarget",
    "tensorflow": "bridge.targets.tensorflow:TensorFlowTarget",
    "openvino": "bridge.targets.openvino:OpenVinoTarget",
    "tflite": "bridge.targets.tflite:TfliteTarget",
}, "--to '{name}': choose one of {known}")


def registered_targets() -> list[str]:
    return _REGISTRY.names()


def get_target(name: str, **options: Any) -> Target:
    """Target ``name``, given the values of its declared options (e.g. ``compress="fp16"`` for openvino) that
    its constructor takes; a target that reads its options only in ``place`` takes none. Options of other
    targets never get here (``bridge.conversion.options`` refuses them, naming their target)."""
    cls = _REGISTRY.load(name)
    params = inspect.signature(cls).parameters
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        options = {k: v for k, v in options.items() if k in params}
    target: Target = cls(**options)
    return target


def candidate_runtime(name: str, model: Any, workdir: Path, artefacts: dict[str, Any] | None = None) -> Runtime:
    """Runtime ``name`` for the converted ``model`` (ONNX): given the artefact a target already wrote for it
    (``artefacts``: runtime name -> artefact), or the one a target makes in ``workdir`` on activation."""
    if artefacts and name in artefacts:
        return get_runtime(name, artefacts[name])
    for target_name in _REGISTRY.names():
        target = get_target(target_name)
        if name in target.runtimes:
            return target.runtime(name, model, workdir / target_name)
    return get_runtime(name, model)  # unknown names: the runtime registry says which exist


__all__ = ["Target", "TargetResult", "candidate_runtime", "get_target", "registered_targets"]
