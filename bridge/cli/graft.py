"""`bridge graft-nms`: add NMS (and optional SSD decoding) to a headless detector's ONNX model.

Parses the arguments and calls ``bridge.graft.graft_nms``; the model is written atomically with
``bridge.io.save_model``. Bad arguments are ``UsageError`` (exit code 2).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from bridge.cli.helptext import examples
from bridge.cli.render import out
from bridge.errors import UsageError


def parse_variances(text: str | None) -> tuple[float, ...] | None:
    if text is None:
        return None
    try:
        values = tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise UsageError(f"--variances '{text}': expected four comma-separated numbers, e.g. 0.1,0.1,0.2,0.2") from None
    if len(values) != 4:
        raise UsageError(f"--variances '{text}': expected four comma-separated numbers, got {len(values)}")
    return values


def parse_background(text: str) -> int | None:
    if text.strip().lower() in ("none", ""):
        return None
    try:
        return int(text)
    except ValueError:
        raise UsageError(f"--background-class '{text}': expected a class index or 'none'") from None


def graft_nms_command(
    model: Annotated[Path, typer.Argument(help="the headless detector (.onnx)")],
    output: Annotated[Path, typer.Option("--output", "-o", metavar="FILE", help="the .onnx file to write")],
    boxes: Annotated[str, typer.Option(metavar="TENSOR", help="tensor with boxes [B, N, 4] (or deltas when --anchors is given)")],
    scores: Annotated[str, typer.Option(metavar="TENSOR", help="tensor with class scores [B, N, C]")],
    anchors: Annotated[str | None, typer.Option(metavar="TENSOR|FILE.npy", help="anchors: a tensor of the model or an .npy file (N x 4)")] = None,
    box_format: Annotated[str, typer.Option(metavar="FORMAT", help="xyxy | yxyx | cxcywh")] = "xyxy",
    variances: Annotated[str | None, typer.Option(metavar="A,B,C,D", help="decoding variances (with --anchors)")] = None,
    iou: Annotated[float, typer.Option(metavar="X", help="suppress boxes with IoU above this")] = 0.45,
    score: Annotated[float, typer.Option(metavar="X", help="keep boxes with score above this")] = 0.01,
    max_per_class: Annotated[int | None, typer.Option(metavar="N", help="at most N boxes per class and image")] = None,
    max_det: Annotated[int, typer.Option(metavar="N", help="detections per image (output rows)")] = 100,
    background_class: Annotated[str, typer.Option(metavar="INDEX", help="score column never reported, or 'none'")] = "0",
    output_format: Annotated[str, typer.Option(metavar="FORMAT", help="boxes-scores-classes | indices")] = "boxes-scores-classes",
) -> None:
    """Graft decoding + per-class NMS onto MODEL's box and score outputs."""
    from bridge.api import graft_nms
    from bridge.io import check_writable, refuse_overwriting_inputs, save_model

    refuse_overwriting_inputs(output, [model, anchors if anchors and anchors.endswith(".npy") else None])
    check_writable(output, "-o")
    result = graft_nms(model, boxes=boxes, scores=scores, anchors=anchors, box_format=box_format,
                       variances=parse_variances(variances), iou=iou, score=score, max_per_class=max_per_class,
                       max_det=max_det, background_class=parse_background(background_class),
                       output_format=output_format)
    save_model(result, output)
    outs = ", ".join(o.name for o in result.graph.output)
    out.print(f"{model} -> {output} written (outputs: {outs})")


def register(app: typer.Typer) -> None:
    """Add the ``graft-nms`` command to ``app`` (idempotent)."""
    if any(c.name == "graft-nms" for c in app.registered_commands):
        return
    app.command("graft-nms", epilog=examples(
        "bridge graft-nms head.onnx --boxes boxes --scores scores --iou 0.45 --max-det 100 -o det.onnx",
        "bridge graft-nms head.onnx --boxes deltas --scores scores --anchors anchors.npy --box-format cxcywh "
        "--variances 0.1,0.1,0.2,0.2 -o det.onnx"))(graft_nms_command)
