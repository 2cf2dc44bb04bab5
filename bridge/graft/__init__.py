"""NMS grafting: add box decoding, score activation, NMS (hard or weighted) and output assembly to a headless
detector's ONNX model, whatever framework exported it.

A "headless" detector ends in raw per-box tensors: box values [B, N, >= 4] (boxes, or regressors to decode
against anchors, possibly with keypoints after the box columns) and class scores [B, N, C]. ``graft_nms``
appends standard ONNX built from the detection building blocks of ``bridge.passes.contrib`` (the same ones the
MXNet lowerings use): a decode kind from ``decode.DECODERS`` selected by name, a score activation, per-class
(or class-agnostic) ONNX NonMaxSuppression, hard or weighted (MediaPipe's blended NMS), then either the TF
combined-NMS layout (``boxes-scores-classes``: the ``max_det`` best detections per image, zero padded, plus
``num_detections`` and, with keypoints, ``detection_keypoints`` [B, max_det, K, 2]) or the raw ``indices``.

Box values: ``box_columns`` picks 4 columns (default the first 4), ``keypoint_columns`` an even number of
columns read as (x, y) pairs. ``box_format`` gives their axis order - x first (``xyxy``, ``cxcywh``) or y first
(``yxyx``, ``cycxhw``), the order of the output boxes (corners) and keypoints too - and, for the direct decodes
and anchor files, whether they are corners or centre-size. ``decode`` (default: ``ssd`` with anchors, else
``corners`` / ``center-size`` after the box format): see ``bridge.passes.contrib.decode``; ``variances`` (ssd,
in the values' own axis order) and ``scales`` (linear: x, y, w, h) are its constants. ``anchors``: a tensor of
the model, an .npy / .csv file, a generator spec (.yaml / .json) or a generator name with
``anchor_options`` (``bridge.graft.anchor_spec``); their count must equal the box count.

Scores: ``score_columns`` picks the class columns (default all), clipped to [-score_clip, score_clip], then
``score_activation`` (none / sigmoid / softmax); ``objectness_column`` (in the box tensor) multiplies them by
its activated value (a sigmoid unless the activation is none; YOLO). A score must be above ``score`` to be a candidate; ``background_class`` is never
reported: ``"auto"`` means none when there is a single score class or the scores are sigmoids (a detector
whose only class is background could never detect anything), else column 0.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir

from bridge import provenance
from bridge.errors import ExportError, UsageError
from bridge.graft.anchor_fit import Shape, anchor_count, check_fit, rows_of, tensor_shapes
from bridge.graft.anchor_spec import BOX_FORMATS, AnchorSource, resolve_anchors
from bridge.io import load_model
from bridge.passes.contrib import nms
from bridge.passes.contrib.decode import ACTIVATIONS, DECODERS, AnchorValues, DecodeSettings, activate_scores
from bridge.rewriting import default_opset
from bridge.rewriting.builder import F32, I64, MIN_OPSET, Builder

log = logging.getLogger(__name__)

Y_FIRST = ("yxyx", "cycxhw")
CENTER_SIZE = ("cxcywh", "cycxhw")
DECODE_KINDS = tuple(DECODERS)
SCORE_ACTIVATIONS = tuple(ACTIVATIONS)
NMS_KINDS = ("hard", "weighted")
GRAFT_FORMATS = ("boxes-scores-classes", "indices")
OUTPUT_NAMES: dict[str, tuple[str, ...]] = {
    "boxes-scores-classes": ("detection_boxes", "detection_scores", "detection_classes", "num_detections"),
    "indices": ("selected_indices", "decoded_boxes", "class_scores"),
}
KEYPOINT_OUTPUT = {"boxes-scores-classes": "detection_keypoints", "indices": "decoded_keypoints"}
CHECK_OUTPUTS = ("graft_check_scores", "graft_check_boxes")  # the probe outputs of the detection check only
DEFAULT_VARIANCES = (0.1, 0.1, 0.2, 0.2)


@dataclass(frozen=True)
class Columns:
    """Columns ``start`` .. ``stop`` - 1 of a tensor's last axis (``stop`` None: to the end)."""

    start: int
    stop: int | None

    @classmethod
    def parse(cls, value: str | Sequence[int | None] | Columns | None, option: str) -> Columns | None:
        if value is None or isinstance(value, Columns):
            return value
        if isinstance(value, str):
            head, sep, tail = value.partition(":")
            try:
                start = int(head) if head.strip() else 0
                stop = int(tail) if tail.strip() else None
            except ValueError:
                raise UsageError(f"{option} '{value}': expected START:STOP column numbers, e.g. 0:4") from None
            if not sep:
                stop = start + 1
        else:
            items = [*list(value), None]
            start = int(items[0] or 0)
            stop = None if items[1] is None else int(items[1])
        if start < 0 or (stop is not None and stop <= start):
            raise UsageError(f"{option} {value}: columns must be START:STOP with 0 <= START < STOP")
        return cls(start, stop)

    def width(self, total: int | None) -> int | None:
        stop = self.stop if self.stop is not None else total
        return None if stop is None else stop - self.start

    def __str__(self) -> str:
        return f"{self.start}:{'' if self.stop is None else self.stop}"


@dataclass(frozen=True)
class GraftPlan:
    """Everything ``graft_nms`` resolved before it builds: the tensors, decode, anchors, classes, background."""

    boxes: str
    scores: str
    num_boxes: int | None  # N of the boxes tensor when static
    box_width: int | None
    score_width: int | None
    decode: str
    box_format: str
    box_columns: Columns
    keypoint_columns: Columns | None
    keypoints: int
    score_columns: Columns
    objectness_column: int | None
    classes: int | None
    background: int | None
    anchors: AnchorSource | None
    settings: DecodeSettings
    score_activation: str
    score_clip: float | None
    iou: float
    score: float
    max_per_class: int | None
    max_det: int
    class_agnostic: bool
    nms: str
    output_format: str
    background_reason: str = ""  # why bridge chose the background class, when it chose it
    box_rows: int | str | None = None  # N of the boxes tensor: static, its symbolic label, or None (unknown)
    anchor_count: int | None = None  # the anchors' count when known before a run
    anchors_given: str = ""  # --anchors as the user gave it (messages quote it)

    @property
    def rows_checked(self) -> bool:
        """The anchor count was checked against static box rows while planning (else the check's run does it)."""
        return self.anchors is None or (isinstance(self.box_rows, int) and self.anchor_count is not None)

    @property
    def y_first(self) -> bool:
        return self.box_format in Y_FIRST

    @property
    def output_names(self) -> tuple[str, ...]:
        names = OUTPUT_NAMES[self.output_format]
        return (*names, KEYPOINT_OUTPUT[self.output_format]) if self.keypoints else names

    def describe(self) -> list[str]:
        """What will be grafted, one line per fact (``bridge graft-nms`` prints it; ``--dry-run`` only this)."""
        n = "?" if self.box_rows is None else str(self.box_rows)
        lines = [f"boxes: '{self.boxes}' [B, {n}, {self.box_width or '?'}], columns {self.box_columns} "
                 f"({self.box_format}, {'y' if self.y_first else 'x'} first)"]
        if self.keypoints:
            lines.append(f"keypoints: {self.keypoints} (columns {self.keypoint_columns}, as "
                         f"{'(y, x)' if self.y_first else '(x, y)'} pairs), decoded with the boxes")
        if self.anchors is not None:
            shown = self.anchors.anchors.describe() if self.anchors.anchors is not None else "from the model"
            if self.rows_checked:
                match = f" - matches the {self.num_boxes} box rows"
            else:
                rows = f"'{self.box_rows}' (symbolic)" if isinstance(self.box_rows, str) else "not declared"
                match = (f" - the box rows are {rows}: checked against the model's on the detection check's run "
                         "(not with --no-check)")
            lines.append(f"anchors: {self.anchors.origin}: {shown}{match}")
        constants = {"ssd": f" (variances {list(self.settings.variances)})",
                     "linear": f" (scales x, y, w, h {list(self.settings.scales)}"
                               f"{', exp size' if self.settings.exp_size else ''})"}
        lines.append(f"decode: {self.decode}{constants.get(self.decode, '')}")
        clip = f", clipped to +-{self.score_clip:g} first" if self.score_clip is not None else ""
        obj = f" x objectness (box column {self.objectness_column})" if self.objectness_column is not None else ""
        columns = "all columns" if self.score_columns == Columns(0, None) else f"columns {self.score_columns}"
        lines.append(f"scores: '{self.scores}' {columns} -> {self.classes or '?'} class(es), "
                     f"{self.score_activation}{clip}{obj}; candidates score > {self.score:g}")
        lines.append(f"background class: {self.background_reason or (self.background if self.background is not None else 'none')}")
        per_class = "class-agnostic" if self.class_agnostic else "per class"
        lines.append(f"nms: {self.nms}, {per_class}, IoU > {self.iou:g} suppressed; outputs "
                     f"{', '.join(self.output_names)}" + (f" ({self.max_det} rows)" if self.output_format ==
                                                          "boxes-scores-classes" else ""))
        return lines


def plan_graft(
    model: str | Path | onnx.ModelProto,
    *,
    boxes: str,
    scores: str,
    anchors: str | Path | None = None,
    anchor_options: Mapping[str, str] | None = None,
    box_format: str | None = None,
    decode: str | None = None,
    variances: Sequence[float] | None = None,
    scales: float | Sequence[float] | None = None,
    exp_size: bool = False,
    box_columns: str | Sequence[int | None] | None = None,
    keypoint_columns: str | Sequence[int | None] | None = None,
    score_columns: str | Sequence[int | None] | None = None,
    objectness_column: int | None = None,
    score_activation: str = "none",
    score_clip: float | None = None,
    iou: float = 0.45,
    score: float = 0.01,
    max_per_class: int | None = None,
    max_det: int = 100,
    background_class: int | str | None = "auto",
    class_agnostic: bool = False,
    nms: str = "hard",
    output_format: str = "boxes-scores-classes",
) -> GraftPlan:
    """Resolve and check every option against the model without changing it (``UsageError`` naming the option)."""
    proto = load_model(model) if isinstance(model, (str, Path)) else model
    if nms not in NMS_KINDS:
        raise UsageError(f"--nms must be one of {', '.join(NMS_KINDS)} (got '{nms}')")
    if output_format not in GRAFT_FORMATS:
        raise UsageError(f"--output-format must be one of {', '.join(GRAFT_FORMATS)} (got '{output_format}')")
    if score_activation not in SCORE_ACTIVATIONS:
        raise UsageError(f"--score-activation must be one of {', '.join(SCORE_ACTIVATIONS)} (got '{score_activation}')")
    if decode is not None and decode not in DECODE_KINDS:
        raise UsageError(f"--decode must be one of {', '.join(DECODE_KINDS)} (got '{decode}')")
    if box_format is not None and box_format not in BOX_FORMATS:
        raise UsageError(f"--box-format must be one of {', '.join(BOX_FORMATS)} (got '{box_format}')")
    if box_format is None:
        box_format = "cxcywh" if decode == "center-size" else "xyxy"
    if decode is None:
        decode = "ssd" if anchors is not None else ("center-size" if box_format in CENTER_SIZE else "corners")
    if (decode == "corners" and box_format in CENTER_SIZE) or (decode == "center-size" and box_format not in CENTER_SIZE):
        raise UsageError(f"--decode {decode} contradicts --box-format {box_format} (corners are xyxy / yxyx, "
                         "centre-size cxcywh / cycxhw)")
    kind = DECODERS[decode]
    if not 0.0 <= iou <= 1.0:
        raise UsageError(f"--iou must be in [0, 1] (got {iou})")
    if max_per_class is not None and max_per_class < 1:
        raise UsageError(f"--max-per-class must be >= 1 (got {max_per_class})")
    if max_det < 1:
        raise UsageError(f"--max-det must be >= 1 (got {max_det})")
    if score_clip is not None and not score_clip > 0:
        raise UsageError(f"--score-clip must be > 0 (got {score_clip})")
    if variances is not None:
        if anchors is None:
            raise UsageError("--variances only applies when --anchors is given (boxes are then decoded)")
        if decode != "ssd":
            raise UsageError(f"--variances belong to the ssd decode (--decode is {decode})")
        if len(variances) != 4:
            raise UsageError(f"--variances needs 4 values (got {len(variances)})")
    if scales is not None and decode != "linear":
        raise UsageError(f"--scale belongs to the linear decode (--decode is {decode})")
    if exp_size and decode != "linear":
        raise UsageError(f"--exp-size belongs to the linear decode (--decode is {decode})")
    settings = DecodeSettings(variances=_variances(variances, box_format), scales=_scales(scales), exp_size=exp_size)
    if nms == "weighted" and output_format != "boxes-scores-classes":
        raise UsageError("--nms weighted blends the boxes of each cluster: it needs --output-format "
                         "boxes-scores-classes (indices would point at unblended boxes)")

    graph = proto.graph
    values = tensor_shapes(proto)
    if values.get(boxes) is None or values.get(scores) is None:  # an inner tensor: its shape as inference gives it
        values = tensor_shapes(proto, infer=True)
    boxes_shape = _lookup(values, boxes, "--boxes", graph)
    scores_shape = _lookup(values, scores, "--scores", graph)
    if boxes_shape is not None and len(boxes_shape) != 3:
        raise UsageError(f"--boxes '{boxes}' has shape {_show(boxes_shape)}; expected [batch, boxes, values]")
    if scores_shape is not None and len(scores_shape) != 3:
        raise UsageError(f"--scores '{scores}' has shape {_show(scores_shape)}; expected [batch, boxes, classes]")
    box_width = _static(boxes_shape, 2)
    score_width = _static(scores_shape, 2)
    num_boxes = _static(boxes_shape, 1)
    score_rows = _static(scores_shape, 1)
    if num_boxes is not None and score_rows is not None and num_boxes != score_rows:
        raise UsageError(f"--boxes '{boxes}' has {num_boxes} rows and --scores '{scores}' {score_rows}; they must "
                         "describe the same boxes")
    box_cols = Columns.parse(box_columns, "--box-columns") or Columns(0, 4)
    if box_cols.width(box_width) not in (None, 4):
        raise UsageError(f"--box-columns {box_cols} selects {box_cols.width(box_width)} columns; a box needs 4")
    if box_columns is None and box_width is not None and box_width != 4 and keypoint_columns is None:
        raise UsageError(f"--boxes '{boxes}' has {box_width} values per box; expected 4, or pick them with "
                         "--box-columns (e.g. 0:4) and the keypoints with --keypoint-columns")
    kp_cols = Columns.parse(keypoint_columns, "--keypoint-columns")
    score_cols = Columns.parse(score_columns, "--score-columns") or Columns(0, None)
    _check_within(box_cols, box_width, "--box-columns", boxes)
    keypoints = 0
    if kp_cols is not None:
        _check_within(kp_cols, box_width, "--keypoint-columns", boxes)
        width = kp_cols.width(box_width)
        if width is None:
            raise UsageError(f"--keypoint-columns {kp_cols}: give STOP (the width of '{boxes}' is not known)")
        if width % 2:
            raise UsageError(f"--keypoint-columns {kp_cols} selects {width} columns; keypoints are (x, y) pairs")
        keypoints = width // 2
        if kind.keypoints is None:
            raise UsageError(f"--decode {decode} has no keypoint rule; drop --keypoint-columns")
    _check_within(score_cols, score_width, "--score-columns", scores)
    if objectness_column is not None and (objectness_column < 0 or (box_width is not None
                                          and objectness_column >= box_width)):
        raise UsageError(f"--objectness-column {objectness_column} is outside '{boxes}' ({box_width} columns)")
    classes = score_cols.width(score_width)
    if classes is not None and classes < 1:
        raise UsageError(f"--score-columns {score_cols} selects no column of '{scores}' ({score_width} columns)")

    source = _plan_anchors(anchors, anchor_options, decode, box_format, values, rows_of(boxes_shape), boxes)
    background, reason = _background(background_class, classes, score_activation)
    return GraftPlan(boxes=boxes, scores=scores, num_boxes=num_boxes, box_width=box_width, score_width=score_width,
                     decode=decode, box_format=box_format, box_columns=box_cols, keypoint_columns=kp_cols,
                     keypoints=keypoints, score_columns=score_cols, objectness_column=objectness_column,
                     classes=classes, background=background, anchors=source, settings=settings,
                     score_activation=score_activation, score_clip=score_clip, iou=iou, score=score,
                     max_per_class=max_per_class, max_det=max_det, class_agnostic=class_agnostic, nms=nms,
                     output_format=output_format, background_reason=reason, box_rows=rows_of(boxes_shape),
                     anchor_count=anchor_count(source, values)[0] if source is not None else None,
                     anchors_given=str(anchors) if anchors is not None else "")


def _plan_anchors(anchors: str | Path | None, anchor_options: Mapping[str, str] | None, decode: str, box_format: str,
                  shapes: Mapping[str, Shape | None], rows: int | str | None, boxes: str) -> AnchorSource | None:
    """The anchors ``--anchors`` names, checked against the decode (does it read anchors, strides?) and against
    the box rows (a set that does not fit names both counts: ``anchor_fit.check_fit``; symbolic rows are checked by
    the detection check's run)."""
    kind = DECODERS[decode]
    if anchors is not None:
        source = resolve_anchors(str(anchors), dict(anchor_options or {}), tensors=set(shapes), box_format=box_format)
        if not kind.anchors:
            raise UsageError(f"--decode {decode} reads no anchors; drop --anchors or choose a decode that uses them "
                             f"({', '.join(k for k, v in DECODERS.items() if v.anchors)})")
        check_fit(str(anchors), source, shapes, boxes, rows)
        if source.anchors is not None:
            if kind.strides and source.anchors.strides is None:
                raise UsageError(f"--decode {decode} needs the grid strides: use the yolo anchor generator or an "
                                 "anchor file with 6 columns (box, stride x, stride y)")
        elif kind.strides:
            raise UsageError(f"--decode {decode} needs the grid strides, which a model tensor does not carry: use "
                             "the yolo anchor generator or an anchor file with 6 columns")
        return source
    if anchor_options:
        raise UsageError("--anchor-option needs --anchors naming a generator")
    if kind.anchors:
        raise UsageError(f"--decode {decode} decodes against anchors: give --anchors")
    return None


def graft_nms(model: str | Path | onnx.ModelProto, **options: object) -> onnx.ModelProto:
    """Return a copy of ``model`` whose box/score outputs are replaced by decoded, NMS'd detections (module
    docstring; the options are ``plan_graft``'s)."""
    proto = load_model(model) if isinstance(model, (str, Path)) else model
    plan = plan_graft(proto, **options)  # type: ignore[arg-type]
    return build(proto, plan)


def build(proto: onnx.ModelProto, plan: GraftPlan, *, probe: bool = False) -> onnx.ModelProto:
    """The grafted model for ``plan``. ``probe``: also output the activated class scores [B, C, N] before the
    background is removed and the decoded boxes (``CHECK_OUTPUTS``), for ``bridge.graft.check``."""
    irm = ir.serde.deserialize_model(proto)  # a new object graph: the caller's proto is untouched
    opset = default_opset(irm)
    if opset < MIN_OPSET:
        from bridge.passes.opset import ConvertOpsetPass

        log.info("graft-nms: converting the model from opset %d to %d first", opset, MIN_OPSET)
        irm = ConvertOpsetPass(MIN_OPSET)(irm).model
        opset = MIN_OPSET
    graph = irm.graph
    values = _values_by_name(graph)
    boxes_v, scores_v = values[plan.boxes], values[plan.scores]
    names = plan.output_names + (CHECK_OUTPUTS if probe else ())
    clash = [n for n in names if n in values]
    if clash:
        raise UsageError(f"the model already has tensors named {clash}; the grafted outputs need those names")

    b = Builder(graph, opset, prefix="graft_nms")
    raw = b.cast(boxes_v, F32) if boxes_v.dtype not in (None, ir.DataType.FLOAT) else boxes_v
    corners, keypoints = _decoded(b, raw, values, plan)
    coords = corners if keypoints is None else b.op(
        "Concat", corners, b.op("Reshape", keypoints, b.i64(0, 0, 2 * plan.keypoints)), axis=-1)
    class_scores = b.op("Transpose", _scores(b, raw, scores_v, plan), perm=[0, 2, 1])  # [B, C, N]
    masked = class_scores
    if plan.background is not None:
        c_range = nms.arange(b, b.dim(class_scores, 1))
        is_bg = b.unsqueeze(b.op("Equal", c_range, b.const(np.array(plan.background, np.int64))), 0, 2)
        masked = b.where(is_bg, nms.neg_inf(b), class_scores)
    box_classes = None
    if plan.class_agnostic:  # one detection per box: its best class (MediaPipe's TensorsToDetections)
        best = b.reduce("ReduceMax", masked, [1], keepdims=1)  # [B, 1, N]
        box_classes = b.squeeze(b.op("ArgMax", masked, axis=1, keepdims=1, select_last_index=0), 1)  # [B, N]
        masked = best
    threshold = float(np.float32(plan.score))
    nms_scores = masked
    if plan.nms == "weighted":  # the blend reads the candidates from the scores: the ones NMS could select
        nms_scores = b.where(b.op("Greater", masked, b.f32(threshold)), masked, nms.neg_inf(b))
    selected = nms.non_max_suppression(b, corners, nms_scores, iou_threshold=plan.iou, score_threshold=threshold,
                                       max_per_class=plan.max_per_class)
    batch = _dim_label(boxes_v, 0)
    width = 4 + 2 * plan.keypoints
    if plan.output_format == "boxes-scores-classes":
        if plan.nms == "weighted":
            det = nms.weighted_detections(b, coords, nms_scores, selected, iou_threshold=plan.iou,
                                          max_det=plan.max_det, box_classes=box_classes)
        else:
            kept = nms.selected_mask(b, selected, nms_scores, (0, 1, 2))
            det = nms.padded_detections(b, coords, nms_scores, kept, plan.max_det, box_classes=box_classes)
        rows = plan.max_det
        new = [b.slice(det.boxes, -1, 0, 4) if plan.keypoints else det.boxes, det.scores, det.classes,
               det.num_detections]
        types = [(F32, [batch, rows, 4]), (F32, [batch, rows]), (I64, [batch, rows]), (I64, [batch])]
        if plan.keypoints:
            new.append(b.op("Reshape", b.slice(det.boxes, -1, 4, width), b.i64(0, rows, plan.keypoints, 2)))
            types.append((F32, [batch, rows, plan.keypoints, 2]))
    else:
        if box_classes is not None:  # the box's own class in the class column of agnostic NMS
            box = b.op("Gather", selected, b.i64(0, 2), axis=1)
            cls = b.unsqueeze(b.op("GatherND", box_classes, box), 1)
            selected = b.op("Concat", b.slice(selected, 1, 0, 1), cls, b.slice(selected, 1, 2, 3), axis=1)
        n = _dim_label(boxes_v, 1)
        new = [b.op("Identity", selected), b.op("Identity", corners), b.op("Identity", class_scores)]
        types = [(I64, ["selected", 3]), (F32, [batch, n, 4]), (F32, [batch, plan.classes, n])]
        if keypoints is not None:
            new.append(b.op("Identity", keypoints))
            types.append((F32, [batch, n, plan.keypoints, 2]))
    if probe:
        new += [b.op("Identity", class_scores), b.op("Identity", corners)]
        types += [(F32, [batch, plan.classes, _dim_label(boxes_v, 1)]), (F32, [batch, _dim_label(boxes_v, 1), 4])]
    nms.set_output_types(new, types)
    for value, name in zip(new, names, strict=True):
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


def _decoded(b: Builder, raw: ir.Value, values: dict[str, ir.Value], plan: GraftPlan
             ) -> tuple[ir.Value, ir.Value | None]:
    """Corner boxes [B, N, 4] and keypoints [B, N, K, 2] (None without), both in the box format's axis order."""
    kind = DECODERS[plan.decode]
    box_raw = _columns(b, raw, plan.box_columns, plan.box_width)
    kp_raw = None
    if plan.keypoint_columns is not None:
        kp_raw = b.op("Reshape", _columns(b, raw, plan.keypoint_columns, plan.box_width),
                      b.i64(0, 0, plan.keypoints, 2))
    if plan.decode == "corners":  # nothing to decode: the values are the boxes (and keypoints), in either order
        return box_raw, kp_raw
    if plan.y_first:  # decode x first, swap back after
        box_raw = nms.swap_xy(b, box_raw)
        kp_raw = _swap_pairs(b, kp_raw) if kp_raw is not None else None
    anchors = _anchor_values(b, values, plan) if plan.anchors is not None else None
    low, high = kind.boxes(b, box_raw, anchors, plan.settings)
    corners = b.op("Concat", low, high, axis=-1)
    keypoints = kind.keypoints(b, kp_raw, anchors, plan.settings) if kp_raw is not None and kind.keypoints else None
    if plan.y_first:
        corners = nms.swap_xy(b, corners)
        keypoints = _swap_pairs(b, keypoints) if keypoints is not None else None
    return corners, keypoints


def _scores(b: Builder, raw_boxes: ir.Value, scores_v: ir.Value, plan: GraftPlan) -> ir.Value:
    """Activated class scores [B, N, C] (times the activated objectness when there is one)."""
    raw = b.cast(scores_v, F32) if scores_v.dtype not in (None, ir.DataType.FLOAT) else scores_v
    if plan.score_columns != Columns(0, None):
        raw = _columns(b, raw, plan.score_columns, plan.score_width)
    scores = activate_scores(b, raw, plan.score_activation, plan.score_clip)
    if plan.objectness_column is not None:
        obj = _columns(b, raw_boxes, Columns(plan.objectness_column, plan.objectness_column + 1), plan.box_width)
        # objectness is one logit: a sigmoid whenever the class scores are activated
        activation = "none" if plan.score_activation == "none" else "sigmoid"
        scores = b.op("Mul", scores, activate_scores(b, obj, activation, plan.score_clip))
    return scores


def _columns(b: Builder, x: ir.Value, cols: Columns, total: int | None) -> ir.Value:
    if cols.start == 0 and cols.stop is not None and cols.stop == total:
        return x
    return b.slice(x, -1, cols.start, cols.stop if cols.stop is not None else int(np.iinfo(np.int64).max))


def _swap_pairs(b: Builder, x: ir.Value) -> ir.Value:
    """(a, b) -> (b, a) on the last axis (size 2)."""
    return b.op("Gather", x, b.i64(1, 0), axis=-1)


def _anchor_values(b: Builder, values: dict[str, ir.Value], plan: GraftPlan) -> AnchorValues:
    """Anchors as [1, N, 2] centre / size (/ stride) values, x first."""
    source = plan.anchors
    assert source is not None
    if source.anchors is not None:
        rows = source.anchors.boxes
        stride = source.anchors.strides
        return AnchorValues(b.const(rows[None, :, :2]), b.const(rows[None, :, 2:]),
                            b.const(stride[None]) if stride is not None else None)
    value = values[str(source.tensor)]
    if value.dtype is not None and value.dtype != ir.DataType.FLOAT:
        value = b.cast(value, F32)
    rows_v = b.unsqueeze(b.op("Reshape", value, b.i64(-1, 4)), 0)  # [1, N, 4] in the box format's layout
    if plan.y_first:
        rows_v = nms.swap_xy(b, rows_v)
    parts = nms.anchors_from_centers(b, rows_v) if plan.box_format in CENTER_SIZE else \
        nms.anchors_from_corners_mean(b, rows_v)
    return AnchorValues(parts.center, parts.size)


def _background(value: int | str | None, classes: int | None, activation: str) -> tuple[int | None, str]:
    """The background column and why (the reason is said when bridge chose it)."""
    if isinstance(value, str):
        text = value.strip().lower()
        if text in ("none", ""):
            return None, ""
        if text != "auto":
            try:
                value = int(text)
            except ValueError:
                raise UsageError(f"--background-class '{value}': expected a class index, 'none' or 'auto'") from None
    if value is None:
        return None, ""
    if value == "auto":
        if classes == 1:
            return None, "none (one score class: it is the class to detect)"
        if activation == "sigmoid":
            return None, "none (sigmoid scores: every class is a class to detect)"
        if classes is None:
            return 0, "0 (softmax-style scores; the class count is not static - give --background-class to be sure)"
        return 0, f"0 (the first of {classes} score columns; 'none' keeps it)"
    assert isinstance(value, int)
    if classes is not None and not 0 <= value < classes:
        raise UsageError(f"--background-class {value} is not a score column (there are {classes})")
    if classes == 1:
        raise UsageError(f"--background-class {value} removes the only score class: the grafted detector could never "
                         "report anything; with one class there is no background (drop the option or give 'none')")
    return value, ""


def _variances(variances: Sequence[float] | None, box_format: str) -> tuple[float, float, float, float]:
    """SSD variances x first (given in the values' own axis order)."""
    v = tuple(float(x) for x in (variances or DEFAULT_VARIANCES))
    if box_format in Y_FIRST and variances is not None:
        return (v[1], v[0], v[3], v[2])
    return (v[0], v[1], v[2], v[3])


def _scales(scales: float | Sequence[float] | None) -> tuple[float, float, float, float]:
    if scales is None:
        return (1.0, 1.0, 1.0, 1.0)
    values = [float(scales)] * 4 if isinstance(scales, (int, float)) else [float(s) for s in scales]
    if len(values) == 1:
        values *= 4
    if len(values) != 4 or any(not np.isfinite(s) or s == 0 for s in values):
        raise UsageError(f"--scale needs 1 or 4 non-zero numbers (x, y, w, h), got {list(values)}")
    return (values[0], values[1], values[2], values[3])


def _lookup(values: dict[str, list[int | str | None] | None], name: str, option: str, graph: onnx.GraphProto
            ) -> list[int | str | None] | None:
    if name not in values:
        outputs = ", ".join(o.name for o in graph.output)
        raise UsageError(f"{option} '{name}': the model has no tensor of that name (its outputs: {outputs})")
    return values[name]


def _static(shape: list[int | str | None] | None, axis: int) -> int | None:
    if shape is None or len(shape) <= axis:
        return None
    d = shape[axis]
    return d if isinstance(d, int) and d > 0 else None


def _show(shape: list[int | str | None]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def _check_within(cols: Columns, width: int | None, option: str, tensor: str) -> None:
    if width is not None and (cols.start >= width or (cols.stop is not None and cols.stop > width)):
        raise UsageError(f"{option} {cols} is outside '{tensor}' ({width} columns)")


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


def _dim_label(value: ir.Value, axis: int) -> int | str | None:
    if value.shape is None or len(value.shape) <= axis:
        return None
    d = value.shape[axis]
    return d if isinstance(d, int) else d.value


__all__ = ["BOX_FORMATS", "DECODE_KINDS", "GRAFT_FORMATS", "NMS_KINDS", "OUTPUT_NAMES", "SCORE_ACTIVATIONS",
           "Columns", "GraftPlan", "build", "graft_nms", "plan_graft"]
