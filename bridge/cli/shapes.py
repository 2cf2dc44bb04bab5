"""`bridge shapes fix|dynamic|buckets`: argument parsing and rendering for bridge.shapes.

No shape logic lives here; ``register(app)`` adds the ``shapes`` group to the main typer app.
Errors propagate to ``bridge.cli.main.main``, which maps them to the documented exit codes.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from bridge.errors import UsageError, ValidationMismatch

out = Console()
err = Console(stderr=True)
log = logging.getLogger("bridge.cli.shapes")

shapes_app = typer.Typer(name="shapes", no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                         help="Make shapes static, make axes dynamic, or build shape buckets from data.")

AsJson = Annotated[bool, typer.Option("--json", help="print the result as JSON")]
Atol = Annotated[float, typer.Option(help="absolute tolerance")]
Rtol = Annotated[float, typer.Option(help="relative tolerance")]


def register(app: typer.Typer) -> None:
    """Add the ``shapes`` command group to ``app`` (once)."""
    if any(g.name == "shapes" for g in app.registered_groups):
        return
    app.add_typer(shapes_app, name="shapes")


@contextlib.contextmanager
def _progress(what: str) -> Iterator[Callable[[str], None]]:
    if err.is_terminal:
        with err.status(what) as status:
            yield lambda msg: status.update(f"{what}: {msg}")
    else:
        yield lambda msg: log.info("%s: %s", what, msg)


def _tol(atol: float, rtol: float) -> Any:
    from bridge.config import Tolerance

    return Tolerance(atol, rtol)


def _json(result: Any) -> None:
    out.print_json(json.dumps(result.to_dict(), default=str))


def _comparisons(comps: list[Any]) -> None:
    for c in comps:
        out.print(("[green]" if c.passed else "[red]") + escape(c.summary()) + ("[/green]" if c.passed else "[/red]"))


def _ints(text: str | None, what: str) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise UsageError(f"{what} '{text}': comma-separated integers") from None


@shapes_app.command("fix")
def fix(
    model: Annotated[Path, typer.Argument(help="the .onnx model with symbolic dims")],
    output: Annotated[Path, typer.Option("--output", "-o", help="the static .onnx file to write")],
    input: Annotated[list[str], typer.Option("--input", "-i", help="NAME:SHAPE, e.g. images:4,3,512,512 (repeatable)")] = [],  # noqa: B006
    validate: Annotated[bool, typer.Option(help="compare with the original in onnxruntime at that shape")] = True,
    atol: Atol = 1e-4,
    rtol: Rtol = 1e-3,
    as_json: AsJson = False,
) -> None:
    """Make every dim concrete at the given input shapes; validate against the original."""
    from bridge.api import fix_shapes

    try:
        with _progress(f"fixing {model}") as progress:
            result = fix_shapes(model, output, inputs=input, validate=validate, tolerance=_tol(atol, rtol),
                                progress=progress)
    except ValidationMismatch as exc:
        if exc.result is not None and not as_json:
            _comparisons(getattr(exc.result, "validation", []))
        raise
    if as_json:
        _json(result)
        return
    out.print(f"[bold]{escape(str(model))}[/bold] -> {escape(str(output))} [green]written[/green]")
    out.print("inputs: " + ", ".join(f"{k}{v}" for k, v in result.inputs.items()))
    out.print("outputs: " + ", ".join(f"{k}{v}" for k, v in result.outputs.items()))
    if result.symbolic_before:
        out.print(f"symbolic dims before: {escape(', '.join(result.symbolic_before[:12]))}"
                  + (f" (+{len(result.symbolic_before) - 12})" if len(result.symbolic_before) > 12 else ""))
    if result.folded:
        out.print("folded: " + ", ".join(f"{op} x{n}" for op, n in result.folded.items()))
    for w in result.warnings:
        out.print(f"[yellow]warning:[/yellow] {escape(w)}")
    _comparisons(result.validation)


@shapes_app.command("dynamic")
def dynamic(
    model: Annotated[Path, typer.Argument(help="a static .onnx model")],
    output: Annotated[Path, typer.Option("--output", "-o", help="the .onnx file to write")],
    axis: Annotated[list[str], typer.Option("--axis", "-a", help="NAME:AXIS=LABEL, e.g. images:0=batch (repeatable)")] = [],  # noqa: B006
    check_size: Annotated[list[str], typer.Option(help="LABEL=S1,S2: the two other sizes to validate at")] = [],  # noqa: B006
    rewrite: Annotated[bool, typer.Option(help="rewrite baked constants where sound (else only report)")] = True,
    allow_baked: Annotated[bool, typer.Option(help="write even if baked constants remain (checked at the original size only)")] = False,
    atol: Atol = 1e-4,
    rtol: Rtol = 1e-3,
    as_json: AsJson = False,
) -> None:
    """Make named input axes dynamic; rewrite or report constants that baked the old size."""
    from bridge.api import make_dynamic

    sizes: dict[str, list[int]] = {}
    for text in check_size:
        label, _, values = text.partition("=")
        parsed = _ints(values, "--check-size") if values else None
        if not label or not parsed:
            raise UsageError(f"--check-size '{text}': expected LABEL=S1,S2")
        sizes[label] = parsed
    try:
        with _progress(f"making {model} dynamic") as progress:
            result = make_dynamic(model, output, axes=axis, check_sizes=sizes or None, rewrite=rewrite,
                                  allow_baked=allow_baked, tolerance=_tol(atol, rtol), progress=progress)
    except ValidationMismatch as exc:
        if exc.result is not None and not as_json:
            _render_dynamic(exc.result)
        raise
    if as_json:
        _json(result)
        return
    out.print(f"[bold]{escape(str(model))}[/bold] -> {escape(str(output))} [green]written[/green]")
    _render_dynamic(result)


def _render_dynamic(result: Any) -> None:
    out.print("inputs: " + ", ".join(f"{k}{v}" for k, v in result.inputs.items()))
    out.print("outputs: " + ", ".join(f"{k}{v}" for k, v in result.outputs.items()))
    for b in result.baked:
        colour = "green" if b.action == "rewritten" else "yellow"
        out.print(f"[{colour}]baked constant[/{colour}] {escape(b.describe())}")
    for c in result.checks:
        out.print(("[green]PASS[/green] " if c.passed else "[red]FAIL[/red] ") + f"{c.kind} at {c.sizes}: {escape(c.detail)}")
    for w in result.warnings:
        out.print(f"[yellow]warning:[/yellow] {escape(w)}")


def _waste_table(report: Any) -> Table:
    table = Table("bucket", "shape", "items", "padded pixels", "pixel waste", "batch waste",
                  title=f"padding waste: {report.waste:.1%} of pixels over {report.samples} samples", title_justify="left")
    for r in report.rows:
        table.add_row(r.bucket, str(r.shape), str(r.items), f"{r.padded_pixels:,}", f"{r.waste:.1%}",
                      f"{r.batch_waste:.1%}" if r.real_slots else "-")
    return table


@shapes_app.command("buckets")
def buckets_cmd(
    model: Annotated[Path | None, typer.Argument(help="the dynamic .onnx model (omit with --report to re-report)")] = None,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="folder for the bucket models + buckets.json")] = None,
    input_shape: Annotated[str | None, typer.Option(help="shape with -1 on bucketed axes, e.g. -1,3,-1,-1")] = None,
    data: Annotated[Path | None, typer.Option(help="image folder, or COCO-like annotation JSON "
                                                   "({images:[{id,height,width}], annotations:[{image_id,bbox}]})")] = None,
    input_name: Annotated[str | None, typer.Option(help="the input to bucket (default: the first)")] = None,
    strategy: Annotated[str, typer.Option(help="mean_std or max_min")] = "mean_std",
    n_std: Annotated[float, typer.Option(help="mean_std: range is mean +- n_std * std")] = 3.0,
    expand_ratio: Annotated[float, typer.Option(help="raise the top of the range by this fraction")] = 0.2,
    interval: Annotated[int, typer.Option(help="round sizes up to a multiple of this")] = 32,
    max_buckets: Annotated[int, typer.Option(help="at most this many candidates per axis")] = 4,
    batch_choices: Annotated[str | None, typer.Option(help="batch sizes, e.g. 1,4,8 (default: from box counts)")] = None,
    limit_side_len: Annotated[int | None, typer.Option(help="scale sizes so the long side is at most this")] = None,
    report: Annotated[bool, typer.Option("--report", help="show the padding waste per bucket")] = False,
    validate: Annotated[bool, typer.Option(help="validate each bucket model against the original")] = True,
    as_json: AsJson = False,
) -> None:
    """Choose shape buckets from data; write one static model per bucket and buckets.json."""
    from bridge.shapes import bucket_report, buckets

    if output is None:
        raise UsageError("give -o OUT_DIR (the bucket folder to write, or with --report and no MODEL, to read)")
    if model is None:
        if not report:
            raise UsageError("give MODEL to build buckets, or --report with -o OUT_DIR to report on existing ones")
        rep = bucket_report(output, data)
        if as_json:
            out.print_json(json.dumps(rep.to_dict(), default=str))
        else:
            out.print(_waste_table(rep))
            if rep.unfit:
                out.print(f"[yellow]{len(rep.unfit)} sample(s) fit no bucket[/yellow], e.g. {escape(rep.unfit[0])}")
        return
    if input_shape is None or data is None:
        raise UsageError("give --input-shape (e.g. -1,3,-1,-1) and --data (image folder or annotation JSON)")
    with _progress(f"building buckets for {model}") as progress:
        result = buckets(model, output, input_shape=input_shape, data=data, input_name=input_name, strategy=strategy,
                         n_std=n_std, expand_ratio=expand_ratio, interval=interval, max_buckets=max_buckets,
                         batch_choices=_ints(batch_choices, "--batch-choices"), limit_side_len=limit_side_len,
                         validate=validate, progress=progress)
    if as_json:
        _json(result)
        return
    out.print(f"[bold]{escape(str(model))}[/bold] -> {len(result.buckets)} bucket model(s) in {escape(str(output))}")
    out.print("candidates: " + ", ".join(f"{k}={v}" for k, v in result.candidates.items()))
    for name, rules in result.unpad.items():
        out.print(f"un-pad {name}: " + ", ".join(f"axis {r['axis']} follows {r['follows']} x{r['ratio'][0]}/{r['ratio'][1]}"
                                                 for r in rules))
    if report:
        out.print(_waste_table(result.report))
    else:
        out.print(f"padding waste on the data: {result.report.waste:.1%} (--report for the table)")
    if result.report.unfit:
        out.print(f"[yellow]{len(result.report.unfit)} sample(s) fit no bucket[/yellow] (mean_std leaves outliers out)")
    for w in result.warnings:
        out.print(f"[yellow]warning:[/yellow] {escape(w)}")
    out.print(f"manifest: {escape(str(result.manifest))}")
