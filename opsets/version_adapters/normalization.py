"""LayerNormalization-17 -> opset 16: decomposed, as the op does not exist before 17.

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
