"""The CLI's rich consoles, with every string shown as text: terminal control characters in it are
escaped, never obeyed; and whole lines when the output is piped or logged.

Model, node, tensor and producer names come from the model file; a name holding ``ESC [ 2 J`` would
clear the user's terminal, ``ESC ] 0 ;`` retitle it, bidi overrides reorder what is shown. Rich turns
every string it prints (``print`` arguments, table cells, titles) into text through
``Console.render_str``; ``SafeConsole`` passes it through ``bridge.chatter.printable`` first, so no
call site has to remember to (rich's own styling is added after, and still works).

Piped or logged (not a terminal, no ``COLUMNS`` given), rich would assume 80 columns: it folds a long
line inside a word (``FoldConstantsP`` / ``ass``) and squeezes tables until every cell is cut. There
the console is ``PIPED_WIDTH`` wide and soft-wraps: a line is written whole and a table takes the width
its cells need, so a log or ``grep`` sees every name in full.
"""

from __future__ import annotations

import os
from typing import Any

from rich.console import Console, ConsoleDimensions
from rich.text import Text

from bridge.chatter import printable

PIPED_WIDTH = 1000  # a table wider than this still wraps (but no real table of bridge's comes close)


class SafeConsole(Console):
    """A rich Console whose strings are made printable before markup is parsed, and whose lines are
    not folded when it writes to a pipe or a file."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._fixed_width = "width" in kwargs
        super().__init__(*args, **kwargs)

    def render_str(self, text: str, **kwargs: Any) -> Text:
        return super().render_str(printable(text), **kwargs)

    @property
    def piped(self) -> bool:
        """Writing to something that is not a terminal, with no width asked for (``width=``, ``COLUMNS``)."""
        return not self._fixed_width and not os.environ.get("COLUMNS") and not self.is_terminal

    @property
    def size(self) -> ConsoleDimensions:
        size = super().size
        return ConsoleDimensions(PIPED_WIDTH, size.height) if self.piped else size

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        Console.size.fset(self, new_size)  # type: ignore[attr-defined]

    @property
    def soft_wrap(self) -> bool:
        return self._soft_wrap or self.piped

    @soft_wrap.setter
    def soft_wrap(self, value: bool) -> None:
        self._soft_wrap = value
