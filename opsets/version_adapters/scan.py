"""Scan-8 -> Scan-9: the batch axis goes, so a batch-1 Scan is wrapped in Squeeze/Unsqueeze.

Scan-8 carries a leading batch axis on every state and scan input and output (and optional
``sequence_lens``); Scan-9 has neither. onnx's version converter drops the batch axis from the graph's
own inputs and outputs instead, which changes the model's signature (a model declared ``[1, 2]`` would
take ``[2]``). Here the signature stays: each input loses axis 0 through a Squeeze, each output gets it
back through an Unsqueeze, and the body is the same (it always saw one batch element). A batch other
than a static 1, or per-batch ``sequence_lens``, has no Scan-9 form and is refused naming the node.
"""

from __future__ import annotations

import onnx_ir as ir

from bridge.rewriting import Builder
from bridge.rewriting.attrs import optional_ints, required_int
from opsets.registry import register
from opsets.version_adapters._util import Rewritten, fail, input_or_none


def _axis0(b: Builder, op: str, x: ir.Value) -> ir.Value:
    return b.op(op, x, b.i64(0)) if b.opset >= 13 else b.op(op, x, axes=[0])


@register("Scan", 8, 9)
def scan_8_9(b: Builder, node: ir.Node) -> Rewritten:
    if input_or_none(node, 0) is not None:
        raise fail(node, "scan_8_9", "sequence_lens (per-batch lengths) has no Scan-9 form")
    values = list(node.inputs[1:])
    for value in values:
        assert value is not None  # only sequence_lens is optional in Scan-8
        batch = None if value.shape is None or len(value.shape) == 0 else value.shape[0]
        if batch != 1:
            raise fail(node, "scan_8_9", f"input '{value.name}' has batch axis {batch if batch is not None else '?'}; "
                       "Scan-9 has no batch axis, so only a static batch of 1 converts")
    body = node.attributes["body"].as_graph()
    node.attributes.pop("body")  # the same body graph moves to the new node
    attrs: dict[str, object] = {"body": body, "num_scan_inputs": required_int(node, "num_scan_inputs")}
    directions = optional_ints(node, "directions")
    if directions:
        attrs["scan_input_directions"] = directions
    outs = b.op_multi("Scan", *(_axis0(b, "Squeeze", v) for v in values if v is not None),
                      num_outputs=len(node.outputs), **attrs)  # type: ignore[arg-type]
    return [_axis0(b, "Unsqueeze", o) for o in outs]
