"""`bridge bench MODEL`: how fast a converted model runs in each runtime, against its source framework.

Parses the arguments and calls ``bridge.api.bench``; a live progress line goes to stderr, the table (median
latency and its ratio to the source first) to stdout, ``--report`` writes .json / .md / .html.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from bridge.cli import render
from bridge.cli.helptext import examples
from bridge.cli.options import AsJsonOpt
from bridge.cli.render import out

if TYPE_CHECKING:
    from bridge.bench import BenchResult


def bench_command(model: Path, as_json: bool = False, **values: Any) -> None:
    """Latency (min/p50/p90/p99/max), throughput, first run and peak memory of MODEL in each runtime and of
    --source in its framework, in interleaved rounds, each runner in its own process. Exits 3 when no runtime
    ran MODEL (each failed to load or run it; the --report is still written), 2 for settings that measure
    nothing or never end (--iterations 0, --time nan)."""
    from bridge import api
    from bridge.bench.command import bench_options
    from bridge.conversion.options import from_cli

    values = from_cli(values, bench_options())
    with render.progress(f"benchmarking {model}") as progress:
        result = api.bench(model, progress=progress, **values)
    if as_json:
        render.print_json(result)
        return
    _render(result)
    if values.get("report"):
        out.print(f"report: {values['report']}", highlight=False)


def _signature() -> inspect.Signature:
    """MODEL, then bench's options (``bridge.bench.command.bench_options``: its own and its groups'), --json."""
    from bridge.bench.command import REPORT_HELP, bench_options
    from bridge.conversion.options import cli_parameters

    keyword = inspect.Parameter.KEYWORD_ONLY
    return inspect.Signature([
        inspect.Parameter("model", inspect.Parameter.POSITIONAL_OR_KEYWORD,
                          annotation=Annotated[Path, typer.Argument(help="the converted .onnx model")]),
        *cli_parameters(bench_options(), help_overrides={
            "report": REPORT_HELP, "feeds": "inputs: .npz keyed by input name (rows taken or repeated to each batch "
                                            "size; default: seeded data)"}),
        inspect.Parameter("as_json", keyword, default=False, annotation=AsJsonOpt)])


def _render(result: BenchResult) -> None:
    from bridge.bench.report import COLUMNS, rows

    data = result.to_dict()
    table = Table(*COLUMNS, title=f"{escape(data['model'])}" + (f" vs {escape(data['reference'])}"
                                                                 if data.get("reference") else ""),
                  title_justify="left")
    for row in rows(data):
        table.add_row(*(escape(c) for c in row))
    if out.is_terminal:
        out.print(table)
    else:  # piped: one line per runner and batch size
        out.print(table.title, soft_wrap=True)
        for row in rows(data):
            out.print("  " + ", ".join(f"{c} {escape(v)}" for c, v in zip(COLUMNS, row, strict=True)), soft_wrap=True)
    verified = data.get("verification")
    if verified:  # --verify: what the timed model was checked against, before the figures mean anything
        out.print(f"verified against {escape(verified['reference'])}: " + escape("; ".join(verified["comparisons"])),
                  soft_wrap=True)
    m = data["machine"]
    out.print(f"machine: {escape(m.get('cpu') or '?')}, {m.get('cores')} cores, load average "
              + ", ".join(f"{x:.2f}" for x in m.get("load_avg", [])), highlight=False)
    loads = [f"{r['name']} {r['load_s']:.2f} s" for r in data["runners"] if r.get("load_s") is not None]
    if loads:
        out.print("load (process start, import, model load / compile): " + escape(", ".join(loads)), highlight=False)
    for r in data["runners"]:
        if r.get("error"):
            out.print(f"[yellow]{escape(r['name'])}:[/yellow] {escape(r['error'])}")


def register(app: typer.Typer) -> None:
    bench_command.__signature__ = _signature()  # type: ignore[attr-defined]
    app.command("bench", epilog=examples(
        "bridge bench out/ssd.onnx --source examples/mxnet_ssd/model-symbol.json --batch 1,4",
        "bridge bench out/ssd.onnx --runtime onnxruntime,openvino --time 5 --report out/bench.html",
        "bridge bench out/ssd.onnx --runtime onnxruntime --variant onnxruntime=out/ssd.int8.onnx --batch 1,4 "
        "--threads 2"))(bench_command)
