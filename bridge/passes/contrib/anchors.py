"""LowerMultiBoxPriorPass: ``bridge.contrib`` MultiBoxPrior -> an anchor initializer, or a Shape/Range
subgraph when the feature map's H or W is dynamic.

Anchors depend only on the feature map's shape (MXNet src/operator/contrib/multibox_prior.cc,
tag 1.9.1), so with a static H, W they are computed here, bit-exact in float32 by following MXNet's
order of operations:

    step_y, step_x = steps, or 1.f / H, 1.f / W when either step is <= 0
    cy = (r + offset_y) * step_y                 cx = (c + offset_x) * step_x
    sizes at ratios[0]:   w = size * H / W * sqrtf(ratios[0]) / 2,  h = size / sqrtf(ratios[0]) / 2
    ratios[1:] at sizes[0]: w = sizes[0] * H / W * sqrtf(ratio) / 2, h = sizes[0] / sqrtf(ratio) / 2
    box = (cx - w, cy - h, cx + w, cy + h), clamped to [0, 1] when clip; order row, column, anchor.

The dynamic subgraph performs the same float32 operations on Shape-derived H and W, so it produces
the same bits once the shape is known.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx_ir as ir

from bridge.errors import NodeError
from bridge.limits import check_allocation
from bridge.passes.contrib.common import LoweringPass, ShapeOracle
from bridge.rewriting import node_label
from bridge.rewriting.attrs import required_floats, required_int
from bridge.rewriting.builder import F32, Builder

f32 = np.float32
MAX_ANCHORS_PER_CELL = 1024  # len(sizes) + len(ratios) - 1; real detectors use under 10


def check_params(label: str, sizes: Sequence[float], ratios: Sequence[float], steps: Sequence[float],
                 offsets: Sequence[float]) -> None:
    """NodeError naming the attribute when the anchors cannot be computed as MXNet would."""
    for attr, values, count in (("sizes", sizes, None), ("ratios", ratios, None), ("steps", steps, 2),
                                ("offsets", offsets, 2)):
        if not values:
            raise NodeError(label, "MultiBoxPrior", f"attribute '{attr}' is empty; it needs at least one value")
        if count is not None and len(values) != count:
            raise NodeError(label, "MultiBoxPrior", f"attribute '{attr}' has {len(values)} values; it needs {count} "
                                                    "(y, x)")
        if not all(np.isfinite(v) for v in values):
            raise NodeError(label, "MultiBoxPrior", f"attribute '{attr}' holds a NaN or infinite value")
    if any(r <= 0 for r in ratios):
        raise NodeError(label, "MultiBoxPrior", "attribute 'ratios' must be positive (sqrt of a ratio is taken)")
    anchors = len(sizes) + len(ratios) - 1
    if anchors > MAX_ANCHORS_PER_CELL:
        raise NodeError(label, "MultiBoxPrior", f"{anchors:,} anchors per feature-map cell (sizes + ratios - 1); "
                                                f"at most {MAX_ANCHORS_PER_CELL}")


def _half_extents(sizes: Sequence[float], ratios: Sequence[float]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per anchor: size, sqrt(ratio) (float32), and h = size / sqrt(ratio) / 2 (independent of H, W)."""
    roots = [np.sqrt(f32(ratios[0]))] * len(sizes) + [np.sqrt(f32(q)) for q in ratios[1:]]
    anchor_sizes = [f32(s) for s in sizes] + [f32(sizes[0])] * (len(ratios) - 1)
    s = np.array(anchor_sizes, dtype=f32)
    r = np.array(roots, dtype=f32)
    return s, r, (s / r) / f32(2)


def multibox_prior(height: int, width: int, sizes: Sequence[float], ratios: Sequence[float], clip: bool,
                   steps: Sequence[float], offsets: Sequence[float]) -> np.ndarray:
    """MXNet MultiBoxPrior anchors for an H x W feature map: float32 [1, H*W*A, 4]."""
    # absurd feature-map sizes (from absurd --input sizes) are refused before the arrays are built
    check_allocation(height * width * (len(sizes) + len(ratios) - 1) * 4 * 4 * 2,
                     f"MultiBoxPrior anchors for a {height} x {width} feature map")
    step_y, step_x = f32(steps[0]), f32(steps[1])
    if step_y <= 0 or step_x <= 0:
        step_y, step_x = f32(1) / f32(height), f32(1) / f32(width)
    cy = (np.arange(height, dtype=f32) + f32(offsets[0])) * step_y
    cx = (np.arange(width, dtype=f32) + f32(offsets[1])) * step_x
    s, r, h = _half_extents(sizes, ratios)
    w = (s * f32(height) / f32(width)) * r / f32(2)
    cyg = cy[:, None, None]
    cxg = cx[None, :, None]
    boxes = np.stack(np.broadcast_arrays(cxg - w, cyg - h, cxg + w, cyg + h), axis=-1).astype(f32)
    if clip:
        boxes = np.clip(boxes, f32(0), f32(1))
    return boxes.reshape(1, -1, 4)


def emit_multibox_prior(b: Builder, data: ir.Value, sizes: Sequence[float], ratios: Sequence[float], clip: bool,
                        steps: Sequence[float], offsets: Sequence[float]) -> ir.Value:
    """The same computation as ``multibox_prior`` in ONNX, reading H and W from ``data``'s shape."""
    h_i, w_i = b.dim(data, 2), b.dim(data, 3)
    h_f, w_f = b.cast(h_i, F32), b.cast(w_i, F32)  # [1] each
    s, r, half_h = _half_extents(sizes, ratios)
    if f32(steps[0]) <= 0 or f32(steps[1]) <= 0:
        # Reciprocal, not Div(1, x): onnxruntime's DivMulFusion rewrites Mul(y, Div(1, x)) into Div(y, x),
        # which rounds differently from MXNet's (c + offset) * (1.f / W)
        step_y, step_x = b.op("Reciprocal", h_f), b.op("Reciprocal", w_f)
    else:
        step_y, step_x = b.f32(float(steps[0])), b.f32(float(steps[1]))
    zero, unit = b.const(np.array(0, np.int64)), b.const(np.array(1, np.int64))

    def centers(n: ir.Value, offset: float, step: ir.Value) -> ir.Value:
        idx = b.cast(b.op("Range", zero, b.squeeze(n, 0), unit), F32)
        return b.op("Mul", b.op("Add", idx, b.f32(float(offset))), step)

    cy = b.unsqueeze(centers(h_i, offsets[0], step_y), 1, 2)  # [H, 1, 1]
    cx = b.unsqueeze(centers(w_i, offsets[1], step_x), 0, 2)  # [1, W, 1]
    w = b.op("Div", b.op("Mul", b.op("Div", b.op("Mul", b.const(s), h_f), w_f), b.const(r)), b.f32(2.0))  # [A]
    h = b.const(half_h)
    parts = [b.op("Sub", cx, w), b.op("Sub", cy, h), b.op("Add", cx, w), b.op("Add", cy, h)]  # broadcast [H, W, A]
    shape = b.op("Concat", h_i, w_i, b.i64(len(s)), axis=0)
    parts = [b.unsqueeze(b.op("Expand", p, shape), 3) for p in parts]
    boxes = b.op("Concat", *parts, axis=3)
    if clip:
        boxes = b.op("Clip", boxes, b.f32(0.0), b.f32(1.0))
    return b.op("Reshape", boxes, b.i64(1, -1, 4))


class LowerMultiBoxPriorPass(LoweringPass):
    """Replace every bridge.contrib MultiBoxPrior by an initializer (static H, W) or a subgraph."""

    op_type = "MultiBoxPrior"
    input_names = ("data",)

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        self._oracle = ShapeOracle(model)  # one shape inference per run, only if a node needs it
        return super().call(model)

    def lower(self, b: Builder, node: ir.Node) -> list[ir.Value]:
        data = node.inputs[0]
        assert data is not None  # check() made sure
        params = dict(sizes=required_floats(node, "sizes"), ratios=required_floats(node, "ratios"),
                      clip=bool(required_int(node, "clip")), steps=required_floats(node, "steps"),
                      offsets=required_floats(node, "offsets"))
        check_params(node_label(node), params["sizes"], params["ratios"], params["steps"],  # type: ignore[arg-type]
                     params["offsets"])  # type: ignore[arg-type]
        dims = self._oracle.dims(data)
        if dims is not None and len(dims) == 4 and isinstance(dims[2], int) and isinstance(dims[3], int):
            anchors = multibox_prior(dims[2], dims[3], **params)  # type: ignore[arg-type]
            graph_outputs = {id(v) for v in b.graph.outputs}
            if any(id(v) in graph_outputs for v in node.outputs):  # a graph output cannot be an initializer
                return [b.const(anchors)]
            return [b.initializer(anchors)]
        b.warn(f"MultiBoxPrior '{node_label(node)}': feature map H/W are dynamic; anchors are computed in the "
               "graph at run time")
        return [emit_multibox_prior(b, data, **params)]  # type: ignore[arg-type]


__all__ = ["LowerMultiBoxPriorPass", "emit_multibox_prior", "multibox_prior"]
