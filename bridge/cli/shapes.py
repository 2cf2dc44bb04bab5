"""`bridge shapes fix|dynamic|buckets`: argument parsing and rendering for bridge.shapes.

No shape logic lives here; ``register(app)`` adds the ``shapes`` group to the main typer app.
Errors propagate to ``bridge.cli.main.main``, which maps them to the documented exit codes.
"""

from __future__ import annotations

import inspect
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
from bridge.errors import UsageError, ValidationMismatch

shapes_app = typer.Typer(name="shapes", no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                         help="Make shapes static, make axes dynamic, or build shape buckets from data.",
                         epilog=examples("bridge shapes fix model.onnx --input images:4,3,512,512 -o static.onnx",
                                         "bridge shapes dynamic static.onnx --axis images:0=batch -o dynamic.onnx"))



def register(app: typer.Typer) -> None:
    """Add the ``shapes`` command group to ``app`` (once)."""
    if any(g.name == "shapes" for g in app.registered_groups):
        return
    app.add_typer(shapes_app, name="shapes")


def _ints(text: str | None, what: str) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise UsageError(f"{what} '{text}': comma-separated integers") from None


def _groups(command: str, own: list[inspect.Parameter], tail: list[inspect.Parameter]) -> inspect.Signature:
    """``own`` parameters, then those of the option groups ``command`` subscribes to
    (``bridge.conversion.options.COMMAND_GROUPS``), then ``tail``."""
    from bridge.conversion.options import cli_parameters, command_options

    return inspect.Signature([*own, *cli_parameters(command_options(command)), *tail])


def _checked(values: dict[str, Any]) -> dict[str, Any]:
    """The tolerance and isolation groups' values (bounds checked) as the shape tools' keywords."""
    from bridge.conversion.options import command_options, resolve, tolerance_of

    v = resolve(values, where="shapes", options=command_options("shapes fix"))
    return {"tolerance": tolerance_of(v), "timeout": v["timeout"], "isolated": v["isolated"],
            "max_memory": v["max_memory"]}


def fix(model: Path, output: Path, input: list[str] | None = None, validate: bool = True,
        as_json: bool = False, **values: Any) -> None:
    """Make every dim concrete at the given input shapes; validate against the original."""
    from bridge.api import fix_shapes

    try:
        with render.progress(f"fixing {model}") as progress:
            result = fix_shapes(model, output, inputs=input or [], validate=validate, progress=progress,
                                **_checked(values))
    except ValidationMismatch as exc:
        if exc.result is not None and not as_json:
            render.print_summaries(getattr(exc.result, "validation", []))
        raise
    if as_json:
        render.print_json(result)
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
    render.print_summaries(result.validation)


_KEYWORD = inspect.Parameter.KEYWORD_ONLY
fix.__signature__ = _groups("shapes fix", [  # type: ignore[attr-defined]
    inspect.Parameter("model", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Annotated[Path, typer.Argument(
        help="the .onnx model with symbolic dims")]),
    inspect.Parameter("output", _KEYWORD, annotation=Annotated[Path, typer.Option(
        "--output", "-o", metavar="FILE", help="the static .onnx file to write")]),
    inspect.Parameter("input", _KEYWORD, default=[], annotation=Annotated[list[str], typer.Option(
        "--input", "-i", metavar="NAME:SHAPE", help="an input's shape, e.g. images:4,3,512,512 (repeatable)")]),
    inspect.Parameter("validate", _KEYWORD, default=True, annotation=Annotated[bool, typer.Option(
        help="compare with the original in onnxruntime at that shape")])],
    [inspect.Parameter("as_json", _KEYWORD, default=False, annotation=AsJsonOpt)])
shapes_app.command("fix", epilog=examples("bridge shapes fix model.onnx --input images:4,3,512,512 -o static.onnx"))(fix)


def dynamic(model: Path, output: Path, axis: list[str] | None = None, check_size: list[str] | None = None,
            rewrite: bool = True, allow_baked: bool = False, as_json: bool = False, **values: Any) -> None:
    """Make named input axes dynamic; rewrite or report constants that baked the old size."""
    from bridge.api import make_dynamic

    sizes: dict[str, list[int]] = {}
    for text in check_size or []:
        label, _, numbers = text.partition("=")
        parsed = _ints(numbers, "--check-size") if numbers else None
        if not label or not parsed:
            raise UsageError(f"--check-size '{text}': expected LABEL=S1,S2")
        sizes[label] = parsed
    try:
        with render.progress(f"making {model} dynamic") as progress:
            result = make_dynamic(model, output, axes=axis or [], check_sizes=sizes or None, rewrite=rewrite,
                                  allow_baked=allow_baked, progress=progress, **_checked(values))
    except ValidationMismatch as exc:
        if exc.result is not None and not as_json:
            _render_dynamic(exc.result)
        raise
    if as_json:
        render.print_json(result)
        return
    out.print(f"[bold]{escape(str(model))}[/bold] -> {escape(str(output))} [green]written[/green]")
    _render_dynamic(result)


dynamic.__signature__ = _groups("shapes dynamic", [  # type: ignore[attr-defined]
    inspect.Parameter("model", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Annotated[Path, typer.Argument(
        help="a static .onnx model")]),
    inspect.Parameter("output", _KEYWORD, annotation=Annotated[Path, typer.Option(
        "--output", "-o", metavar="FILE", help="the .onnx file to write")]),
    inspect.Parameter("axis", _KEYWORD, default=[], annotation=Annotated[list[str], typer.Option(
        "--axis", "-a", metavar="NAME:AXIS=LABEL", help="make an input axis dynamic under a name, e.g. "
        "images:0=batch (repeatable)")]),
    inspect.Parameter("check_size", _KEYWORD, default=[], annotation=Annotated[list[str], typer.Option(
        metavar="LABEL=S1,S2", help="the two other sizes to validate at")]),
    inspect.Parameter("rewrite", _KEYWORD, default=True, annotation=Annotated[bool, typer.Option(
        help="rewrite baked constants where sound (else only report)")]),
    inspect.Parameter("allow_baked", _KEYWORD, default=False, annotation=Annotated[bool, typer.Option(
        help="write even if baked constants remain (checked at the original size only)")])],
    [inspect.Parameter("as_json", _KEYWORD, default=False, annotation=AsJsonOpt)])
shapes_app.command("dynamic", epilog=examples(
    "bridge shapes dynamic static.onnx --axis images:0=batch -o dynamic.onnx",
    "bridge shapes dynamic static.onnx --axis images:0=batch --check-size batch=1,7 -o dynamic.onnx"))(dynamic)


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
    table = Table("model", "shape", "items", "padded pixels", "pixel waste", "batch waste",
                  title=f"padding waste: {report.waste:.1%} of pixels over {report.samples} samples", title_justify="left")
    for r in report.rows:
        table.add_row(r.bucket, str(r.shape), str(r.items), f"{r.padded_pixels:,}", f"{r.waste:.1%}",
                      f"{r.batch_waste:.1%}" if r.real_slots else "-")
    return table


@shapes_app.command("buckets", epilog=examples(
    "bridge shapes buckets model.onnx --input-shape -1,3,-1,-1 --data images/ --batch-choices 1,4 -o buckets/",
    "bridge shapes buckets model.onnx --config auto_scaling.yaml --n-std 2 -o buckets/",
    "bridge shapes buckets --report -o buckets/ --data other_images/   # padding waste of existing buckets"))
def buckets_cmd(
    model: Annotated[Path | None, typer.Argument(help="the dynamic .onnx model (omit with --report to re-report)")] = None,
    output: Annotated[Path | None, typer.Option("--output", "-o", metavar="DIR", help="folder for the bucket models + buckets.json")] = None,
    config: Annotated[Path | None, typer.Option(metavar="FILE", help="YAML file of these settings (same names: n_std, max_buckets, "
                                                     "...); options given here override it")] = None,
    input_shape: Annotated[str | None, typer.Option(metavar="SHAPE", help="shape with -1 on bucketed axes, e.g. -1,3,-1,-1; no -1: "
                                                         "one static model")] = None,
    data: Annotated[Path | None, typer.Option(metavar="DIR|FILE.json", help="image folder, or COCO-like annotation JSON "
                                                   "({images:[{id,height,width}], annotations:[{image_id,bbox}]})")] = None,
    input_name: Annotated[str | None, typer.Option(metavar="NAME", help="the input to bucket (default: the first)")] = None,
    strategy: Annotated[str | None, typer.Option(help="mean_std (default) or max_min")] = None,
    n_std: Annotated[float | None, typer.Option(metavar="X", help="mean_std: range is mean +- n_std * std (default 3)")] = None,
    expand_ratio: Annotated[float | None, typer.Option(metavar="X", help="raise the top of the range by this fraction (default 0.2)")] = None,
    interval: Annotated[int | None, typer.Option(metavar="N", help="round sizes up to a multiple of this (default 32)")] = None,
    max_buckets: Annotated[int | None, typer.Option(metavar="N", help="at most this many candidates per axis (default 4)")] = None,
    batch_choices: Annotated[str | None, typer.Option(metavar="SIZES", help="batch sizes, e.g. 1,4,8 (default: from box counts of an "
                                                           "annotation file, else 1,2,4,8)")] = None,
    limit_side_len: Annotated[int | None, typer.Option(metavar="N", help="scale sizes so the long side is at most this")] = None,
    height_range: Annotated[str | None, typer.Option(metavar="MIN,MAX", help="heights outside are left out of the statistics "
                                                          "(and reported)")] = None,
    width_range: Annotated[str | None, typer.Option(metavar="MIN,MAX", help="widths outside are left out of the statistics "
                                                         "(and reported)")] = None,
    default_scaling: Annotated[str | None, typer.Option(metavar="HxW,...", help="these (height, width) buckets instead "
                                                             "of ones from data (without --data and this, "
                                                             "--limit-side-len S gives the built-in default)")] = None,
    layout: Annotated[str | None, typer.Option(help="static (default): one static model per (batch, height, width); "
                                                    "per-batch: one model per batch, height/width dynamic")] = None,
    report: Annotated[bool, typer.Option("--report", help="show the padding waste per model")] = False,
    validate: Annotated[bool | None, typer.Option("--validate/--no-validate",
                                                  help="validate each model against the original (default: validate)")] = None,
    timeout: Annotated[float | None, typer.Option(metavar="SECONDS", help="seconds each validation step may take in its child "
                                                       "process (default 600)")] = None,
    as_json: AsJsonOpt = False,
) -> None:
    """Choose shape buckets from data (or defaults); write their models and buckets.json."""
    from bridge.shapes import bucket_report, buckets
    from bridge.shapes.scaling import ScalingConfig

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
    options = {"input_shape": input_shape, "data": str(data) if data is not None else None, "input_name": input_name,
               "strategy": strategy, "n_std": n_std, "expand_ratio": expand_ratio, "interval": interval,
               "max_buckets": max_buckets, "batch_choices": batch_choices, "limit_side_len": limit_side_len,
               "height_range": height_range, "width_range": width_range, "default_scaling": default_scaling,
               "layout": layout, "validate": validate, "timeout": timeout}
    base = ScalingConfig.load(config) if config is not None else ScalingConfig()
    settings = base.override(options, "options")
    with render.progress(f"building buckets for {model}") as progress:
        result = buckets(model, output, config=settings, progress=progress)
    if as_json:
        render.print_json(result)
        return
    _render_buckets(result, model, output, report)


def _render_buckets(result: Any, model: Path, output: Path, report: bool) -> None:
    files = result.files
    kind = "per-batch (height/width dynamic)" if result.model_layout == "per-batch" else "static"
    out.print(f"[bold]{escape(str(model))}[/bold] -> {len(files)} {kind} model(s) in {escape(str(output))}")
    if result.candidates:
        out.print("candidates: " + ", ".join(f"{k}={v}" for k, v in result.candidates.items()))
    scaling = result.settings.get("scaling")
    if scaling and scaling not in ("data", "none"):
        out.print(f"height/width buckets: {escape(scaling)}")
    if result.batch and result.layout.batch is not None:
        out.print(f"batch ({escape(result.batch['source'])}): {escape(result.batch['explanation'])}")
    r = result.ranges
    if r.height_range or r.width_range:
        out.print(f"range filter: {r.inside} image(s) inside, {r.outside} outside "
                  f"({r.routed} go to the nearest bucket, {r.refused} refused)"
                  + (f", e.g. {escape(r.examples[0])}" if r.examples else ""))
    for name, rules in result.unpad.items():
        out.print(f"un-pad {name}: " + ", ".join(f"axis {r['axis']} follows {r['follows']} x{r['ratio'][0]}/{r['ratio'][1]}"
                                                 for r in rules))
    if result.report.samples:
        if report:
            out.print(_waste_table(result.report))
        else:
            out.print(f"padding waste on the data: {result.report.waste:.1%} (--report for the table)")
    if result.report.unfit:
        out.print(f"[yellow]{len(result.report.unfit)} sample(s) fit no bucket[/yellow] (outside the range, or "
                  "outliers mean_std leaves out)")
    for w in result.warnings:
        out.print(f"[yellow]warning:[/yellow] {escape(w)}")
    out.print(f"manifest: {escape(str(result.manifest))}")
