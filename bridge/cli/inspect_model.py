"""`bridge inspect MODEL`: what a model file holds (opsets, signature, op histogram, problems),
from ``bridge.api.inspect``; ``--nodes`` adds every node's inferred types.

``--anchors`` (with ``--anchor-option`` / ``--box-format``, graft-nms's own options) prints the anchors graft-nms
would generate - per layer and in total, the first rows of each layer - from ``bridge.api.inspect_anchors``; with a
MODEL too, its regressor row counts against them (``--boxes`` names the tensor). The exit code is 1 when the model
has problems or no regressor fits the anchors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from bridge.cli import render
from bridge.cli.anchor_options import AnchorOptionOpt, AnchorsOpt, BoxFormatOpt, parse_anchor_options
from bridge.cli.helptext import examples
from bridge.cli.options import AsJsonOpt
from bridge.cli.render import out
from bridge.errors import EXIT_MISMATCH, UsageError


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
    model: Annotated[Path | None, typer.Argument(help="an .onnx file (optional with --anchors)")] = None,
    nodes: Annotated[bool, typer.Option("--nodes", help="every node's inferred types and shapes; flags where "
                                                          "inference loses a dim")] = False,
    anchors: AnchorsOpt = None,
    anchor_option: AnchorOptionOpt = None,
    box_format: BoxFormatOpt = None,
    boxes: Annotated[str | None, typer.Option("--boxes", metavar="TENSOR", help=(
        "with --anchors and MODEL: the box values [B, N, >=4] to count rows of (default: every such output)"))] = None,
    as_json: AsJsonOpt = False,
) -> None:
    """Opsets, IR version, signature (symbolic dims flagged), op histogram, size, problems; --anchors: the
    anchors graft-nms would generate, against the model's regressor rows."""
    from bridge import api

    for flag, given in (("--anchor-option", anchor_option), ("--box-format", box_format), ("--boxes", boxes)):
        if given and anchors is None:
            raise UsageError(f"{flag} belongs to --anchors: give --anchors too")
    if model is None and anchors is None:
        raise UsageError("give MODEL (an .onnx file), --anchors (the anchors graft-nms would use), or both")
    if nodes and model is None:
        raise UsageError("--nodes lists a model's nodes: give MODEL")
    fit = None
    if anchors is not None:
        fit = api.inspect_anchors(anchors, parse_anchor_options(anchor_option), box_format=box_format, model=model,
                                  boxes=boxes)
    rep = api.inspect(model, nodes=nodes) if model is not None else None
    failed = bool(rep is not None and rep.problems) or (fit is not None and fit.matches is False)
    if as_json:
        data = {**(rep.to_dict() if rep is not None else {}), **({"anchors": fit.to_dict()} if fit else {})}
        out.print_json(json.dumps(data, default=str))
        if failed:  # scripts can trust the exit code: problems found or anchors that fit no regressor = 1
            raise typer.Exit(EXIT_MISMATCH)
        return
    if rep is not None:
        print_report(rep)
    if fit is not None:
        for line in fit.describe():
            out.print(line, markup=False, highlight=False, soft_wrap=True)
    if failed:
        raise typer.Exit(EXIT_MISMATCH)


def print_report(rep: Any) -> None:
    """The model's report (``bridge.inspection.InspectReport``) as text."""
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


def register(app: typer.Typer) -> None:
    """Add the ``inspect`` command to ``app``."""
    app.command("inspect", epilog=examples(
        "bridge inspect out/ssd.onnx", "bridge inspect out/ssd.onnx --nodes     # where inference loses a dim",
        "bridge inspect out/ssd.onnx --json > out/ssd.json",
        # BlazeFace's anchors as graft-nms would generate them (add MODEL to check them against its regressor rows)
        "bridge inspect --anchors ssd --anchor-option num_layers=4 --anchor-option input_size=128 --anchor-option "
        "strides=8,16,16,16 --anchor-option min_scale=0.1484375 --anchor-option max_scale=0.75 --anchor-option "
        "aspect_ratios=1.0 --anchor-option fixed_anchor_size=true"))(inspect_command)
