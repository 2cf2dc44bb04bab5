"""LpPool-18 -> LpPool-11: LpPool-18 added ``dilations`` and ``ceil_mode``; at their neutral values
(all ones, 0) the node is already in LpPool-11 form, otherwise it has none."""

from __future__ import annotations

import onnx_ir as ir

from bridge.rewriting import Builder
from bridge.rewriting.attrs import optional_int, optional_ints
from opsets.registry import register
from opsets.version_adapters._util import Rewritten, fail, in_place


@register("LpPool", 18, 11)
def lppool_18_11(b: Builder, node: ir.Node) -> Rewritten:
    if optional_int(node, "ceil_mode", 0) != 0:
        raise fail(node, "lppool_18_11", "ceil_mode=1 does not exist before LpPool-18")
    if any(d != 1 for d in optional_ints(node, "dilations") or []):
        raise fail(node, "lppool_18_11", "dilations other than 1 do not exist before LpPool-18")
    return in_place(node, drop_attrs=["ceil_mode", "dilations"])
