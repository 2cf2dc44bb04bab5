"""OptionalHasElement / OptionalGetElement 18 -> 15: the plain-tensor and plain-sequence forms opset 18 added.

Opset 18 let both ops take a tensor or a sequence as well as an optional, and OptionalHasElement no input at all
(onnx/defs/optional/defs.cc). On an optional input the node is already in its opset-15 form and stays. On a
plain tensor or sequence the answer is known: it is present, so OptionalHasElement is a constant ``true`` and
OptionalGetElement is the value itself (an Identity). Without an input OptionalHasElement is ``false``. The
input's type must be known to tell the forms apart.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from bridge.rewriting import Builder
from opsets.registry import register
from opsets.version_adapters._util import Rewritten, fail, input_or_none


def _plain(node: ir.Node, hop: str) -> bool | None:
    """True for a tensor/sequence input, False for an optional one, None when there is no input."""
    value = input_or_none(node, 0)
    if value is None:
        return None
    if value.type is None:
        raise fail(node, hop, "the input's type must be known to tell an optional from a plain value")
    return not isinstance(value.type, ir.OptionalType)


@register("OptionalHasElement", 18, 15)
def optionalhaselement_18_15(b: Builder, node: ir.Node) -> Rewritten:
    plain = _plain(node, "optionalhaselement_18_15")
    if plain is False:
        return None
    return [b.const(np.asarray(plain is True))]


@register("OptionalGetElement", 18, 15)
def optionalgetelement_18_15(b: Builder, node: ir.Node) -> Rewritten:
    plain = _plain(node, "optionalgetelement_18_15")
    if plain is None:
        raise fail(node, "optionalgetelement_18_15", "the input is missing")
    return [b.op("Identity", node.inputs[0])] if plain else None
