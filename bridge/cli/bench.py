"""`bridge bench MODEL`: how fast a converted model runs in each runtime, against its source framework.

Parses the arguments and calls ``bridge.api.bench``; a live progress line goes to stderr, the table (median
latency and its ratio to the source first) to stdout, ``--report`` writes .json / .md / .html.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table

from bridge.cli import render
from bridge.cli.helptext import examples
from bridge.cli.options import (
    AsJsonOpt,
    InputOpt,
    IsolateOpt,
    MaxMemoryOpt,
    SeedOpt,
    TimeoutOpt,
    TrustOpt,
    WeightsOpt,
    runtimes_from,
)
from bridge.cli.render import out
from bridge.errors import UsageError
from bridge.runtimes import available_runtimes
from bridge.runtimes.isolated import DEFAULT_TIMEOUT_S

if TYPE_CHECKING:
    from bridge.bench import BenchResult


def _ints(text: str, option: str) -> list[int]:
    try:
        return [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise UsageError(f"{option} {text}: expected comma-separated integers, e.g. 1,4,8") from None


def bench_command(
    model: Annotated[Path, typer.Argument(help="the converted .onnx model")],
    source: Annotated[str | None, typer.Option(help="the source model, run on the same inputs as the reference")] = None,
    runtime: Annotated[str | None, typer.Option(metavar="RUNTIMES", help=f"runtimes, comma-separated ({', '.join(available_runtimes())}; "
                                                     "default: every installed one)")] = None,
    batch: Annotated[str | None, typer.Option(metavar="SIZES", help="batch sizes, comma-separated, e.g. 1,4,8 (sizes other than the "
                                                   "model's need a dynamic batch axis; default: the model's)")] = None,
    threads: Annotated[int | None, typer.Option(metavar="N", help="CPU threads per runner (default: each runtime's own)")] = None,
    warmup: Annotated[int, typer.Option(metavar="N", help="untimed calls per runner and batch size after the first run")] = 3,
    iterations: Annotated[int | None, typer.Option(metavar="N", help="timed calls per runner and batch size (default 50)")] = None,
    time_s: Annotated[float | None, typer.Option("--time", metavar="SECONDS", help="timed seconds per runner and batch size "
                                                                "(instead of --iterations)")] = None,
    rounds: Annotated[int, typer.Option(metavar="N", help="interleaved rounds the timed calls are spread over")] = 10,
    feeds: Annotated[Path | None, typer.Option(metavar="FILE.npz", help="inputs: .npz keyed by input name (rows taken or repeated to "
                                                    "each batch size; default: seeded data)")] = None,
    input: InputOpt = [],  # noqa: B006 - typer needs a literal default
    framework: Annotated[str | None, typer.Option(metavar="NAME", help="framework of --source (default: detect)")] = None,
    weights: WeightsOpt = None,
    report: Annotated[Path | None, typer.Option(metavar="FILE", help="write a report: .json, .md or .html (latency plots)")] = None,
    trust_source: TrustOpt = False,
    isolate: IsolateOpt = True,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT_S,
    max_memory: MaxMemoryOpt = None,
    seed: SeedOpt = 0,
    as_json: AsJsonOpt = False,
    variant: Annotated[list[str] | None, typer.Option(metavar="RUNTIME=FILE", help="also time another file of the "
                                                      "model in RUNTIME in the same rounds (an int8 .onnx, an IR "
                                                      ".xml, a .tflite), compared with RUNTIME on MODEL "
                                                      "(repeatable)")] = None,
) -> None:
    """Latency (min/p50/p90/p99/max), throughput, first run and peak memory of MODEL in each runtime and of
    --source in its framework, in interleaved rounds, each runner in its own process."""
    from bridge import api

    with render.progress(f"benchmarking {model}") as progress:
        result = api.bench(model, source=source, runtime=runtimes_from(runtime),
                           batch=_ints(batch, "--batch") if batch else (), threads=threads, warmup=warmup,
                           iterations=iterations, seconds=time_s, rounds=rounds, feeds=feeds, inputs=input,
                           framework=framework, weights=weights, seed=seed, report=report, timeout=timeout,
                           options={"trust_source": "1"} if trust_source else None, max_memory=max_memory,
                           isolated=isolate, progress=progress, variants=variant or None)
    if as_json:
        render.print_json(result)
        return
    _render(result)
    if report:
        out.print(f"report: {report}", highlight=False)


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
    app.command("bench", epilog=examples(
        "bridge bench out/ssd.onnx --source examples/mxnet_ssd/model-symbol.json --batch 1,4",
        "bridge bench out/ssd.onnx --runtime onnxruntime,openvino --time 5 --report out/bench.html",
        "bridge bench out/ssd.onnx --runtime onnxruntime --variant onnxruntime=out/ssd.int8.onnx --batch 1,4 "
        "--threads 2"))(bench_command)
