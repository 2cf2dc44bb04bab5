"""How every ``bridge`` command shows progress and results: one console pair, one progress display,
one comparison table, one JSON printer.

Progress is a spinner naming the current stage on a terminal and plain log lines (at ``-v``) when
piped. Tables keep their columns readable when piped (no wrapping of names into slivers).
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable, Iterator
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

out = Console()
err = Console(stderr=True)


@contextlib.contextmanager
def progress(what: str, logger: str = "bridge.cli") -> Iterator[Callable[[str], None]]:
    """A spinner with the current stage on a terminal; stage lines on stderr at -v otherwise."""
    log = logging.getLogger(logger)
    if err.is_terminal:
        with err.status(what) as status:
            yield lambda msg: status.update(f"{what}: {msg}")
    else:
        yield lambda msg: log.info("%s: %s", what, msg)


def print_json(result: Any) -> None:
    """A result object (anything with ``to_dict()``) as JSON on stdout."""
    out.print_json(json.dumps(result.to_dict(), default=str))


def print_comparisons(comparisons: list[Any]) -> None:
    """One table per candidate runtime: every output's verdict and error figures."""
    for comp in comparisons:
        table = Table(title=f"{comp.candidate} vs {comp.reference}: {'PASS' if comp.passed else 'FAIL'}",
                      title_justify="left")
        for col in ("output", "ok", "shape", "max abs", "max rel", "mismatch", "note"):
            table.add_column(col, overflow="fold", no_wrap=col in ("ok", "max abs", "max rel", "mismatch"))
        for o in comp.outputs:
            table.add_row(escape(o.name), "yes" if o.passed else "[red]NO[/red]", str(o.cand_shape),
                          f"{o.max_abs:.3g}" if o.max_abs is not None else "-",
                          f"{o.max_rel:.3g}" if o.max_rel is not None else "-",
                          f"{o.mismatch_fraction:.3g}" if o.mismatch_fraction is not None else "-", escape(o.note))
        out.print(table)


def print_summaries(comparisons: list[Any]) -> None:
    """One line per candidate runtime (for commands where the table would say too much)."""
    for c in comparisons:
        colour = "green" if c.passed else "red"
        out.print(f"[{colour}]{escape(c.summary())}[/{colour}]")
