"""`bridge debug`: convert SOURCE like `bridge convert`, then name the node (and pass) where it goes wrong.

Parses the same options as ``convert`` and calls ``bridge.api.debug``; renders the verdict, the passes
with their before/after comparison and the tensors around the culprit. Exit code 1 (ValidationMismatch) when the converted
model diverges from the source (as ``convert`` would fail), 0 when every compared tensor agrees.
``render_debug`` is also used by ``convert --localize`` / ``validate --localize``.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from bridge.cli import render
from bridge.cli.helptext import examples
from bridge.cli.options import AsJsonOpt
from bridge.cli.render import out
from bridge.conversion.options import cli_parameters
from bridge.errors import ValidationMismatch

ROWS_AROUND_CULPRIT = 3  # divergence-table rows shown before and after the culprit (all are in --report)

def debug_command(source: str, model: Path | None = None, budget_mb: int = 256, as_json: bool = False,
                  **values: Any) -> None:
    """Compare every intermediate tensor of SOURCE and its conversion; name the first node that diverges
    while its inputs agree, and the pass (or translator) that produced it."""
    from bridge import api
    from bridge.conversion.options import from_cli

    values = from_cli(values)
    with render.progress(f"debugging {source}") as progress:
        result = api.debug(source, model=model, budget_mb=budget_mb, progress=progress, **values)
    if as_json:
        render.print_json(result)
    else:
        render_debug(result)
        if values.get("report"):
            out.print(f"report written to {values['report']}")
    if not result.passed:
        culprit = result.culprit()
        failing = "; ".join(c.summary() for c in result.validation if not c.passed)
        raise ValidationMismatch(culprit["summary"] if culprit else
                                 f"the converted model does not match the source ({failing or 'see above'})",
                                 result=result)


def _debug_signature() -> inspect.Signature:
    keyword = inspect.Parameter.KEYWORD_ONLY
    help_overrides = {"report": "write a report: .html (self-contained, with detection overlays and error "
                                "histograms), .json or .md"}
    return inspect.Signature([
        inspect.Parameter("source", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Annotated[str, typer.Argument(
            help="model file, folder, or module.path:factory (as for convert)")]),
        inspect.Parameter("model", keyword, default=None, annotation=Annotated[Path | None, typer.Option(metavar="FILE",
            help="an already converted .onnx to compare with SOURCE (default: convert SOURCE pass by pass)")]),
        *cli_parameters(debug=True, help_overrides=help_overrides),
        inspect.Parameter("budget_mb", keyword, default=256, annotation=Annotated[int, typer.Option(metavar="MIB",
            help="MiB of tensors fetched per run (bigger models run in chunks)")]),
        inspect.Parameter("as_json", keyword, default=False, annotation=AsJsonOpt)])


def debug_values(values: dict[str, Any]) -> dict[str, Any]:
    """The convert option values ``bridge debug`` takes too (for ``--localize``)."""
    from bridge.conversion.options import convert_options

    return {o.name: values[o.name] for o in convert_options() if o.debug and o.name in values}


def render_debug(result: Any) -> None:
    """The verdict first, then the passes, the outputs and the tensors around the culprit."""
    culprit = result.culprit()
    out.print(f"[bold]{escape(result.source)}[/bold] ({result.framework}): "
              + ("[green]every compared tensor agrees[/green]" if culprit is None and result.passed
                 else "[red]diverges[/red]"))
    for n in result.notes:
        out.print(f"[yellow]note:[/yellow] {escape(n)}")
    for w in result.warnings:
        out.print(f"[yellow]warning:[/yellow] {escape(w)}")
    if result.stage.verdicts:
        table = Table("pass", "modified", "values before vs after", title="ONNX stage, pass by pass", title_justify="left")
        for v in result.stage.verdicts:
            text = escape(v.summary())
            table.add_row(v.record.name, "yes" if v.record.modified else "no",
                          f"[red]{text}[/red]" if v.changed_values else text)
        out.print(table)
    if result.validation_sizes:
        render.print_sizes(result.validation_sizes, result.second_size_skipped)
    render.print_comparisons(result.validation)
    if result.divergence is not None:
        _print_divergence(result.divergence)
    if culprit is not None:
        out.print(f"[bold red]culprit:[/bold red] node [bold]{escape(culprit['node'])}[/bold] "
                  f"(op {escape(culprit['op'])}), output '{escape(culprit['tensor'])}'"
                  + (f"; {escape(culprit['made_by'])}" if culprit.get("made_by") else ""))
        if culprit["attributes"]:
            out.print("  attributes: " + escape(", ".join(f"{k}={v}" for k, v in culprit["attributes"].items())))
        err = culprit["error"]
        out.print(f"  error: max abs {_fmt(err['max_abs'])}, max rel {_fmt(err['max_rel'])}, "
                  f"mismatch {_fmt(err['mismatch_fraction'])} {escape(err.get('note') or '')}")
        for i in culprit["inputs"]:
            out.print(f"  input  {escape(i['tensor'])}: {escape(_stats(i['reference']))}  |  converted "
                      f"{escape(_stats(i['candidate']))}")
        out.print(f"  output {escape(culprit['tensor'])}: {escape(_stats(culprit['reference']))}  |  converted "
                  f"{escape(_stats(culprit['candidate']))}")


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}"


def _stats(s: dict[str, Any] | None) -> str:
    if not s:
        return "-"
    if s.get("min") is None:
        return f"{s['dtype']}{s['shape']} no finite values"
    bad = f", {s['nan']} NaN, {s['inf']} inf" if s.get("nan") or s.get("inf") else ""
    return f"{s['dtype']}{s['shape']} min {s['min']:.4g} max {s['max']:.4g} mean {s['mean']:.4g}{bad}"


def _print_divergence(d: Any) -> None:
    rows = d.rows
    focus = d.culprit or d.first_divergent
    if focus is not None:
        at = rows.index(focus)
        shown = rows[max(0, at - ROWS_AROUND_CULPRIT): at + ROWS_AROUND_CULPRIT + 1]
    else:
        shown = rows[-ROWS_AROUND_CULPRIT:]
    table = Table("tensor", "source node", "ONNX node", "verdict", "max abs",
                  title=f"{d.reference} vs {d.candidate}: {len(rows)} tensors compared, "
                        f"{sum(r.diverges for r in rows)} differ, {len(d.propagated)} of them only by error inherited "
                        "from their inputs (rows around the first divergence)",
                  title_justify="left")
    for r in shown:
        verdict = ("[bold red]CULPRIT[/bold red]" if r.culprit else "[yellow]inherited[/yellow]" if r.propagated
                   else "[red]differs[/red]" if r.diverges else "agrees")
        table.add_row(escape(r.tensor), escape(f"{r.source_node.name} ({r.source_node.op})") if r.source_node else "-",
                      escape(f"{r.node.name} ({r.node.op})") if r.node else "-", verdict, _fmt(r.error.max_abs))
    out.print(table)
    out.print(escape(d.summary()))


def register(app: typer.Typer) -> None:
    """Add the ``debug`` command to ``app`` (idempotent)."""
    if any(c.name == "debug" for c in app.registered_commands):
        return
    debug_command.__signature__ = _debug_signature()  # type: ignore[attr-defined]
    app.command("debug", epilog=examples(
        "bridge debug examples/mxnet_ssd/model-symbol.json --input data:1,3,64,64 --report out/debug.html",
        "bridge debug examples/mxnet_ssd/model-symbol.json --model out/ssd.onnx --input data:1,3,64,64"))(debug_command)


LocalizeOpt = Annotated[bool, typer.Option("--localize", help="on a mismatch, compare every intermediate tensor with the "
                                                              "source and name the culprit node and pass (as bridge debug)")]


def localize_failure(source: str, **kwargs: Any) -> None:
    """``convert --localize`` / ``validate --localize``: after a mismatch, run ``bridge.api.debug`` and show its verdict."""
    from bridge import api

    with render.progress(f"localising the mismatch of {source}") as progress:
        result = api.debug(source, progress=progress, **kwargs)
    render_debug(result)
    if kwargs.get("report"):
        out.print(f"debug report written to {kwargs['report']}")
