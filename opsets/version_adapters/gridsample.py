"""GridSample-20 -> GridSample-16: GridSample-20 renamed the modes (``linear``/``cubic`` for 16's
``bilinear``/``bicubic``) and took N-D inputs; a 4-D GridSample-20 is a GridSample-16 with the old
mode name (onnx's converter has only the up adapter)."""

from __future__ import annotations

import onnx_ir as ir

from bridge.rewriting import Builder
from bridge.rewriting.attrs import optional_str
from opsets.registry import register
from opsets.version_adapters._util import Rewritten, fail, in_place

_OLD_MODE = {"linear": "bilinear", "cubic": "bicubic", "nearest": "nearest"}


@register("GridSample", 20, 16)
def gridsample_20_16(b: Builder, node: ir.Node) -> Rewritten:
    x = node.inputs[0]
    if x is None or x.shape is None or len(x.shape) != 4:
        raise fail(node, "gridsample_20_16", "GridSample-16 takes only 4-D inputs (rank unknown or not 4)")
    mode = optional_str(node, "mode", "linear")
    if mode not in _OLD_MODE:
        raise fail(node, "gridsample_20_16", f"unknown mode {mode!r}")
    return in_place(node, set_attrs={"mode": ir.AttrString("mode", _OLD_MODE[mode])})
