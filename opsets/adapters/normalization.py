"""LayerNormalization-17 -> opset 16: decomposed, as the op does not exist before 17.

Formula from the LayerNormalization-17 function body (onnx/defs/nn/defs.cc): over the axes
``axis..rank-1``, ``y = (x - mean) / sqrt(var + epsilon) * scale + bias`` with the population
variance; ReduceMean is emitted in its opset-13..17 form (axes attribute). Only output 0 is
produced: optional Mean / InvStdDev outputs must be unused.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from opsets.adapters._util import attr_int, const, fail, input_or_none, replace
from opsets.registry import register


@register("LayerNormalization", 17, 16)
def layernormalization_17_16(node: ir.Node) -> list[ir.Node]:
    hop = "layernormalization_17_16"
    if any(out.uses() for out in node.outputs[1:]) or any(out.is_graph_output() for out in node.outputs[1:]):
        raise fail(node, hop, "the Mean/InvStdDev outputs are used; the decomposition only yields Y")
    x = node.inputs[0]
    if x is None or x.shape is None:
        raise fail(node, hop, "the input rank must be known")
    if attr_int(node, "stash_type", 1) != 1:
        raise fail(node, hop, "stash_type other than float is not supported")
    rank = len(x.shape)
    axis = attr_int(node, "axis", -1) % rank
    axes = list(range(axis, rank))
    dtype = x.dtype.numpy() if x.dtype is not None else np.float32
    eps = node.attributes["epsilon"].as_float() if "epsilon" in node.attributes else 1e-5
    tape = ir.tape.Tape()
    mean = tape.op("ReduceMean", [x], attributes={"axes": axes, "keepdims": 1})
    centred = tape.op("Sub", [x, mean])
    var = tape.op("ReduceMean", [tape.op("Mul", [centred, centred])], attributes={"axes": axes, "keepdims": 1})
    std = tape.op("Sqrt", [tape.op("Add", [var, const(tape, np.asarray(eps, dtype=dtype))])])
    y = tape.op("Mul", [tape.op("Div", [centred, std]), node.inputs[1]])
    bias = input_or_none(node, 2)
    if bias is not None:
        y = tape.op("Add", [y, bias])
    new_nodes = replace(node, tape, [y])
    return new_nodes
