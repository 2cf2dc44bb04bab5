"""CanonicalizeResizePass: rewrite nearest-Resize forms a target runtime rejects into exactly
equivalent ones it accepts.

onnx-tf (the TF target) rejects nearest + half_pixel and nearest_mode=round_prefer_floor, which
onnx's Resize defaults and torch's exporter produce. For integer upscales those pick the same
source pixels as asymmetric + floor (the proof and the per-axis check live in
``opsets.resize_forms``), so the node is rewritten in place. Where the equivalence does not
hold (scale 1.5, 0.5, unknown scales, align_corners on a dynamic axis) the node is left alone
and a line naming it and the reason goes to ``warnings``, which the pipeline runner collects.

Needs the opset final (runs after ConvertOpsetPass) and static shapes where scales come from
``sizes`` (after FixInputShapesPass / shape inference).
"""

from __future__ import annotations

import logging

import numpy as np
import onnx_ir as ir

from bridge.passes.base import BridgePass
from bridge.rewriting import Builder, MatchResult, Rewrite, apply_rewrites, node_label
from bridge.rewriting.attrs import optional_str
from opsets.resize_forms import asymmetric_floor_equivalent
from opsets.support import runtime_support

logger = logging.getLogger(__name__)

_TARGET_COORD, _TARGET_ROUNDING = "asymmetric", "floor"


class CanonicalizeResizePass(BridgePass, Rewrite):
    """Rewrite (in place) every nearest Resize the target rejects whose exact equivalent it accepts."""

    op_type = "Resize"

    def __init__(self, target: str = "onnx-tf") -> None:
        super().__init__()
        self.support = runtime_support(target)
        self.target = target

    def matches(self, node: ir.Node) -> bool:
        # Resize-10 (X, scales) is asymmetric by definition; forms the target accepts need nothing
        return (super().matches(node) and len(node.inputs) >= 3
                and not self.support.accepts_resize(*_form(node)[:2], _form(node)[2] if _form(node)[0] == "nearest" else None))

    def check(self, node: ir.Node, opset: int) -> MatchResult:
        mode, coord, rounding = _form(node)
        if mode != "nearest":
            return MatchResult.fail(f"{self.target} does not accept it and no exact equivalent is known; left as is")
        scales = _scales(node, _input_shape(node))
        if scales is None:
            return MatchResult.fail("scales unknown (not constant, or sizes with a dynamic input); left as is")
        why = asymmetric_floor_equivalent(coord, rounding, scales, _input_shape(node))
        if why is not None:
            return MatchResult.fail(f"not rewritten for {self.target}: {why}")
        return MatchResult.success()

    def rewrite(self, b: Builder, node: ir.Node) -> None:
        node.attributes["coordinate_transformation_mode"] = ir.AttrString("coordinate_transformation_mode", _TARGET_COORD)
        node.attributes["nearest_mode"] = ir.AttrString("nearest_mode", _TARGET_ROUNDING)
        logger.info("%s -> asymmetric/floor (exactly equivalent)", _describe(node))
        return None

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        outcome = apply_rewrites(model, [self], by=type(self).__name__)
        for node_reason in outcome.left_alone:  # each names the node; say it the way users read it
            logger.warning(node_reason)
            self.warnings.append(node_reason)
        return ir.passes.PassResult(model, outcome.modified)


def _form(node: ir.Node) -> tuple[str, str, str]:
    return (optional_str(node, "mode", "nearest"), optional_str(node, "coordinate_transformation_mode", "half_pixel"),
            optional_str(node, "nearest_mode", "round_prefer_floor"))


def _describe(node: ir.Node) -> str:
    mode, coord, rounding = _form(node)
    return f"Resize '{node_label(node)}' ({mode}, {coord}" + (f", {rounding})" if mode == "nearest" else ")")


def _input_shape(node: ir.Node) -> list[object] | None:
    x = node.inputs[0]
    return list(x.shape) if x is not None and x.shape is not None else None


def _const(value: ir.Value | None) -> np.ndarray | None:
    if value is None:
        return None
    tensor = ir.convenience.get_const_tensor(value)
    return None if tensor is None else tensor.numpy()


def _scales(node: ir.Node, in_shape: list[object] | None) -> np.ndarray | None:
    """Full-rank per-axis scales from constant scales, or constant sizes over a static input shape."""
    rank = len(in_shape) if in_shape is not None else None
    axes_attr = node.attributes.get("axes")  # Resize-18+: scales/sizes only for these axes
    axes = [int(a) for a in axes_attr.as_ints()] if axes_attr is not None else None
    given = _const(node.inputs[2]) if len(node.inputs) > 2 else None
    from_sizes = False
    if given is None or given.size == 0:
        given = _const(node.inputs[3]) if len(node.inputs) > 3 else None
        from_sizes = True
        if given is None or given.size == 0:
            return None
    if axes is not None:
        if rank is None:
            return None
        axes = [a % rank for a in axes]
    else:
        axes = list(range(given.size))
    scales = np.ones(max(rank or 0, given.size), dtype=np.float64)
    for axis, v in zip(axes, given.astype(np.float64), strict=True):
        if from_sizes:
            dim = in_shape[axis] if in_shape is not None else None
            if not isinstance(dim, int) or dim == 0:
                return None
            scales[axis] = v / dim
        else:
            scales[axis] = v
    return scales
