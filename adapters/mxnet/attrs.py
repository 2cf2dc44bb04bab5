"""Typed views of MXNet's string-encoded operator attributes.

Every MXNet generation stores operator parameters as strings in the symbol JSON: tuples as
``'(1,2,0.5)'`` or ``'[1, 2]'``, booleans as ``'True'``/``'1'``, floats as decimal strings and
optional values as ``'None'``. This module turns those strings into Python/numpy values exactly the
way MXNet's dmlc parameter parser reads them (floats are float32 of the decimal string).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import numpy as np

from bridge.errors import ExportError

_TRUE = {"true", "1"}
_FALSE = {"false", "0"}


def _fail(node: str, key: str, text: str, what: str) -> ExportError:
    return ExportError(f"node '{node}': attribute {key}='{text}' is not {what}")


def parse_bool(text: str, *, node: str = "?", key: str = "?") -> bool:
    t = text.strip().lower()
    if t in _TRUE:
        return True
    if t in _FALSE:
        return False
    raise _fail(node, key, text, "a boolean")


def parse_float32(text: str, *, node: str = "?", key: str = "?") -> np.float32:
    """float32 of the decimal string (MXNet reads float params with strtof-like parsing)."""
    try:
        return np.float32(text.strip())
    except ValueError:
        raise _fail(node, key, text, "a number") from None


def parse_int(text: str, *, node: str = "?", key: str = "?") -> int:
    t = text.strip()
    try:
        return int(t)
    except ValueError:
        # MXNet writes some ints as '2L' (python 2 era) or '2.0'
        try:
            f = float(t.rstrip("Ll"))
        except ValueError:
            raise _fail(node, key, text, "an integer") from None
        if f != int(f):
            raise _fail(node, key, text, "an integer") from None
        return int(f)


def split_tuple(text: str) -> list[str]:
    """'(1, 2)' / '[1,2]' / '(2,)' / '2' / '()' -> list of element strings ('None' kept as text)."""
    t = text.strip()
    if t[:1] in "([" and t[-1:] in ")]":
        t = t[1:-1]
    return [p.strip() for p in re.split(r",", t) if p.strip()]


def parse_int_tuple(text: str, *, node: str = "?", key: str = "?") -> tuple[int, ...]:
    return tuple(parse_int(p, node=node, key=key) for p in split_tuple(text))


def parse_float_tuple(text: str, *, node: str = "?", key: str = "?") -> tuple[np.float32, ...]:
    return tuple(parse_float32(p, node=node, key=key) for p in split_tuple(text))


def is_none(text: str | None) -> bool:
    return text is None or text.strip() in ("None", "")


class Attrs:
    """Typed accessors over one node's attribute dict (all values are strings), in bridge's one family of
    attribute readers (as ``bridge.rewriting.attrs`` for ONNX nodes): ``optional_<type>(key, default)``
    gives the default when the attribute is absent or ``'None'``; ``required_<type>(key)`` raises an
    ExportError naming the node."""

    def __init__(self, node: str, values: Mapping[str, str]) -> None:
        self.node = node
        self.values = dict(values)

    def __contains__(self, key: str) -> bool:
        return key in self.values and not is_none(self.values[key])

    def optional_str(self, key: str, default: str | None = None) -> str | None:
        v = self.values.get(key)
        return default if is_none(v) else v

    def optional_bool(self, key: str, default: bool) -> bool:
        v = self.values.get(key)
        return default if is_none(v) else parse_bool(v or "", node=self.node, key=key)

    def optional_int(self, key: str, default: int | None) -> int | None:
        v = self.values.get(key)
        return default if is_none(v) else parse_int(v or "", node=self.node, key=key)

    def optional_float(self, key: str, default: float | None) -> np.float32 | None:
        v = self.values.get(key)
        if is_none(v):
            return None if default is None else np.float32(default)
        return parse_float32(v or "", node=self.node, key=key)

    def optional_ints(self, key: str, default: tuple[int, ...] = ()) -> tuple[int, ...]:
        v = self.values.get(key)
        return default if is_none(v) else parse_int_tuple(v or "", node=self.node, key=key)

    def optional_floats(self, key: str, default: tuple[float, ...] = ()) -> tuple[np.float32, ...]:
        v = self.values.get(key)
        if is_none(v):
            return tuple(np.float32(x) for x in default)
        return parse_float_tuple(v or "", node=self.node, key=key)

    def required_int(self, key: str) -> int:
        v = self.optional_int(key, None)
        if v is None:
            raise ExportError(f"node '{self.node}': required attribute '{key}' is missing")
        return v
