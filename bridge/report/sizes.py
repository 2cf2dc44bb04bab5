"""The input sizes a validation ran at, and why a model with dynamic axes was checked at one size only, as one
line each for every report format and the CLI."""

from __future__ import annotations

from typing import Any


def sizes_text(sizes: list[dict[str, Any]]) -> str:
    """The input shapes of every size validated at: ``data[4, 3, 64, 64] and data[5, 3, 64, 64]`` (a model
    with dynamic axes is checked at two sizes)."""
    return " and ".join(", ".join(f"{k}[{', '.join(str(d) for d in v)}]" for k, v in s.items()) for s in sizes)


def one_size_text(reason: str) -> str:
    """The line saying a model with dynamic axes was checked at one size only (``second_size_skipped``): the
    verdict stands, but proves nothing about those axes."""
    return f"dynamic axes not proved: {reason}; the verdict covers one size only (--strict makes this a failure)"
