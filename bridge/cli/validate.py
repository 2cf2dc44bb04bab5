"""`bridge validate MODEL`: run a converted model and compare it with its source (run now) or a saved
reference, through ``bridge.api.validate``; ``--localize`` names the culprit node on a mismatch."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from bridge.cli import render
from bridge.cli.debug import LocalizeOpt, localize_failure
from bridge.cli.helptext import examples
from bridge.cli.options import (
    DEFAULT_ATOL,
    DEFAULT_RTOL,
    DEFAULT_TIMEOUT,
    AtolOpt,
    DetectionsOpt,
    FeedsOpt,
    InputKindOpt,
    InputOpt,
    InputRangeOpt,
    IsolateOpt,
    MaxMemoryOpt,
    PinningOpt,
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
from bridge.cli.render import out
from bridge.errors import ValidationMismatch


def validate_command(
    model: Annotated[Path, typer.Argument(help="the .onnx file to check")],
    source: Annotated[str | None, typer.Option(help="the source model to run as reference")] = None,
    reference: Annotated[Path | None, typer.Option(metavar="FILE.npz", help="saved RunResults .npz to compare against")] = None,
    runtime: Annotated[str, typer.Option(metavar="RUNTIMES", help="runtime(s) to run MODEL in, comma-separated")] = "onnxruntime",
    framework: Annotated[str | None, typer.Option(metavar="NAME", help="framework of --source (default: detect)")] = None,
    input: InputOpt = [],  # noqa: B006
    weights: WeightsOpt = None,
    atol: AtolOpt = DEFAULT_ATOL,
    rtol: RtolOpt = DEFAULT_RTOL,
    tolerance: ToleranceOpt = [],  # noqa: B006
    save_reference: Annotated[Path | None, typer.Option(metavar="FILE.npz", help="save the source run as RunResults (.npz + .json), at every size checked")] = None,
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
    pinning: PinningOpt = True,
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
                                  input_kind=input_kind, input_range=input_range, pinning=pinning,
                                  progress=progress)
    except ValidationMismatch as exc:
        if isinstance(exc.result, api.ValidateResult):
            render.print_sizes(exc.result.sizes or [exc.result.inputs], exc.result.second_size_skipped)
            render.print_comparisons(exc.result.comparisons)
        if localize and source is not None:  # compare MODEL's intermediates with the source's, name the culprit
            localize_failure(source, model=model, framework=framework, inputs=input, weights=weights, seed=seed,
                             atol=atol, rtol=rtol, tolerance=tolerance, feeds=feeds, report=report,
                             trust_source=trust_source, detections=detections, input_kind=input_kind,
                             input_range=input_range)
        elif source is not None:
            render.hint("add --localize to compare every intermediate tensor with --source and name the node "
                        "where the outputs start to diverge")
        else:
            render.hint(f"to name the node where the outputs start to diverge, compare with the source model: "
                        f"bridge validate {model} --source SOURCE --localize (or: bridge debug SOURCE --model {model})")
        raise
    for w in result.warnings:
        out.print(f"[yellow]warning:[/yellow] {escape(w)}")
    render.print_sizes(result.sizes or [result.inputs], result.second_size_skipped)
    render.print_comparisons(result.comparisons)
    if result.saved_reference:
        out.print(f"reference saved to {result.saved_reference}")


def register(app: typer.Typer) -> None:
    """Add the ``validate`` command to ``app``."""
    app.command("validate", epilog=examples(
        "bridge validate out/ssd.onnx --source examples/mxnet_ssd/model-symbol.json --localize",
        "bridge validate out/ssd.onnx --source examples/mxnet_ssd/model-symbol.json --save-reference ref.npz",
        "bridge validate out/ssd.onnx --reference ref.npz --runtime onnxruntime,tensorflow"))(validate_command)
