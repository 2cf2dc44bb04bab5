"""Down-adapters for schema changes that only widened types or added attributes with a neutral default.

onnx's converter has no adapter for several such hops (Add/Sub/Mul/Div 14 -> 13, ...), so
down-conversion stops there even though nothing needs rewriting. Each adapter here checks the
node against the older schema -- every input/output dtype allowed by its type constraints, no
attribute or input the older schema lacks (or only at its neutral default) -- and keeps the node.
"""

from __future__ import annotations

from collections.abc import Callable

import onnx
import onnx_ir as ir

from bridge.rewriting import Builder
from opsets.registry import register
from opsets.version_adapters._util import Rewritten, const_array, fail

Droppable = Callable[[ir.Node, object], bool]  # (node, attribute value) -> may the attribute go?


def _allowzero_droppable(node: ir.Node, value: object) -> bool:
    # allowzero=1 only differs from Reshape-13 when the target shape holds a 0 (copy vs literal 0)
    shape = const_array(node.inputs[1]) if len(node.inputs) > 1 else None
    return value == 0 or (shape is not None and not (shape == 0).any())


def _all_ones(node: ir.Node, value: object) -> bool:
    return all(v == 1 for v in value)  # type: ignore[attr-defined]


def _equals(neutral: object) -> Droppable:
    return lambda node, value: value == neutral


# Schema changes that only added types (mostly bfloat16 at 13, int8/int16 at 14, float8/int4 at
# 19/21) or an attribute with a neutral default. Listed explicitly, not derived from the schemas:
# a same-signature change can still change meaning (Softmax-13, GridSample-20 mode names,
# ScatterElements-18 reductions), and those need real adapters or none.
_TYPES_ONLY: list[tuple[str, int, int, dict[str, Droppable]]] = [
    *[(op, 13, to, {}) for op, to in (
        ("Abs", 6), ("Add", 7), ("Sub", 7), ("Mul", 7), ("Div", 7), ("Ceil", 6), ("Floor", 6), ("Exp", 6),
        ("Log", 6), ("Neg", 6), ("Reciprocal", 6), ("Relu", 6), ("Sigmoid", 6), ("Sign", 9), ("Sqrt", 6),
        ("Tanh", 6), ("Erf", 9), ("Concat", 11), ("Transpose", 1), ("Identity", 1), ("Flatten", 11),
        ("Gather", 11), ("GatherElements", 11), ("Gemm", 11), ("MatMul", 9), ("Expand", 8), ("Tile", 6),
        ("Equal", 11), ("Greater", 9), ("Less", 9), ("Max", 12), ("Min", 12), ("Sum", 8), ("Mean", 8),
        ("Pow", 12), ("Shape", 1), ("Size", 1), ("Slice", 11), ("Pad", 11), ("Reshape", 5),
        ("ArgMax", 12), ("ArgMin", 12), ("DepthToSpace", 11), ("SpaceToDepth", 1), ("Cast", 9),
        ("ReduceMean", 11), ("ReduceMax", 12), ("ReduceMin", 12), ("ReduceProd", 11), ("ReduceL1", 11),
        ("ReduceL2", 11), ("ReduceLogSum", 11), ("ReduceSumSquare", 11), ("ReduceLogSumExp", 11),
    )],
    ("Constant", 13, 12, {}),
    ("Constant", 12, 11, {}),  # Constant-12 added value_float/value_ints/...: only `value` is allowed at 11
    ("ArgMax", 12, 11, {"select_last_index": _equals(0)}),
    ("ArgMin", 12, 11, {"select_last_index": _equals(0)}),
    ("Max", 12, 8, {}),
    ("Min", 12, 8, {}),
    ("Pow", 12, 7, {}),
    ("MaxPool", 12, 11, {}),
    *[(op, 14, 13, {}) for op in ("Add", "Sub", "Mul", "Div", "Identity")],
    ("Reshape", 14, 13, {"allowzero": _allowzero_droppable}),
    ("BatchNormalization", 15, 14, {}),
    ("BatchNormalization", 14, 9, {"training_mode": _equals(0)}),
    ("Pow", 15, 13, {}),
    ("CumSum", 14, 11, {}),
    ("LeakyRelu", 16, 6, {}),
    ("PRelu", 16, 9, {}),
    ("Where", 16, 9, {}),
    ("GreaterOrEqual", 16, 12, {}),
    ("LessOrEqual", 16, 12, {}),
    ("Identity", 16, 14, {}),
    ("Cast", 19, 13, {"saturate": _equals(1)}),  # saturate only affects float8 targets
    ("Constant", 19, 13, {}),
    ("Equal", 19, 13, {}),
    ("Identity", 19, 16, {}),
    ("Reshape", 19, 14, {}),
    ("Shape", 19, 15, {}),
    ("Size", 19, 13, {}),
    ("AveragePool", 19, 11, {"dilations": _all_ones}),
    ("ConstantOfShape", 20, 9, {}),
    ("IsInf", 20, 10, {}),
    ("IsNaN", 20, 13, {}),
    ("IsNaN", 13, 9, {}),
    ("GlobalMaxPool", 22, 1, {}),  # 22 added bfloat16
    ("Mod", 13, 10, {}),
    ("GatherND", 13, 12, {}),
    ("GatherND", 12, 11, {"batch_dims": _equals(0)}),
    ("ScatterElements", 13, 11, {}),
    ("ScatterND", 13, 11, {}),
    ("BitShift", 28, 11, {}),  # 28 added signed types: refused by the type check below (no older form)
    *[(op, 21, to, {}) for op, to in (
        ("Cast", 19), ("CastLike", 19), ("Constant", 19), ("ConstantOfShape", 20), ("Flatten", 13),
        ("Identity", 19), ("Pad", 19), ("Reshape", 19), ("Shape", 19), ("Size", 19), ("Squeeze", 13),
        ("Transpose", 13), ("Unsqueeze", 13),
    )],
]


def _check_older_schema(b: Builder, node: ir.Node, to: int, hop: str, neutral: dict[str, Droppable]) -> Rewritten:
    schema = onnx.defs.get_schema(node.op_type, to, "")
    known = set(schema.attributes)
    for name in list(node.attributes):
        if name in known:
            continue
        if name in neutral and neutral[name](node, node.attributes[name].value):
            del node.attributes[name]
            continue
        raise fail(node, hop, f"attribute {name} does not exist in {node.op_type}-{schema.since_version}")
    allowed = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}
    formals = [(f, v) for f, v in zip(schema.inputs, node.inputs, strict=False)]
    formals += [(f, v) for f, v in zip(schema.outputs, node.outputs, strict=False)]
    for formal, value in formals:
        if value is None or value.dtype is None or formal.type_str not in allowed:
            continue
        type_str = f"tensor({onnx.helper.tensor_dtype_to_np_dtype(value.dtype.value).name})"
        type_str = {"tensor(float32)": "tensor(float)", "tensor(float64)": "tensor(double)"}.get(type_str, type_str)
        if type_str not in allowed[formal.type_str]:
            raise fail(node, hop, f"{formal.name} is {type_str}, which {node.op_type}-{schema.since_version} does not take")
    return None


def _make(op: str, frm: int, to: int, neutral: dict[str, Droppable]) -> None:
    name = f"{op.lower()}_{frm}_{to}"

    def adapter(b: Builder, node: ir.Node) -> Rewritten:
        return _check_older_schema(b, node, to, name, neutral)

    adapter.__name__ = adapter.__qualname__ = name
    register(op, frm, to)(adapter)
    globals()[name] = adapter


for _op, _from, _to, _neutral in _TYPES_ONLY:
    _make(_op, _from, _to, _neutral)


def _reduce_bool_20_18(b: Builder, node: ir.Node) -> Rewritten:
    """ReduceMax/ReduceMin-20 added bool (any/all): on bool the reduction runs on int32 0/1 and is cast back."""
    hop = f"{node.op_type.lower()}_20_18"
    x = node.inputs[0]
    if x is None or x.dtype != ir.DataType.BOOL:
        return _check_older_schema(b, node, 18, hop, {})
    attrs = {name: attr.as_int() for name, attr in node.attributes.items()}
    reduced = b.op(node.op_type, b.cast(x, ir.DataType.INT32), *node.inputs[1:], **attrs)
    return [b.cast(reduced, ir.DataType.BOOL)]


for _op in ("ReduceMax", "ReduceMin"):
    register(_op, 20, 18)(_reduce_bool_20_18)
