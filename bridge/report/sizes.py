"""The input sizes a validation ran at, as one line for every report format and the CLI."""

from __future__ import annotations

from typing import Any


def sizes_text(sizes: list[dict[str, Any]]) -> str:
    """The input shapes of every size validated at: ``data[4, 3, 64, 64] and data[5, 3, 64, 64]`` (a model
    with dynamic axes is checked at two sizes)."""
    return " and ".join(", ".join(f"{k}[{', '.join(str(d) for d in v)}]" for k, v in s.items()) for s in sizes)
