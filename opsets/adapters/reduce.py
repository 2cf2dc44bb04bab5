"""Axes-as-input down-adapters: Reduce* (ReduceSum at 13, the others at 18), Squeeze/Unsqueeze (13).

The axes input must be constant to become an attribute. An empty/absent axes input means
"all axes" unless noop_with_empty_axes=1, which makes the op an Identity.
"""

from __future__ import annotations

import onnx_ir as ir

from opsets.adapters._util import attr_int, const_array, fail, input_or_none, replace
from opsets.registry import register

_AXES_INPUT_SINCE_18 = ("ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
                        "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")


def _axes_to_attribute(node: ir.Node, hop: str) -> list[ir.Node]:
    axes_value = input_or_none(node, 1)
    axes = const_array(axes_value)
    if axes_value is not None and axes is None:
        raise fail(node, hop, "the axes input is computed; the older schema needs constant axes")
    tape = ir.tape.Tape()
    if axes is None or axes.size == 0:
        if attr_int(node, "noop_with_empty_axes", 0):
            return replace(node, tape, [tape.op("Identity", [node.inputs[0]])])
        attrs: dict[str, object] = {}
    else:
        attrs = {"axes": [int(a) for a in axes.reshape(-1)]}
    attrs["keepdims"] = attr_int(node, "keepdims", 1)
    out = tape.op(node.op_type, [node.inputs[0]], attributes=attrs)  # type: ignore[arg-type]
    return replace(node, tape, [out])


def _make(op: str, frm: int, to: int) -> None:
    name = f"{op.lower()}_{frm}_{to}"

    def adapter(node: ir.Node) -> list[ir.Node]:
        return _axes_to_attribute(node, name)

    adapter.__name__ = adapter.__qualname__ = name
    register(op, frm, to)(adapter)
    globals()[name] = adapter


for _op in _AXES_INPUT_SINCE_18:
    _make(_op, 18, 13)
_make("ReduceSum", 13, 11)


def _axes_input_to_attribute(node: ir.Node, hop: str) -> list[ir.Node]:
    """Squeeze/Unsqueeze-13 -> 11: constant axes input to attribute."""
    axes_value = input_or_none(node, 1)
    axes = const_array(axes_value)
    if axes_value is not None and axes is None:
        raise fail(node, hop, "the axes input is computed; the opset-11 form needs constant axes")
    tape = ir.tape.Tape()
    attrs = {} if axes is None else {"axes": [int(a) for a in axes.reshape(-1)]}
    return replace(node, tape, [tape.op(node.op_type, [node.inputs[0]], attributes=attrs)])


@register("Squeeze", 13, 11)
def squeeze_13_11(node: ir.Node) -> list[ir.Node]:
    return _axes_input_to_attribute(node, "squeeze_13_11")


@register("Unsqueeze", 13, 11)
def unsqueeze_13_11(node: ir.Node) -> list[ir.Node]:
    if input_or_none(node, 1) is None:
        raise fail(node, "unsqueeze_13_11", "Unsqueeze without axes is invalid")
    return _axes_input_to_attribute(node, "unsqueeze_13_11")
