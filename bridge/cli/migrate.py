"""`bridge migrate MANIFEST`: convert and validate a whole model zoo, one isolated worker per model.

Parses the arguments and calls ``bridge.api.migrate``; progress goes to stderr (live on a terminal,
one line per model otherwise), the summary table to stdout. Exit code 0 only when every enabled
model passed, 1 when any failed, 2 for a bad manifest or arguments.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table

from bridge.cli.helptext import examples
from bridge.cli.safe_console import SafeConsole
from bridge.errors import EXIT_MISMATCH, BridgeError, UsageError

if TYPE_CHECKING:
    from bridge.migrate.results import ModelResult

out = SafeConsole()
err = SafeConsole(stderr=True)


class MigrationFailed(BridgeError):
    """Some enabled models failed (each one's reason is in the table and the reports): exit code 1."""

    exit_code = EXIT_MISMATCH


def _only(names: list[str]) -> list[str]:
    return [n.strip() for item in names for n in item.split(",") if n.strip()]


def result_cell(m: ModelResult) -> str:
    """The table's result column: a failure's whole reason on one line (an unsupported-op error names the
    ops after its first line), else each runtime's verdict."""
    from bridge.migrate.report import reason_line

    if m.status == "failed":
        return f"{m.kind}: {reason_line(m.reason)}"
    return "; ".join(f"{p.runtime} {'ok' if p.passed else 'FAIL'} max abs {p.max_abs or 0:.2g}"
                     for p in m.parity) or m.validation_skipped or reason_line(m.reason)


def migrate_command(
    manifest: Annotated[Path, typer.Argument(help="the migration manifest (YAML)")],
    jobs: Annotated[int, typer.Option("--jobs", "-j", metavar="N", help="models converted at once (local executor)")] = 1,
    out_dir: Annotated[Path | None, typer.Option("--out", "-o", metavar="DIR", help="output folder (default: <manifest stem>-out "
                                                                     "beside the manifest)")] = None,
    resume: Annotated[bool, typer.Option(help="reuse outcomes recorded in --out; redo unfinished or changed models")] = False,
    only: Annotated[list[str], typer.Option(metavar="NAMES", help="run only these models (repeatable or comma-separated)")] = [],  # noqa: B006
    executor: Annotated[str, typer.Option(metavar="local|dask://HOST:PORT", help="local, or dask://HOST:PORT for a Dask distributed scheduler")] = "local",
) -> None:
    """Convert and validate every model of MANIFEST, each in its own process; write report.json/.md/.html."""
    from bridge import api
    from bridge.migrate.progress import console_monitor

    if jobs < 1:
        raise UsageError(f"-j {jobs}: need at least one worker")
    target = out_dir or manifest.resolve().parent / f"{manifest.stem}-out"
    batch = api.migrate(manifest, out=target, jobs=jobs, resume=resume, only=_only(only), executor=executor,
                        monitor=console_monitor(err))
    table = Table("model", "status", "s", "result", title_justify="left",
                  title=f"{len(batch.models)} models: " + ", ".join(f"{n} {s}" for s, n in batch.counts.items() if n))
    for m in batch.models:
        style = {"passed": "green", "failed": "red"}.get(m.status, "dim")
        table.add_row(escape(m.name), f"[{style}]{m.status}[/{style}]",
                      f"{m.elapsed_s:.1f}" if m.elapsed_s is not None else "-", escape(result_cell(m)))
    out.print(table)
    for m in batch.models:
        if m.kept:
            out.print(f"[yellow]note:[/yellow] {escape(m.name)}: left in place, not written by bridge: "
                      + escape(", ".join(m.kept)), highlight=False)
    out.print(f"reports: {target / 'report.html'} (+ report.json, report.md)", highlight=False)
    if batch.failed:
        raise MigrationFailed(f"{len(batch.failed)} of {len(batch.models)} models failed: "
                              + ", ".join(m.name for m in batch.failed))


def register(app: typer.Typer) -> None:
    app.command("migrate", epilog=examples(
        "bridge migrate examples/migration/manifest.yaml -j 2 --out out/migration",
        "bridge migrate examples/migration/manifest.yaml -j 2 --out out/migration --resume",
        "bridge migrate zoo.yaml --only ssd,resnet --executor dask://scheduler:8786 --out /shared/out/zoo"))(migrate_command)
