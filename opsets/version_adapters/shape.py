"""Shape-15 -> Shape-13: the start/end attributes become a Slice of the full shape."""

from __future__ import annotations

import onnx_ir as ir

from bridge.rewriting import Builder
from bridge.rewriting.attrs import optional_int
from opsets.registry import register
from opsets.version_adapters._util import Rewritten, in_place


@register("Shape", 15, 13)
def shape_15_13(b: Builder, node: ir.Node) -> Rewritten:
    if "start" not in node.attributes and "end" not in node.attributes:
        return in_place(node)
    start = optional_int(node, "start", 0)
    end = optional_int(node, "end", 2**63 - 1)  # Slice clamps, as Shape-15 does (onnx/defs/tensor/defs.cc)
    if start == 0 and end == 2**63 - 1:
        return in_place(node, drop_attrs=["start", "end"])
    full = b.op("Shape", node.inputs[0])
    out = b.op("Slice", full, b.const([start], "int64"), b.const([end], "int64"), b.const([0], "int64"))
    return [out]
