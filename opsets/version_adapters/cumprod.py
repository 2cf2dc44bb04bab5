"""CumProd-26 -> opset 25: a ReduceProd over a triangular mask, as CumProd does not exist before 26.

``y[.., i, ..] = prod(x[.., j, ..] for j <= i)`` along ``axis`` (``j < i`` when ``exclusive``, ``j >= i`` /
``j > i`` when ``reverse``; an empty product is 1). The input gets a new axis in front of ``axis`` for
``i``, ``Where(mask[i, j], x, 1)`` fills the ``[n, n]`` grid, and ReduceProd over ``j`` leaves ``y``: only
multiplications, exact for integers and without the sign and zero trouble of ``exp(cumsum(log|x|))``.
The mask is built from the axis' run-time size (Range), so dynamic sizes convert; memory grows with ``n^2``
along the axis. ``axis`` must be a constant and the input rank known.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from bridge.rewriting import Builder
from bridge.rewriting.attrs import optional_int
from opsets.registry import register
from opsets.version_adapters._util import Rewritten, const_array, fail


@register("CumProd", 26, 25)
def cumprod_26_25(b: Builder, node: ir.Node) -> Rewritten:
    hop = "cumprod_26_25"
    x = node.inputs[0]
    axis_value = const_array(node.inputs[1])
    if x is None or x.shape is None:
        raise fail(node, hop, "the input rank must be known")
    if axis_value is None or axis_value.size != 1:
        raise fail(node, hop, "axis must be a constant scalar")
    rank = len(x.shape)
    axis = int(axis_value.reshape(())) % rank
    exclusive = optional_int(node, "exclusive", 0) != 0
    reverse = optional_int(node, "reverse", 0) != 0
    size = b.op("Squeeze", b.dim(x, axis), b.i64(0))
    index = b.op("Range", b.const(np.asarray(0, np.int64)), size, b.const(np.asarray(1, np.int64)))
    rows, cols = b.unsqueeze(index, 1), b.unsqueeze(index, 0)  # i, j
    compare = {(False, False): "LessOrEqual", (True, False): "Less",
               (False, True): "GreaterOrEqual", (True, True): "Greater"}[(exclusive, reverse)]
    mask = b.op(compare, cols, rows)  # [n_i, n_j]
    trailing = rank - axis - 1
    if trailing:
        mask = b.unsqueeze(mask, *range(2, 2 + trailing))
    dtype = x.dtype.numpy() if x.dtype is not None else np.float32
    grid = b.where(mask, b.unsqueeze(x, axis), b.const(np.asarray(1, dtype)))  # [.., n_i, n_j, ..]
    return [b.reduce("ReduceProd", grid, [axis + 1], keepdims=0)]
