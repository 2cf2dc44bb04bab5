"""Defer modules that are slow to import and rarely used until code first touches them.

onnx_ir imports sympy (1.2-1.7 s, most of ``import bridge.api``) for symbolic dimension arithmetic
that bridge almost never asks for. ``install`` puts a finder first on ``sys.meta_path`` that gives
the modules in ``DEFERRED`` an ``importlib.util.LazyLoader``: ``import sympy`` binds a module
object at once, and the real import runs on its first attribute access (``sympy.Max``,
``SymbolicDim("N") + 1``, or torch's own ``from sympy import ...``), so behaviour is unchanged and
only unused work is skipped. ``onnx_ir._symbolic_shapes`` is deferred too because it reads sympy
attributes at import. A module already imported when ``install`` runs stays as it is.

A leaf: imports only the standard library. ``bridge/__init__.py`` calls ``install`` first.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Sequence
from types import ModuleType

DEFERRED = frozenset({"sympy", "onnx_ir._symbolic_shapes"})


class _DeferringFinder(importlib.abc.MetaPathFinder):
    """Finds ``DEFERRED`` modules through the other finders and wraps their loader in a LazyLoader."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in DEFERRED:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = importlib.util.LazyLoader(spec.loader)
                return spec
        return None


def install() -> None:
    """Put the deferring finder first on ``sys.meta_path`` (once)."""
    if not any(isinstance(f, _DeferringFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _DeferringFinder())
