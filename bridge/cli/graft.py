"""`bridge graft-nms`: add decoding, score activation and NMS to a headless detector's ONNX model.

Parses the arguments and calls ``bridge.api.graft`` (``bridge.graft.command.graft_file``): it prints what it
grafts (anchors per layer, decode, background class, ...), checks that the result detects on inputs, and writes
the model atomically. ``--dry-run`` prints the plan and writes nothing. Bad arguments are ``UsageError``
(exit code 2); a detector that cannot detect is a validation failure (exit code 1).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from bridge.cli.anchor_options import AnchorOptionOpt, AnchorsOpt, BoxFormatOpt, parse_anchor_options
from bridge.cli.helptext import examples
from bridge.cli.render import out
from bridge.errors import UsageError

# graft-nms's detection check runs the grafted model itself (not a validation against a source), so these are its
# own options, declared here: importing the conversion's option groups would load numpy and onnx for --help
FeedsOpt = Annotated[Path | None, typer.Option(metavar="FILE.npz", help=(
    "inputs for the detection check: .npz keyed by input name (default: seeded noise)"))]
InputOpt = Annotated[list[str], typer.Option("--input", "-i", metavar="NAME:SHAPE[:DTYPE]", help=(
    "an input's shape for the detection check where the model's is symbolic, e.g. images:1,3,128,128 (repeatable)"))]
IsolateOpt = Annotated[bool, typer.Option("--isolate/--no-isolate", help=(
    "run the detection check in a child process with time and memory limits"))]


def parse_numbers(text: str | None, option: str, counts: tuple[int, ...], example: str) -> tuple[float, ...] | None:
    if text is None:
        return None
    try:
        values = tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise UsageError(f"{option} '{text}': expected comma-separated numbers, e.g. {example}") from None
    if len(values) not in counts:
        raise UsageError(f"{option} '{text}': expected {' or '.join(map(str, counts))} comma-separated numbers, "
                         f"got {len(values)}")
    return values


def parse_variances(text: str | None) -> tuple[float, ...] | None:
    return parse_numbers(text, "--variances", (4,), "0.1,0.1,0.2,0.2")


def parse_background(text: str) -> int | str | None:
    value = text.strip().lower()
    if value in ("none", ""):
        return None
    if value == "auto":
        return "auto"
    try:
        return int(value)
    except ValueError:
        raise UsageError(f"--background-class '{text}': expected a class index, 'none' or 'auto'") from None


def graft_nms_command(
    model: Annotated[Path, typer.Argument(help="the headless detector (.onnx)")],
    boxes: Annotated[str, typer.Option(metavar="TENSOR", help="box values [B, N, >=4]: boxes, or regressors to decode "
                                       "(with keypoints after the box columns)")],
    scores: Annotated[str, typer.Option(metavar="TENSOR", help="class scores [B, N, C] (may be the boxes tensor)")],
    output: Annotated[Path | None, typer.Option("--output", "-o", metavar="FILE", help="the .onnx file to write")] = None,
    anchors: AnchorsOpt = None,
    anchor_option: AnchorOptionOpt = None,
    decode: Annotated[str | None, typer.Option(metavar="KIND", help=(
        "corners | center-size | ssd | linear | yolo-v3 | yolo-v5 (default: ssd with --anchors, else after "
        "--box-format)"))] = None,
    box_format: BoxFormatOpt = None,
    box_columns: Annotated[str | None, typer.Option(metavar="START:STOP", help="the 4 box columns (default 0:4)")] = None,
    keypoint_columns: Annotated[str | None, typer.Option(metavar="START:STOP", help=(
        "keypoint columns, read as pairs in the box axis order, decoded with the boxes and kept through NMS"))] = None,
    variances: Annotated[str | None, typer.Option(metavar="A,B,C,D", help="ssd decode variances (default 0.1,0.1,0.2,0.2)")] = None,
    scale: Annotated[str | None, typer.Option(metavar="S|X,Y,W,H", help=(
        "linear decode scales: value / scale * anchor size (BlazeFace: the input size, 128)"))] = None,
    exp_size: Annotated[bool, typer.Option("--exp-size", help="linear decode: size = exp(value / scale) * anchor size")] = False,
    score_columns: Annotated[str | None, typer.Option(metavar="START:STOP", help="the class score columns (default all)")] = None,
    objectness_column: Annotated[int | None, typer.Option(metavar="INDEX", help=(
        "a box-tensor column multiplied into every class score (YOLO objectness)"))] = None,
    score_activation: Annotated[str, typer.Option(metavar="KIND", help="none | sigmoid | softmax")] = "none",
    score_clip: Annotated[float | None, typer.Option(metavar="X", help="clip raw scores to [-X, X] before the activation")] = None,
    iou: Annotated[float, typer.Option(metavar="X", help="suppress boxes with IoU above this")] = 0.45,
    score: Annotated[float, typer.Option(metavar="X", help="keep boxes with score above this")] = 0.01,
    max_per_class: Annotated[int | None, typer.Option(metavar="N", help="at most N boxes per class and image")] = None,
    max_det: Annotated[int, typer.Option(metavar="N", help="detections per image (output rows)")] = 100,
    background_class: Annotated[str, typer.Option(metavar="INDEX|none|auto", help=(
        "score column never reported; auto: none for one class or sigmoid scores, else 0"))] = "auto",
    class_agnostic: Annotated[bool, typer.Option("--class-agnostic", help=(
        "one detection per box (its best class), NMS across classes"))] = False,
    nms: Annotated[str, typer.Option(metavar="KIND", help="hard | weighted (MediaPipe's blended NMS)")] = "hard",
    output_format: Annotated[str, typer.Option(metavar="FORMAT", help="boxes-scores-classes | indices")] = "boxes-scores-classes",
    feeds: FeedsOpt = None,
    input: InputOpt = [],  # noqa: B006 - typer needs a literal default
    check: Annotated[bool, typer.Option("--check/--no-check", help=(
        "run the grafted model once and fail when its scores pass --score but it detects nothing"))] = True,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="print what would be grafted (anchors per layer, ...); write nothing")] = False,
    isolate: IsolateOpt = True,
) -> None:
    """Graft decoding + NMS onto MODEL's box and score outputs."""
    from bridge.api import graft

    if output is None and not dry_run:
        raise UsageError("give -o FILE (or --dry-run to print the plan only)")
    scales = parse_numbers(scale, "--scale", (1, 4), "128 or 128,128,128,128")
    result = graft(model, output, dry_run=dry_run, check=check, feeds=feeds, inputs=input, isolated=isolate,
                   boxes=boxes,
                   scores=scores, anchors=anchors, anchor_options=parse_anchor_options(anchor_option),
                   decode=decode, box_format=box_format, box_columns=box_columns, keypoint_columns=keypoint_columns,
                   variances=parse_variances(variances), scales=scales, exp_size=exp_size,
                   score_columns=score_columns, objectness_column=objectness_column,
                   score_activation=score_activation, score_clip=score_clip, iou=iou, score=score,
                   max_per_class=max_per_class, max_det=max_det,
                   background_class=parse_background(background_class), class_agnostic=class_agnostic, nms=nms,
                   output_format=output_format)
    for line in result.plan.describe():
        out.print(line, markup=False, highlight=False, soft_wrap=True)
    if result.check is not None:
        out.print(result.check.describe(), markup=False, highlight=False, soft_wrap=True)
    if result.output is None:
        out.print("dry run: nothing written", markup=False, highlight=False, soft_wrap=True)
        return
    out.print(f"{model} -> {result.output} written (outputs: {', '.join(result.outputs)})", markup=False,
              highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    """Add the ``graft-nms`` command to ``app`` (idempotent)."""
    if any(c.name == "graft-nms" for c in app.registered_commands):
        return
    app.command("graft-nms", epilog=examples(
        "bridge graft-nms out/tiny.onnx --boxes boxes --scores scores --iou 0.45 --max-det 100 -o out/tiny_nms.onnx",
        "bridge graft-nms out/tiny.onnx --boxes boxes --scores scores --background-class none --output-format "
        "indices -o out/tiny_indices.onnx",
        # MediaPipe-style: the boxes read as regressors of anchors generated by its SsdAnchorsCalculator's rules
        "bridge graft-nms out/tiny.onnx --boxes boxes --scores scores --anchors ssd --anchor-option num_layers=1 "
        "--anchor-option strides=8 --anchor-option input_size_height=64 --anchor-option input_size_width=64 "
        "--anchor-option min_scale=0.2 --anchor-option max_scale=0.5 --anchor-option aspect_ratios=1.0,2.0 "
        "--anchor-option interpolated_scale_aspect_ratio=0 --decode linear --scale 64 --box-format cxcywh "
        "--score-activation sigmoid --score-clip 100 --nms weighted --input images:1,3,64,64 -o out/tiny_anchored.onnx",
        "bridge graft-nms out/tiny.onnx --boxes boxes --scores scores --box-format cxcywh --decode center-size "
        "--class-agnostic --dry-run"))(graft_nms_command)
