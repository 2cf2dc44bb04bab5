"""Final fix-ups for forms the *target* opset rejects that no single hop is responsible for.

Clip on integer tensors exists only from Clip-12: a model at opset < 12 with an int64/int32 Clip
is invalid (onnxruntime refuses to load it), whatever opset it came from. Below 12 we rewrite it
as Cast(double) -> Max -> Min -> Cast(back): double holds every int32 exactly and int64 up to
2**53 (Max/Min take integers only from opset 12 too, so the detour through double is needed).
"""

from __future__ import annotations

import logging

import numpy as np
import onnx_ir as ir

from bridge.rewriting import Builder, MatchResult, Rewrite, apply_rewrites
from opsets.version_adapters._util import input_or_none

logger = logging.getLogger(__name__)

_INT_TYPES = {ir.DataType.INT8, ir.DataType.INT16, ir.DataType.INT32, ir.DataType.INT64,
              ir.DataType.UINT8, ir.DataType.UINT16, ir.DataType.UINT32, ir.DataType.UINT64}
_CLIP_INTEGERS_SINCE = 12


class IntegerClipInDouble(Rewrite):
    """Clip on an integer tensor below opset 12 -> Cast(double), Max, Min, Cast back."""

    op_type = "Clip"

    def check(self, node: ir.Node, opset: int) -> MatchResult:
        x = node.inputs[0] if node.inputs else None
        if x is None or x.dtype not in _INT_TYPES:
            return MatchResult.fail("not an integer Clip")
        return MatchResult.success()

    def rewrite(self, b: Builder, node: ir.Node) -> list[ir.Value]:
        # Max/Min rather than Clip in double: onnxruntime's Clip-6/11 kernels are float-only, its
        # Max-8/Min-8 kernels take double
        x = node.inputs[0]
        assert x is not None and x.dtype is not None
        y = b.op("Cast", x, to=ir.DataType.DOUBLE)
        for index, key, op in ((1, "min", "Max"), (2, "max", "Min")):
            bound: ir.Value | None = input_or_none(node, index)
            if bound is not None:
                bound = b.op("Cast", bound, to=ir.DataType.DOUBLE)
            elif key in node.attributes:
                bound = b.const(np.asarray(node.attributes[key].as_float(), np.float64))
            if bound is not None:
                y = b.op(op, y, bound)
        logger.info("Clip '%s' on %s at opset %d: computed as Max/Min in double (integer Clip needs opset 12)",
                    node.name, x.dtype, b.opset)
        return [b.op("Cast", y, to=x.dtype)]


def _int_clips(model: ir.Model) -> list[ir.Node]:
    rule = IntegerClipInDouble()
    return [n for n in model.graph.all_nodes() if rule.matches(n) and rule.check(n, 0).ok]


def needed(model: ir.Model, target: int) -> bool:
    return target < _CLIP_INTEGERS_SINCE and bool(_int_clips(model))


def apply(model: ir.Model, target: int) -> bool:
    """Legalize ``model`` (already at opset ``target``) in place; True when anything changed."""
    if target >= _CLIP_INTEGERS_SINCE:
        return False
    return apply_rewrites(model, [IntegerClipInDouble()], opset=target).modified
