"""`bridge validate MODEL`: run a converted model and compare it with its source (run now) or a saved
reference, through ``bridge.api.validate``; ``--localize`` names the culprit node on a mismatch."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from bridge.cli import render
from bridge.cli.debug import LocalizeOpt, debug_values, localize_failure
from bridge.cli.helptext import examples
from bridge.cli.render import out
from bridge.errors import ValidationMismatch


def validate_command(model: Path, localize: bool = False, **values: Any) -> None:
    """Run MODEL and compare it with --source (run now) or --reference (a saved RunResults)."""
    from bridge import api
    from bridge.conversion.options import from_cli
    from bridge.conversion.validate import validate_options

    values = from_cli(values, validate_options())
    try:
        with render.progress(f"validating {model}") as progress:
            result = api.validate(model, progress=progress, **values)
    except ValidationMismatch as exc:
        if isinstance(exc.result, api.ValidateResult):
            _warnings(exc.result)
            render.print_sizes(exc.result.sizes or [exc.result.inputs], exc.result.second_size_skipped)
            render.print_comparisons(exc.result.comparisons)
            render.print_dataset(exc.result.dataset)
        if isinstance(exc.result, api.ValidateResult) and all(c.passed for c in exc.result.comparisons):
            raise  # only the dataset's accuracy budget failed: the outputs agree, there is nothing to localise
        source = values.get("source")
        if localize and source is not None:  # compare MODEL's intermediates with the source's, name the culprit
            localize_failure(source, model=model, **debug_values(values))
        elif source is not None:
            render.hint("add --localize to compare every intermediate tensor with --source and name the node "
                        "where the outputs start to diverge")
        else:
            render.hint(f"to name the node where the outputs start to diverge, compare with the source model: "
                        f"bridge validate {model} --source SOURCE --localize (or: bridge debug SOURCE --model {model})")
        raise
    _warnings(result)
    render.print_sizes(result.sizes or [result.inputs], result.second_size_skipped)
    render.print_comparisons(result.comparisons)
    render.print_dataset(result.dataset)
    if result.saved_reference:
        out.print(f"reference saved to {result.saved_reference}")


def _warnings(result: Any) -> None:
    for w in result.warnings:
        out.print(f"[yellow]warning:[/yellow] {escape(w)}")


def _signature() -> inspect.Signature:
    """MODEL, then validate's options (``bridge.conversion.validate.validate_options``: its own and its groups')."""
    from bridge.conversion.options import cli_parameters
    from bridge.conversion.validate import validate_options

    keyword = inspect.Parameter.KEYWORD_ONLY
    return inspect.Signature([
        inspect.Parameter("model", inspect.Parameter.POSITIONAL_OR_KEYWORD,
                          annotation=Annotated[Path, typer.Argument(help="the .onnx file to check")]),
        *cli_parameters(validate_options(), help_overrides={"report": "write a report (.json or .md)"}),
        inspect.Parameter("localize", keyword, default=False, annotation=LocalizeOpt)])


def register(app: typer.Typer) -> None:
    """Add the ``validate`` command to ``app``."""
    validate_command.__signature__ = _signature()  # type: ignore[attr-defined]
    app.command("validate", epilog=examples(
        "bridge validate out/ssd.onnx --source examples/mxnet_ssd/model-symbol.json --localize",
        "bridge validate out/ssd.onnx --source examples/mxnet_ssd/model-symbol.json --save-reference ref.npz",
        "bridge validate out/ssd.onnx --reference ref.npz --runtime onnxruntime,tensorflow",
        "bridge validate out/ssd.onnx --source examples/mxnet_ssd/model-symbol.json --dataset images/ "
        "--labels labels.json"))(validate_command)
