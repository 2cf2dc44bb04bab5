"""LowerBoxNMSPass / LowerBoxDecodePass: GluonCV's ``box_nms`` and ``box_decode`` (bridge.contrib) -> ONNX.

box_nms, as MXNet src/operator/contrib/bounding_box-inl.h (tag 1.9.1) computes it, per image of
data [..., N, W] flattened to [B, N, W]:
  - topk == 0: the output is the input;
  - valid: score > valid_thresh and (id_index < 0 or id != background_id);
  - candidates: the first ``topk`` valid boxes in stable score-descending order (all when topk < 0);
  - greedy NMS over the candidates in that order: a box is suppressed by an earlier kept box when
    IoU > overlap_thresh (strict) and (force_suppress or id_index < 0 or int(id) equal); a box with a
    negative width or height has area 0 and intersects nothing, so it neither suppresses nor is
    suppressed (ONNX NMS would sort its corners: such boxes go to NMS as zero-area boxes);
  - output: the kept rows (all W columns) compacted to the front in score order, every other row -1;
    with in_format != out_format the coordinates of rows whose first coordinate is >= 0 are
    converted (MXNet's conversion kernels skip rows starting with a negative value).
Unlike mx2onnx's export this is class-aware: ids are offset to 0..C-1 (C = max - min + 1 over the
candidates) and each box's score goes in its class row of a [B, C, K] NMS score matrix. Candidate-first:
one TopK picks the K = min(N, topk) candidates in stable score order, so the score matrix, NMS, the
kept mask and the output gather are K-sized; rows past K are one -1 pad.

box_decode: data [B, N, 4] deltas against anchors (the first N anchors of the anchors tensor, as
MXNet reads them, in "center" (cx, cy, w, h) or "corner" format), std0..3 scaling, ``clip`` > 0 caps
dw, dh before exp; output corner boxes. The decode is ``decode.DECODERS["ssd"]`` (its float32 order).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir

from bridge.errors import NodeError
from bridge.passes.contrib import nms
from bridge.passes.contrib.common import LoweringPass
from bridge.passes.contrib.decode import ssd_decode
from bridge.rewriting import node_label
from bridge.rewriting.attrs import required_float, required_int, required_str
from bridge.rewriting.builder import I64, Builder
from bridge.rewriting.protos import call_without_weights

_FORMATS = ("corner", "center")


def _format(node: ir.Node, name: str) -> str:
    value = required_str(node, name)
    if value not in _FORMATS:
        raise NodeError(node_label(node), node.op_type, f"{name}='{value}' is not one of {_FORMATS}")
    return value


class LowerBoxNMSPass(LoweringPass):
    """Lower every bridge.contrib box_nms to class-aware ONNX NonMaxSuppression (module docstring)."""

    op_type = "box_nms"
    input_names = ("data",)
    float32_inputs = (0,)

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        _learn_box_widths(model, [n.inputs[0] for n in self.nodes(model) if n.inputs and n.inputs[0] is not None])
        return super().call(model)

    def lower(self, b: Builder, node: ir.Node) -> list[ir.Value]:
        data = node.inputs[0]
        assert data is not None  # check() made sure
        return [build_box_nms(
            b, node, data, overlap_thresh=required_float(node, "overlap_thresh"),
            valid_thresh=required_float(node, "valid_thresh"), topk=required_int(node, "topk"),
            coord_start=required_int(node, "coord_start"), score_index=required_int(node, "score_index"),
            id_index=required_int(node, "id_index"), background_id=required_int(node, "background_id"),
            force_suppress=bool(required_int(node, "force_suppress")), in_format=_format(node, "in_format"),
            out_format=_format(node, "out_format"))]


def _static_width(value: ir.Value) -> bool:
    return value.shape is not None and len(value.shape) >= 2 and isinstance(value.shape[-1], int)


def _learn_box_widths(model: ir.Model, datas: list[ir.Value]) -> None:
    """Give each box_nms input whose box width the model does not record the shape onnx's inference derives.

    An exporter records intermediate shapes for the static case only: with a dynamic batch, GluonCV's
    [B, N * C, 6] (a Concat of id, score and box columns) reaches the lowering with no shape although the
    width 6 follows from its inputs. Inference runs on a copy without the weights (seconds saved on a
    full-size model); a width it cannot derive is left unknown and the lowering says so."""
    missing = {str(v.name): v for v in datas if not _static_width(v) and v.name}
    if not missing:
        return

    def infer(proto: onnx.ModelProto) -> onnx.ModelProto:
        return onnx.shape_inference.infer_shapes(proto, strict_mode=False, data_prop=True)

    try:
        inferred = call_without_weights(infer, model)
    except Exception:  # best effort: the lowering's own error names the node
        return
    g = inferred.graph
    for info in (*g.value_info, *g.output, *g.input):
        value = missing.get(info.name)
        if value is None or not info.type.tensor_type.HasField("shape"):
            continue
        dims = info.type.tensor_type.shape.dim
        if len(dims) >= 2 and dims[-1].HasField("dim_value") and (value.shape is None or len(value.shape) == len(dims)):
            value.shape = ir.Shape([d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in dims])


def build_box_nms(b: Builder, node: ir.Node, data: ir.Value, *, overlap_thresh: float, valid_thresh: float,
                  topk: int, coord_start: int, score_index: int, id_index: int, background_id: int,
                  force_suppress: bool, in_format: str, out_format: str) -> ir.Value:
    label = node_label(node)
    if topk == 0:  # MXNet: topk < 1 after min(num_elem, topk) -> output = input
        return b.op("Identity", data)
    width = data.shape[-1] if data.shape is not None and len(data.shape) >= 2 else None
    if not isinstance(width, int):
        raise NodeError(label, node.op_type, "the last axis of data (box width, e.g. 6) must be static")
    if not 0 <= coord_start <= width - 4 or not 0 <= score_index < width or id_index >= width:
        raise NodeError(label, node.op_type, f"coord_start={coord_start}, score_index={score_index}, "
                        f"id_index={id_index} do not fit a box width of {width}")
    shape = b.op("Shape", data)
    # [..., N, W] -> [B, N, W]
    tail = b.op("Slice", shape, b.i64(-2), b.i64(np.iinfo(np.int64).max), b.i64(0))
    d3 = b.op("Reshape", data, b.op("Concat", b.i64(-1), tail, axis=0))
    # the score and id columns as contiguous rows of the transposed data ([B, W, N]): slicing a width-1 column
    # out of [B, N, W] is a strided per-row copy in onnxruntime (~3x slower at N = 680k rows, W = 6); the
    # Reshape to [B, W * N] keeps its transpose optimizer from pushing the Transpose back past the Slices
    columns = b.op("Reshape", b.op("Transpose", d3, perm=[0, 2, 1]), b.i64(0, -1))  # [B, W * N]
    n_rows = b.dim(d3, 1)

    def column(index: int) -> ir.Value:
        start = b.op("Mul", b.i64(index), n_rows)
        return b.op("Slice", columns, start, b.op("Add", start, n_rows), b.i64(1))  # [B, N]

    score = column(score_index)
    valid = b.op("Greater", score, b.f32(float(np.float32(valid_thresh))))
    ids = column(id_index) if id_index >= 0 else None
    if ids is not None:
        valid = b.op("And", valid, b.op("Not", b.op("Equal", ids, b.f32(float(background_id)))))
    # candidates first (one TopK: the topk cut and the stable score order); everything after is K-sized
    values, order = nms.top_candidates(b, b.where(valid, score, nms.neg_inf(b)), topk)  # [B, K]
    cand_rows = b.gather_rows(d3, order)  # [B, K, W]: the coordinates are sliced from the K rows, not all N
    cand_coords = b.slice(cand_rows, 2, coord_start, coord_start + 4)  # [B, K, 4]
    if ids is None or force_suppress:
        nms_scores = b.unsqueeze(values, 1)  # [B, 1, K]; non-candidates are -inf already
    else:
        cls = b.cast(b.gather_cols(ids, order), I64)  # static_cast<int>: truncation toward zero, as Cast does
        zero = b.const(np.array(0, np.int64))
        masked = b.where(b.op("Greater", values, nms.neg_inf(b)), cls, zero)
        lo = b.reduce("ReduceMin", masked, None, keepdims=0)
        hi = b.reduce("ReduceMax", masked, None, keepdims=0)
        num_classes = b.unsqueeze(b.op("Add", b.op("Sub", hi, lo), b.const(np.array(1, np.int64))), 0)
        onehot = b.op("Equal", b.unsqueeze(b.op("Sub", cls, lo), 1), b.unsqueeze(nms.arange(b, num_classes), 0, 2))
        nms_scores = b.where(onehot, b.unsqueeze(values, 1), nms.neg_inf(b))  # [B, C, K]
    if in_format == "corner":  # inverted boxes never suppress in MXNet (nms.collapse_inverted)
        cand_coords = nms.collapse_inverted(b, cand_coords)
    selected = nms.non_max_suppression(b, cand_coords, nms_scores, iou_threshold=float(np.float32(overlap_thresh)),
                                       center_point_box=1 if in_format == "center" else 0)
    kept = nms.selected_mask(b, selected, values, (0, 2))  # [B, K]
    # kept candidates keep their (score) order: a stable partition puts them first
    kept_order = b.gather_cols(order, nms.stable_partition(b, kept))  # [B, K] anchor indices
    n_kept = b.reduce("ReduceSum", b.cast(kept, I64), [1], keepdims=1)
    n = b.dim(score, 1)
    k_pos = b.unsqueeze(nms.arange(b, b.dim(order, 1)), 0)
    # rows past the kept count are -1: a K-sized Where after the gather (not an N-sized padded copy of the data
    # with a sentinel row), its [B, K, 1] condition widened to W (onnxruntime's broadcasting Where is slow)
    is_kept = b.op("Less", k_pos, n_kept)  # [B, K]
    out = b.gather_rows(d3, b.where(is_kept, kept_order, b.const(np.array(0, np.int64))))  # [B, K, W]
    out = b.where(nms.widen_mask(b, b.unsqueeze(is_kept, -1), width), out, b.f32(-1.0))
    if in_format != out_format:
        box = b.slice(out, 2, coord_start, coord_start + 4)
        conv = nms.corner_to_center(b, box) if out_format == "center" else nms.center_to_corner(b, box)
        first = b.slice(box, 2, 0, 1)
        box = b.where(b.op("Not", b.op("Less", first, b.f32(0.0))), conv, box)
        pieces = []
        if coord_start > 0:
            pieces.append(b.slice(out, 2, 0, coord_start))
        pieces.append(box)
        if coord_start + 4 < width:
            pieces.append(b.slice(out, 2, coord_start + 4, width))
        out = b.op("Concat", *pieces, axis=2) if len(pieces) > 1 else box
    out = nms.pad_axis1(b, out, n, b.f32(-1.0), 3)  # [B, N, W]: every row past K is -1
    return b.op("Reshape", out, shape)


class LowerBoxDecodePass(LoweringPass):
    """Lower every bridge.contrib box_decode (module docstring)."""

    op_type = "box_decode"
    input_names = ("data", "anchors")
    float32_inputs = (0, 1)

    def lower(self, b: Builder, node: ir.Node) -> list[ir.Value]:
        data, anchors = node.inputs[0], node.inputs[1]
        assert data is not None and anchors is not None  # check() made sure
        return [build_box_decode(b, data, anchors, [required_float(node, f"std{i}") for i in range(4)],
                                 clip=required_float(node, "clip"), anchor_format=_format(node, "format"))]


def build_box_decode(b: Builder, data: ir.Value, anchors: ir.Value, stds: list[float], *, clip: float,
                     anchor_format: str) -> ir.Value:
    # MXNet reads anchors as a flat [1, n, 4] buffer: the first N anchors, shared by every image
    n = b.dim(data, 1)
    flat = b.op("Reshape", anchors, b.i64(-1, 4))
    first = b.unsqueeze(b.op("Slice", flat, b.i64(0), n, b.i64(0)), 0)  # [1, N, 4]
    parts = (nms.anchors_from_corners_halfwidth(b, first) if anchor_format == "corner"
             else nms.anchors_from_centers(b, first))
    low, high = ssd_decode(b, data, parts, stds, exp_clip=float(np.float32(clip)) if clip > 0 else None)
    return b.op("Concat", low, high, axis=-1)


__all__ = ["LowerBoxDecodePass", "LowerBoxNMSPass", "build_box_decode", "build_box_nms"]
