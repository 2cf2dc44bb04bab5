"""Target runtimes behind one protocol, looked up by name and imported lazily."""

from __future__ import annotations

import importlib
from typing import Any

from bridge.errors import UsageError
from bridge.runtimes.base import Runtime, TensorMeta, activated

# name -> "module:Class"; imported only when asked for, so `import bridge` stays framework-free.
_RUNTIMES = {
    "onnxruntime": "bridge.runtimes.onnxruntime:OnnxRuntime",
    "tensorflow": "bridge.runtimes.tensorflow:TensorFlowRuntime",
}


def available_runtimes() -> list[str]:
    return sorted(_RUNTIMES)


def get_runtime(name: str, model: Any, **options: Any) -> Runtime:
    """Instantiate runtime ``name`` for ``model`` (an ONNX path, bytes or ModelProto)."""
    try:
        module_name, cls_name = _RUNTIMES[name].split(":")
    except KeyError:
        raise UsageError(f"unknown runtime '{name}'; available: {', '.join(available_runtimes())}") from None
    cls = getattr(importlib.import_module(module_name), cls_name)
    runtime: Runtime = cls(model, **options)
    return runtime


__all__ = ["Runtime", "TensorMeta", "activated", "available_runtimes", "get_runtime"]
