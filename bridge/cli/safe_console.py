"""The CLI's rich consoles, with every string shown as text: terminal control characters in it are
escaped, never obeyed.

Model, node, tensor and producer names come from the model file; a name holding ``ESC [ 2 J`` would
clear the user's terminal, ``ESC ] 0 ;`` retitle it, bidi overrides reorder what is shown. Rich turns
every string it prints (``print`` arguments, table cells, titles) into text through
``Console.render_str``; ``SafeConsole`` passes it through ``bridge.chatter.printable`` first, so no
call site has to remember to (rich's own styling is added after, and still works).
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.text import Text

from bridge.chatter import printable


class SafeConsole(Console):
    """A rich Console whose strings are made printable before markup is parsed."""

    def render_str(self, text: str, **kwargs: Any) -> Text:
        return super().render_str(printable(text), **kwargs)
