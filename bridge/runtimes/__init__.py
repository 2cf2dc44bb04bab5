"""Target runtimes behind one protocol, looked up by name and imported lazily."""

from __future__ import annotations

from typing import Any

from bridge.registry import LazyRegistry
from bridge.runtimes.base import Runtime, TensorMeta, activated

# name -> "module:Class"; imported only when asked for, so `import bridge` stays framework-free.
_REGISTRY = LazyRegistry({
    "onnxruntime": "bridge.runtimes.onnxruntime:OnnxRuntime",
    "tensorflow": "bridge.runtimes.tensorflow:TensorFlowRuntime",
    "openvino": "bridge.runtimes.openvino:OpenVinoRuntime",
    "litert": "bridge.runtimes.litert:LiteRtRuntime",
}, "unknown runtime '{name}'; available: {known}")
_RUNTIMES = _REGISTRY.entries


def available_runtimes() -> list[str]:
    return sorted(_REGISTRY.names())


def declared_input_metadata(name: str, model: Any) -> list[TensorMeta] | None:
    """What runtime ``name`` would give as ``input_metadata()`` for ONNX ``model``, known without loading it
    (the runtime class's ``declared_input_metadata``), or None when only loading it tells."""
    declared = getattr(_REGISTRY.load(name), "declared_input_metadata", None)
    result: list[TensorMeta] | None = declared(model) if declared is not None else None
    return result


def get_runtime(name: str, model: Any, **options: Any) -> Runtime:
    """Instantiate runtime ``name`` for ``model`` (an ONNX path, bytes, ModelProto, or what the runtime takes)."""
    runtime: Runtime = _REGISTRY.load(name)(model, **options)
    return runtime


__all__ = ["Runtime", "TensorMeta", "activated", "available_runtimes", "declared_input_metadata", "get_runtime"]
