"""``LazyRegistry``: name -> ``"module:attribute"``, imported only when a name is asked for.

Frameworks (``adapters``), runtimes (``bridge.runtimes``) and targets (``bridge.targets``) are each one
such registry, the only list of what exists; importing the registry imports no framework. A leaf.
"""

from __future__ import annotations

import importlib
from typing import Any

from bridge.errors import UsageError


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
            raise UsageError(self.unknown.format(name=name, known=", ".join(self.entries))) from None
        return getattr(importlib.import_module(module_name), attribute)
