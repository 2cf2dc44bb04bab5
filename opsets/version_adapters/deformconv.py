"""DeformConv-19 -> opset 18 (2-D): bilinear sampling with GridSample, then the convolution as a MatMul, as
DeformConv does not exist before 19.

Kernel tap ``k`` of output position ``(oh, ow)`` reads the input at ``(oh * sh - pad_top + kh * dh + dy,
ow * sw - pad_left + kw * dw + dx)``, the offsets ``(dy, dx)`` from ``offset`` (``[N, G * 2 * K, oH, oW]``,
pairs per offset group ``G`` and tap), bilinearly with zeros outside the image: GridSample-16 with
``align_corners=1`` and zero padding, on the input viewed as ``[N * G, C / G, H, W]`` and a grid of all taps
``[N * G, K * oH, oW, 2]``. The samples (times ``mask`` when given) form columns ``[N, C * K, oH * oW]``; the
weight ``[oC, C / group, kH, kW]`` multiplies them per group, and ``B`` is added. Input and output spatial sizes
must be static (they fix the grid's normalisation and the base positions).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from bridge.rewriting import Builder
from bridge.rewriting.attrs import optional_int, optional_ints
from opsets.registry import register
from opsets.version_adapters._util import Rewritten, fail, input_or_none, static_shape


@register("DeformConv", 19, 18)
def deformconv_19_18(b: Builder, node: ir.Node) -> Rewritten:
    hop = "deformconv_19_18"
    x, w, offset = node.inputs[0], node.inputs[1], node.inputs[2]
    bias, mask = input_or_none(node, 3), input_or_none(node, 4)
    if x is None or w is None or offset is None or x.shape is None or offset.shape is None:
        raise fail(node, hop, "X, W and offset must have known shapes")
    if len(x.shape) != 4:
        raise fail(node, hop, f"only 2-D DeformConv converts (X has rank {len(x.shape)})")
    w_shape = static_shape(w)
    height, width = x.shape[2], x.shape[3]
    out_h, out_w = offset.shape[2], offset.shape[3]
    channels = x.shape[1]
    if w_shape is None or not all(isinstance(d, int) for d in (height, width, out_h, out_w, channels)):
        raise fail(node, hop, "the weight shape, X's channels and spatial sizes and offset's spatial sizes must be static")
    assert isinstance(height, int) and isinstance(width, int) and isinstance(out_h, int) and isinstance(out_w, int)
    assert isinstance(channels, int)
    out_c, kh_n, kw_n = w_shape[0], w_shape[2], w_shape[3]
    taps = kh_n * kw_n
    groups, offset_groups = optional_int(node, "group", 1), optional_int(node, "offset_group", 1)
    sh, sw = optional_ints(node, "strides") or [1, 1]
    dh, dw = optional_ints(node, "dilations") or [1, 1]
    pads = optional_ints(node, "pads") or [0, 0, 0, 0]
    dtype = x.dtype.numpy().type if x.dtype is not None else np.float32
    # base sampling positions of every tap and output position, [K, oH, oW]
    kh, kw = np.divmod(np.arange(taps), kw_n)
    base_y = (np.arange(out_h)[None, :, None] * sh - pads[0] + kh[:, None, None] * dh) * np.ones((1, 1, out_w))
    base_x = (np.arange(out_w)[None, None, :] * sw - pads[1] + kw[:, None, None] * dw) * np.ones((1, out_h, 1))
    pairs = b.op("Reshape", offset, b.i64(0, offset_groups, taps, 2, out_h, out_w))
    dy = b.op("Gather", pairs, b.const(np.asarray(0, np.int64)), axis=3)  # [N, G, K, oH, oW]
    dx = b.op("Gather", pairs, b.const(np.asarray(1, np.int64)), axis=3)

    def normalised(base: np.ndarray, delta: ir.Value, size: int) -> ir.Value:
        # align_corners=1: pixel i sits at -1 + 2 i / (size - 1); a length-1 axis at 0, where GridSample puts it
        scale = 2.0 / (size - 1) if size > 1 else 0.0
        pos = b.op("Add", b.const((base * scale - (1.0 if size > 1 else 0.0)).astype(dtype)),
                   b.op("Mul", delta, b.const(np.asarray(scale, dtype))))
        return b.unsqueeze(pos, 5)

    grid = b.op("Concat", normalised(base_x, dx, width), normalised(base_y, dy, height), axis=5)
    grid = b.op("Reshape", grid, b.i64(-1, taps * out_h, out_w, 2))
    images = b.op("Reshape", x, b.i64(-1, channels // offset_groups, height, width))
    sampled = b.op("GridSample", images, grid, mode="bilinear", padding_mode="zeros", align_corners=1)
    sampled = b.op("Reshape", sampled, b.i64(-1, offset_groups, channels // offset_groups, taps, out_h, out_w))
    if mask is not None:
        sampled = b.op("Mul", sampled, b.op("Reshape", mask, b.i64(0, offset_groups, 1, taps, out_h, out_w)))
    columns = b.op("Reshape", sampled, b.i64(-1, groups, channels // groups * taps, out_h * out_w))
    weights = b.op("Reshape", w, b.i64(groups, out_c // groups, channels // groups * taps))
    y = b.op("Reshape", b.op("MatMul", weights, columns), b.i64(-1, out_c, out_h, out_w))
    if bias is not None:
        y = b.op("Add", y, b.op("Reshape", bias, b.i64(1, out_c, 1, 1)))
    return [y]
