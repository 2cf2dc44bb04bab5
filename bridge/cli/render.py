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
        verdict = "PASS" if comp.passed else "FAIL"
        if getattr(comp, "vacuous", False):
            verdict += " [yellow](vacuous: " + escape("; ".join(comp.vacuous_reasons)) + ")[/yellow]"
        table = Table(title=f"{escape(comp.candidate)} vs {escape(comp.reference)}: {verdict}", title_justify="left")
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


def print_node_types(nodes: list[Any]) -> None:
    """``inspect --nodes``: one row per node with its inferred input/output types; rows where inference
    loses a dim or the rank although every input was known are marked (the first one is where
    dynamic-axis and "Expected shape" problems begin)."""
    table = Table("#", "node", "op", "inputs", "outputs", "inference", title="inferred types and shapes",
                  title_justify="left")
    for n in nodes:
        ins = ", ".join(f"{i.name}: {i.describe()}" for i in n.inputs)
        outs = ", ".join(f"{o.name}: {o.describe()}" for o in n.outputs)
        table.add_row(str(n.index), escape(n.name), escape(n.op), escape(ins), escape(outs),
                      f"[red]{escape(n.loses)}[/red]" if n.loses else "")
    out.print(table)
    lost = [n for n in nodes if n.loses]
    if lost:
        out.print(f"[yellow]inference first loses a dim at node '{escape(lost[0].name)}' ({escape(lost[0].op)})[/yellow]"
                  f" ({len(lost)} node(s) in all)")
    else:
        out.print("inference keeps every dim of every node whose inputs are known")
