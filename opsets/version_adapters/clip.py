"""Clip version adapters: bounds as attributes (Clip-6) vs inputs (Clip-11+), and integer Clip.

onnx's Clip 10 -> 11 adapter always makes float bounds; on an int64/int32 Clip (invalid before
Clip-12 anyway, onnxruntime refuses it) that leaves a type mismatch that stays invalid after 12.
Ours makes the bounds the input's dtype, so the model is valid from opset 12 on. Below 12 an
integer Clip is computed in double (opsets.legalize), which is exact for int32 and |x| < 2**53.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from bridge.rewriting import Builder
from opsets.registry import register
from opsets.version_adapters._util import Rewritten, const_array, fail, input_or_none


def _np_dtype(value: ir.Value | None) -> np.dtype:
    dtype = None if value is None else value.dtype
    return np.dtype(np.float32) if dtype is None else dtype.numpy()


@register("Clip", 6, 11)
def clip_6_11(b: Builder, node: ir.Node) -> Rewritten:
    x = node.inputs[0]
    dtype = _np_dtype(x)
    bounds: list[ir.Value | None] = []
    for key in ("min", "max"):
        attr = node.attributes.get(key)
        if attr is None:
            bounds.append(None)
            continue
        value = float(attr.as_float())
        if np.issubdtype(dtype, np.integer):
            info = np.iinfo(dtype)
            value = float(np.clip(value, info.min, info.max))  # Clip-6's default bounds are float lowest/max
        bounds.append(b.const(np.asarray(value).astype(dtype)))
    while bounds and bounds[-1] is None:
        bounds.pop()
    out = b.op("Clip", x, *bounds)
    return [out]


@register("Clip", 11, 6)
def clip_11_6(b: Builder, node: ir.Node) -> Rewritten:
    attrs: dict[str, float] = {}
    for index, key in ((1, "min"), (2, "max")):
        bound = input_or_none(node, index)
        if bound is None:
            continue
        value = const_array(bound)
        if value is None:
            raise fail(node, "clip_11_6", f"Clip-6 needs a constant {key}; the {key} input is computed")
        attrs[key] = float(np.asarray(value).reshape(()))
    out = b.op("Clip", node.inputs[0], **attrs)
    return [out]


@register("Clip", 12, 11)
def clip_12_11(b: Builder, node: ir.Node) -> Rewritten:
    # Clip-12 only added integer types; integer Clips are rewritten in double by opsets.legalize
    # after the last hop (an intermediate hop may not be the target)
    return None


@register("Clip", 13, 12)
def clip_13_12(b: Builder, node: ir.Node) -> Rewritten:
    return None  # Clip-13 only added bfloat16
