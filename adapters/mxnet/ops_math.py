"""Translators for MXNet's elementwise arithmetic: broadcast_*, elemwise_*, _*_scalar, unary math.

MXNet comparisons return 0/1 in the input dtype (not bool), so ONNX's boolean result is cast back.
Scalars are cast to the input dtype first, as MXNet does (``OP::Map(a, DType(scalar))`` in
src/operator/tensor/elemwise_binary_scalar_op.h).
"""

from __future__ import annotations

from onnx import TensorProto

from adapters.mxnet.context import ConversionContext
from adapters.mxnet.registry import out, translator
from adapters.mxnet.symbol import MXNode

# MXNet binary op -> (ONNX op, negate result). Tensor-tensor forms; all broadcast in ONNX.
BINARY: dict[str, tuple[str, bool]] = {
    "broadcast_add": ("Add", False), "broadcast_plus": ("Add", False), "elemwise_add": ("Add", False),
    "_plus": ("Add", False), "_Plus": ("Add", False), "_add": ("Add", False),
    "broadcast_sub": ("Sub", False), "broadcast_minus": ("Sub", False), "elemwise_sub": ("Sub", False),
    "_minus": ("Sub", False), "_Minus": ("Sub", False), "_sub": ("Sub", False),
    "broadcast_mul": ("Mul", False), "elemwise_mul": ("Mul", False), "_mul": ("Mul", False), "_Mul": ("Mul", False),
    "broadcast_div": ("Div", False), "elemwise_div": ("Div", False), "_div": ("Div", False), "_Div": ("Div", False),
    "broadcast_maximum": ("Max", False), "_maximum": ("Max", False), "_Maximum": ("Max", False),
    "broadcast_minimum": ("Min", False), "_minimum": ("Min", False), "_Minimum": ("Min", False),
    "broadcast_power": ("Pow", False), "_power": ("Pow", False), "_Power": ("Pow", False),
    "broadcast_equal": ("Equal", False), "_equal": ("Equal", False),
    "broadcast_not_equal": ("Equal", True), "_not_equal": ("Equal", True),
    "broadcast_greater": ("Greater", False), "_greater": ("Greater", False),
    "broadcast_greater_equal": ("GreaterOrEqual", False), "_greater_equal": ("GreaterOrEqual", False),
    "broadcast_lesser": ("Less", False), "_lesser": ("Less", False),
    "broadcast_lesser_equal": ("LessOrEqual", False), "_lesser_equal": ("LessOrEqual", False),
    "broadcast_logical_and": ("And", False), "broadcast_logical_or": ("Or", False),
    "broadcast_logical_xor": ("Xor", False),
}
_COMPARE = {"Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual"}
_LOGICAL = {"And", "Or", "Xor"}

# MXNet scalar op -> (ONNX op, scalar on the left)
SCALAR: dict[str, tuple[str, bool]] = {
    "_plus_scalar": ("Add", False), "_PlusScalar": ("Add", False),
    "_minus_scalar": ("Sub", False), "_MinusScalar": ("Sub", False),
    "_rminus_scalar": ("Sub", True), "_RMinusScalar": ("Sub", True),
    "_mul_scalar": ("Mul", False), "_MulScalar": ("Mul", False),
    "_div_scalar": ("Div", False), "_DivScalar": ("Div", False),
    "_rdiv_scalar": ("Div", True), "_RDivScalar": ("Div", True),
    "_power_scalar": ("Pow", False), "_rpower_scalar": ("Pow", True),
    "_maximum_scalar": ("Max", False), "_minimum_scalar": ("Min", False),
    "_equal_scalar": ("Equal", False), "_not_equal_scalar": ("NotEqual", False),
    "_greater_scalar": ("Greater", False), "_greater_equal_scalar": ("GreaterOrEqual", False),
    "_lesser_scalar": ("Less", False), "_lesser_equal_scalar": ("LessOrEqual", False),
}

UNARY: dict[str, str] = {
    "exp": "Exp", "log": "Log", "sqrt": "Sqrt", "abs": "Abs", "negative": "Neg", "reciprocal": "Reciprocal",
    "sigmoid": "Sigmoid", "tanh": "Tanh", "relu": "Relu", "floor": "Floor", "ceil": "Ceil", "erf": "Erf",
    "sin": "Sin", "cos": "Cos", "sign": "Sign", "softsign": "Softsign",
}


def _compare_result(ctx: ConversionContext, node: MXNode, op: str, a: str, b: str, negate: bool, like: str) -> list[str]:
    boolean = ctx.emit(op, [a, b], 1, name=f"{node.name}__{op.lower()}")[0]
    if negate:
        boolean = ctx.emit("Not", [boolean], 1, name=f"{node.name}__not")[0]
    return ctx.emit("Cast", [boolean], [out(ctx, node)], name=node.name, to=ctx.elem(like) or TensorProto.FLOAT)


@translator(*BINARY)
def broadcast_add(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    op, negate = BINARY[node.op]
    a, b = inputs[:2]
    if op in _COMPARE:
        return _compare_result(ctx, node, op, a, b, negate, a)
    if op in _LOGICAL:
        ab = [ctx.emit("Cast", [t], 1, name=f"{node.name}__bool", to=TensorProto.BOOL)[0] for t in (a, b)]
        r = ctx.emit(op, ab, 1, name=f"{node.name}__{op.lower()}")[0]
        return ctx.emit("Cast", [r], [out(ctx, node)], name=node.name, to=ctx.elem(a) or TensorProto.FLOAT)
    return ctx.emit(op, [a, b], [out(ctx, node)], name=node.name)


@translator(*SCALAR)
def _plus_scalar(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    op, left = SCALAR[node.op]
    x = inputs[0]
    # float tensors: float32 of the decimal string; integer tensors: the double truncated to DType
    is_float = ctx.np_dtype(x).kind == "f"
    value = node.attrs.optional_float("scalar", 0.0) if is_float else float(node.attrs.optional_str("scalar", "0") or 0)
    s = ctx.scalar(value, x, f"{node.name}__scalar")
    a, b = (s, x) if left else (x, s)
    if op == "NotEqual":
        return _compare_result(ctx, node, "Equal", a, b, True, x)
    if op in _COMPARE:
        return _compare_result(ctx, node, op, a, b, False, x)
    return ctx.emit(op, [a, b], [out(ctx, node)], name=node.name)


@translator(*UNARY)
def exp(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    return ctx.emit(UNARY[node.op], inputs[:1], [out(ctx, node)], name=node.name)


@translator("square")
def square(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    return ctx.emit("Mul", [inputs[0], inputs[0]], [out(ctx, node)], name=node.name)


@translator("rsqrt")
def rsqrt(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    s = ctx.emit("Sqrt", inputs[:1], 1, name=f"{node.name}__sqrt")[0]
    return ctx.emit("Reciprocal", [s], [out(ctx, node)], name=node.name)


@translator("round")
def round(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:  # MXNet op name
    # MXNet rounds half away from zero (mshadow_op.h round = ::roundf); ONNX Round is half-to-even:
    # sign(x) * floor(|x| + 0.5)
    x = inputs[0]
    ab = ctx.emit("Abs", [x], 1, name=f"{node.name}__abs")[0]
    f = ctx.emit("Floor", [ctx.emit("Add", [ab, ctx.scalar(0.5, x, f"{node.name}__half")], 1,
                                    name=f"{node.name}__add")[0]], 1, name=f"{node.name}__floor")[0]
    sg = ctx.emit("Sign", [x], 1, name=f"{node.name}__sign")[0]
    return ctx.emit("Mul", [sg, f], [out(ctx, node)], name=node.name)


@translator("ElementWiseSum", "add_n")
def ElementWiseSum(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    return ctx.emit("Sum", inputs, [out(ctx, node)], name=node.name)
