"""Pad-18 -> Pad-13: the optional ``axes`` input becomes full-rank ``pads``.

Pad-18 (onnx/defs/tensor/defs.cc) pads only the listed ``axes`` (negative ones count from the end);
``pads`` then holds ``[begin_0, ..., begin_k, end_0, ..., end_k]`` for those axes. Pad-13 wants
``2 * rank`` values. Constant pads are rewritten as a constant; computed pads (e.g. a dynamo export
padding to a multiple of a window size) are scattered into zeros with ScatterElements. The axes must
be constant and the input rank known. A Pad-18 without ``axes`` is already in Pad-13 form.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from bridge.rewriting import Builder
from opsets.registry import register
from opsets.version_adapters._util import Rewritten, const_array, fail, in_place, input_or_none


@register("Pad", 18, 13)
def pad_18_13(b: Builder, node: ir.Node) -> Rewritten:
    hop = "pad_18_13"
    axes_value = input_or_none(node, 3)
    if axes_value is None:
        return in_place(node)
    axes_array = const_array(axes_value)
    if axes_array is None:
        raise fail(node, hop, "the axes input is computed; Pad-13 needs to know which axes are padded")
    x = node.inputs[0]
    if x is None or x.shape is None:
        raise fail(node, hop, "the input rank must be known to spell pads for every axis")
    rank = len(x.shape)
    axes = [int(a) % rank for a in axes_array.reshape(-1)]
    positions = np.asarray(axes + [a + rank for a in axes], dtype=np.int64)  # where each given pad goes
    pads_value = node.inputs[1]
    if pads_value is None:
        raise fail(node, hop, "the pads input is missing")
    pads = const_array(pads_value)
    if pads is not None:
        full = np.zeros(2 * rank, dtype=np.int64)
        full[positions] = pads.reshape(-1).astype(np.int64)
        new_pads = b.const(full)
    else:
        zeros = b.const(np.zeros(2 * rank, dtype=np.int64))
        new_pads = b.op("ScatterElements", zeros, b.const(positions), b.cast(pads_value, ir.DataType.INT64), axis=0)
    inputs: list[ir.Value | None] = [x, new_pads]
    value = input_or_none(node, 2)
    if value is not None:
        inputs.append(value)
    mode = node.attributes.get("mode")
    attrs = {} if mode is None else {"mode": mode.as_string()}
    return [b.op("Pad", *inputs, **attrs)]
