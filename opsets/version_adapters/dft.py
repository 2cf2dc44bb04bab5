"""DFT-20 -> DFT-17: the ``axis`` input goes back to an attribute.

DFT-20 takes ``axis`` as an optional scalar input, default ``-2`` (the last signal axis); DFT-17 as an attribute,
default ``1`` (onnx/defs/math/defs.cc and old.cc). Both accept negative axes in ``[-r, -2]``; the value is
copied as it is, so the input rank need not be known. A computed axis has no DFT-17 form and is refused
(onnx's own DFT 20 -> 19 adapter also refuses it, and rejects even an initializer axis).
"""

from __future__ import annotations

import onnx_ir as ir

from bridge.rewriting import Builder
from opsets.registry import register
from opsets.version_adapters._util import Rewritten, const_array, fail, input_or_none


@register("DFT", 20, 17)
def dft_20_17(b: Builder, node: ir.Node) -> Rewritten:
    axis_value = input_or_none(node, 2)
    axis = -2
    if axis_value is not None:
        array = const_array(axis_value)
        if array is None or array.size != 1:
            raise fail(node, "dft_20_17", "axis is computed; DFT-17 takes it as an attribute")
        axis = int(array.reshape(()))
    attrs: dict[str, object] = {"axis": axis}
    for name in ("inverse", "onesided"):
        if name in node.attributes:
            attrs[name] = node.attributes[name].as_int()
    inputs = list(node.inputs[:2])
    while inputs and inputs[-1] is None:
        inputs.pop()
    return [b.op("DFT", *inputs, **attrs)]
