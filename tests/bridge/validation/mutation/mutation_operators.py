"""Mutation operators over converted ONNX models: each makes mutants, one plausible converter bug each.

An operator finds its sites in the graph generically - by op type, by what feeds a NonMaxSuppression, by the
detection groups bridge recorded - never by one model's node names, and makes one mutant per site (and
variant). When a model has no site for it, the operator raises ``NoSite`` with the reason: the suite
reports it, nothing is silently skipped.

Regions of a detector's graph the operators look in:
- the *box cone*: every value the boxes entering NonMaxSuppression, or a detection group's box outputs, are
  computed from. Float constants there with more than 4 elements that no weight-taking op (Conv, Gemm, MatMul,
  BatchNormalization) reads are the *anchors* (MultiBoxPrior's folded priors, a grid of centres, YOLO's
  anchor sizes); those with at most 4 elements read by Mul / Div are the *decode constants* (variances,
  strides, the halving of extents);
- the *detection region*: every value a detection output is computed from, where score thresholds are
  comparisons of a score with a constant in (0, 1);
- the *elementwise outputs*: float outputs in no detection group whose values reach atol / rtol, where the scale
  rule (``bridge.validation.tolerance``) widens the tolerance near zero: the ``large_output_*`` operators put
  there exactly what that rule must still FAIL (edits after the output, sized from its values on the feeds).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from mutation_graph import (
    WEIGHT_CONSUMERS,
    Editor,
    constants,
    consumers,
    node_label,
    ops,
    spread,
    upstream,
    value_shapes,
)
from mutation_rows import RANKS, NoRows, Rows
from onnx import helper

from bridge.config import DEFAULT_TOLERANCE, DETECTION_META, NONDETERMINISTIC_OUTPUTS_META
from bridge.validation.detection.layouts import DetectionSpec, dump_detection_specs


class NoSite(Exception):
    """The operator has no site in this model; the message says why."""


@dataclass(frozen=True)
class Mutant:
    operator: str
    site: str  # where and what, in a reader's words
    model: onnx.ModelProto = field(repr=False)


@dataclass
class Base:
    """A converted base model and what operators may look at: its detection groups and probe inputs."""

    name: str
    model: onnx.ModelProto
    specs: list[DetectionSpec]
    feeds: dict[str, np.ndarray]  # the validation feeds (the sample a constant-output mutant folds in)
    probe: list[dict[str, np.ndarray]]  # realistic inputs for data-guided choices (not the validation feeds)
    run: Callable[[onnx.ModelProto, Sequence[dict[str, np.ndarray]]], list[dict[str, np.ndarray]]]


@dataclass(frozen=True)
class Operator:
    name: str
    bug: str  # the converter bug it stands for
    find: Callable[[Base], list[Mutant]]


OPERATORS: dict[str, Operator] = {}


def operator(name: str, bug: str) -> Callable[[Callable[[Base], list[Mutant]]], Callable[[Base], list[Mutant]]]:
    """Register the decorated site finder as operator ``name`` standing for converter bug ``bug``."""

    def register(fn: Callable[[Base], list[Mutant]]) -> Callable[[Base], list[Mutant]]:
        OPERATORS[name] = Operator(name, bug, fn)
        return fn

    return register


def _mutant(base: Base, op: str, site: str, edit: Callable[[Editor], None]) -> Mutant:
    ed = Editor(base.model)
    edit(ed)
    return Mutant(op, site, ed.finish())


# -- regions ---------------------------------------------------------------------------------------------------

def _nms(base: Base) -> list[onnx.NodeProto]:
    found = ops(base.model.graph, "NonMaxSuppression")
    if not found:
        raise NoSite("no NonMaxSuppression in the graph")
    return found


def _box_outputs(base: Base) -> list[str]:
    return [name for spec in base.specs for role, name in spec.outputs.items() if role in ("boxes", "detections")]


def _box_cone(base: Base) -> set[str]:
    g = base.model.graph
    roots = [n.input[0] for n in ops(g, "NonMaxSuppression")] + _box_outputs(base)
    if not roots:
        raise NoSite("no NonMaxSuppression and no detection group: no box decode")
    return upstream(g, roots)


def _float_constants(base: Base, cone: set[str]) -> dict[str, np.ndarray]:
    weights = {n.input[k] for n in base.model.graph.node if n.op_type in WEIGHT_CONSUMERS for k in range(1, len(n.input))}
    return {k: v for k, v in constants(base.model.graph).items()
            if k in cone and v.dtype.kind == "f" and k not in weights and np.isfinite(v).all()}


def _anchors(base: Base) -> dict[str, np.ndarray]:
    found = {k: v for k, v in _float_constants(base, _box_cone(base)).items() if v.size > 4 and np.ptp(v) > 0}
    if not found:
        raise NoSite("no float constant of more than 4 values (anchors) in what the boxes are computed from")
    return found


def _detection_region(base: Base) -> set[str]:
    g = base.model.graph
    roots = [i for n in ops(g, "NonMaxSuppression") for i in n.input] + \
        [name for spec in base.specs for name in spec.outputs.values()]
    if not roots:
        raise NoSite("no NonMaxSuppression and no detection group")
    return upstream(g, roots)


def _groups(base: Base) -> list[DetectionSpec]:
    if not base.specs:
        raise NoSite("no detection group (the model reports no detections)")
    return base.specs


# -- weights -------------------------------------------------------------------------------------------------

@operator("conv_weight_scale", "a Conv weight read or folded with the wrong scale (x1.02)")
def conv_weight_scale(base: Base) -> list[Mutant]:
    consts = constants(base.model.graph)
    convs = [n for n in ops(base.model.graph, "Conv", "ConvTranspose") if len(n.input) > 1 and n.input[1] in consts]
    if not convs:
        raise NoSite("no Conv with a constant weight")
    return [_mutant(base, "conv_weight_scale", f"{node_label(n)} weight x1.02",
                    lambda ed, w=n.input[1]: ed.scale_initializer(w, lambda v: v * 1.02)) for n in spread(convs)]


@operator("bn_scale", "BatchNormalization's scale x1.02, or its epsilon read as 1e-3 (the default of another "
                      "framework)")
def bn_scale(base: Base) -> list[Mutant]:
    consts = constants(base.model.graph)
    bns = [n for n in ops(base.model.graph, "BatchNormalization") if n.input[1] in consts]
    if not bns:
        raise NoSite("no BatchNormalization node (folded into the convolutions, or none in the model)")
    found = []
    for n in spread(bns, 2):
        found.append(_mutant(base, "bn_scale", f"{node_label(n)} scale x1.02",
                             lambda ed, s=n.input[1]: ed.scale_initializer(s, lambda v: v * 1.02)))

        def eps(ed: Editor, name: str = n.name) -> None:
            node = next(x for x in ed.graph.node if x.name == name)
            kept = [a for a in node.attribute if a.name != "epsilon"]
            del node.attribute[:]
            node.attribute.extend([*kept, helper.make_attribute("epsilon", 1e-3)])

        found.append(_mutant(base, "bn_scale", f"{node_label(n)} epsilon 1e-3", eps))
    return found


# -- anchors and decode --------------------------------------------------------------------------------------

@operator("anchor_scale", "anchors (priors feeding the box decode) scaled: x1.0005 (a lowering's rounding), "
                          "x1.01")
def anchor_scale(base: Base) -> list[Mutant]:
    anchors = _anchors(base)
    names = sorted(anchors)

    def scale_all(factor: float) -> Callable[[Editor], None]:
        def edit(ed: Editor) -> None:
            for name in names:
                ed.scale_initializer(name, lambda v: v * factor)
        return edit

    found = [_mutant(base, "anchor_scale", f"every anchor constant ({', '.join(names)}) x{f}", scale_all(f))
             for f in (1.0005, 1.01)]
    if len(names) > 1:
        found += [_mutant(base, "anchor_scale", f"anchor constant {n} x1.01",
                          lambda ed, n=n: ed.scale_initializer(n, lambda v: v * 1.01)) for n in names]
    return found


@operator("anchor_shift", "anchors shifted: all by 1% of their range, or one anchor value by 5% (an off-by-one "
                          "in a prior grid)")
def anchor_shift(base: Base) -> list[Mutant]:
    found = []
    for name, value in sorted(_anchors(base).items()):
        delta = float(np.ptp(value))
        found.append(_mutant(base, "anchor_shift", f"anchor constant {name} + {0.01 * delta:.4g} (all values)",
                             lambda ed, n=name, d=0.01 * delta: ed.scale_initializer(n, lambda v: v + d)))
        index = _live_element(base, name, 0.05 * delta)
        if index is None:
            continue
        found.append(_mutant(base, "anchor_shift", f"anchor constant {name} element {index} + {0.05 * delta:.4g}",
                             lambda ed, n=name, i=index, d=0.05 * delta: ed.scale_initializer(
                                 n, lambda v: _add_at(v, i, d))))
    return found


def _add_at(value: np.ndarray, index: int, delta: float) -> np.ndarray:
    out = value.copy().reshape(-1)
    out[index] += delta
    return out.reshape(value.shape)


def _live_element(base: Base, name: str, delta: float) -> int | None:
    """One element of constant ``name`` whose shift by ``delta`` changes the outputs on the probe inputs (found
    by bisection), or None when no single element's shift shows there."""
    reference = base.run(base.model, base.probe)
    size = constants(base.model.graph)[name].size

    def changes(indices: np.ndarray) -> bool:
        ed = Editor(base.model)
        ed.scale_initializer(name, lambda v: _add_at_many(v, indices, delta))
        got = base.run(ed.finish(), base.probe)
        return any(not _same(a, b) for ra, rb in zip(reference, got, strict=True) for a, b in
                   ((ra[k], rb.get(k)) for k in ra))

    candidates = np.arange(size)
    if not changes(candidates):
        return None
    while len(candidates) > 1:
        half = candidates[: len(candidates) // 2]
        candidates = half if changes(half) else candidates[len(candidates) // 2:]
    return int(candidates[0]) if changes(candidates) else None


def _add_at_many(value: np.ndarray, indices: np.ndarray, delta: float) -> np.ndarray:
    out = value.copy().reshape(-1)
    out[indices] += delta
    return out.reshape(value.shape)


def _same(a: Any, b: Any) -> bool:
    return b is not None and np.shape(a) == np.shape(b) and np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True)


@operator("decode_variance", "a box decode constant (a variance, a stride, the halving of an extent) x1.1")
def decode_variance(base: Base) -> list[Mutant]:
    cone = _box_cone(base)
    small = {k: v for k, v in _float_constants(base, cone).items() if v.size <= 4}
    readers = consumers(base.model.graph)
    sites: dict[tuple[float, ...], list[tuple[str, int]]] = {}  # value -> (node name, input index) reading it
    for name, value in small.items():
        if np.isin(value, (0.0, 1.0, -1.0)).all():
            continue
        for node in readers.get(name, []):
            if node.op_type in ("Mul", "Div") and node.output[0] in cone:
                key = tuple(np.round(value.astype(np.float64).ravel(), 6))
                sites.setdefault(key, []).extend((node.name, k) for k, i in enumerate(node.input) if i == name)
    if not sites:
        raise NoSite("no small constant read by a Mul or Div on the way to the boxes")

    def edit(places: list[tuple[str, int]]) -> Callable[[Editor], None]:
        def apply(ed: Editor) -> None:
            consts = constants(ed.graph)
            for node_name, k in places:
                node = next(x for x in ed.graph.node if x.name == node_name)
                ed.replace_constant(node, k, consts[node.input[k]] * 1.1)
        return apply

    return [_mutant(base, "decode_variance", f"decode constant {list(value)} x1.1 at {len(places)} node(s)",
                    edit(places)) for value, places in sorted(sites.items())]


# -- NMS -----------------------------------------------------------------------------------------------------

def _nms_constant(base: Base, node: onnx.NodeProto, index: int) -> float | None:
    consts = constants(base.model.graph)
    if index >= len(node.input) or not node.input[index] or node.input[index] not in consts:
        return None
    return float(consts[node.input[index]].ravel()[0])


def _nms_input_edit(node_name: str, index: int, value: Any, dtype: Any) -> Callable[[Editor], None]:
    def edit(ed: Editor) -> None:
        node = next(x for x in ed.graph.node if x.name == node_name)
        name = ed.const(np.asarray([value], dtype), "nms_param")
        while len(node.input) <= index:
            node.input.append("")
        node.input[index] = name
    return edit


@operator("nms_iou", "NonMaxSuppression's IoU threshold off: +0.01 (0.45 -> 0.46) or -0.15")
def nms_iou(base: Base) -> list[Mutant]:
    found = []
    for node in spread(_nms(base), 2):
        iou = _nms_constant(base, node, 3)
        iou = 0.0 if iou is None else iou
        for new in (iou + 0.01, max(iou - 0.15, 0.0)):
            found.append(_mutant(base, "nms_iou", f"{node_label(node)} iou_threshold {iou:.4g} -> {new:.4g}",
                                 _nms_input_edit(node.name, 3, new, np.float32)))
    return found


@operator("score_threshold", "a score threshold off by +0.02 (NonMaxSuppression's, or a comparison of scores with "
                             "a constant before it)")
def score_threshold(base: Base) -> list[Mutant]:
    found = []
    for node in ops(base.model.graph, "NonMaxSuppression"):
        t = _nms_constant(base, node, 4)
        if t is not None and t > -1e30:
            found.append(_mutant(base, "score_threshold", f"{node_label(node)} score_threshold {t:.4g} -> {t + 0.02:.4g}",
                                 _nms_input_edit(node.name, 4, t + 0.02, np.float32)))
    region = _detection_region(base) if base.specs or ops(base.model.graph, "NonMaxSuppression") else set()
    consts = constants(base.model.graph)
    compares = []
    for node in ops(base.model.graph, "Greater", "GreaterOrEqual", "Less", "LessOrEqual"):
        if node.output[0] not in region:
            continue
        for k, name in enumerate(node.input):
            value = consts.get(name)
            if value is not None and value.dtype.kind == "f" and value.size == 1 and 0 < float(value.ravel()[0]) < 1:
                compares.append((node, k, float(value.ravel()[0])))
    for node, k, t in spread(compares, 3):
        def edit(ed: Editor, node_name: str = node.name, k: int = k, t: float = t) -> None:
            target = next(x for x in ed.graph.node if x.name == node_name)
            ed.replace_constant(target, k, np.asarray(t + 0.02, np.float32).reshape(constants(ed.graph)[target.input[k]].shape))
        found.append(_mutant(base, "score_threshold", f"{node_label(node)} threshold {t:.4g} -> {t + 0.02:.4g}", edit))
    if not found:
        raise NoSite("no NonMaxSuppression score threshold in use and no comparison of scores with a constant in (0, 1)")
    return found


@operator("nms_max_output", "NonMaxSuppression's max_output_boxes_per_class set to 1 or 3")
def nms_max_output(base: Base) -> list[Mutant]:
    return [_mutant(base, "nms_max_output", f"{node_label(node)} max_output_boxes_per_class -> {k}",
                    _nms_input_edit(node.name, 2, k, np.int64)) for node in spread(_nms(base), 2) for k in (1, 3)]


@operator("topk", "a TopK's k off by one (k - 1) or halved (a pre-NMS top-k or a max-detections cut)")
def topk(base: Base) -> list[Mutant]:
    nodes = ops(base.model.graph, "TopK")
    if not nodes:
        raise NoSite("no TopK in the graph")
    found = []
    for node in spread(nodes, 2):
        for how in ("k-1", "k/2"):
            def edit(ed: Editor, node_name: str = node.name, how: str = how) -> None:
                target = next(x for x in ed.graph.node if x.name == node_name)
                k = target.input[1]
                one = ed.const(np.asarray([1], np.int64))
                smaller = ed.op("Sub", k, one) if how == "k-1" else ed.op("Div", k, ed.const(np.asarray([2], np.int64)))
                target.input[1] = ed.op("Max", smaller, ed.op("Min", k, one))  # never below 1 (or 0 when k was 0)
            found.append(_mutant(base, "topk", f"{node_label(node)} {how}", edit))
    return found


@operator("after_nms", "a change right after NonMaxSuppression: the first selection dropped, or each selection's "
                       "box index + 1 (the neighbouring candidate's box)")
def after_nms(base: Base) -> list[Mutant]:
    found = []
    for node in spread(_nms(base), 2):
        selected = node.output[0]

        def drop_first(ed: Editor, sel: str = selected) -> None:
            pre = ed.intercept(sel)
            ed.node("Slice", [pre, ed.const(np.asarray([1], np.int64)), ed.const(np.asarray([2**62], np.int64)),
                              ed.const(np.asarray([0], np.int64))], [sel])

        def next_box(ed: Editor, sel: str = selected, boxes: str = node.input[0]) -> None:
            pre = ed.intercept(sel)
            last = ed.op("Sub", ed.op("Gather", ed.op("Shape", boxes), ed.const(np.asarray(1, np.int64)), axis=0),
                         ed.const(np.asarray(1, np.int64)))
            shift = ed.const(np.asarray([0, 0, 1], np.int64))
            ed.node("Min", [ed.op("Add", pre, shift), ed.op("Concat", ed.const(np.asarray([2**62, 2**62], np.int64)),
                                                           ed.op("Unsqueeze", last, ed.const(np.asarray([0], np.int64))),
                                                           axis=0)], [sel])

        found.append(_mutant(base, "after_nms", f"{node_label(node)} first selection dropped", drop_first))
        found.append(_mutant(base, "after_nms", f"{node_label(node)} selected box index + 1", next_box))
    return found


# -- the reported detections -------------------------------------------------------------------------------

def _rows_mutant(base: Base, op: str, spec: DetectionSpec, what: str, fn: Callable[[Rows], None]) -> Mutant:
    def edit(ed: Editor) -> None:
        rows = Rows(ed, spec)
        fn(rows)
        rows.close()
    try:
        return _mutant(base, op, f"group '{spec.label}' ({spec.layout}): {what}", edit)
    except NoRows as exc:
        raise NoSite(str(exc)) from None


@operator("swap_xy", "x and y swapped in the reported boxes (or only in the boxes NMS compares)")
def swap_xy(base: Base) -> list[Mutant]:
    found = [_rows_mutant(base, "swap_xy", spec, "x and y swapped", Rows.swap_xy) for spec in _groups(base)]
    for node in ops(base.model.graph, "NonMaxSuppression")[:1]:
        def edit(ed: Editor, name: str = node.name) -> None:
            target = next(x for x in ed.graph.node if x.name == name)
            target.input[0] = ed.op("Gather", target.input[0], ed.const(np.asarray([1, 0, 3, 2], np.int64)), axis=2)
        found.append(_mutant(base, "swap_xy", f"{node_label(node)}: x and y swapped in the boxes it compares", edit))
    return found


@operator("class_id_plus_one", "class ids off by one (the background class counted)")
def class_id_plus_one(base: Base) -> list[Mutant]:
    found = []
    for spec in _groups(base):
        try:
            found.append(_rows_mutant(base, "class_id_plus_one", spec, "class id + 1", Rows.labels_plus_one))
        except NoSite:
            continue
    if not found:
        raise NoSite("no detection group reports class ids")
    return found


@operator("score_clip", "scores clipped at 0.9 (a Clip lowered with the wrong bound), in the output or before NMS")
def score_clip(base: Base) -> list[Mutant]:
    found = [_rows_mutant(base, "score_clip", spec, "scores clipped at 0.9", lambda r: r.clip_scores(0.9))
             for spec in _groups(base)]
    for node in ops(base.model.graph, "NonMaxSuppression")[:1]:
        def edit(ed: Editor, name: str = node.name) -> None:
            target = next(x for x in ed.graph.node if x.name == name)
            target.input[1] = ed.op("Min", target.input[1], ed.const(np.float32(0.9)))
        found.append(_mutant(base, "score_clip", f"{node_label(node)}: the scores it ranks clipped at 0.9", edit))
    return found


@operator("rows", "one reported row per image dropped, or its box moved by 20% of its width, at the top, middle "
                  "or lowest rank (nodes after the detection outputs)")
def rows(base: Base) -> list[Mutant]:
    found = []
    for spec in _groups(base):
        for rank in RANKS:
            found.append(_rows_mutant(base, "rows", spec, f"{rank}-ranked row dropped", lambda r, k=rank: r.drop(k)))
            found.append(_rows_mutant(base, "rows", spec, f"{rank}-ranked box moved", lambda r, k=rank: r.move(k)))
    return found


# -- ops -----------------------------------------------------------------------------------------------------

COORDINATE_MODES = ("half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel")


@operator("resize_mode", "Resize's mode (nearest <-> linear) or coordinate_transformation_mode wrong")
def resize_mode(base: Base) -> list[Mutant]:
    nodes = ops(base.model.graph, "Resize")
    if not nodes:
        raise NoSite("no Resize in the graph")
    found = []
    for node in spread(nodes, 2):
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        mode = attrs.get("mode", b"nearest")
        mode = mode.decode() if isinstance(mode, bytes) else mode
        coord = attrs.get("coordinate_transformation_mode", b"half_pixel")
        coord = coord.decode() if isinstance(coord, bytes) else coord
        variants = [("mode", "linear" if mode == "nearest" else "nearest")] + \
            [("coordinate_transformation_mode", c) for c in COORDINATE_MODES if c != coord]
        for attr, value in variants:
            found.append(_mutant(base, "resize_mode", f"{node_label(node)} {attr} {attrs.get(attr, '(default)')!s} -> "
                                                      f"{value}", _set_attr(node.name, attr, value)))
    return found


def _set_attr(node_name: str, attr: str, value: Any) -> Callable[[Editor], None]:
    def edit(ed: Editor) -> None:
        node = next(x for x in ed.graph.node if x.name == node_name)
        kept = [a for a in node.attribute if a.name != attr]
        del node.attribute[:]
        node.attribute.extend([*kept, helper.make_attribute(attr, value)])
    return edit


@operator("softmax_axis", "Softmax over the wrong axis (an NCHW/NHWC or channel-mode mix-up)")
def softmax_axis(base: Base) -> list[Mutant]:
    nodes = ops(base.model.graph, "Softmax", "LogSoftmax")
    if not nodes:
        raise NoSite("no Softmax in the graph")
    shapes = value_shapes(base.model)
    found = []
    for node in spread(nodes, 2):
        dims = shapes.get(node.input[0])
        if not dims:
            continue
        axis = next((a.i for a in node.attribute if a.name == "axis"), -1) % len(dims)
        other = next((k for k in range(len(dims)) if k != axis and dims[k] != 1), None)
        if other is None:
            other = (axis + 1) % len(dims)
        found.append(_mutant(base, "softmax_axis", f"{node_label(node)} axis {axis} -> {other}",
                             _set_attr(node.name, "axis", other)))
    if not found:
        raise NoSite("no Softmax with a known input rank")
    return found


@operator("relu_leaky", "Relu converted as LeakyRelu (alpha 0.01)")
def relu_leaky(base: Base) -> list[Mutant]:
    nodes = ops(base.model.graph, "Relu")
    if not nodes:
        raise NoSite("no Relu in the graph")

    def edit(ed: Editor, name: str) -> None:
        node = next(x for x in ed.graph.node if x.name == name)
        node.op_type = "LeakyRelu"
        node.attribute.append(helper.make_attribute("alpha", 0.01))

    return [_mutant(base, "relu_leaky", f"{node_label(n)} -> LeakyRelu(0.01)", lambda ed, n=n.name: edit(ed, n))
            for n in spread(nodes)]


# -- elementwise outputs: what the scale rule must still FAIL ------------------------------------------------

def _elementwise_outputs(base: Base) -> dict[str, np.ndarray]:
    """Float graph outputs compared elementwise (in no detection group) where the scale rule can widen the
    tolerance (bridge.validation.tolerance: ``atol + rtol * scale``, wider than atol once the output reaches
    atol / rtol = 0.1 with the default tolerance), with their base values on the validation feeds."""
    grouped = {name for spec in base.specs for name in spec.outputs.values()}
    [values] = base.run(base.model, [base.feeds])
    floor = DEFAULT_TOLERANCE.atol / DEFAULT_TOLERANCE.rtol
    found = {name: np.asarray(v) for name, v in values.items() if name not in grouped and np.asarray(v).dtype.kind == "f"
             and np.asarray(v).size > 1 and np.isfinite(v).all() and float(np.abs(v).max()) > floor}
    if not found:
        raise NoSite(f"no float output compared elementwise whose values reach {floor:g} (where the scale rule "
                     "widens the tolerance)")
    return found


def _after_output(base: Base, op: str, name: str, what: str, build: Callable[[Editor, str], str]) -> Mutant:
    """A mutant computing graph output ``name`` as ``build(editor, the value before)`` (nodes after the output)."""

    def edit(ed: Editor) -> None:
        pre = ed.intercept(name, readers_keep_original=True)
        ed.node("Identity", [build(ed, pre)], [name])

    return _mutant(base, op, f"output '{name}': {what}", edit)


@operator("large_output_scale", "a large-valued output scaled by 1.003 (a folded constant's rounding, a wrong "
                                "Rescaling): on its largest values 3x what rtol allows")
def large_output_scale(base: Base) -> list[Mutant]:
    return [_after_output(base, "large_output_scale", name, "x1.003",
                          lambda ed, pre, v=value: ed.op("Mul", pre, ed.const(np.asarray(1.003, v.dtype))))
            for name, value in _elementwise_outputs(base).items()]


def _channel_axis(shape: tuple[int, ...]) -> int:
    """The shortest axis of size > 1 (the last of equals): the channels of [N, C, H, W], the columns of [1, N, 16]."""
    sizes = [(d, k) for k, d in enumerate(shape) if d > 1]
    return min(sizes, key=lambda dk: (dk[0], -dk[1]))[1]


@operator("large_output_channel_bias", "a bias off by 0.5% of the output's range on one channel (the slice along "
                                       "its shortest axis whose own values are smallest)")
def large_output_channel_bias(base: Base) -> list[Mutant]:
    found = []
    for name, value in _elementwise_outputs(base).items():
        axis = _channel_axis(value.shape)
        per_slice = np.abs(value).max(axis=tuple(k for k in range(value.ndim) if k != axis))
        quiet = int(np.argmin(per_slice))
        delta = np.zeros([d if k == axis else 1 for k, d in enumerate(value.shape)], value.dtype)
        delta.reshape(-1)[quiet] = 0.005 * float(np.abs(value).max())
        found.append(_after_output(base, "large_output_channel_bias", name,
                                   f"+{float(delta.max()):.4g} on index {quiet} of axis {axis}",
                                   lambda ed, pre, d=delta: ed.op("Add", pre, ed.const(d))))
    return found


@operator("large_output_one_element", "one element of a large-valued output off by 1% of its range (the element "
                                      "nearest zero, where the scale rule widens the tolerance most)")
def large_output_one_element(base: Base) -> list[Mutant]:
    found = []
    for name, value in _elementwise_outputs(base).items():
        at = int(np.argmin(np.abs(value)))
        delta = np.zeros(value.shape, value.dtype)
        delta.reshape(-1)[at] = 0.01 * float(np.abs(value).max())
        found.append(_after_output(base, "large_output_one_element", name,
                                   f"element {list(np.unravel_index(at, value.shape))} + {float(delta.max()):.4g}",
                                   lambda ed, pre, d=delta: ed.op("Add", pre, ed.const(d))))
    return found


@operator("large_output_near_zero_sign", "signs flipped where |value| < 1% of a large-valued output's range (an "
                                         "Abs / Sign / Where lowering wrong near zero)")
def large_output_near_zero_sign(base: Base) -> list[Mutant]:
    found = []
    for name, value in _elementwise_outputs(base).items():
        bound = 0.01 * float(np.abs(value).max())

        def flip(ed: Editor, pre: str, t: float = bound, dtype: Any = value.dtype) -> str:
            near = ed.op("Less", ed.op("Abs", pre), ed.const(np.asarray(t, dtype)))
            return ed.op("Where", near, ed.op("Neg", pre), pre)

        found.append(_after_output(base, "large_output_near_zero_sign", name, f"sign flipped where |value| < "
                                   f"{bound:.4g}", flip))
    return found


# -- whole models ----------------------------------------------------------------------------------------------

@operator("constant_outputs", "the validation sample's outputs folded into the graph: it ignores its input")
def constant_outputs(base: Base) -> list[Mutant]:
    [outputs] = base.run(base.model, [base.feeds])

    def edit(ed: Editor) -> None:
        keep_inputs = list(ed.graph.input)
        del ed.graph.node[:]
        del ed.graph.initializer[:]
        for out in ed.graph.output:
            ed.graph.node.append(helper.make_node("Constant", [], [out.name], name=ed.fresh("Constant"),
                                                  value=onnx.numpy_helper.from_array(np.asarray(outputs[out.name]))))
        del ed.graph.input[:]
        ed.graph.input.extend(keep_inputs)

    return [_mutant(base, "constant_outputs", "every output a Constant of the sample's outputs", edit)]


def _last_weight(base: Base) -> tuple[str, str]:
    """The last learned weight: of a Conv, else of a Gemm / MatMul (a constant of 16+ values that are not all
    equal - a lowering's 0/1 selection matrix is no weight)."""
    consts = constants(base.model.graph)

    def learned(n: onnx.NodeProto) -> bool:
        w = consts.get(n.input[1]) if len(n.input) > 1 else None
        return w is not None and w.dtype.kind == "f" and w.size >= 16 and bool(np.ptp(w) > 0)

    nodes = [n for n in ops(base.model.graph, "Conv", "ConvTranspose") if learned(n)] or \
        [n for n in ops(base.model.graph, "Gemm", "MatMul") if learned(n)]
    if not nodes:
        raise NoSite("no learned weight (Conv, Gemm, MatMul) to break under the tampered metadata")
    return node_label(nodes[-1]), nodes[-1].input[1]


@operator("metadata_nondeterministic", "a wrong model (its last weight x1.5) that says in its own metadata "
                                       "(bridge.nondeterministic_outputs) its outputs are random samples")
def metadata_nondeterministic(base: Base) -> list[Mutant]:
    label, weight = _last_weight(base)
    names = [o.name for o in base.model.graph.output]

    def edit(ed: Editor) -> None:
        ed.scale_initializer(weight, lambda v: v * 1.5)
        ed.set_meta(NONDETERMINISTIC_OUTPUTS_META, json.dumps(names))

    return [_mutant(base, "metadata_nondeterministic", f"{label} weight x1.5, all outputs listed as nondeterministic",
                    edit)]


@operator("metadata_detection", "a wrong model whose own detection metadata (bridge.detection_outputs) excuses the "
                                "bug: x/y swapped but declared yxyx; class ids + 1 but the labels role left out")
def metadata_detection(base: Base) -> list[Mutant]:
    found = []
    for k, spec in enumerate(_groups(base)):
        other = "yxyx" if spec.box_format == "xyxy" else "xyxy"
        as_other = DetectionSpec(spec.layout, spec.outputs, reference_layout=spec.ref_layout,
                                 reference_outputs=spec.ref_outputs, name=spec.name, box_format=other,
                                 reference_box_format=spec.ref_box_format)
        found.append(_rows_mutant(base, "metadata_detection", spec, f"x and y swapped, declared box_format {other}",
                                  _declaring(base, k, as_other, Rows.swap_xy)))
        if "labels" in spec.outputs and spec.layout == "boxes-scores-labels":
            no_labels = DetectionSpec(spec.layout, {r: n for r, n in spec.outputs.items() if r != "labels"},
                                      reference_layout=spec.ref_layout,
                                      reference_outputs={r: n for r, n in spec.ref_outputs.items() if r != "labels"},
                                      name=spec.name, box_format=spec.box_format)
            found.append(_rows_mutant(base, "metadata_detection", spec, "class id + 1, labels role left out of the "
                                      "metadata", _declaring(base, k, no_labels, Rows.labels_plus_one)))
    return found


def _declaring(base: Base, index: int, declared: DetectionSpec, bug: Callable[[Rows], None]) -> Callable[[Rows], None]:
    """The row edit ``bug``, with the model's detection metadata declaring group ``index`` as ``declared``."""

    def edit(rows: Rows) -> None:
        bug(rows)
        specs = list(base.specs)
        specs[index] = declared
        rows.ed.set_meta(DETECTION_META, dump_detection_specs(specs))

    return edit


def mutants(base: Base, name: str) -> list[Mutant]:
    """The mutants operator ``name`` makes of ``base`` (NoSite when it has no site there)."""
    made = OPERATORS[name].find(base)
    if not made:
        raise AssertionError(f"operator {name} found no site in {base.name} without saying why")
    return made
