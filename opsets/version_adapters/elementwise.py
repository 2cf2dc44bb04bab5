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


@register("Mod", 28, 13)
def mod_28_13(b: Builder, node: ir.Node) -> Rewritten:
    """Mod-28 allowed ``fmod=0`` (floored, the divisor's sign) on floats; Mod-13 takes floats only with ``fmod=1``.

    Floored from truncated as CPython's float ``%`` (Objects/floatobject.c ``float_rem``): ``r = fmod(a, b)``; a
    nonzero ``r`` whose sign differs from ``b``'s becomes ``r + b``; a zero ``r`` takes ``b``'s sign. That gives
    Mod-28's special cases too (NaN for an infinite ``a`` or a zero ``b``; ``b`` itself for an infinite ``b``
    against a finite ``a`` of the other sign). Integer Mods and ``fmod=1`` are already in their Mod-13 form.
    """
    a, d = node.inputs[0], node.inputs[1]
    fmod = node.attributes.get("fmod")
    dtype = None if a is None else a.dtype
    if (fmod is not None and fmod.as_int() == 1) or (dtype is not None and dtype not in _FLOATS):
        return None
    if dtype is None or a is None or d is None:
        raise fail(node, "mod_28_13", "the input type must be known (floats need a rewrite, integers do not)")
    np_dtype = dtype.numpy()
    zero = b.const(np.zeros((), np_dtype))
    r = b.op("Mod", a, d, fmod=1)
    negative_d = b.op("Less", d, zero)
    is_zero = b.op("Equal", r, zero)
    flip = b.op("And", b.op("Not", is_zero), b.op("Xor", b.op("Less", r, zero), negative_d))
    out = b.where(flip, b.op("Add", r, d), r)
    # the sign goes on by a product: onnxruntime's Where does not keep a -0.0 it selects
    sign = b.where(is_zero, b.op("Sign", d), b.op("Sign", out))
    return [b.op("Mul", b.op("Abs", out), sign)]
