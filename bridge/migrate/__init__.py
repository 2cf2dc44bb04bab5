"""Batch migrations: a manifest of models -> each converted and validated in its own worker process -> reports.

``manifest`` (YAML + JSON Schema), ``worker`` (the per-model child process), ``executors`` (local
threads or Dask distributed), ``state`` (resume), ``results`` / ``report`` (batch reports),
``progress`` (live display or log lines), ``batch.run`` (the loop). ``bridge.api.migrate`` is the
public entry point; it passes ``bridge.api.convert`` in, since this package sits below the API.

``bridge.migrate`` names both this package and the API function: once the package is imported it is
the attribute ``bridge.migrate``, so the package itself is callable: ``bridge.migrate(...)`` is
``batch.run`` with ``bridge.convert`` named by reference for the workers (nothing here imports
``bridge.api``, which sits above this package in the import order).
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

# Loaded on first use, so the worker child (which imports bridge.migrate.worker) does not pay for
# pydantic, YAML and rich before it starts converting.
_EXPORTS = {"run": "batch", "ManifestError": "manifest", "ResolvedEntry": "manifest", "load_manifest": "manifest",
            "manifest_schema": "manifest", "BatchResult": "results", "ModelResult": "results", "Parity": "results",
            "comparable": "results"}


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"bridge.migrate.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'bridge.migrate' has no attribute {name!r}")


__all__ = ["BatchResult", "ManifestError", "ModelResult", "Parity", "ResolvedEntry", "comparable",
           "load_manifest", "manifest_schema", "run"]


class _CallablePackage(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from bridge.migrate.batch import run

        return run(*args, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage
