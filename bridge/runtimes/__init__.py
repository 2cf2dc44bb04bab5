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


def get_runtime(name: str, model: Any, **options: Any) -> Runtime:
    """Instantiate runtime ``name`` for ``model`` (an ONNX path, bytes, ModelProto, or what the runtime takes)."""
    runtime: Runtime = _REGISTRY.load(name)(model, **options)
    return runtime


__all__ = ["Runtime", "TensorMeta", "activated", "available_runtimes", "get_runtime"]
