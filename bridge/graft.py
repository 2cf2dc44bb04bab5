"""NMS grafting: add decoding (optional) + per-class NonMaxSuppression + output assembly to a headless
detector's ONNX model, whatever framework exported it.

A "headless" detector ends in raw per-box tensors: boxes [B, N, 4] (or SSD deltas [B, N, 4] with
anchors) and class scores [B, N, C]. ``graft_nms`` appends the same building blocks the
MultiBoxDetection lowering uses (bridge/passes/contrib/nms.py): SSD decoding, ONNX
NonMaxSuppression per class (score > ``score``, suppress IoU > ``iou``, at most ``max_per_class``
boxes per class), then either the TF combined-NMS layout (``boxes-scores-classes``: the
``max_det`` best (box, class) pairs per image, zero padded, plus ``num_detections``) or the raw
``indices`` (selected_indices [K, 3] = (batch, class, box), the boxes fed to NMS, scores [B, C, N]).

Box formats: ``xyxy`` and ``yxyx`` corner boxes stay in their order (ONNX NMS accepts both);
``cxcywh`` boxes are converted to xyxy. With anchors (a tensor of the model or a .npy file, N x 4
in ``box_format``, shared by all images) the boxes input holds deltas in the same axis order
((dx, dy, dw, dh), or (dy, dx, dh, dw) for yxyx; variances in that same order) decoded SSD-style: centre = anchor centre +
d * variance * anchor size, size = anchor size * exp(d * variance); variances default to
(0.1, 0.1, 0.2, 0.2). Output classes are the score tensor's column indices; ``background_class``
(default 0, None for none) is never reported.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir

from bridge import provenance
from bridge.errors import ExportError, UsageError
from bridge.io import load_model
from bridge.passes.contrib import nms
from bridge.rewriting import default_opset
from bridge.rewriting.builder import F32, I64, MIN_OPSET, Builder

log = logging.getLogger(__name__)

BOX_FORMATS = ("xyxy", "yxyx", "cxcywh")
GRAFT_FORMATS = ("boxes-scores-classes", "indices")
OUTPUT_NAMES: dict[str, tuple[str, ...]] = {
    "boxes-scores-classes": ("detection_boxes", "detection_scores", "detection_classes", "num_detections"),
    "indices": ("selected_indices", "decoded_boxes", "class_scores"),
}
DEFAULT_VARIANCES = (0.1, 0.1, 0.2, 0.2)


def graft_nms(
    model: str | Path | onnx.ModelProto,
    *,
    boxes: str,
    scores: str,
    anchors: str | Path | None = None,
    box_format: str = "xyxy",
    variances: Sequence[float] | None = None,
    iou: float = 0.45,
    score: float = 0.01,
    max_per_class: int | None = None,
    max_det: int = 100,
    background_class: int | None = 0,
    output_format: str = "boxes-scores-classes",
) -> onnx.ModelProto:
    """Return a copy of ``model`` whose ``boxes``/``scores`` outputs are replaced by NMS'd detections."""
    _check_args(box_format, variances, anchors, iou, max_per_class, max_det, output_format)
    proto = load_model(model) if isinstance(model, (str, Path)) else model
    irm = ir.serde.deserialize_model(proto)  # a new object graph: the caller's proto is untouched
    opset = default_opset(irm)
    if opset < MIN_OPSET:
        from bridge.passes.opset import ConvertOpsetPass

        log.info("graft-nms: converting the model from opset %d to %d first", opset, MIN_OPSET)
        irm = ConvertOpsetPass(MIN_OPSET)(irm).model
        opset = MIN_OPSET
    graph = irm.graph
    values = _values_by_name(graph)
    boxes_v = _lookup(values, boxes, "--boxes", graph)
    scores_v = _lookup(values, scores, "--scores", graph)
    _check_rank(boxes_v, 3, "--boxes", "[batch, boxes, 4]")
    _check_rank(scores_v, 3, "--scores", "[batch, boxes, classes]")
    taken = set(values)
    clash = [n for n in OUTPUT_NAMES[output_format] if n in taken]
    if clash:
        raise UsageError(f"the model already has tensors named {clash}; the grafted outputs need those names")

    b = Builder(graph, opset, prefix="graft_nms")
    anchor_v = _anchor_value(b, values, anchors, graph) if anchors is not None else None
    nms_boxes = _boxes_for_nms(b, boxes_v, anchor_v, box_format, tuple(variances or DEFAULT_VARIANCES))
    class_scores = b.op("Transpose", scores_v, perm=[0, 2, 1])  # [B, C, N]
    nms_scores = class_scores
    if background_class is not None:
        c_range = b.op("Range", b.const(np.array(0, np.int64)), b.squeeze(b.dim(class_scores, 1), 0),
                       b.const(np.array(1, np.int64)))
        is_bg = b.unsqueeze(b.op("Equal", c_range, b.const(np.array(background_class, np.int64))), 0, 2)
        nms_scores = b.where(is_bg, nms.neg_inf(b), class_scores)
    selected = nms.non_max_suppression(b, nms_boxes, nms_scores, iou_threshold=iou, score_threshold=score,
                                       max_per_class=max_per_class)
    batch = _dim_label(boxes_v, 0)
    if output_format == "boxes-scores-classes":
        kept = nms.selected_mask(b, selected, nms_scores, (0, 1, 2))
        det = nms.padded_detections(b, nms_boxes, nms_scores, kept, max_det)
        new = [det.boxes, det.scores, det.classes, det.num_detections]
        nms.set_output_types(new, [(F32, [batch, max_det, 4]), (F32, [batch, max_det]), (I64, [batch, max_det]),
                                   (I64, [batch])])
    else:
        new = [selected, b.op("Identity", nms_boxes), b.op("Identity", class_scores)]
        nms.set_output_types(new, [(I64, ["selected", 3]), (F32, [batch, _dim_label(boxes_v, 1), 4]),
                                   (F32, [batch, _dim_label(scores_v, 2), _dim_label(scores_v, 1)])])
    for value, name in zip(new, OUTPUT_NAMES[output_format], strict=True):
        value.name = name
    earlier = provenance.before(irm)
    graph.extend(list(b.nodes))
    provenance.attribute_new_nodes(irm, earlier, "graft-nms")  # the grafted nodes serve the detector's head
    kept_outputs = [v for v in graph.outputs if v is not boxes_v and v is not scores_v]
    graph.outputs.clear()
    graph.outputs.extend([*kept_outputs, *new])
    result = ir.serde.serialize_model(irm)
    try:
        onnx.checker.check_model(result, full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
        raise ExportError(f"the grafted model fails the ONNX checker: {exc}") from exc
    return result


def _check_args(box_format: str, variances: Sequence[float] | None, anchors: object, iou: float,
                max_per_class: int | None, max_det: int, output_format: str) -> None:
    if box_format not in BOX_FORMATS:
        raise UsageError(f"--box-format must be one of {', '.join(BOX_FORMATS)} (got '{box_format}')")
    if output_format not in GRAFT_FORMATS:
        raise UsageError(f"--output-format must be one of {', '.join(GRAFT_FORMATS)} (got '{output_format}')")
    if variances is not None:
        if anchors is None:
            raise UsageError("--variances only applies when --anchors is given (boxes are then decoded)")
        if len(variances) != 4:
            raise UsageError(f"--variances needs 4 values (got {len(variances)})")
    if not 0.0 <= iou <= 1.0:
        raise UsageError(f"--iou must be in [0, 1] (got {iou})")
    if max_per_class is not None and max_per_class < 1:
        raise UsageError(f"--max-per-class must be >= 1 (got {max_per_class})")
    if max_det < 1:
        raise UsageError(f"--max-det must be >= 1 (got {max_det})")


def _values_by_name(graph: ir.Graph) -> dict[str, ir.Value]:
    values: dict[str, ir.Value] = {}
    for v in graph.inputs:
        values[str(v.name)] = v
    for name, v in graph.initializers.items():
        values[str(name)] = v
    for node in graph:
        for v in node.outputs:
            if v.name:
                values[str(v.name)] = v
    return values


def _lookup(values: dict[str, ir.Value], name: str, option: str, graph: ir.Graph) -> ir.Value:
    value = values.get(name)
    if value is None:
        outputs = ", ".join(str(v.name) for v in graph.outputs)
        raise UsageError(f"{option} '{name}': the model has no tensor of that name (its outputs: {outputs})")
    return value


def _check_rank(value: ir.Value, rank: int, option: str, layout: str) -> None:
    if value.shape is not None and len(value.shape) != rank:
        raise UsageError(f"{option} '{value.name}' has shape {list(value.shape)}; expected {layout}")
    if option == "--boxes" and value.shape is not None and isinstance(value.shape[-1], int) and value.shape[-1] != 4:
        raise UsageError(f"--boxes '{value.name}' has {value.shape[-1]} values per box; expected 4")


def _dim_label(value: ir.Value, axis: int) -> int | str | None:
    if value.shape is None or len(value.shape) <= axis:
        return None
    d = value.shape[axis]
    return d if isinstance(d, int) else d.value


def _anchor_value(b: Builder, values: dict[str, ir.Value], anchors: str | Path, graph: ir.Graph) -> ir.Value:
    """Anchors as [1, N, 4] float32: a tensor of the model by name, or a .npy file."""
    text = str(anchors)
    if text in values:
        source = values[text]
    elif text.endswith(".npy") or Path(text).is_file():
        path = Path(text)
        if not path.is_file():
            raise UsageError(f"--anchors {text}: no such file")
        try:
            array = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise UsageError(f"--anchors {text}: not a readable .npy array ({exc})") from exc
        if array.size == 0 or array.shape[-1] != 4:
            raise UsageError(f"--anchors {text}: shape {array.shape} is not [..., N, 4]")
        source = b.const(array.astype(np.float32))
    else:
        raise UsageError(f"--anchors '{text}' is neither a tensor of the model nor a .npy file")
    if source.dtype is not None and source.dtype != ir.DataType.FLOAT:
        source = b.cast(source, F32)
    return b.unsqueeze(b.op("Reshape", source, b.i64(-1, 4)), 0)


def _boxes_for_nms(b: Builder, boxes: ir.Value, anchors: ir.Value | None, box_format: str,
                   variances: tuple[float, ...]) -> ir.Value:
    """Corner boxes in xyxy (xyxy, cxcywh input) or yxyx (yxyx input) order, decoded when anchors are given."""
    if boxes.dtype is not None and boxes.dtype != ir.DataType.FLOAT:
        boxes = b.cast(boxes, F32)
    if anchors is None:
        return nms.center_to_corner(b, boxes) if box_format == "cxcywh" else boxes
    if box_format == "cxcywh":
        parts = nms.anchors_from_centers(b, anchors)
        return nms.decode_deltas(b, boxes, parts, variances)
    if box_format == "yxyx":  # decode in x-first order, then back to y-first
        parts = nms.anchors_from_corners_mean(b, nms.swap_xy(b, anchors))
        vy, vx, vh, vw = variances  # given in the deltas' own (y, x, h, w) order
        return nms.swap_xy(b, nms.decode_deltas(b, nms.swap_xy(b, boxes), parts, (vx, vy, vw, vh)))
    return nms.decode_deltas(b, boxes, nms.anchors_from_corners_mean(b, anchors), variances)
