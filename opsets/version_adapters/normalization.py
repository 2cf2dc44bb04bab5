"""LayerNormalization-17 -> opset 16 and GroupNormalization-18/21: decomposed, as neither op exists
before its first opset.

GroupNormalization normalises each of ``num_groups`` channel groups over its channels and spatial
positions: reshaped to ``[N, G, -1]`` that is exactly an InstanceNormalization (which exists since
opset 6), then reshaped back. GroupNormalization-18 takes scale/bias per group (applied inside the
InstanceNormalization); GroupNormalization-21 per channel (applied after the reshape back) and
computes in ``stash_type`` (float by default).

Formula from the LayerNormalization-17 function body (onnx/defs/nn/defs.cc): over the axes
``axis..rank-1``, ``y = (x - mean) / sqrt(var + epsilon) * scale + bias`` with the population
variance; ReduceMean is emitted in its opset-13..17 form (axes attribute). Only output 0 is
produced: optional Mean / InvStdDev outputs must be unused.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from bridge.rewriting import Builder
from bridge.rewriting.attrs import optional_int
from opsets.registry import register
from opsets.version_adapters._util import Rewritten, fail, input_or_none


@register("LayerNormalization", 17, 16)
def layernormalization_17_16(b: Builder, node: ir.Node) -> Rewritten:
    hop = "layernormalization_17_16"
    if any(out.uses() for out in node.outputs[1:]) or any(out.is_graph_output() for out in node.outputs[1:]):
        raise fail(node, hop, "the Mean/InvStdDev outputs are used; the decomposition only yields Y")
    x = node.inputs[0]
    if x is None or x.shape is None:
        raise fail(node, hop, "the input rank must be known")
    if optional_int(node, "stash_type", 1) != 1:
        raise fail(node, hop, "stash_type other than float is not supported")
    rank = len(x.shape)
    axis = optional_int(node, "axis", -1) % rank
    axes = list(range(axis, rank))
    dtype = x.dtype.numpy() if x.dtype is not None else np.float32
    eps = node.attributes["epsilon"].as_float() if "epsilon" in node.attributes else 1e-5
    mean = b.op("ReduceMean", x, axes=axes, keepdims=1)
    centred = b.op("Sub", x, mean)
    var = b.op("ReduceMean", b.op("Mul", centred, centred), axes=axes, keepdims=1)
    std = b.op("Sqrt", b.op("Add", var, b.const(np.asarray(eps, dtype=dtype))))
    y = b.op("Mul", b.op("Div", centred, std), node.inputs[1])
    bias = input_or_none(node, 2)
    if bias is not None:
        y = b.op("Add", y, bias)
    return [y]


def _group_norm(b: Builder, node: ir.Node, hop: str, per_channel: bool) -> Rewritten:
    x, scale, bias = node.inputs[0], node.inputs[1], node.inputs[2]
    if x is None or x.shape is None or scale is None or bias is None:
        raise fail(node, hop, "the input rank must be known")
    if "num_groups" not in node.attributes:
        raise fail(node, hop, "num_groups is missing")
    groups = optional_int(node, "num_groups", 1)
    eps = node.attributes["epsilon"].as_float() if "epsilon" in node.attributes else 1e-5
    rank = len(x.shape)
    dtype = x.dtype
    stash = per_channel and optional_int(node, "stash_type", 1) == 1 and dtype not in (None, ir.DataType.FLOAT)
    work = b.cast(x, ir.DataType.FLOAT) if stash else x
    np_dtype = np.float32 if stash or dtype is None else dtype.numpy()
    grouped = b.op("Reshape", work, b.i64(0, groups, -1))
    if per_channel:
        g_scale, g_bias = b.const(np.ones(groups, np_dtype)), b.const(np.zeros(groups, np_dtype))
    else:
        g_scale, g_bias = scale, bias
    normed = b.op("InstanceNormalization", grouped, g_scale, g_bias, epsilon=eps)
    y = b.op("Reshape", normed, b.op("Shape", work))
    if stash:
        y = b.cast(y, dtype)  # type: ignore[arg-type]
    if per_channel:
        spatial = list(range(1, rank - 1))
        s = b.op("Unsqueeze", scale, b.i64(*spatial)) if spatial else scale
        o = b.op("Unsqueeze", bias, b.i64(*spatial)) if spatial else bias
        y = b.op("Add", b.op("Mul", y, s), o)
    return [y]


@register("GroupNormalization", 18, 17)
def groupnormalization_18_17(b: Builder, node: ir.Node) -> Rewritten:
    return _group_norm(b, node, "groupnormalization_18_17", per_channel=False)


@register("GroupNormalization", 21, 18)
def groupnormalization_21_18(b: Builder, node: ir.Node) -> Rewritten:
    return _group_norm(b, node, "groupnormalization_21_18", per_channel=True)
