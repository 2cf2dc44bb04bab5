"""``LazyRegistry``: name -> ``"module:attribute"``, imported only when a name is asked for.

Frameworks (``adapters``), runtimes (``bridge.runtimes``) and targets (``bridge.targets``) are each one
such registry, the only list of what exists; importing the registry imports no framework. A leaf.

``load`` is the one door through which a framework gets imported, so it first calls
``quiet_framework_logs``: the frameworks' C++ log-level variables, read once at their import, are set
so that MXNet's "Subgraph backend MKLDNN is activated", TensorFlow's oneDNN / CPU-feature banners and
absl's INFO lines appear only with ``-v`` (log level INFO or lower); a value the user exported is kept.
"""

from __future__ import annotations

import importlib
import logging
import os
from typing import Any

from bridge.errors import UsageError, did_you_mean

# C++ log levels of the frameworks: warnings and errors still print, INFO banners do not
QUIET_LOG_ENV: dict[str, str] = {
    "TF_CPP_MIN_LOG_LEVEL": "2",        # TensorFlow (oneDNN, cpu_feature_guard, XLA banners)
    "MXNET_SUBGRAPH_VERBOSE": "0",      # MXNet "Subgraph backend MKLDNN is activated"
    "GLOG_minloglevel": "2",            # glog / absl-compatible C++ logging (MXNet's dmlc, XLA)
    "ABSL_MIN_LOG_LEVEL": "2",          # absl C++ logging in newer TensorFlow builds
    "GRPC_VERBOSITY": "ERROR",          # gRPC core pulled in by TensorFlow
}


def quiet_framework_logs() -> None:
    """Set ``QUIET_LOG_ENV`` (unless exported) while the log level is above INFO (no ``-v``)."""
    if logging.getLogger().getEffectiveLevel() <= logging.INFO:
        return
    for key, value in QUIET_LOG_ENV.items():
        os.environ.setdefault(key, value)


class LazyRegistry:
    """``unknown`` formats the usage error for a missing name: ``{name}`` and ``{known}`` are filled in."""

    def __init__(self, entries: dict[str, str], unknown: str) -> None:
        self.entries = entries  # insertion order matters to users of names() (e.g. source detection)
        self.unknown = unknown

    def names(self) -> list[str]:
        return list(self.entries)

    def register(self, name: str, target: str) -> None:
        """Register ``module:attribute`` under ``name`` (replacing an earlier one)."""
        self.entries[name] = target

    def load(self, name: str) -> Any:
        """The registered attribute (imported now), or UsageError naming the known names."""
        try:
            module_name, attribute = self.entries[name].split(":")
        except KeyError:
            message = self.unknown.format(name=name, known=", ".join(self.entries))
            raise UsageError(message.replace(f"'{name}'", f"'{name}'{did_you_mean(name, self.entries)}", 1)) from None
        quiet_framework_logs()  # before the module (and the framework it wraps) is imported
        return getattr(importlib.import_module(module_name), attribute)
