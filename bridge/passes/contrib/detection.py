"""LowerMultiBoxDetectionPass: ``bridge.contrib`` MultiBoxDetection -> decode + ONNX NonMaxSuppression +
output assembly, reproducing MXNet (src/operator/contrib/multibox_detection.cc, tag 1.9.1) row for row.

MXNet, per image: score/id = max/first argmax of cls_prob over classes 1.. (class 0 is always the
background; ``background_id`` is accepted but the CPU kernel ignores it), valid when id > 0 (some
class prob > -1) and not score < threshold; boxes decoded with the variances (exp in float64 then
float32, see ``decode.DECODERS["ssd"]``), clamped to [0, 1] when clip. Output [B, N, 6] rows (class - 1,
score, box), initialised to -1, valid rows compacted to the front in anchor order. When
0 < nms_threshold <= 1: the valid rows are stably sorted by score descending, only the first
``nkeep = min(valid, nms_topk)`` are rewritten in sorted order (rows nkeep..valid-1 keep the
anchor-order content with class -1), and greedy NMS sets class -1 on a later row when
(force_suppress or same class) and IoU >= nms_threshold; score and box stay in place.

ONNX recipe: candidates (valid, within the top nms_topk) get their score in the row of their class
of a [B, C, N] score matrix and -inf elsewhere (one class per box makes ONNX's per-class NMS
MXNet's same-class suppression), or a [B, 1, N] row with force_suppress; iou_threshold =
nextafter(nms_threshold, 0) turns ONNX's "IoU > t" into MXNet's "IoU >= t"; TopK (lower index
first on ties) gives the stable sort and the anchor-order compaction.

The mxnet format with NMS on (``build_multibox_rows``, the deployed case) does this candidate-first:
one TopK picks the K = min(N, nms_topk) candidates in MXNet's order, and the score matrix, NMS and
suppression mask are K-sized ([B, C, K], not [B, C, N]); the rows from K on come from an O(N) stable
compaction (CumSum + one Compress) instead of a second N-sized sort or gather; scores are read class-last
and the class is taken for the K candidates only (see its docstring for why each step has its form).
Measured 3-6x faster than the N-sized form on 24-34k anchors x 20 classes (bench nms section). The
boxes-scores-classes format with NMS on shares that candidate stage (``build_multibox_padded``: the kept
candidates in MXNet's row order, decoding only the K candidates' boxes; 5.8 -> 1.6 ms on vgg_like_300, b1);
the indices format and NMS off still use the N-sized ``MultiBoxParts``.

Output formats: ``mxnet`` (the [B, N, 6] tensor above, default), ``boxes-scores-classes`` (boxes
[B, K, 4], scores [B, K], classes [B, K] int64 (class - 1, as MXNet reports it), num_detections [B]
int64; K = max_detections, zero padded; with NMS on, the rows of the mxnet format whose class is not -1,
in that order), ``indices`` (selected_indices [K, 3] int64 (batch, class,
anchor), decoded boxes [B, N, 4], class probabilities [B, C, N] without the background row).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import onnx
import onnx_ir as ir

from bridge.config import DETECTION_META
from bridge.errors import NodeError, UsageError
from bridge.passes.contrib import nms
from bridge.passes.contrib.common import LoweringPass
from bridge.passes.contrib.decode import ssd_decode
from bridge.rewriting import BOOL, F32, I64, Builder, Expansion, node_label
from bridge.rewriting.attrs import required_float, required_floats, required_int
from bridge.rewriting.protos import call_without_weights


def _check_format(output_format: str, max_detections: int | None) -> None:
    if output_format not in nms.OUTPUT_FORMATS:
        raise UsageError(f"unknown detection output format '{output_format}'; choose one of "
                         f"{', '.join(nms.OUTPUT_FORMATS)}")
    if max_detections is not None and max_detections < 1:
        raise UsageError(f"max_detections must be >= 1 (got {max_detections})")


class LowerMultiBoxDetectionPass(LoweringPass):
    """Lower every bridge.contrib MultiBoxDetection; see the module docstring for the semantics.

    ``output_format``: "mxnet" | "boxes-scores-classes" | "indices". ``max_detections`` caps the
    rows of boxes-scores-classes (None: one row per anchor). Formats other than mxnet replace the
    node's graph output by several outputs named ``<output>_boxes``, ``<output>_scores``, ...
    The graph outputs produced are recorded in the model's metadata (``DETECTION_META``: output
    name -> format) so validation compares them detection by detection.
    """

    op_type = "MultiBoxDetection"
    input_names = ("cls_prob", "loc_pred", "anchors")
    float32_inputs = (0, 1, 2)

    def __init__(self, output_format: str = "mxnet", max_detections: int | None = None) -> None:
        super().__init__()
        _check_format(output_format, max_detections)
        self.output_format = output_format
        self.max_detections = max_detections
        self._score_dims: dict[str, tuple[int | ir.SymbolicDim | None, int | None]] = {}  # per output, see call

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph_outputs = {str(v.name) for v in model.graph.outputs}
        detections = {str(n.outputs[0].name): self.output_format for n in self.nodes(model)
                      if n.outputs[0].name in graph_outputs}
        self._score_dims = _score_dims(model, self.nodes(model)) if self.output_format != "mxnet" else {}
        result = super().call(model)
        if detections:
            # the metadata is a JSON list of detection specs; a lowered output is recorded in the short
            # {output: format} form, which bridge.validation.detection.layouts reads as an item of that list
            recorded = json.loads(model.metadata_props.get(DETECTION_META, "[]"))
            items = recorded if isinstance(recorded, list) else [recorded]
            model.metadata_props[DETECTION_META] = json.dumps([*items, detections])
        return result

    def lower(self, b: Builder, node: ir.Node) -> list[ir.Value] | Expansion:
        label = node_label(node)
        cls_prob, loc_pred, anchors = node.inputs[0], node.inputs[1], node.inputs[2]
        assert cls_prob is not None and loc_pred is not None and anchors is not None  # check() made sure
        variances = required_floats(node, "variances")
        if len(variances) != 4:
            raise NodeError(label, node.op_type, f"variances must have 4 values (got {variances})")
        if self.output_format == "mxnet":
            if 0.0 < required_float(node, "nms_threshold") <= 1.0:
                return [build_multibox_rows(
                    b, cls_prob, loc_pred, anchors, threshold=required_float(node, "threshold"),
                    clip=bool(required_int(node, "clip")), variances=variances,
                    nms_threshold=required_float(node, "nms_threshold"),
                    force_suppress=bool(required_int(node, "force_suppress")), nms_topk=required_int(node, "nms_topk"))]
            return [self._parts(b, node, variances).mxnet_rows(b)]
        out = node.outputs[0]
        if out.uses():
            raise NodeError(label, node.op_type, f"output format '{self.output_format}' replaces the graph output; "
                            f"'{out.name}' is consumed by other nodes")
        if out not in b.graph.outputs:
            b.warn(f"MultiBoxDetection '{label}': output is unused; lowered and dropped")
            return Expansion([[]])
        batch, n_anchors = self._score_dims.get(str(out.name), (None, None))
        if out.shape is not None and len(out.shape) == 3 and not _anonymous(out.shape[0]):
            batch = out.shape[0]
        if self.output_format == "boxes-scores-classes" and 0.0 < required_float(node, "nms_threshold") <= 1.0:
            det = build_multibox_padded(
                b, cls_prob, loc_pred, anchors, threshold=required_float(node, "threshold"),
                clip=bool(required_int(node, "clip")), variances=variances, nms_threshold=required_float(node, "nms_threshold"),
                force_suppress=bool(required_int(node, "force_suppress")), nms_topk=required_int(node, "nms_topk"),
                max_det=self.max_detections)
            rows = self.max_detections if self.max_detections is not None else n_anchors or _dim(cls_prob, 2)
            return Expansion([padded_outputs(b, det, rows, str(out.name), batch)])
        parts = self._parts(b, node, variances)
        return Expansion([parts.formatted(b, self.output_format, self.max_detections, str(out.name), batch,
                                          n_anchors)])

    @staticmethod
    def _parts(b: Builder, node: ir.Node, variances: list[float]) -> MultiBoxParts:
        cls_prob, loc_pred, anchors = node.inputs[0], node.inputs[1], node.inputs[2]
        assert cls_prob is not None and loc_pred is not None and anchors is not None  # check() made sure
        return build_multibox_detection(
            b, cls_prob, loc_pred, anchors, threshold=required_float(node, "threshold"), clip=bool(required_int(node, "clip")),
            variances=variances, nms_threshold=required_float(node, "nms_threshold"),
            force_suppress=bool(required_int(node, "force_suppress")), nms_topk=required_int(node, "nms_topk"))


class MultiBoxParts:
    """The intermediate values of a lowered MultiBoxDetection, from which every output format is built."""

    def __init__(self, *, probs: ir.Value, cls: ir.Value, score: ir.Value, valid: ir.Value, boxes: ir.Value,
                 nms_scores: ir.Value, kept: ir.Value, selected: ir.Value | None, force_suppress: bool,
                 nms_on: bool, nms_topk: int) -> None:
        self.probs, self.cls, self.score, self.valid, self.boxes = probs, cls, score, valid, boxes
        self.nms_scores, self.kept, self.selected = nms_scores, kept, selected
        self.force_suppress, self.nms_on, self.nms_topk = force_suppress, nms_on, nms_topk

    def kept_per_box(self, b: Builder) -> ir.Value:
        """bool [B, N]: the anchor survives (valid, within topk, not suppressed)."""
        return b.reduce("ReduceMax", b.cast(self.kept, I64), [1], keepdims=0) if not self.force_suppress \
            else b.squeeze(self.kept, 1)

    def mxnet_rows(self, b: Builder) -> ir.Value:
        """The [B, N, 6] output exactly as MXNet lays it out (module docstring)."""
        n = b.dim(self.score, 1)
        pos = b.unsqueeze(b.op("Range", b.const(np.array(0, np.int64)), b.squeeze(n, 0),
                               b.const(np.array(1, np.int64))), 0)  # [1, N]
        n_valid = b.reduce("ReduceSum", b.cast(self.valid, I64), [1], keepdims=1)  # [B, 1]
        # anchor-order compaction of the valid rows: TopK keeps index order among equal keys
        compact = nms.sort_desc(b, b.where(self.valid, b.f32(0.0), b.f32(-1.0)))
        in_valid = b.op("Less", pos, n_valid)
        if self.nms_on:
            ordered = nms.sort_desc(b, b.where(self.valid, self.score, nms.neg_inf(b)))
            nkeep = n_valid if self.nms_topk <= 0 else b.op("Min", n_valid, b.i64(self.nms_topk))
            in_sorted = b.op("Less", pos, nkeep)
            row = b.where(in_sorted, ordered, compact)
            kept_row = b.cast(b.gather_cols(b.cast(self.kept_per_box(b), I64), row), BOOL)
            has_class = b.op("And", in_sorted, kept_row)
        else:
            row = compact
            has_class = in_valid
        minus_one = b.f32(-1.0)
        cls_row = b.gather_cols(b.cast(self.cls, F32), row)
        cls_out = b.where(b.op("And", in_valid, has_class), cls_row, minus_one)
        score_out = b.where(in_valid, b.gather_cols(self.score, row), minus_one)
        box_out = b.where(b.unsqueeze(in_valid, -1), b.gather_rows(self.boxes, row), minus_one)
        return b.op("Concat", b.unsqueeze(cls_out, -1), b.unsqueeze(score_out, -1), box_out, axis=-1)

    def selected_indices(self, b: Builder) -> ir.Value:
        """[K, 3] (batch, class, anchor) with the box's own class also under force_suppress."""
        selected = self.selected if self.selected is not None else nms.mask_to_selected(b, self.kept)
        if not self.force_suppress:
            return selected
        batch_box = b.op("Gather", selected, b.i64(0, 2), axis=1)
        cls = b.unsqueeze(b.op("GatherND", self.cls, batch_box), 1)
        return b.op("Concat", b.slice(selected, 1, 0, 1), cls, b.slice(selected, 1, 2, 3), axis=1)

    def formatted(self, b: Builder, output_format: str, max_det: int | None, prefix: str,
                  batch: int | str | ir.SymbolicDim | None, anchors: int | None = None) -> list[ir.Value]:
        if output_format == "boxes-scores-classes":
            det = nms.padded_detections(b, self.boxes, self.nms_scores, self.kept, max_det,
                                        box_classes=self.cls if self.force_suppress else None)
            rows = max_det if max_det is not None else anchors or _dim(self.boxes, 1)
            return padded_outputs(b, det, rows, prefix, batch)
        bdim = _label(batch)
        values = [self.selected_indices(b), b.op("Identity", self.boxes), b.op("Identity", self.probs)]
        # dims shape inference cannot follow are named after the output, never left to a runtime's unk__N
        boxes = _dim(self.boxes, 1)
        classes = _dim(self.probs, 1)
        nms.set_output_types(values, [(I64, ["selected", 3]), (F32, [bdim, f"{prefix}_anchors" if boxes is None else boxes, 4]),
                                      (F32, [bdim, f"{prefix}_classes" if classes is None else classes,
                                             f"{prefix}_anchors" if boxes is None else boxes])])
        return _named(b, values, output_format, prefix)


def _label(batch: int | str | ir.SymbolicDim | None) -> int | str | None:
    return batch if isinstance(batch, int) else (batch.value if isinstance(batch, ir.SymbolicDim) else None)


def _named(b: Builder, values: list[ir.Value], output_format: str, prefix: str) -> list[ir.Value]:
    """Name the format's graph outputs ``<prefix>_<suffix>`` (reserved in the builder)."""
    for v, suffix in zip(values, nms.FORMAT_OUTPUTS[output_format], strict=True):
        name = f"{prefix}_{suffix}"
        b.fresh(name)  # reserve
        v.name = name
    return values


def padded_outputs(b: Builder, det: nms.PaddedDetections, rows: int | str | None, prefix: str,
                   batch: int | str | ir.SymbolicDim | None) -> list[ir.Value]:
    """The boxes-scores-classes graph outputs, typed ([B, rows, 4], [B, rows], [B, rows], [B]) and named; rows
    only known at run time are named ``<prefix>_rows`` (never left to a runtime's ``unk__N``)."""
    bdim = _label(batch)
    rows = f"{prefix}_rows" if rows is None else rows
    values = [det.boxes, det.scores, det.classes, det.num_detections]
    nms.set_output_types(values, [(F32, [bdim, rows, 4]), (F32, [bdim, rows]), (I64, [bdim, rows]), (I64, [bdim])])
    return _named(b, values, "boxes-scores-classes", prefix)


def _anonymous(dim: int | ir.SymbolicDim) -> bool:
    return not isinstance(dim, int) and (dim.value is None or dim.value.startswith("unk__"))


def _score_dims(model: ir.Model, nodes: list[ir.Node]) -> dict[str, tuple[int | ir.SymbolicDim | None, int | None]]:
    """Per MultiBoxDetection (keyed by its output name): the batch of its scores [B, C+1, N] and the anchor
    count N, as shape inference on a copy sees them (the model is not touched). The lowered outputs are
    declared with them: NMS and TopK hide both from inference, and left anonymous they were named only
    by running the whole model at two sizes (``NameOutputDimsByProbePass``: seconds on a full-size SSD).
    The batch is kept only when it is a graph input's symbol (which the dynamic-axis naming follows) or
    a number; N is read from the anchors [1, N, 4] (static even when the scores' reshape hides it)."""
    wanted = {str(v.name): (k, str(n.outputs[0].name)) for n in nodes
              for k, v in enumerate(n.inputs[:3]) if v is not None and v.name}
    if not wanted:
        return {}
    def infer(proto: onnx.ModelProto) -> onnx.ModelProto:
        return onnx.shape_inference.infer_shapes(proto, strict_mode=False, data_prop=True)

    try:  # without the weights: serialising a full-size model's tensors would cost seconds
        inferred = call_without_weights(infer, model)
    except Exception:  # best effort: the dims then stay anonymous and are probed as before
        return {}
    g = inferred.graph
    input_symbols = {d.dim_param for i in g.input for d in i.type.tensor_type.shape.dim if d.dim_param}
    shapes = {vi.name: list(vi.type.tensor_type.shape.dim) for vi in (*g.value_info, *g.output, *g.input)
              if vi.name in wanted and vi.type.tensor_type.HasField("shape")}
    shapes.update({t.name: [onnx.TensorShapeProto.Dimension(dim_value=d) for d in t.dims] for t in g.initializer
                   if t.name in wanted})
    out: dict[str, tuple[int | ir.SymbolicDim | None, int | None]] = {}
    for node in nodes:
        batch: int | ir.SymbolicDim | None = None
        count: int | None = None
        for k, v in enumerate(node.inputs[:3]):
            dims = shapes.get(str(v.name)) if v is not None else None
            if not dims or len(dims) != 3:
                continue
            if k == 0:  # scores [B, C+1, N]
                d0 = dims[0]
                batch = (d0.dim_value if d0.HasField("dim_value") else
                         ir.SymbolicDim(d0.dim_param) if d0.dim_param in input_symbols else None)
            axis = 2 if k == 0 else 1  # anchors [1, N, 4]; loc_pred [B, 4N] is 2-D and skipped
            if count is None and dims[axis].HasField("dim_value"):
                count = int(dims[axis].dim_value)
        out[str(node.outputs[0].name)] = (batch, count)
    return out


def _dim(value: ir.Value, axis: int) -> int | str | None:
    if value.shape is None or len(value.shape) <= axis:
        return None
    d = value.shape[axis]
    return d if isinstance(d, int) else d.value


def build_multibox_detection(b: Builder, cls_prob: ir.Value, loc_pred: ir.Value, anchors: ir.Value, *,
                             threshold: float, clip: bool, variances: list[float], nms_threshold: float,
                             force_suppress: bool, nms_topk: int) -> MultiBoxParts:
    """Emit scores, validity, decoded boxes and NMS for MultiBoxDetection; returns the pieces."""
    probs = b.op("Slice", cls_prob, b.i64(1), b.i64(np.iinfo(np.int64).max), b.i64(1))  # [B, C, N], no background
    cls = b.op("ArgMax", probs, axis=1, keepdims=0, select_last_index=0)  # first maximum, like MXNet's `temp > score`
    score = b.squeeze(b.op("GatherElements", probs, b.unsqueeze(cls, 1), axis=1), 1)  # [B, N]
    thr = b.f32(float(np.float32(threshold)))
    # MXNet: score starts at -1 and only `temp > score` updates id; invalid when id == 0 or score < threshold
    valid = b.op("And", b.op("Greater", score, b.f32(-1.0)), b.op("Not", b.op("Less", score, thr)))
    loc = b.op("Reshape", loc_pred, b.i64(0, -1, 4))
    boxes = b.op("Concat", *ssd_decode(b, loc, nms.anchors_from_corners_mean(b, anchors), variances, clip_unit=clip),
                 axis=-1)
    nms_on = 0.0 < nms_threshold <= 1.0
    candidate = valid
    if nms_on and nms_topk > 0:
        candidate = b.op("And", valid, nms.topk_mask(b, b.where(valid, score, nms.neg_inf(b)), nms_topk))
    if force_suppress:
        nms_scores = nms.agnostic_scores(b, score, candidate)
    else:
        nms_scores = nms.class_score_matrix(b, score, cls, candidate, b.dim(probs, 1))
    selected: ir.Value | None = None
    if nms_on:
        # ONNX suppresses IoU > t, MXNet IoU >= t: the next float below t makes them agree
        iou = float(np.nextafter(np.float32(nms_threshold), np.float32(0)))
        selected = nms.non_max_suppression(b, boxes, nms_scores, iou_threshold=iou)
        kept = nms.selected_mask(b, selected, nms_scores, (0, 1, 2))
    else:
        kept = b.op("Greater", nms_scores, nms.neg_inf(b))
    return MultiBoxParts(probs=probs, cls=cls, score=score, valid=valid, boxes=boxes, nms_scores=nms_scores,
                         kept=kept, selected=selected, force_suppress=force_suppress, nms_on=nms_on,
                         nms_topk=nms_topk)


@dataclass(frozen=True)
class Candidates:
    """The candidate stage of the deployed lowering (NMS on), shared by the mxnet and padded layouts.

    score/valid [B, N] and table [B, N, 6] (class -1, score, box) in anchor order; values/order [B, K]
    the K = min(N, nms_topk) best scores and their anchors in MXNet's stable order; cand_valid [B, K]
    (false past the valid count), cand_rows [B, K, 6], cand_boxes [B, K, 4], cand_cls [B, K] int64
    (class - 1, first maximum); kept [B, K] (not suppressed); ranks [K] float (K, K-1, ..., 1). Without
    the anchor-order rows (``with_table=False``) table and cand_rows are None and only the K candidates'
    boxes are decoded.
    """

    score: ir.Value
    valid: ir.Value
    table: ir.Value | None
    values: ir.Value
    order: ir.Value
    cand_valid: ir.Value
    cand_rows: ir.Value | None
    cand_boxes: ir.Value
    cand_cls: ir.Value
    kept: ir.Value
    ranks: ir.Value
    every_anchor: bool  # K == N: every anchor is a candidate


def build_multibox_candidates(b: Builder, cls_prob: ir.Value, loc_pred: ir.Value, anchors: ir.Value, *,
                              threshold: float, clip: bool, variances: list[float], nms_threshold: float,
                              force_suppress: bool, nms_topk: int, with_table: bool = True) -> Candidates:
    """Scores, decoded table, the K candidates and their NMS (see ``build_multibox_rows`` for each step's form).

    ``with_table=False`` (layouts that need no anchor-order rows): the boxes of the K candidates only are
    decoded, from their gathered deltas and anchors - per-element the same float32 operations, so the same
    bits, without the N-sized decode (its float64 Exp is the largest kernel of the lowering).
    """
    probs_last = b.op("Transpose", cls_prob, perm=[0, 2, 1])  # [B, N, C+1]
    probs = b.op("Slice", probs_last, b.i64(1), b.i64(np.iinfo(np.int64).max), b.i64(2))  # [B, N, C]
    score = b.reduce("ReduceMax", probs, [2], keepdims=0)  # [B, N]
    # MXNet: score starts at -1 and only `temp > score` updates the class; a row is valid when some class
    # beat -1 and not score < threshold, i.e. score >= max(threshold, the float after -1)
    low_bound = max(np.float32(threshold), np.nextafter(np.float32(-1.0), np.float32(1.0)))
    valid = b.op("GreaterOrEqual", score, b.f32(float(low_bound)))
    loc = b.op("Reshape", loc_pred, b.i64(0, -1, 4))
    # TopK of the raw scores: every valid score (>= low_bound) outranks every invalid one, so the first
    # min(valid, K) candidates and their order are those of the valid scores alone (no N-sized Where)
    values, order = nms.top_candidates(b, score, nms_topk)  # [B, K]
    cand_valid = b.op("GreaterOrEqual", values, b.f32(float(low_bound)))  # [B, K]: false past the valid count
    table = cand_rows = None
    if with_table:
        low, high = ssd_decode(b, loc, nms.anchors_from_corners_mean(b, anchors), variances, clip_unit=clip,
                               interleaved=True)
        n = b.dim(score, 1)
        shape_bn1 = b.op("Concat", b.dim(score, 0), n, b.i64(1), axis=0)
        # the output rows in anchor order (class -1): candidates and the anchor-order rows are taken from it
        class_score = b.op("Concat", b.op("Expand", b.f32(-1.0), shape_bn1), b.unsqueeze(score, -1), axis=-1)
        table = nms.rows_from_pairs(b, b.op("Reshape", class_score, b.i64(0, 1, -1)), low, high)  # [B, N, 6]
        cand_rows = b.gather_rows(table, order)  # [B, K, 6]
        cand_boxes = b.slice(cand_rows, 2, 2, 6)  # [B, K, 4]
    else:  # MXNet reads the anchors as N x 4 (the first image's): the candidates' anchors are one Gather
        cand_anchors = b.op("Gather", b.op("Reshape", anchors, b.i64(-1, 4)), order, axis=0)  # [B, K, 4]
        low, high = ssd_decode(b, b.gather_rows(loc, order), nms.anchors_from_corners_mean(b, cand_anchors),
                               variances, clip_unit=clip, interleaved=True)
        cand_boxes = nms.rows_from_pairs(b, low, high)  # [B, K, 4]
    # first maximum over classes 1.., like MXNet's `temp > score`; only the candidates need their class (when
    # every anchor is a candidate, ArgMax over all rows is cheaper than gathering the C-wide rows first)
    static_n = _dim(cls_prob, 2)
    every_anchor = nms_topk <= 0 or (isinstance(static_n, int) and nms_topk >= static_n)
    if every_anchor:
        cand_cls = b.gather_cols(b.op("ArgMax", probs, axis=2, keepdims=0, select_last_index=0), order)  # [B, K]
    else:
        cand_cls = b.op("ArgMax", b.gather_rows(probs, order), axis=2, keepdims=0, select_last_index=0)
    # NMS sees the candidates' ranks (K, K-1, ..., 1), not their scores: the same greedy order as MXNet's
    # stable sort even among equal scores, which onnxruntime's NMS heap would visit in no defined order
    k_dim = b.dim(order, 1)
    ranks = b.cast(b.op("Sub", k_dim, nms.arange(b, k_dim)), F32)  # [K], exact below 2^24
    cand_scores = b.unsqueeze(b.where(cand_valid, ranks, nms.neg_inf(b)), 1)  # [B, 1, K]; -inf: never selected
    if force_suppress:
        nms_scores = cand_scores
    else:
        c_range = nms.arange(b, b.dim(probs, 2))
        onehot = b.op("Equal", b.unsqueeze(cand_cls, 1), b.unsqueeze(c_range, 0, 2))  # [B, C, K]
        nms_scores = b.where(onehot, cand_scores, nms.neg_inf(b))
    # ONNX suppresses IoU > t, MXNet IoU >= t: the next float below t makes them agree
    iou = float(np.nextafter(np.float32(nms_threshold), np.float32(0)))
    selected = nms.non_max_suppression(b, cand_boxes, nms_scores, iou_threshold=iou)
    kept = nms.selected_mask(b, selected, values, (0, 2))  # [B, K]; only valid candidates can be selected
    return Candidates(score=score, valid=valid, table=table, values=values, order=order, cand_valid=cand_valid,
                      cand_rows=cand_rows, cand_boxes=cand_boxes, cand_cls=cand_cls, kept=kept, ranks=ranks,
                      every_anchor=every_anchor)


def build_multibox_rows(b: Builder, cls_prob: ir.Value, loc_pred: ir.Value, anchors: ir.Value, *, threshold: float,
                        clip: bool, variances: list[float], nms_threshold: float, force_suppress: bool,
                        nms_topk: int) -> ir.Value:
    """MXNet's [B, N, 6] rows with NMS on, computed on the K = min(N, nms_topk) candidates only.

    Class-last: the scores are read from ``Transpose(cls_prob)`` [B, N, C+1]. In a converted SSD
    cls_prob is itself ``Transpose(Softmax(y, axis=-1))`` (``SoftmaxLastAxisPass``), so the two
    Transposes cancel (``TransposePairPass``) and the max over classes runs over the contiguous last
    axis of the Softmax output (onnxruntime's ArgMax/Slice over axis 1 of [B, C, N] cost ~3x more).
    score = ReduceMax over classes 1..; the class (first maximum, ArgMax) is needed only for the K
    candidates (suppressed and non-candidate rows carry class -1), so it is taken on their K gathered
    probability rows. One TopK of the scores gives the candidates in MXNet's stable score order (every
    valid score outranks every invalid one, so no N-sized masking first); NMS, its score matrix and the
    suppression mask are K-sized. Boxes are decoded on interleaved (x, y) columns (the ssd decode's interleaved layout).

    Layout: a [B, N, 6] table (class -1, score, box) in anchor order; row p < K is candidate p (its
    class, or -1 when suppressed), row K <= p < valid the p-th valid anchor in anchor order, every
    later row -1. When K < N the rows from K on are one Compress over [candidate rows | table | -1
    rows] per image, selecting all K candidate rows, the valid anchors of rank > K (CumSum) and as
    many -1 rows as make N: exactly N rows per image, no index arithmetic or N-sized gather.
    """
    c = build_multibox_candidates(b, cls_prob, loc_pred, anchors, threshold=threshold, clip=clip, variances=variances,
                                  nms_threshold=nms_threshold, force_suppress=force_suppress, nms_topk=nms_topk)
    assert c.table is not None and c.cand_rows is not None  # with_table
    minus_one = b.f32(-1.0)
    cls_col = b.unsqueeze(b.where(c.kept, b.cast(c.cand_cls, F32), minus_one), -1)
    cand_out = b.where(nms.widen_mask(b, b.unsqueeze(c.cand_valid, -1), 6),
                       b.op("Concat", cls_col, b.slice(c.cand_rows, 2, 1, 6), axis=-1), minus_one)  # [B, K, 6]
    if c.every_anchor:
        return cand_out  # K == N: every row is a candidate row (rows past the valid count are -1)
    n = b.dim(c.score, 1)
    k = b.dim(c.order, 1)
    rank = b.op("CumSum", b.cast(c.valid, I64), b.const(np.array(1, np.int64)))  # [B, N]: 1-based rank among valid
    n_valid = b.op("Slice", rank, b.i64(-1), b.i64(np.iinfo(np.int64).max), b.i64(1))  # [B, 1]
    take = b.op("And", c.valid, b.op("Greater", rank, k))  # valid anchors past the K-th: rows K..valid-1
    rest = b.op("Sub", n, k)  # [1]: N - K rows after the candidates
    pads_needed = b.op("Sub", rest, b.op("Max", b.op("Sub", n_valid, k), b.i64(0)))  # [B, 1]
    pad_take = b.op("Less", b.unsqueeze(nms.arange(b, rest), 0), pads_needed)  # [B, N - K]
    batch = b.dim(c.score, 0)
    pad_rows = b.op("Expand", minus_one, b.op("Concat", batch, rest, b.i64(6), axis=0))
    all_cand = b.op("ConstantOfShape", b.op("Shape", c.values), value=ir.tensor(np.array([True])))
    rows = b.op("Concat", cand_out, c.table, pad_rows, axis=1)  # [B, K + N + N - K, 6]
    take_rows = b.op("Concat", all_cand, take, pad_take, axis=1)  # N True per image
    if _dim(cls_prob, 0) == 1:  # one image: Compress along axis 1 yields [1, N, 6] as it is (no Reshape copy)
        return b.op("Compress", rows, b.squeeze(take_rows, 0), axis=1)
    picked = b.op("Compress", b.op("Reshape", rows, b.i64(-1, 6)), b.op("Reshape", take_rows, b.i64(-1)), axis=0)
    return b.op("Reshape", picked, b.op("Concat", batch, n, b.i64(6), axis=0))


def build_multibox_padded(b: Builder, cls_prob: ir.Value, loc_pred: ir.Value, anchors: ir.Value, *, threshold: float,
                          clip: bool, variances: list[float], nms_threshold: float, force_suppress: bool,
                          nms_topk: int, max_det: int | None) -> nms.PaddedDetections:
    """The boxes-scores-classes layout with NMS on, from the K candidates (``build_multibox_candidates``).

    The kept candidates in MXNet's row order (score descending, lower anchor first on ties: the rows of the
    mxnet format whose class is not -1), the first ``max_det`` of them (None: N rows), zero padded.
    """
    c = build_multibox_candidates(b, cls_prob, loc_pred, anchors, threshold=threshold, clip=clip, variances=variances,
                                  nms_threshold=nms_threshold, force_suppress=force_suppress, nms_topk=nms_topk,
                                  with_table=False)
    rows = b.dim(c.score, 1) if max_det is None else b.i64(max_det)
    # the candidates' ranks order the kept ones as the candidates are ordered (distinct keys: no ties)
    key = b.where(c.kept, b.unsqueeze(c.ranks, 0), nms.neg_inf(b))  # [B, K]
    k = b.op("Min", b.dim(key, 1), rows)
    top, idx = b.op_multi("TopK", key, k, num_outputs=2, axis=1, largest=1, sorted=1)
    real = b.op("Greater", top, nms.neg_inf(b))  # [B, k]
    zero_f, zero_i = b.f32(0.0), b.const(np.array(0, np.int64))
    out_boxes = b.where(b.unsqueeze(real, -1), b.gather_rows(c.cand_boxes, idx), zero_f)
    out_scores = b.where(real, b.gather_cols(c.values, idx), zero_f)
    out_classes = b.where(real, b.gather_cols(c.cand_cls, idx), zero_i)
    num = b.reduce("ReduceSum", b.cast(real, I64), [1], keepdims=0)
    pad = b.op("Sub", rows, k)  # rows past the candidates: zero rows
    zero1 = b.i64(0)
    pads2 = b.op("Concat", zero1, zero1, zero1, pad, axis=0)
    pads3 = b.op("Concat", zero1, zero1, zero1, zero1, pad, zero1, axis=0)
    return nms.PaddedDetections(b.op("Pad", out_boxes, pads3, zero_f), b.op("Pad", out_scores, pads2, zero_f),
                                b.op("Pad", out_classes, pads2, zero_i), num)
