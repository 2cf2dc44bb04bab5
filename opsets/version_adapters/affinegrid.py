"""AffineGrid-20 -> opset 19: the base grid built from Range and transformed by a MatMul with ``theta``, as
AffineGrid does not exist before 20.

For ``size = [N, C, *spatial]`` (2-D: ``H, W``; 3-D: ``D, H, W``) each spatial axis of length ``L`` gets
normalised coordinates in [-1, 1]: ``(2 i + 1) / L - 1`` without ``align_corners``, ``-1 + 2 i / (L - 1)``
with it (``-1`` when ``L`` is 1), as in onnx's reference (onnx/reference/ops/op_affine_grid.py). The
homogeneous base grid ``[*spatial, k + 1]`` holds ``(x, y[, z], 1)`` with ``x`` along the last axis; the result
is ``theta @ base`` per batch, ``[N, *spatial, k]``. ``size`` may be computed (the lengths are read at run
time); its length must be static.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from bridge.rewriting import Builder
from bridge.rewriting.attrs import optional_int
from opsets.registry import register
from opsets.version_adapters._util import Rewritten, fail


@register("AffineGrid", 20, 19)
def affinegrid_20_19(b: Builder, node: ir.Node) -> Rewritten:
    hop = "affinegrid_20_19"
    theta, size = node.inputs[0], node.inputs[1]
    length = None if size is None or size.shape is None or len(size.shape) != 1 else size.shape[0]
    if theta is None or size is None or length not in (4, 5):
        raise fail(node, hop, "size must be a 1-D tensor of static length 4 or 5")
    assert isinstance(length, int)
    k = length - 2
    dtype = theta.dtype or ir.DataType.FLOAT
    np_dtype = dtype.numpy().type
    align = optional_int(node, "align_corners", 0) != 0
    spatial = b.op("Slice", size, b.i64(2), b.i64(length), b.i64(0))
    one, two = b.const(np.asarray(1, np_dtype)), b.const(np.asarray(2, np_dtype))
    coords: list[ir.Value] = []
    for i in range(k):  # size order: D, H, W
        count = b.op("Squeeze", b.op("Slice", size, b.i64(2 + i), b.i64(3 + i), b.i64(0)), b.i64(0))
        index = b.cast(b.op("Range", b.const(np.asarray(0, np.int64)), count, b.const(np.asarray(1, np.int64))), dtype)
        extent = b.cast(count, dtype)
        if align:
            step = b.op("Div", two, b.op("Max", b.op("Sub", extent, one), one))
            coord = b.op("Sub", b.op("Mul", index, step), one)
        else:
            coord = b.op("Sub", b.op("Div", b.op("Add", b.op("Mul", index, two), one), extent), one)
        view = [1] * k
        view[i] = -1
        coords.append(b.unsqueeze(b.op("Expand", b.op("Reshape", coord, b.i64(*view)), spatial), k))
    ones = b.unsqueeze(b.op("Expand", b.const(np.ones([1] * k, np_dtype)), spatial), k)
    base = b.op("Concat", *reversed(coords), ones, axis=k)  # [*spatial, k + 1]: x (last axis) first
    flat = b.op("Reshape", base, b.i64(-1, k + 1))
    grid = b.op("MatMul", flat, b.op("Transpose", theta, perm=[0, 2, 1]))  # [N, P, k]
    batch = b.op("Slice", b.op("Shape", theta), b.i64(0), b.i64(1), b.i64(0))
    return [b.op("Reshape", grid, b.op("Concat", batch, spatial, b.i64(k), axis=0))]
