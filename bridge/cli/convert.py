"""`bridge convert SOURCE -o OUT.onnx`: parses convert's options (declared once in
``bridge.conversion.options``) into a ``bridge.api.convert`` call and renders its result."""

from __future__ import annotations

import inspect as _inspect
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from bridge.cli import render
from bridge.cli.debug import LocalizeOpt, debug_values, localize_failure
from bridge.cli.helptext import examples
from bridge.cli.options import AsJsonOpt, OutputOpt
from bridge.cli.render import out
from bridge.conversion.options import cli_parameters
from bridge.errors import ValidationMismatch


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
        elif exc.result is None or not all(c.passed for c in getattr(exc.result, "validation", [])):
            # (a strict failure of a passing verdict - vacuous, one size only - has no divergence to localise)
            render.hint("add --localize to name the node (and the pass or translator) where the outputs start "
                        f"to diverge, or run: bridge debug {source} with the same options")
        raise
    _render_convert(result, as_json)


def _signature() -> _inspect.Signature:
    keyword = _inspect.Parameter.KEYWORD_ONLY
    return _inspect.Signature([
        _inspect.Parameter("source", _inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Annotated[str, typer.Argument(
            metavar="SOURCE", help="model file, folder, or module.path:factory")]),
        _inspect.Parameter("output", keyword, annotation=OutputOpt),
        *cli_parameters(),
        _inspect.Parameter("as_json", keyword, default=False, annotation=AsJsonOpt),
        _inspect.Parameter("localize", keyword, default=False, annotation=LocalizeOpt)])


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
        kept = "" if result.written else ", [red]not written[/red]"  # --strict or a failed runtime stopped it
        out.print(f"{f['kind']}: {escape(f['path'])} - {f['verdict']} ({escape(by)}){kept}")
    if result.validation_inputs:
        render.print_sizes(result.validation_sizes or [result.validation_inputs], result.second_size_skipped)
    sources = {str(f.get("source")) for f in result.validation_feeds.values() if f.get("source")}
    if sources:
        out.print(f"validation inputs: {escape('; '.join(sorted(sources)))}"
                  + (f"; traced on: {escape(result.export_inputs)}" if result.export_inputs else ""), soft_wrap=True)
    render.print_comparisons(result.validation)
    render.print_dataset(result.dataset)  # --dataset (issue 33)
    render.print_precision(result.precision)  # --precision (issue 34)
    if result.bench:
        out.print(f"bench (median latency, vs source): {escape(result.bench['summary'])}", soft_wrap=True)


def register(app: typer.Typer) -> None:
    """Add the ``convert`` command to ``app``."""
    convert.__signature__ = _signature()  # type: ignore[attr-defined]
    app.command("convert", epilog=examples(
        "bridge convert examples/mxnet_ssd/model-symbol.json --input data:4,3,64,64 -o out/ssd.onnx",
        "bridge convert examples/tiny_detector/model.py:build --weights examples/tiny_detector/weights.pt "
        "--input images:2,3,64,64 --dynamic images:0=batch -o out/tiny.onnx",
        "bridge convert model.onnx --opset 17 --validate onnxruntime,openvino --report out/model.md -o out/model.onnx",
        "bridge convert model.keras --input img:2,32,32,3 --to tensorflow -o out/model_tf.onnx"))(convert)
