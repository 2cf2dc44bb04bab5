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

from bridge.passes.base import node_label
from opsets.resize_forms import asymmetric_floor_equivalent
from opsets.support import runtime_support

logger = logging.getLogger(__name__)

_TARGET_COORD, _TARGET_ROUNDING = "asymmetric", "floor"


class CanonicalizeResizePass(ir.passes.InPlacePass):
    def __init__(self, target: str = "onnx-tf") -> None:
        super().__init__()
        self.support = runtime_support(target)
        self.target = target
        self.warnings: list[str] = []

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        self.warnings = []
        modified = False
        for node in model.graph.all_nodes():
            if node.op_type != "Resize" or node.domain not in ("", "ai.onnx"):
                continue
            modified |= self._visit(node)
        return ir.passes.PassResult(model, modified)

    def _visit(self, node: ir.Node) -> bool:
        if len(node.inputs) < 3:  # Resize-10 (X, scales): asymmetric by definition, nothing to choose
            return False
        mode = _attr(node, "mode", "nearest")
        coord = _attr(node, "coordinate_transformation_mode", "half_pixel")
        rounding = _attr(node, "nearest_mode", "round_prefer_floor")
        if self.support.accepts_resize(mode, coord, rounding if mode == "nearest" else None):
            return False
        label = f"Resize '{node_label(node)}' ({mode}, {coord}" + (f", {rounding})" if mode == "nearest" else ")")
        if mode != "nearest":
            self._warn(f"{label}: {self.target} does not accept it and no exact equivalent is known; left as is")
            return False
        x = node.inputs[0]
        in_shape: list[object] | None = list(x.shape) if x is not None and x.shape is not None else None
        scales = _scales(node, in_shape)
        if scales is None:
            self._warn(f"{label}: scales unknown (not constant, or sizes with a dynamic input); left as is")
            return False
        why = asymmetric_floor_equivalent(coord, rounding, scales, in_shape)
        if why is not None:
            self._warn(f"{label}: not rewritten for {self.target}: {why}")
            return False
        node.attributes["coordinate_transformation_mode"] = ir.AttrString("coordinate_transformation_mode", _TARGET_COORD)
        node.attributes["nearest_mode"] = ir.AttrString("nearest_mode", _TARGET_ROUNDING)
        logger.info("%s -> asymmetric/floor (exactly equivalent at scales %s)", label, scales.tolist())
        return True

    def _warn(self, message: str) -> None:
        logger.warning(message)
        self.warnings.append(message)


def _attr(node: ir.Node, name: str, default: str) -> str:
    attr = node.attributes.get(name)
    return default if attr is None else str(attr.as_string())


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
