"""Axes-as-input down-adapters: Reduce* (ReduceSum at 13, the others at 18), Squeeze/Unsqueeze (13).

The axes input must be constant to become an attribute. An empty/absent axes input means
"all axes" unless noop_with_empty_axes=1, which makes the op an Identity.
"""

from __future__ import annotations

import onnx_ir as ir

from bridge.rewriting import Builder
from bridge.rewriting.attrs import optional_int
from opsets.registry import register
from opsets.version_adapters._util import Rewritten, const_array, fail, input_or_none

_AXES_INPUT_SINCE_18 = ("ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
                        "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")


def _axes_to_attribute(b: Builder, node: ir.Node, hop: str) -> Rewritten:
    axes_value = input_or_none(node, 1)
    axes = const_array(axes_value)
    if axes_value is not None and axes is None:
        raise fail(node, hop, "the axes input is computed; the older schema needs constant axes")
    if axes is None or axes.size == 0:
        if optional_int(node, "noop_with_empty_axes", 0):
            return [b.op("Identity", node.inputs[0])]
        attrs: dict[str, object] = {}
    else:
        attrs = {"axes": [int(a) for a in axes.reshape(-1)]}
    attrs["keepdims"] = optional_int(node, "keepdims", 1)
    out = b.op(node.op_type, node.inputs[0], **attrs)  # type: ignore[arg-type]
    return [out]


def _make(op: str, frm: int, to: int) -> None:
    name = f"{op.lower()}_{frm}_{to}"

    def adapter(b: Builder, node: ir.Node) -> Rewritten:
        return _axes_to_attribute(b, node, name)

    adapter.__name__ = adapter.__qualname__ = name
    register(op, frm, to)(adapter)
    globals()[name] = adapter


for _op in _AXES_INPUT_SINCE_18:
    _make(_op, 18, 13)
_make("ReduceSum", 13, 11)


def _axes_input_to_attribute(b: Builder, node: ir.Node, hop: str) -> Rewritten:
    """Squeeze/Unsqueeze-13 -> 11: constant axes input to attribute."""
    axes_value = input_or_none(node, 1)
    axes = const_array(axes_value)
    if axes_value is not None and axes is None:
        raise fail(node, hop, "the axes input is computed; the opset-11 form needs constant axes")
    attrs = {} if axes is None else {"axes": [int(a) for a in axes.reshape(-1)]}
    return [b.op(node.op_type, node.inputs[0], **attrs)]


@register("Squeeze", 13, 11)
def squeeze_13_11(b: Builder, node: ir.Node) -> Rewritten:
    return _axes_input_to_attribute(b, node, "squeeze_13_11")


@register("Unsqueeze", 13, 11)
def unsqueeze_13_11(b: Builder, node: ir.Node) -> Rewritten:
    if input_or_none(node, 1) is None:
        raise fail(node, "unsqueeze_13_11", "Unsqueeze without axes is invalid")
    return _axes_input_to_attribute(b, node, "unsqueeze_13_11")
