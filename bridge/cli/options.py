"""The command line's own presentation options (``--json``, ``-o``), shared by the commands that print or write,
and the anchor options ``graft-nms`` and ``inspect`` both take (``--anchors``, ``--anchor-option``,
``--box-format``: declared here once, parsed by ``parse_anchor_options``, resolved by the one resolver
``bridge.graft.anchor_spec.resolve_anchors``).

Every option that reaches ``bridge.api`` - inputs, tolerance, seed, isolation, the source, ... - is declared once
in ``bridge.conversion.options`` (in groups each command subscribes to) and turned into typer parameters there
(``cli_parameters``), with its bounds and parser; nothing here declares it again. This module imports typer only,
so a command that takes none of the conversion's options (``inspect``, ``graft-nms``) shows its help without
importing numpy and onnx.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from bridge.errors import UsageError

OutputOpt = Annotated[Path, typer.Option("--output", "-o", metavar="FILE", help="the .onnx file to write")]
AsJsonOpt = Annotated[bool, typer.Option("--json", help="print the result as JSON")]

AnchorsOpt = Annotated[str | None, typer.Option("--anchors", metavar="TENSOR|FILE|GENERATOR", help=(
    "anchors: a tensor of the model, an .npy/.csv file (N x 4), a generator spec .yaml/.json, or a generator "
    "name (ssd, multibox_prior, yolo) with --anchor-option"))]
AnchorOptionOpt = Annotated[list[str] | None, typer.Option("--anchor-option", metavar="KEY=VALUE", help=(
    "a generator parameter, e.g. strides=8,16,16,16 (repeatable; MediaPipe's names accepted)"))]
BoxFormatOpt = Annotated[str | None, typer.Option("--box-format", metavar="FORMAT", help=(
    "xyxy | yxyx | cxcywh | cycxhw: axis order (and corners vs centre-size) of the box values and anchor "
    "files; graft-nms's output boxes are corners in that axis order"))]


def parse_anchor_options(items: list[str] | None) -> dict[str, str]:
    """``--anchor-option KEY=VALUE`` items as a mapping (values are read by the generator's spec)."""
    parsed: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--anchor-option '{item}': expected KEY=VALUE, e.g. strides=8,16,16,16")
        parsed[key.strip()] = value.strip()
    return parsed
