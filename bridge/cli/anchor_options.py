"""The anchor options ``graft-nms`` and ``inspect --anchors`` both take (``--anchors``, ``--anchor-option``,
``--box-format``): declared here once, parsed by ``parse_anchor_options``, resolved by the one resolver
``bridge.graft.anchor_spec.resolve_anchors``.

They are graft's own options, not the conversion's (``bridge.conversion.options`` declares every option of the
commands that convert or validate, with its bounds); this module imports typer only, so both commands show their
help without importing numpy and onnx.
"""

from __future__ import annotations

from typing import Annotated

import typer

from bridge.errors import UsageError

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
