"""Activations that became ops of their own after opset 17, decomposed for older opsets.

Mish-18: ``x * tanh(softplus(x))`` (its function body in onnx/defs/math/defs.cc). Gelu-20:
``0.5 * x * (1 + erf(x / sqrt(2)))``, or with ``approximate="tanh"``
``0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))`` (onnx/defs/math/defs.cc). Swish-24:
``x * sigmoid(alpha * x)``. SwiGLU-28: ``Swish_alpha(A) * B``.
"""

from __future__ import annotations

import math

import numpy as np
import onnx_ir as ir

from bridge.rewriting import Builder
from bridge.rewriting.attrs import optional_float, optional_str
from opsets.registry import register
from opsets.version_adapters._util import Rewritten, fail


def _scalar(b: Builder, x: ir.Value, value: float) -> ir.Value:
    dtype = x.dtype.numpy() if x.dtype is not None else np.float32
    return b.const(np.asarray(value, dtype=dtype))


@register("Mish", 18, 17)
def mish_18_17(b: Builder, node: ir.Node) -> Rewritten:
    x = node.inputs[0]
    return [b.op("Mul", x, b.op("Tanh", b.op("Softplus", x)))]


@register("Gelu", 20, 19)
def gelu_20_19(b: Builder, node: ir.Node) -> Rewritten:
    x = node.inputs[0]
    if x is None:
        raise fail(node, "gelu_20_19", "the input is missing")
    approximate = optional_str(node, "approximate", "none")
    if approximate == "tanh":
        cube = b.op("Mul", b.op("Mul", x, x), x)
        inner = b.op("Mul", _scalar(b, x, math.sqrt(2 / math.pi)), b.op("Add", x, b.op("Mul", _scalar(b, x, 0.044715), cube)))
        gate = b.op("Tanh", inner)
    elif approximate == "none":
        gate = b.op("Erf", b.op("Div", x, _scalar(b, x, math.sqrt(2))))
    else:
        raise fail(node, "gelu_20_19", f"unknown approximate={approximate!r}")
    half_x = b.op("Mul", x, _scalar(b, x, 0.5))
    return [b.op("Mul", half_x, b.op("Add", gate, _scalar(b, x, 1.0)))]


@register("Swish", 24, 23)
def swish_24_23(b: Builder, node: ir.Node) -> Rewritten:
    x = node.inputs[0]
    if x is None:
        raise fail(node, "swish_24_23", "the input is missing")
    alpha = optional_float(node, "alpha", 1.0)
    scaled = x if alpha == 1.0 else b.op("Mul", x, _scalar(b, x, alpha))
    return [b.op("Mul", x, b.op("Sigmoid", scaled))]


@register("SwiGLU", 28, 27)
def swiglu_28_27(b: Builder, node: ir.Node) -> Rewritten:
    """SwiGLU-28: ``Swish_alpha(A) * B`` (its schema, onnx/defs/math/defs.cc), with Swish spelled out as above."""
    gate, value = node.inputs[0], node.inputs[1]
    if gate is None or value is None:
        raise fail(node, "swiglu_28_27", "an input is missing")
    alpha = optional_float(node, "alpha", 1.0)
    scaled = gate if alpha == 1.0 else b.op("Mul", gate, _scalar(b, gate, alpha))
    return [b.op("Mul", b.op("Mul", gate, b.op("Sigmoid", scaled)), value)]
