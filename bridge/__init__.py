"""bridge: convert PyTorch / MXNet / TensorFlow / ONNX models to validated ONNX (and on to other runtimes).

``import bridge`` imports no deep-learning framework; the library entry points load lazily.
"""

from __future__ import annotations

from typing import Any

from bridge.version import __version__

_API = ("convert", "inspect", "validate", "graft_nms", "fix_shapes", "make_dynamic", "buckets", "migrate", "debug")


def __getattr__(name: str) -> Any:
    # Lazy so that `import bridge` stays cheap and framework-free; bridge.api pulls onnx/numpy only.
    if name in _API:
        from bridge import api

        return getattr(api, name)
    raise AttributeError(f"module 'bridge' has no attribute {name!r}")


__all__ = ["__version__", "buckets", "convert", "debug", "fix_shapes", "graft_nms", "inspect", "make_dynamic", "migrate", "validate"]
