"""Col2Im-18 -> opset 17: a grouped ConvTranspose with a one-hot kernel, as Col2Im does not exist before 18.

Col2Im (torch ``fold``) sums each column of ``[N, C * prod(block), L]`` into its block of the image.
Viewed as ``[N, C * prod(block), *blocks]`` (L is the blocks' raster), that is ConvTranspose with
``group=C`` and a weight ``[C * prod(block), 1, *block]`` whose channel ``c * prod(block) + j`` is one at
kernel position ``j`` (raster order, as in onnx's Col2Im reference) and zero elsewhere; strides,
dilations and pads carry over, and ``output_padding`` makes the output exactly ``image_shape``.
``image_shape``, ``block_shape`` and the column dimension must be constant.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from bridge.rewriting import Builder
from bridge.rewriting.attrs import optional_ints
from opsets.registry import register
from opsets.version_adapters._util import Rewritten, const_array, fail


@register("Col2Im", 18, 17)
def col2im_18_17(b: Builder, node: ir.Node) -> Rewritten:
    hop = "col2im_18_17"
    x = node.inputs[0]
    image, block = const_array(node.inputs[1]), const_array(node.inputs[2])
    if image is None or block is None:
        raise fail(node, hop, "image_shape and block_shape must be constant")
    image_shape, block_shape = [int(v) for v in image], [int(v) for v in block]
    k = len(block_shape)
    columns = None if x is None or x.shape is None else x.shape[1]
    kernel = int(np.prod(block_shape))
    if not isinstance(columns, int) or columns % kernel:
        raise fail(node, hop, "the column dimension must be static and a multiple of prod(block_shape)")
    channels = columns // kernel
    strides = optional_ints(node, "strides") or [1] * k
    dilations = optional_ints(node, "dilations") or [1] * k
    pads = optional_ints(node, "pads") or [0] * (2 * k)
    blocks, output_padding = [], []
    for i in range(k):
        span = dilations[i] * (block_shape[i] - 1) + 1
        count = (image_shape[i] + pads[i] + pads[i + k] - span) // strides[i] + 1
        blocks.append(count)
        output_padding.append(image_shape[i] - (strides[i] * (count - 1) + span - pads[i] - pads[i + k]))
    dtype = x.dtype.numpy() if x is not None and x.dtype is not None else np.float32
    weight = np.zeros((channels * kernel, 1, *block_shape), dtype=dtype)
    for c in range(channels):
        for j in range(kernel):
            weight[(c * kernel + j, 0, *np.unravel_index(j, block_shape))] = 1
    shaped = b.op("Reshape", x, b.i64(0, columns, *blocks))
    out = b.op("ConvTranspose", shaped, b.const(weight), group=channels, strides=strides, dilations=dilations,
               pads=pads, output_padding=output_padding, kernel_shape=block_shape)
    return [out]
