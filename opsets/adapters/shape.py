"""Shape-15 -> Shape-13: the start/end attributes become a Slice of the full shape."""

from __future__ import annotations

import onnx_ir as ir

from opsets.adapters._util import attr_int, const, in_place, replace
from opsets.registry import register


@register("Shape", 15, 13)
def shape_15_13(node: ir.Node) -> list[ir.Node]:
    if "start" not in node.attributes and "end" not in node.attributes:
        return in_place(node)
    start = attr_int(node, "start", 0)
    end = attr_int(node, "end", 2**63 - 1)  # Slice clamps, as Shape-15 does (onnx/defs/tensor/defs.cc)
    if start == 0 and end == 2**63 - 1:
        return in_place(node, drop_attrs=["start", "end"])
    tape = ir.tape.Tape()
    full = tape.op("Shape", [node.inputs[0]])
    out = tape.op("Slice", [full, const(tape, [start], "int64"), const(tape, [end], "int64"), const(tape, [0], "int64")])
    return replace(node, tape, [out])
