"""The translator registry: MXNet op name -> function emitting the equivalent ONNX nodes.

A translator is ``fn(ctx, node, inputs) -> outputs``: ``inputs`` are the ONNX tensor names of the
node's inputs (in MXNet argument order), the result lists the ONNX names of its visible outputs.
Translators are named after the MXNet op they translate and registered with ``@translator``; aliases
(legacy or renamed ops) are extra names on the same decorator.

Output names follow MXNet's own ``list_outputs()`` convention so that the reference runner can fetch
the same tensors from ``get_internals()``: ``<node>_output`` for single-output ops and
``<node>_output<i>`` for multi-output ones (SliceChannel); variables keep their own name.
"""

from __future__ import annotations

from collections.abc import Callable

from adapters.mxnet.context import ConversionContext
from adapters.mxnet.symbol import MXNode

Translator = Callable[[ConversionContext, MXNode, list[str]], list[str]]

TRANSLATORS: dict[str, Translator] = {}

# MXNet ops bridge does not translate, with the reason (shown in UnsupportedOpError and the README table).
# Training-only ops that have an inference meaning (SoftmaxOutput, ...) are translated, not listed here.
NOT_TRANSLATED: dict[str, str] = {
    "_contrib_Proposal": "anchors, decode, NMS and top-N fused in one op with training-time RPN parameters; "
                         "cut the graph before it (--outputs) and graft NMS with `bridge graft-nms`",
    "_contrib_MultiProposal": "as _contrib_Proposal, batched",
    "_contrib_DeformableConvolution": "no ONNX equivalent (DeformConv exists only from opset 19, with other offsets)",
    "_contrib_PSROIPooling": "position-sensitive pooling has no ONNX equivalent",
    "_zeros_without_dtype": "its dtype comes from the consumer at bind time; re-export with an explicit dtype",
    "Custom": "a Python-defined operator: its computation is not in the symbol file",
}


def translator(*names: str) -> Callable[[Translator], Translator]:
    """Register the decorated function for each MXNet op name in ``names``."""

    def register(fn: Translator) -> Translator:
        for n in names:
            if n in TRANSLATORS:
                raise RuntimeError(f"two translators for MXNet op {n}")
            TRANSLATORS[n] = fn
        return fn

    return register


def output_name(node: MXNode, index: int = 0, count: int = 1) -> str:
    return f"{node.name}_output" if count == 1 else f"{node.name}_output{index}"


def out(ctx: ConversionContext, node: MXNode, index: int = 0, count: int = 1) -> str:
    """Reserve and return the canonical ONNX name of output ``index`` of ``node``."""
    return ctx.reserve(output_name(node, index, count))
