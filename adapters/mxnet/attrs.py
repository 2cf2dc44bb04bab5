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


_Str = str
_Int = int
_Float = float
_Bool = bool


class Attrs:
    """Typed, default-aware accessors over one node's attribute dict (all values are strings)."""

    def __init__(self, node: _Str, values: Mapping[_Str, str]) -> None:
        self.node = node
        self.values = dict(values)

    def __contains__(self, key: _Str) -> _Bool:
        return key in self.values and not is_none(self.values[key])

    def str(self, key: _Str, default: _Str | None = None) -> _Str | None:
        v = self.values.get(key)
        return default if is_none(v) else v

    def bool(self, key: _Str, default: _Bool) -> _Bool:
        v = self.values.get(key)
        return default if is_none(v) else parse_bool(v or "", node=self.node, key=key)

    def int(self, key: _Str, default: _Int | None) -> _Int | None:
        v = self.values.get(key)
        return default if is_none(v) else parse_int(v or "", node=self.node, key=key)

    def float(self, key: _Str, default: _Float | None) -> np.float32 | None:
        v = self.values.get(key)
        if is_none(v):
            return None if default is None else np.float32(default)
        return parse_float32(v or "", node=self.node, key=key)

    def ints(self, key: _Str, default: tuple[_Int, ...] = ()) -> tuple[_Int, ...]:
        v = self.values.get(key)
        return default if is_none(v) else parse_int_tuple(v or "", node=self.node, key=key)

    def floats(self, key: _Str, default: tuple[_Float, ...] = ()) -> tuple[np.float32, ...]:
        v = self.values.get(key)
        if is_none(v):
            return tuple(np.float32(x) for x in default)
        return parse_float_tuple(v or "", node=self.node, key=key)

    def require_int(self, key: _Str) -> _Int:
        v = self.int(key, None)
        if v is None:
            raise ExportError(f"node '{self.node}': required attribute '{key}' is missing")
        return v
