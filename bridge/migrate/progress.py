"""Progress of a batch migration for people: a live rich display on a terminal, plain log lines elsewhere.

Both take the same events from ``bridge.migrate.run``: the batch starts, a model finishes, and a
periodic tick with what each worker is running now. The live view shows done / failed / running /
queued, elapsed time, ETA and the current model per worker; the plain form writes one line per
finished model (and nothing on ticks), which is what a CI log or ``nohup`` wants.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from bridge.migrate.results import ModelResult


class Monitor(Protocol):
    def start(self, total: int, reused: int, executor: str) -> None: ...

    def finished(self, result: ModelResult) -> None: ...

    def tick(self, running: dict[str, str], queued: int) -> None: ...

    def stop(self) -> None: ...


class NullMonitor:
    def start(self, total: int, reused: int, executor: str) -> None: ...

    def finished(self, result: ModelResult) -> None: ...

    def tick(self, running: dict[str, str], queued: int) -> None: ...

    def stop(self) -> None: ...


def _line(result: ModelResult) -> str:
    took = f" ({result.elapsed_s:.1f} s)" if result.elapsed_s is not None else ""
    if result.status == "passed":
        return f"passed {result.name}{took}"
    return f"FAILED {result.name}{took}: {result.kind}: {(result.reason or '').splitlines()[0][:200]}"


class LineMonitor:
    """One line per finished model on ``console`` (no colours, no cursor movement)."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.done = self.total = 0
        self.t0 = time.perf_counter()

    def start(self, total: int, reused: int, executor: str) -> None:
        self.total, self.t0 = total, time.perf_counter()
        extra = f", {reused} reused from the last run" if reused else ""
        self.console.print(f"migrating {total} model(s) on {executor}{extra}", markup=False, highlight=False)

    def finished(self, result: ModelResult) -> None:
        self.done += 1
        self.console.print(f"[{self.done}/{self.total}] {_line(result)} "
                           f"[{time.perf_counter() - self.t0:.0f} s elapsed]", markup=False, highlight=False)

    def tick(self, running: dict[str, str], queued: int) -> None: ...

    def stop(self) -> None: ...


class RichMonitor:
    """Live bar with counts, elapsed and ETA, and a table of what each worker converts right now."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.progress = Progress(TextColumn("[bold]migrating"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[counts]}"), TimeElapsedColumn(), TextColumn("ETA"),
                                 TimeRemainingColumn(), console=console)
        self.task = self.progress.add_task("migrate", total=0, counts="")
        self.failed = self.done = 0
        self.running: dict[str, str] = {}
        self.queued = 0
        self.live: Live | None = None

    def _render(self) -> Any:
        self.progress.update(self.task, counts=f"done {self.done}  [red]failed {self.failed}[/red]  "
                                               f"running {len(self.running)}  queued {self.queued}")
        table = Table(show_header=False, box=None, padding=(0, 1))
        for worker, name in self.running.items():
            table.add_row(f"[dim]{escape(worker)}[/dim]", escape(name))
        return Group(self.progress, table)

    def start(self, total: int, reused: int, executor: str) -> None:
        self.progress.update(self.task, total=total)
        self.queued = total
        self.console.print(f"migrating {total} model(s) on {escape(executor)}"
                           + (f", {reused} reused from the last run" if reused else ""))
        self.live = Live(self._render(), console=self.console, refresh_per_second=4, transient=True)
        self.live.start()

    def finished(self, result: ModelResult) -> None:
        self.done += 1
        self.failed += result.status == "failed"
        self.running = {w: n for w, n in self.running.items() if n != result.name}
        self.progress.advance(self.task)
        colour = "green" if result.status == "passed" else "red"
        self.console.print(f"[{colour}]{escape(_line(result))}[/{colour}]")
        if self.live:
            self.live.update(self._render())

    def tick(self, running: dict[str, str], queued: int) -> None:
        self.running, self.queued = running, queued
        if self.live:
            self.live.update(self._render())

    def stop(self) -> None:
        if self.live:
            self.live.stop()
            self.live = None


def console_monitor(console: Console) -> Monitor:
    """The live display on a terminal, plain lines otherwise."""
    return RichMonitor(console) if console.is_terminal else LineMonitor(console)
