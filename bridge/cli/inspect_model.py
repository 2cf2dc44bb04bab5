"""`bridge inspect MODEL`: what a model file holds (opsets, signature, op histogram, problems),
from ``bridge.api.inspect``; ``--nodes`` adds every node's inferred types."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from bridge.cli import render
from bridge.cli.helptext import examples
from bridge.cli.options import AsJsonOpt
from bridge.cli.render import out
from bridge.errors import EXIT_MISMATCH


def readable_metadata(value: str) -> str:
    """A metadata value as a person reads it: JSON (a list of detection output specs, ...) becomes
    ``key=value`` pairs, one ``;``-separated group per list item; comma lists get spaces; other text as is."""
    try:
        data = json.loads(value)
    except ValueError:
        return ", ".join(p for p in value.split(",")) if "," in value and " " not in value else value

    def show(item: Any) -> str:
        if isinstance(item, dict):
            return ", ".join(f"{k}={show(v)}" for k, v in item.items() if v not in (None, "", [], {}))
        if isinstance(item, list):
            return "; ".join(show(v) for v in item) or "-"
        return str(item)

    return show(data) if isinstance(data, (dict, list)) else value


def inspect_command(
    model: Annotated[Path, typer.Argument(help="an .onnx file")],
    nodes: Annotated[bool, typer.Option("--nodes", help="every node's inferred types and shapes; flags where "
                                                          "inference loses a dim")] = False,
    as_json: AsJsonOpt = False,
) -> None:
    """Opsets, IR version, signature (symbolic dims flagged), op histogram, size, problems."""
    from bridge import api

    rep = api.inspect(model, nodes=nodes)
    if as_json:
        render.print_json(rep)
        if rep.problems:  # scripts can trust the exit code: problems found = 1
            raise typer.Exit(EXIT_MISMATCH)
        return
    out.print(f"[bold]{rep.path}[/bold]  IR {rep.ir_version}  opsets "
              + ", ".join(f"{d}={v}" for d, v in rep.opset_imports.items()) + f"  producer: {rep.producer or '-'}")
    table = Table("tensor", "kind", "shape", "dtype", title="signature", title_justify="left")
    for kind, metas in (("input", rep.inputs), ("output", rep.outputs)):
        for m in metas:
            shape = "unknown" if m.shape is None else "[" + ", ".join(
                str(d) if isinstance(d, int) else f"[yellow]{d or '?'}[/yellow]" for d in m.shape) + "]"
            table.add_row(m.name, kind, shape, m.dtype)
    out.print(table)
    unknown = [m.name for m in (*rep.inputs, *rep.outputs) if m.shape is None]
    if rep.symbolic:
        out.print("[yellow]symbolic dims:[/yellow] " + ", ".join(rep.symbolic))
    if unknown:
        out.print("[yellow]no declared shape:[/yellow] " + ", ".join(unknown))
    if not rep.symbolic and not unknown:
        out.print("all input/output dims are concrete")
    out.print(f"parameters: {rep.parameter_count:,} ({rep.parameter_bytes / 2**20:.2f} MiB)")
    out.print("ops: " + ", ".join(f"{op} x{n}" for op, n in rep.op_histogram.items()))
    if rep.bridge:
        out.print("written by bridge:")
        for key, value in rep.bridge.items():
            out.print(f"  {escape(key.replace('_', ' '))}: {escape(readable_metadata(value))}", highlight=False)
    if rep.problems:
        for p in rep.problems:
            where = f" [{p.op} at {p.node}]" if p.node else ""
            out.print(f"[red]problem ({p.kind}){escape(where)}:[/red] {escape(p.message)}")
    else:
        out.print("[green]no problems found[/green] (checker, known traps, onnxruntime load)")
    if rep.nodes is not None:
        render.print_node_types(rep.nodes)
    if rep.problems:
        raise typer.Exit(EXIT_MISMATCH)


def register(app: typer.Typer) -> None:
    """Add the ``inspect`` command to ``app``."""
    app.command("inspect", epilog=examples(
        "bridge inspect out/ssd.onnx", "bridge inspect out/ssd.onnx --nodes     # where inference loses a dim",
        "bridge inspect out/ssd.onnx --json > out/ssd.json"))(inspect_command)
