"""bridge: convert PyTorch / MXNet / TensorFlow / ONNX models to validated ONNX (and on to other runtimes).

``import bridge`` imports no deep-learning framework; the library entry points load lazily.
"""

from __future__ import annotations

import sys
import types
from typing import Any

from bridge import lazy_imports
from bridge.version import __version__

lazy_imports.install()  # before anything imports onnx_ir (and with it sympy)

_API = ("convert", "inspect", "validate", "graft_nms", "fix_shapes", "make_dynamic", "buckets", "migrate", "debug",
        "bench")
# API functions named like a subpackage (bridge/bench/): importing the subpackage must not rebind the name
_SHADOWED = ("bench",)


class _Package(types.ModuleType):
    def __setattr__(self, name: str, value: Any) -> None:
        if name in _SHADOWED and isinstance(value, types.ModuleType):
            return  # the subpackage stays reachable through sys.modules and ``from bridge.bench import ...``
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __getattr__(name: str) -> Any:
    # Lazy so that `import bridge` stays cheap and framework-free; bridge.api pulls onnx/numpy only.
    if name in _API:
        from bridge import api

        return getattr(api, name)
    raise AttributeError(f"module 'bridge' has no attribute {name!r}")


__all__ = ["__version__", "bench", "buckets", "convert", "debug", "fix_shapes", "graft_nms", "inspect", "make_dynamic", "migrate", "validate"]
