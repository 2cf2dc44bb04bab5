"""Down-adapters for ops whose newer schema only widened the accepted types.

Relu-14 added integer types: float Relus are unchanged; an integer Relu becomes Max(x, 0),
which takes integers from Max-12 on.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from bridge.rewriting import Builder
from opsets.registry import register
from opsets.version_adapters._util import Rewritten, fail

_FLOATS = {ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.DOUBLE, ir.DataType.BFLOAT16}


@register("Relu", 14, 13)
def relu_14_13(b: Builder, node: ir.Node) -> Rewritten:
    x = node.inputs[0]
    dtype = None if x is None else x.dtype
    if dtype is None or dtype in _FLOATS:
        return None
    if dtype not in {ir.DataType.INT8, ir.DataType.INT16, ir.DataType.INT32, ir.DataType.INT64}:
        raise fail(node, "relu_14_13", f"Relu on {dtype} has no opset-13 form")
    zero = b.const(np.zeros((), dtype=dtype.numpy()))
    return [b.op("Max", x, zero)]
