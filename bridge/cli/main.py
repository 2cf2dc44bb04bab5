"""The `bridge` command line: parses arguments into bridge.api calls and renders their results.

No conversion logic lives here. Exit codes: 0 ok, 1 validation mismatch (or problems found by inspect), 2 usage error,
3 conversion error, 70 internal error (a bug: please report it with the traceback shown).
"""

from __future__ import annotations

import inspect as _inspect
import logging
import re
import sys
import traceback
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table
from typer.exceptions import TyperException

from bridge.cli import render
from bridge.cli.debug import LocalizeOpt, debug_values, localize_failure, test_hooks
from bridge.cli.options import (
    DEFAULT_ATOL,
    DEFAULT_RTOL,
    DEFAULT_TIMEOUT,
    AsJsonOpt,
    AtolOpt,
    DetectionsOpt,
    FeedsOpt,
    InputKindOpt,
    InputOpt,
    InputRangeOpt,
    IsolateOpt,
    MaxMemoryOpt,
    ReportOpt,
    RtolOpt,
    SeedOpt,
    StrictOpt,
    TimeoutOpt,
    ToleranceOpt,
    TrustOpt,
    WeightsOpt,
    runtimes_from,
    tolerance_from,
)
from bridge.cli.render import err, out
from bridge.conversion.options import cli_parameters
from bridge.errors import EXIT_INTERNAL, EXIT_MISMATCH, EXIT_USAGE, BridgeError, ValidationMismatch

app = typer.Typer(
    name="bridge", no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
    help="Convert PyTorch / MXNet / TensorFlow / ONNX models to ONNX and prove them in each target runtime.",
)
def _show_version(value: bool) -> None:
    if value:
        from bridge.version import __version__

        out.print(f"bridge {__version__}", highlight=False)
        raise typer.Exit(0)


@app.callback()
def _root(ctx: typer.Context,
          verbose: Annotated[int, typer.Option("--verbose", "-v", count=True,
                                               help="-v info, -vv debug (before or after the command)")] = 0,
          version: Annotated[bool, typer.Option("--version", is_eager=True, callback=_show_version,
                                                help="print bridge's version and exit")] = False) -> None:
    logging.basicConfig(level=[logging.WARNING, logging.INFO, logging.DEBUG][min(verbose, 2)],
                        format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    ctx.with_resource(test_hooks())  # BRIDGE_TEST_BREAK (README: debugging), for this command only


def convert(source: str, output: Path, as_json: bool = False, localize: bool = False, **values: Any) -> None:
    """Convert SOURCE to ONNX, run the ONNX stage, validate against the source framework."""
    from bridge import api
    from bridge.conversion.options import from_cli

    values = from_cli(values)
    try:
        with render.progress(f"converting {source}") as progress:
            result = api.convert(source, output, progress=progress, **values)
    except ValidationMismatch as exc:
        if exc.result is not None:
            _render_convert(exc.result, as_json)
        if localize:  # find the node (and pass) where it went wrong; the report becomes the debug report
            localize_failure(source, **debug_values(values))
        raise
    _render_convert(result, as_json)


convert.__signature__ = _inspect.Signature([  # type: ignore[attr-defined]
    _inspect.Parameter("source", _inspect.Parameter.POSITIONAL_OR_KEYWORD,
                      annotation=Annotated[str, typer.Argument(help="model file, folder, or module.path:factory")]),
    _inspect.Parameter("output", _inspect.Parameter.KEYWORD_ONLY,
                      annotation=Annotated[Path, typer.Option("--output", "-o", help="the .onnx file to write")]),
    *cli_parameters(), _inspect.Parameter("as_json", _inspect.Parameter.KEYWORD_ONLY, default=False, annotation=AsJsonOpt),
    _inspect.Parameter("localize", _inspect.Parameter.KEYWORD_ONLY, default=False, annotation=LocalizeOpt)])
app.command()(convert)


def _render_convert(result: Any, as_json: bool) -> None:
    if as_json:
        render.print_json(result)
        return
    out.print(f"[bold]{result.source}[/bold] ({result.framework}) -> {result.output} "
              f"{'[green]written[/green]' if result.written else '[red]not written[/red]'}")
    if result.target:
        out.print(f"{result.target['target']}: {result.target['path']} ({result.target['converter']}, "
                  f"opset {result.target['opset_in']} -> {result.target['opset_out']}, {result.target['seconds']:.1f} s)")
    out.print(f"exporter: {result.exporter}; opset {result.opset}; "
              + ", ".join(f"{k} {v:.2f}" for k, v in result.timings.items()))
    for n in result.notes:
        out.print(f"[yellow]note:[/yellow] {escape(n)}")
    for w in result.warnings:
        out.print(f"[yellow]warning:[/yellow] {escape(w)}")
    sig = ", ".join(f"{m.name}{list(m.shape) if m.shape is not None else '?'}" for m in result.inputs)
    outs = ", ".join(f"{m.name}{list(m.shape) if m.shape is not None else '?'}" for m in result.outputs)
    out.print(f"inputs: {sig}\noutputs: {outs}")
    if result.validation_skipped:
        out.print(f"[yellow]validation skipped:[/yellow] {escape(result.validation_skipped)}"
                  + ("" if result.stages["validation"].cause == "disabled" else
                     " - nothing was proved about this model (--strict makes this a failure)"))
    for f in result.files:
        by = ", ".join(f["validated_by"]) or "no runtime"
        out.print(f"{f['kind']}: {escape(f['path'])} - {f['verdict']} ({escape(by)})")
    if result.validation_inputs:
        out.print("validated at: " + render.sizes_text(result.validation_sizes or [result.validation_inputs]))
    sources = {str(f.get("source")) for f in result.validation_feeds.values() if f.get("source")}
    if sources:
        out.print(f"validation inputs: {escape('; '.join(sorted(sources)))}"
                  + (f"; traced on: {escape(result.export_inputs)}" if result.export_inputs else ""), soft_wrap=True)
    render.print_comparisons(result.validation)
    if result.bench:
        out.print(f"bench (median latency, vs source): {escape(result.bench['summary'])}", soft_wrap=True)


@app.command()
def inspect(
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
        out.print("bridge: " + ", ".join(f"{k}={v}" for k, v in rep.bridge.items()))
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


@app.command()
def validate(
    model: Annotated[Path, typer.Argument(help="the .onnx file to check")],
    source: Annotated[str | None, typer.Option(help="the source model to run as reference")] = None,
    reference: Annotated[Path | None, typer.Option(help="saved RunResults .npz to compare against")] = None,
    runtime: Annotated[str, typer.Option(help="runtime(s) to run MODEL in, comma-separated")] = "onnxruntime",
    framework: Annotated[str | None, typer.Option(help="framework of --source (default: detect)")] = None,
    input: InputOpt = [],  # noqa: B006
    weights: WeightsOpt = None,
    atol: AtolOpt = DEFAULT_ATOL,
    rtol: RtolOpt = DEFAULT_RTOL,
    tolerance: ToleranceOpt = [],  # noqa: B006
    save_reference: Annotated[Path | None, typer.Option(help="save the source run as RunResults (.npz + .json)")] = None,
    report: ReportOpt = None,
    feeds: FeedsOpt = None,
    trust_source: TrustOpt = False,
    isolate: IsolateOpt = True,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT,
    strict: StrictOpt = False,
    max_memory: MaxMemoryOpt = None,
    seed: SeedOpt = 0,
    localize: LocalizeOpt = False,
    detections: DetectionsOpt = [],  # noqa: B006
    input_kind: InputKindOpt = None,
    input_range: InputRangeOpt = None,
) -> None:
    """Run MODEL and compare it with --source (run now) or --reference (a saved RunResults)."""
    from bridge import api

    try:
        with render.progress(f"validating {model}") as progress:
            result = api.validate(model, source=source, reference=reference, runtime=runtimes_from(runtime) or [],
                                  framework=framework, inputs=input, weights=weights,
                                  tolerance=tolerance_from(atol, rtol, tolerance), seed=seed,
                                  save_reference=save_reference, report=report, feeds=feeds,
                                  options={"trust_source": "1"} if trust_source else None, isolated=isolate,
                                  timeout=timeout, strict=strict, max_memory=max_memory, detections=detections,
                                  input_kind=input_kind,
                                  input_range=input_range, progress=progress)
    except ValidationMismatch as exc:
        if isinstance(exc.result, api.ValidateResult):
            render.print_comparisons(exc.result.comparisons)
        if localize and source is not None:  # compare MODEL's intermediates with the source's, name the culprit
            localize_failure(source, model=model, framework=framework, inputs=input, weights=weights, seed=seed,
                             atol=atol, rtol=rtol, tolerance=tolerance, feeds=feeds, report=report,
                             trust_source=trust_source, detections=detections, input_kind=input_kind,
                             input_range=input_range)
        raise
    for w in result.warnings:
        out.print(f"[yellow]warning:[/yellow] {escape(w)}")
    out.print("validated at: " + render.sizes_text(result.sizes or [result.inputs]))
    render.print_comparisons(result.comparisons)
    if result.saved_reference:
        out.print(f"reference saved to {result.saved_reference}")


def _register_command_modules() -> None:
    """Commands that live in their own modules (each parses only, and calls bridge.api)."""
    from bridge.cli import bench, debug, graft, migrate, shapes

    debug.register(app)
    graft.register(app)
    shapes.register(app)
    migrate.register(app)
    bench.register(app)


_register_command_modules()


_VERBOSITY = re.compile(r"-v+|--verbose")


def hoist_verbosity(args: list[str]) -> list[str]:
    """``-v``/``-vv``/``--verbose`` anywhere before ``--`` moved to the front, where the root option
    reads them: the README lists them among a command's options, so ``bridge convert ... -v`` works."""
    end = args.index("--") if "--" in args else len(args)
    flags = [a for a in args[:end] if _VERBOSITY.fullmatch(a)]
    return [*flags, *(a for a in args[:end] if not _VERBOSITY.fullmatch(a)), *args[end:]]


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the app and map every outcome to the documented exit code."""
    try:
        # without standalone mode click returns (not raises) the code of a typer.Exit from a command
        code = app(args=hoist_verbosity(sys.argv[1:] if argv is None else list(argv)), standalone_mode=False)
    except typer.Exit as exc:
        return int(exc.exit_code)
    except typer.Abort:
        err.print("aborted")
        return EXIT_USAGE
    except TyperException as exc:  # usage errors from argument parsing (click's, vendored by typer)
        show = getattr(exc, "show", None)
        if show is not None:
            show()
        else:
            err.print(f"error: {exc}")
        return int(getattr(exc, "exit_code", EXIT_USAGE))
    except BridgeError as exc:
        err.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False)
        return exc.exit_code
    except Exception:
        err.print("[red]internal error[/red] (a bug in bridge; please report it with this traceback):")
        err.print(traceback.format_exc(), highlight=False, markup=False)
        return EXIT_INTERNAL
    return code if isinstance(code, int) else 0


if __name__ == "__main__":
    sys.exit(main())
