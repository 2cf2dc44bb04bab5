"""An upstream tie proof by pinning: a failed comparison re-run with the source's values deciding the selections.

A detector selects: TopK keeps the N best scores, NonMaxSuppression keeps boxes in score order, ArgMax picks
one class, a comparison keeps peaks (CenterNet's ``x * (MaxPool(x) == x)``) or scores over a threshold. Two
runtimes that compute the same scores to within a float32 ulp (onnxruntime's Sigmoid is not MXNet's) can select
differently where two scores are tied to that ulp, and everything downstream then sees other rows; the final
outputs' matcher has no evidence that the difference came from a tie upstream. Bit-exact agreement is not
achievable across runtimes, so this module proves the tie instead:

1. ``selection_points``: the decision inputs of every selection op of the candidate graph (``SELECTION_OPS``;
   and the float data inputs of comparisons, ``COMPARISON_OPS``), each walked back to the nearest tensors the
   source also returns (its *pins*) - by name, or as a *layout alias*: a tensor made by a node standing for a
   source node (its provenance) whose values equal that node's output in another axis order (a softmax whose
   Transpose a pass moved away), checked on the first feeds;
2. the pins' values from the source and from the candidate (the unpinned model with the pins as extra
   outputs) on the same feeds must agree within the tolerance - the part of the model above the selections
   is proved by this, not assumed (a pin downstream of another is judged again with the selections above it
   deciding on the source's values, so a selection difference upstream of it is not counted against it);
3. the decision-pinned run (``bridge.validation.pinned_graph.decision_pinned_model``): the source's pin values
   reach **only the selection ops** - every other consumer, and so every output, reads the candidate's own
   tensors (anchors, decoded boxes, scores). A pin never replaces geometry: the outputs are the candidate's
   numbers at the source's choices, compared with the reference by the ordinary comparison (box tolerance,
   tie rules unchanged);
4. what it may excuse (``RowAccount``): only output rows (elements) that the decision pinning changed. The
   rows the unpinned comparison fails on must all be rows where the unpinned and the pinned run differ (for
   detections: or rows a changed row reaches through a chain of overlapping rows of their class - greedy
   matching pairs only overlapping boxes, so a changed row can push its neighbours onto other partners); each
   failing output's count of excused rows and of rows pinning changed is reported;
5. the bound (``_bound``): a *root* selection - none of the selections upstream of it changed or reordered - may change
   at most ``MAX_ROOT_CHANGE_SHARE`` of its choices (at least ``MIN_ROOT_CHANGES``), and with ``strict`` each choice it changed
   must sit on decision inputs that differ from the source's by at most ``STRICT_TIE_ULPS`` float32 ulps of
   the input's magnitude (a rounding tie, not merely a within-tolerance difference). Over the share, a root TopK
   or ArgMax is still a near-tie when the *source's own* values tie every choice it changed: each within
   ``SOURCE_TIE_ULPS`` (two rounding errors) of the source's cut (``source_tie_band``; an untrained SSD scores
   every anchor 1/21 to a few ulps, so hundreds of anchors sit at its top-400 cut). Selections downstream of
   a changed one see other rows by construction; their changes are counted, not bounded.

Only if all of that holds is the verdict a pass; the comparison then says which tensors were pinned, their
largest difference, how many choices each selection changed, how many rows each output excused, and that with
the selections decided alike every output matches (``PinningResult.text``). Anything else leaves the failure
standing, saying why pinning did not explain it. This module is runtime-agnostic: the caller runs the
candidate (``RunCandidate``) and the source (``PinSource``) wherever they run (``bridge.conversion.pinning``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import onnx

from bridge.config import Tolerance
from bridge.validation.compare import Comparison, OutputComparison, compare_outputs, detection_tolerance
from bridge.validation.detection.layouts import DetectionSpec, as_detection_specs, read_detection_pair
from bridge.validation.detection.matching import Detections, problem_rows
from bridge.validation.graph import GraphIndex, with_outputs
from bridge.validation.layout_aliases import CheckedAliases, check_claimed_aliases
from bridge.validation.pinned_graph import (
    SOURCE_SUFFIX,
    UNPINNED_SUFFIX,
    DecisionSite,
    decision_pinned_model,
    graph_input_names,
    pinned_model,
    subgraph_names,
)

log = logging.getLogger(__name__)

__all__ = [
    "COMPARISON_OPS",
    "MAX_ROOT_CHANGE_SHARE",
    "MIN_ROOT_CHANGES",
    "SELECTION_OPS",
    "SOURCE_TIE_ULPS",
    "STRICT_TIE_ULPS",
    "UNPINNED_SUFFIX",
    "PinSource",
    "PinningResult",
    "SelectionInputsProof",
    "SelectionPoint",
    "explain_by_pinning",
    "graph_input_names",
    "has_selection_ops",
    "pinned_model",
    "prove_selection_inputs",
    "selection_changes",
    "selection_points",
    "source_tie_band",
]

# op -> (inputs whose values decide what is selected, the output holding the selected indices)
SELECTION_OPS: dict[str, tuple[tuple[int, ...], int]] = {
    "TopK": ((0,), 1),  # the top-N cut (and the order within it)
    "NonMaxSuppression": ((0, 1), 0),  # boxes (IoU against the threshold) and scores (the visiting order)
    "ArgMax": ((0,), 0),
    "ArgMin": ((0,), 0),
}
# comparisons select too: a mask ``x * (MaxPool(x) == x)`` (CenterNet's peaks) or a threshold ``score > 0.5``
# flips where its two float inputs are tied to an ulp. Only float inputs computed from the graph's inputs are
# pinned (a mask over integer shapes, a constant threshold is exact on both sides); a comparison with no such
# input, or none the source returns, is no selection point (left to the candidate: it can only keep a failure)
COMPARISON_OPS: frozenset[str] = frozenset({"Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual"})
FLOAT_TYPES = frozenset({onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16,
                         onnx.TensorProto.BFLOAT16})
# the bound on what pinning may change (module docstring, step 5): near-ties are rare among a selection's
# choices; measured on random-weight detectors, the worst legitimate root change was 0.5% of an RPN NMS's
# survivors (GluonCV Faster R-CNN FPN: 21 of 4,588)
MAX_ROOT_CHANGE_SHARE = 0.05
MIN_ROOT_CHANGES = 2  # one swap: a choice made and one given up (a peak moved to its tied neighbour flips two)
STRICT_TIE_ULPS = 4  # the tie rules' DEFAULT_TIE_ULPS: a rounding tie, measured at the input's magnitude
# over the share, a root TopK / ArgMax is still a near-tie when every choice it changed sits within this many ulps of
# the source's cut in the source's own values: two rounding errors (STRICT_TIE_ULPS each) can swap such a pair
SOURCE_TIE_ULPS = 2 * STRICT_TIE_ULPS
MAX_CHAIN_ROWS = 50_000  # rows of one class searched for overlap chains (past it: counts against changed rows)

RunCandidate = Callable[[onnx.ModelProto, Mapping[str, np.ndarray]], dict[str, np.ndarray]]


class PinSource(Protocol):
    """The source's side: which candidate tensors it can return (by the candidate's names) and their values."""

    def names(self) -> set[str]: ...

    def values(self, feeds: Sequence[Mapping[str, np.ndarray]], names: Sequence[str]) -> list[dict[str, np.ndarray]]: ...


@dataclass(frozen=True)
class SelectionPoint:
    """One selection op of the candidate graph and the source tensors its selection inputs are pinned at."""

    node: str
    op: str
    inputs: tuple[str, ...]  # the op's score/box inputs
    indices: str  # the op's output holding what it selected
    pins: tuple[str, ...]  # the nearest tensors upstream of ``inputs`` the source also returns
    position: int = -1  # the node's index in the graph
    positions: tuple[int, ...] = ()  # where ``inputs`` sit among the node's inputs

    def to_dict(self) -> dict[str, Any]:
        return {"node": self.node, "op": self.op, "inputs": list(self.inputs), "pins": list(self.pins)}


def _elem_types(model: onnx.ModelProto) -> dict[str, int]:
    """Tensor name -> element type, from the graph's declarations and (when it runs) ONNX shape inference."""
    types: dict[str, int] = {t.name: t.data_type for t in model.graph.initializer}
    graphs = [model.graph]
    try:
        graphs.append(onnx.shape_inference.infer_shapes(model).graph)
    except Exception as exc:  # an unknown type leaves the comparison unpinned (it can only keep a failure)
        log.debug("pinning: shape inference failed (%s); comparison inputs typed from declarations only", exc)
    for g in graphs:
        for v in (*g.input, *g.value_info, *g.output):
            if v.type.HasField("tensor_type") and v.type.tensor_type.elem_type:
                types.setdefault(v.name, v.type.tensor_type.elem_type)
    return types


def _fed_by_inputs(index: GraphIndex) -> set[str]:
    """Every main-graph tensor computed from a graph input (one pass in node order; constants are not)."""
    fed = set(index.inputs)
    for node in index.model.graph.node:
        if any(i in fed for i in (*node.input, *subgraph_names(node))):
            fed.update(o for o in node.output if o)
    return fed


def _data_inputs(node: onnx.NodeProto, types: Mapping[str, int], fed: set[str]) -> tuple[str, ...]:
    """A comparison's float inputs computed from the graph's inputs (not constants, not integer shapes)."""
    return tuple(dict.fromkeys(i for i in node.input if i in fed and types.get(i) in FLOAT_TYPES))


def selection_points(model: onnx.ModelProto, available: set[str]) -> list[SelectionPoint]:
    """Every selection op of ``model``'s main graph with the source tensors (``available``) nearest upstream of
    its selection inputs; ops with none (fed straight from graph inputs or constants) get no pins. Comparisons
    (``COMPARISON_OPS``) are points only on float data inputs and only where the source returns a tensor upstream."""
    index = GraphIndex(model)
    compared = available & (set(index.order) - set(index.inputs))
    comparing = any(n.op_type in COMPARISON_OPS for n in model.graph.node)
    types, fed = (_elem_types(model), _fed_by_inputs(index)) if comparing else ({}, set())
    points = []
    for k, node in enumerate(model.graph.node):
        if node.domain not in ("", "ai.onnx"):
            continue
        facts = SELECTION_OPS.get(node.op_type)
        if node.op_type in COMPARISON_OPS:
            inputs, out = _data_inputs(node, types, fed), 0
            positions = tuple(i for i, name in enumerate(node.input) if name in inputs)
        elif facts is None:
            continue
        else:
            positions, out = facts
            positions = tuple(i for i in positions if i < len(node.input) and node.input[i])
            inputs = tuple(node.input[i] for i in positions)
        pins: list[str] = []
        for name in inputs:
            if name in index.initializers or name in index.inputs:
                continue
            found = [name] if name in compared else index.frontier(name, compared)[0]
            pins.extend(p for p in found if p in compared and p not in pins)
        if node.op_type in COMPARISON_OPS and not pins:
            continue
        indices = node.output[out] if out < len(node.output) else ""
        points.append(SelectionPoint(node.name or f"<unnamed {node.op_type} #{k}>", node.op_type, inputs, indices,
                                     tuple(sorted(pins, key=lambda p: index.position.get(p, -1))), k, positions))
    return points


# ops that read rows of their data input (input 0) at positions another input gives (input 1: indices, a mask)
ROW_READING_OPS: frozenset[str] = frozenset({"Gather", "GatherND", "GatherElements", "Compress"})
MAX_GATHERED_RANK = 3  # candidate rows ([N, k], [B, N, k]); a feature map an RoI reads from is no row table


def gathered_rows(model: onnx.ModelProto, available: set[str]) -> list[str]:
    """The source tensors nearest upstream of the data a selection's choice is read from: a Gather / GatherND /
    GatherElements / Compress whose positions come from a selection (a threshold mask's NonZero, TopK's indices, NMS
    rows) and whose data does not. Every row of that data (each anchor's decoded box) can be the chosen one on some
    image, though on the validation feeds only the chosen rows reach the outputs: torchvision's per-image head
    gathers the boxes scoring over its threshold before NMS, so the decoded boxes are no input of any selection."""
    index = GraphIndex(model)
    compared = available & (set(index.order) - set(index.inputs))
    selected: set[str] = set()  # tensors computed from some selection's result
    for node in model.graph.node:
        picks = node.domain in ("", "ai.onnx") and (node.op_type in SELECTION_OPS or node.op_type in COMPARISON_OPS
                                                    or node.op_type == "NonZero")
        if picks or any(i in selected for i in node.input):
            selected.update(o for o in node.output if o)
    found: list[str] = []
    for node in model.graph.node:
        if node.domain not in ("", "ai.onnx") or node.op_type not in ROW_READING_OPS or len(node.input) < 2:
            continue
        data, where = node.input[0], node.input[1]
        if where not in selected or data in selected or data in index.initializers or data in index.inputs:
            continue
        for pin in [data] if data in compared else index.frontier(data, compared)[0]:
            if pin in compared and pin not in selected and pin not in found:
                found.append(pin)
    return sorted(found, key=lambda n: index.position.get(n, -1))


def has_selection_ops(model: onnx.ModelProto) -> bool:
    return any(n.op_type in SELECTION_OPS or n.op_type in COMPARISON_OPS for n in model.graph.node
               if n.domain in ("", "ai.onnx"))


def selection_changes(point: SelectionPoint, before: np.ndarray | None, after: np.ndarray | None) -> dict[str, Any]:
    """How differently ``point`` selected between the unpinned candidate (``before``) and the pinned one:
    ``changed`` choices the pinned run made that the unpinned did not (and the reverse, ``dropped``), out of
    ``selected`` (``choices``: what the bound's share is taken of)."""
    if before is None or after is None:
        return {"node": point.node, "op": point.op, "compared": False}
    a, b = np.asarray(before), np.asarray(after)
    entry: dict[str, Any] = {"node": point.node, "op": point.op, "compared": True, "selected": int(b.size)}
    if point.op == "NonMaxSuppression":  # rows (batch, class, box): kept by one run only
        rows_a = {tuple(r) for r in a.reshape(-1, 3).tolist()}
        rows_b = {tuple(r) for r in b.reshape(-1, 3).tolist()}
        entry.update(selected=len(rows_b), changed=len(rows_a - rows_b), dropped=len(rows_b - rows_a),
                     choices=max(len(rows_a), len(rows_b)),
                     reordered=int((a != b).any(axis=-1).sum()) if a.shape == b.shape else None)
        return entry
    if a.shape != b.shape:
        entry.update(changed=None, note=f"shape {list(a.shape)} unpinned vs {list(b.shape)} pinned")
        return entry
    entry["choices"] = int(b.size)
    if point.op in COMPARISON_OPS:  # element-wise results (a mask): how many flipped
        entry.update(changed=int((a != b).sum()), comparison=True)
        return entry
    entry["reordered"] = int((a != b).sum())  # positions whose selected index differs
    if point.op == "TopK" and a.ndim:
        flat_a, flat_b = a.reshape(-1, a.shape[-1]), b.reshape(-1, b.shape[-1])  # sets per slice (any axis)
        entry["changed"] = int(sum(len(set(x.tolist()) - set(y.tolist())) for x, y in zip(flat_a, flat_b, strict=True)))
    else:
        entry["changed"] = entry["reordered"]
    return entry


def _changed(entry: Mapping[str, Any]) -> int:
    return max(int(entry.get("changed") or 0), int(entry.get("dropped") or 0))


def _allowed(choices: int) -> int:
    """Choices a root selection may change: ``MAX_ROOT_CHANGE_SHARE`` of them, at least ``MIN_ROOT_CHANGES``."""
    return max(MIN_ROOT_CHANGES, int(MAX_ROOT_CHANGE_SHARE * choices))


def _decisive_mask(point: SelectionPoint, node: onnx.NodeProto, k: int, x: np.ndarray, before: np.ndarray,
                   after: np.ndarray, out_shape: tuple[int, ...]) -> np.ndarray | None:
    """Which elements of ``point``'s decision input ``k`` (value ``x``) took part in a choice the pinned run made
    otherwise: a TopK's or ArgMax's changed picks, a comparison's flipped elements (its input broadcast to the
    output), NMS's boxes and scores of rows kept by one run only. None where it cannot be told."""
    axis = next((a.i for a in node.attribute if a.name == "axis"), -1 if point.op == "TopK" else 0)
    try:
        if point.op == "NonMaxSuppression":
            rows = {tuple(r) for r in before.reshape(-1, 3).tolist()} ^ {tuple(r) for r in after.reshape(-1, 3).tolist()}
            mask = np.zeros(x.shape, bool)
            for b, c, i in rows:
                if k == 0:
                    mask[b, i] = True
                else:
                    mask[b, c, i] = True
            return mask
        if point.op in ("TopK", "ArgMax", "ArgMin"):
            idx_a, idx_b = before.astype(np.int64), after.astype(np.int64)
            if point.op != "TopK" and idx_a.ndim < x.ndim:  # keepdims=0
                idx_a, idx_b = np.expand_dims(idx_a, axis), np.expand_dims(idx_b, axis)
            sel_a, sel_b = np.zeros(x.shape, bool), np.zeros(x.shape, bool)
            np.put_along_axis(sel_a, idx_a, True, axis)
            np.put_along_axis(sel_b, idx_b, True, axis)
            # and, for a TopK whose order is read downstream, the picks at positions whose index differs (each
            # index appears once per slice on each side, so every element gets its own side's flag)
            moved_a, moved_b = np.zeros(x.shape, bool), np.zeros(x.shape, bool)
            np.put_along_axis(moved_a, idx_a, idx_a != idx_b, axis)
            np.put_along_axis(moved_b, idx_b, idx_a != idx_b, axis)
            return (sel_a ^ sel_b) | moved_a | moved_b
        if point.op in COMPARISON_OPS:
            flipped = before != after
            full = np.broadcast_to(np.zeros(x.shape, bool), out_shape) if x.shape != out_shape else None
            if full is not None:  # a broadcast input: an element decides every output position it reaches
                expand = [d for d in range(len(out_shape)) if d >= len(out_shape) - x.ndim
                          and x.shape[d - len(out_shape) + x.ndim] == 1 and out_shape[d] != 1]
                reduced = flipped.any(axis=tuple(expand), keepdims=True) if expand else flipped
                return reduced.reshape(x.shape) if reduced.size == x.size else None
            return flipped
    except (IndexError, ValueError):
        return None
    return None


def decisive_ulps(point: SelectionPoint, node: onnx.NodeProto, unpinned: Sequence[np.ndarray],
                  pinned: Sequence[np.ndarray], before: np.ndarray, after: np.ndarray) -> float | None:
    """The largest difference, in float32 ulps of the input's magnitude (its largest finite value), between the
    candidate's and the source's decision inputs at the elements where ``point`` chose otherwise (None: nothing
    to measure, e.g. integer inputs or shapes that differ)."""
    worst: float | None = None
    for k, (xu, xs) in enumerate(zip(unpinned, pinned, strict=True)):
        xu, xs = np.asarray(xu), np.asarray(xs)
        if xu.shape != xs.shape or xs.dtype.kind != "f":
            continue
        mask = _decisive_mask(point, node, k, xs, before, after, np.shape(after))
        if mask is None or not mask.any():
            continue
        with np.errstate(all="ignore"):
            finite = np.abs(xs[np.isfinite(xs)])
            scale = np.float32(finite.max(initial=0.0))
            step = float(np.spacing(scale)) if scale > 0 else float(np.finfo(np.float32).tiny)
            diff = np.abs(xu.astype(np.float64) - xs.astype(np.float64))[mask]
            diff = np.where(np.isnan(diff), np.inf, diff)
        worst = max(worst or 0.0, float(diff.max()) / step)
    return worst


@dataclass
class RowAccount:
    """One failing output: the rows (detections, or elements) the unpinned comparison would have to excuse, the
    rows decision pinning changed in the candidate's own output, and excused rows pinning did not change."""

    output: str
    excused: int = 0
    changed: int = 0
    outside: int = 0
    unit: str = "rows"
    tied: int = 0  # of the excused: rows the pinned comparison's own tie rules excuse (with their evidence)

    def to_dict(self) -> dict[str, Any]:
        return {"output": self.output, "excused": self.excused, "changed": self.changed, "outside": self.outside,
                "unit": self.unit, "tied": self.tied}


@dataclass
class PinningResult:
    """What pinning found for one candidate: ``explained`` (the failure is a selection tie upstream) or why not."""

    explained: bool
    reason: str = ""
    points: list[SelectionPoint] = field(default_factory=list)
    pins: dict[str, dict[str, Any]] = field(default_factory=dict)  # pin -> {max_abs, passed, judged_with}
    selections: list[dict[str, Any]] = field(default_factory=list)
    pinned_comparison: Comparison | None = None
    tie_orders: dict[str, int] = field(default_factory=dict)  # TopK indices -> positions of exact ties reordered
    rows: dict[str, RowAccount] = field(default_factory=dict)  # failing output -> what pinning excused there
    strict: bool = False
    # layout aliases the model under test claims (``claimed_aliases``) whose values are not the source's: not used
    rejected_aliases: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        pins = ", ".join(f"{n} (max abs {_fig(p.get('max_abs'))}" + (
            f", judged with {', '.join(p['judged_with_pinned'])} pinned" if p.get("judged_with_pinned") else "") + ")"
            for n, p in self.pins.items())
        rejected = f"; {CheckedAliases(rejected=self.rejected_aliases).statement()}" if self.rejected_aliases else ""
        if not self.explained:
            return (f"pinning did not explain the failure: {self.reason}" + (f" [pins: {pins}]" if pins else "")
                    + rejected)
        compared = [s for s in self.selections if s.get("compared")]
        same = [s for s in compared if s.get("comparison") and s.get("changed") == 0]  # one count, not one line each
        changed = [s for s in compared if s not in same]
        sel = "; ".join(f"{s['op']} {s['node']}: {s.get('changed')} of {s.get('selected')} "
                        + ("comparison results changed" if s.get("comparison") else "selected changed")
                        + (f", {s['reordered']} positions reordered" if s.get("reordered") is not None else "")
                        + (f" (root: at most {s['allowed']} allowed" + (
                            f"; more, as every choice it changed lies within {s['source_tie_ulps']:.3g} float32 ulps "
                            f"of the source's cut in the source's own values ({s['source_tie_band']} source values "
                            f"within {SOURCE_TIE_ULPS} ulps of it: ties the source itself cannot order)"
                            if _changed(s) > s['allowed'] and s.get("source_tie_ulps") is not None else "") + (
                            f", {s['ulps']:.3g} ulps at the choices it changed" if s.get("ulps") is not None else "")
                           + ")" if s.get("root") and (_changed(s) or s.get("reordered")) else "")
                        for s in changed) + (f"{'; ' if changed else ''}{len(same)} more comparison(s) unchanged"
                                             if same else "")
        rows = "; ".join(f"{a.output}: {a.excused} {a.unit} excused, each among the {a.changed} {a.unit} the "
                         "selections decided alike changed" + (f" or tie-ambiguous there too ({a.tied})" if a.tied
                                                                else "") for a in self.rows.values())
        return (f"passed with the source's values pinned at {len(self.pins)} selection input(s): {pins}; each agrees "
                f"with the source within the tolerance{' (--strict: changed choices within ' + str(STRICT_TIE_ULPS) + ' ulps)' if self.strict else ''}; "
                "the pins feed the selections only (the outputs are the candidate's own values at the choices the "
                "source made); "
                f"selections changed by pinning: {sel or 'none measured'}; "
                + "".join(f"{n}: {c} positions hold exactly equal scores in the source's order (ONNX TopK orders "
                          "exact ties by index; the same scores selected), pinned too; "
                          for n, c in self.tie_orders.items())
                + (f"{rows}; " if rows else "")
                + "with the selections decided alike every output matches (the unpinned difference comes from "
                "selections reacting to within-tolerance differences of their inputs: near-ties, e.g. 1-ulp scores "
                "at a top-N cut)" + rejected)

    def to_dict(self) -> dict[str, Any]:
        return {"explained": self.explained, "reason": self.reason, "text": self.text,
                "points": [p.to_dict() for p in self.points], "pins": self.pins, "selections": self.selections,
                "tie_orders": self.tie_orders, "rows": {k: v.to_dict() for k, v in self.rows.items()},
                "strict": self.strict, "max_root_change_share": MAX_ROOT_CHANGE_SHARE,
                "rejected_aliases": self.rejected_aliases}


def _fig(x: Any) -> str:
    return "n/a" if x is None else f"{x:.3g}"


def _judge_pins(src: Mapping[str, np.ndarray], cand: Mapping[str, np.ndarray], names: Sequence[str],
                tolerance: Tolerance) -> dict[str, OutputComparison]:
    comp = compare_outputs({n: src[n] for n in names}, {n: cand[n] for n in names if n in cand}, tolerance)
    return {o.name: o for o in comp.outputs}


def reference_output_names(outputs: Sequence[str], detections: Sequence[DetectionSpec] | Mapping[str, str] | None
                           ) -> list[str]:
    """The source's names for the candidate's ``outputs``: a detection group's reference outputs (a lowered
    MultiBoxDetection in boxes-scores-classes is one [B, N, 6] output in MXNet), every other output its own."""
    specs = as_detection_specs(detections)
    consumed = {n for s in specs for n in s.candidate_names()}
    names = [n for s in specs for n in s.reference_names()]
    return list(dict.fromkeys([*names, *(o for o in outputs if o not in consumed)]))


def explain_by_pinning(
    comparison: Comparison,
    model: onnx.ModelProto,
    source: PinSource,
    run_candidate: RunCandidate,
    sizes: Sequence[tuple[Mapping[str, np.ndarray], Mapping[str, np.ndarray] | None]],
    tolerance: Tolerance,
    *,
    detections: Sequence[DetectionSpec] | Mapping[str, str] | None = None,
    shape_only: Sequence[str] = (),
    strict: bool = False,
    say: Callable[[str], None] = lambda _m: None,
    claimed_aliases: Mapping[str, Mapping[str, Any]] | None = None,
) -> PinningResult:
    """Prove ``comparison``'s failure is a tie at a selection (module docstring) and, if it is, turn it into a
    pass with the evidence in every failing output's note and ``comparison.pinning``; else only record why not.

    ``sizes``: per input size compared, the feeds and the reference's outputs (None: taken from the source).
    ``strict``: changed choices must be rounding ties (``STRICT_TIE_ULPS``), not merely within the tolerance.
    ``claimed_aliases``: the layout aliases the model records (``bridge.provenance.TENSOR_ALIASES_META``: tensor ->
    {of, perm}); the model may be the file under test, so each is used only where its values are the source's
    (``_verified_aliases``), and one that is not is said. Nothing here runs for a comparison that passed."""
    if comparison.passed:
        return PinningResult(False, "the comparison passed: nothing to explain")
    rejected: list[str] = []
    if claimed_aliases and has_selection_ops(model) and sizes:
        source = _verified_aliases(model, source, run_candidate, sizes[0][0], tolerance, claimed_aliases, rejected, say)
    result = _explain(comparison, model, source, run_candidate, sizes, tolerance, detections, shape_only, strict, say)
    result.rejected_aliases = rejected
    result.strict = strict
    comparison.pinning = result.to_dict()
    if result.explained and result.pinned_comparison is not None:
        _take_pinned(comparison, result.pinned_comparison, result.text)
    return result


class _Sites:
    """The selection points as decision sites, and which of them lie upstream of which."""

    def __init__(self, model: onnx.ModelProto, points: Sequence[SelectionPoint]) -> None:
        self.model, self.points = model, list(points)
        self.index = GraphIndex(model)
        self.sites = [(p.position, p.op, p.positions) for p in points]
        self._ancestors = [set().union(*(_upstream(self.index, i) for i in p.inputs)) | set(p.inputs) for p in points]

    def upstream_of(self, k: int) -> list[int]:
        """Points whose selection reaches point ``k``'s decision inputs."""
        node_outputs = [set(self.model.graph.node[p.position].output) - {""} for p in self.points]
        return [j for j, outs in enumerate(node_outputs) if j != k and outs & self._ancestors[k]]

    def pinned(self, pins: Mapping[str, np.ndarray], outputs: Sequence[str]) -> tuple[onnx.ModelProto, list[DecisionSite]]:
        return decision_pinned_model(self.model, pins, self.sites, outputs)


def _pinned_feeds(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], pins: Mapping[str, np.ndarray],
                  extra: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    wanted = graph_input_names(model)
    out = {k: v for k, v in feeds.items() if k in wanted}
    out.update({p + SOURCE_SUFFIX: v for p, v in pins.items() if p + SOURCE_SUFFIX in wanted})
    out.update({k: v for k, v in (extra or {}).items() if k in wanted})
    return out


def _explain(comparison: Comparison, model: onnx.ModelProto, source: PinSource, run_candidate: RunCandidate,
             sizes: Sequence[tuple[Mapping[str, np.ndarray], Mapping[str, np.ndarray] | None]], tolerance: Tolerance,
             detections: Sequence[DetectionSpec] | Mapping[str, str] | None, shape_only: Sequence[str], strict: bool,
             say: Callable[[str], None]) -> PinningResult:
    if not has_selection_ops(model):
        return PinningResult(False, "the model has no selection op (" + ", ".join([*SELECTION_OPS, *sorted(COMPARISON_OPS)])
                             + ")")
    if len(sizes) < len(comparison.sizes):  # a pass must cover every size the failure was measured at
        return PinningResult(False, f"the comparison covers {len(comparison.sizes)} input sizes, pinning could be "
                             f"run at {len(sizes)} only")
    source = _with_layout_aliases(model, source, run_candidate, sizes[0][0], tolerance, say)
    points = selection_points(model, source.names())
    pins = list(dict.fromkeys(p for point in points for p in point.pins))
    if not pins:
        return PinningResult(False, "no tensor upstream of a selection op is one the source can return", points)
    bare = [p.node for p in points if not p.pins]
    if bare:  # a selection left to the candidate's own values would keep its tie unexplained
        return PinningResult(False, f"selection op(s) {', '.join(bare)} have no source tensor upstream to pin", points)
    outputs = [o.name for o in model.graph.output]
    indices = [p.indices for p in points if p.indices]
    decision_inputs = list(dict.fromkeys(i for p in points for i in p.inputs))
    sites = _Sites(model, points)
    say(f"pinning: fetching {len(pins)} selection input(s) from the source")
    # a TopK's exact ties (equal scores, bit for bit) are ordered by index in ONNX, by the source's own rule there
    ordered = _index_aliases(model, points, source.names())
    ref_names = reference_output_names(outputs, detections)
    source_values = source.values([f for f, _ in sizes], list(dict.fromkeys(
        [*pins, *ordered.values(), *(n for n in ref_names if any(r is None for _, r in sizes))])))
    order = {p: sites.index.position.get(p, -1) for p in pins}
    pins.sort(key=lambda p: order[p])
    result = PinningResult(False, points=points)
    pinned_comps: list[Comparison] = []
    for n_size, ((feeds, ref_out), src) in enumerate(zip(sizes, source_values, strict=True)):
        missing = [p for p in pins if p not in src]
        if missing:
            result.reason = f"the source returned no value for {', '.join(missing)}"
            return result
        reference = ref_out if ref_out is not None else {n: src[n] for n in ref_names if n in src}
        say("pinning: running the candidate with the selection inputs as outputs")
        cand = run_candidate(with_outputs(model, list(dict.fromkeys([*outputs, *pins, *indices, *decision_inputs]))),
                             feeds)
        bad = _judge_all_pins(result, sites, src, cand, pins, feeds, tolerance, run_candidate)
        if bad:
            o = result.pins[bad[0]]
            result.reason = (f"the candidate's {bad[0]} differs from the source's beyond the tolerance (max abs "
                             f"{_fig(o.get('max_abs'))}, mismatch {_fig(o.get('mismatch'))}"
                             + (f"; {o['note']}" if o.get("note") else "") + "): the difference is upstream of the "
                             "selections")
            return result
        say("pinning: running the candidate with the source's values deciding its selections")
        src_pins = {p: src[p] for p in pins}
        topk_inputs = [p.inputs[0] for p in points if p.op == "TopK" and p.inputs]
        decided_model, decided_sites = sites.pinned(src_pins, [*outputs, *indices, *topk_inputs, *ordered.values()])
        reads = list(dict.fromkeys(r for s in decided_sites for r in s.reads))
        decided_model = with_outputs(decided_model, list(dict.fromkeys(
            [*outputs, *indices, *ordered.values(), *reads])))
        after = run_candidate(decided_model, _pinned_feeds(decided_model, feeds, src_pins))
        changes = [selection_changes(p, cand.get(p.indices), after.get(p.indices)) for p in points]
        over = _bound(sites, changes, decided_sites, cand, after, strict)
        _merge_selections(result, changes, first=n_size == 0)
        if over:
            result.reason = over
            return result
        final = {o: after[o] for o in outputs if o in after}
        comp = compare_outputs(reference, final, tolerance, reference_name=comparison.reference,
                               candidate_name=comparison.candidate, detection_outputs=detections, shape_only=shape_only)
        decided = {**after, **{s.inputs[0]: after[s.reads[0]] for s in decided_sites
                               if s.op == "TopK" and s.inputs and s.reads and s.reads[0] in after}}
        tied = {} if comp.passed else _tie_orders(model, points, decided, src, ordered)
        if tied:  # the same scores selected, exact ties in another order: the source's order pinned too
            say("pinning: re-running with the source's order of exactly tied TopK scores")
            order_pins = {n: v for n, (v, _) in tied.items()}
            again_model = pinned_model(decided_model, order_pins, outputs)
            again = run_candidate(again_model, _pinned_feeds(again_model, feeds, src_pins, order_pins))
            final = {o: again[o] for o in outputs if o in again}
            after = {**after, **final}
            comp = compare_outputs(reference, final, tolerance, reference_name=comparison.reference,
                                   candidate_name=comparison.candidate, detection_outputs=detections,
                                   shape_only=shape_only)
            for n, (_, count) in tied.items():
                result.tie_orders[n] = result.tie_orders.get(n, 0) + count
        pinned_comps.append(comp)
        if comp.passed:
            _account_rows(result, comparison, reference, cand, final, tolerance, detections)
    merged = pinned_comps[0]
    merged.sizes = [{k: list(np.shape(v)) for k, v in sizes[0][0].items()}]
    for n_size, other in enumerate(pinned_comps[1:], start=1):
        merged.add_size(other, {k: list(np.shape(v)) for k, v in sizes[n_size][0].items()})
    result.pinned_comparison = merged
    if not merged.passed:
        result.reason = ("with the selections deciding on the source's values the outputs still differ ("
                         + "; ".join(f"{o.name}: {o.note or 'max abs ' + _fig(o.max_abs)}" for o in merged.failures)
                         + "): the difference is not (only) a tie at a selection")
        return result
    outside = [a for a in result.rows.values() if a.outside]
    if outside:
        result.reason = ("the unpinned comparison fails on rows the selections decided alike did not change ("
                         + "; ".join(f"{a.output}: {a.outside} of {a.excused} {a.unit}" for a in outside)
                         + "): pinning excuses only what it changed")
        return result
    result.explained = True
    return result


MAX_ALIASES = 64  # candidate tensors tried as layout aliases of a source tensor (module docstring, step 1)


class _AliasedSource:
    """A PinSource that also returns candidate tensors which are a transpose of a source tensor (``aliases``:
    candidate name -> (source name, axes)), e.g. a softmax whose Transpose a pass moved into its consumer."""

    def __init__(self, base: PinSource, aliases: Mapping[str, tuple[str, tuple[int, ...]]]) -> None:
        self.base, self.aliases = base, dict(aliases)

    def names(self) -> set[str]:
        return self.base.names() | set(self.aliases)

    def values(self, feeds: Sequence[Mapping[str, np.ndarray]], names: Sequence[str]) -> list[dict[str, np.ndarray]]:
        wanted = list(dict.fromkeys(self.aliases[n][0] if n in self.aliases else n for n in names))
        out = []
        for got in self.base.values(feeds, wanted):
            values = dict(got)
            for n in names:
                if n in self.aliases and self.aliases[n][0] in got:
                    src, axes = self.aliases[n]
                    values[n] = np.transpose(np.asarray(got[src]), axes)
            out.append(values)
        return out


def _verified_aliases(model: onnx.ModelProto, source: PinSource, run_candidate: RunCandidate,
                      feeds: Mapping[str, np.ndarray], tolerance: Tolerance, claimed: Mapping[str, Mapping[str, Any]],
                      rejected: list[str], say: Callable[[str], None]) -> PinSource:
    """``source`` widened by the layout aliases the model claims (tensor -> transpose(source tensor ``of``,
    ``perm``)) whose values are that, within the tolerance, on ``feeds``: measured by
    ``bridge.validation.layout_aliases.check_claimed_aliases`` (as ``bridge debug`` measures them), never taken on
    the model's word (a claim could otherwise make a tensor of the candidate's choice a pin). Each claim not
    measured to hold is added to ``rejected`` with why."""
    checked = check_claimed_aliases(
        model, claimed, source.names(), feeds, lambda names: source.values([feeds], names)[0],
        lambda names: run_candidate(with_outputs(model, list(names)), feeds), tolerance,
        lambda message: say(f"pinning: {message}"))
    rejected.extend(checked.rejected)
    return _AliasedSource(source, checked.kept) if checked.kept else source


def _source_names_of(node: onnx.NodeProto, names: set[str]) -> list[str]:
    """The source tensors ``node`` may compute in another layout: those of the source node its provenance names."""
    from bridge import provenance

    prov = provenance.read(node)
    if prov is None or not prov.node:
        return []
    return [n for n in (prov.node, f"{prov.node}_output", f"{prov.node}_output0") if n in names]


def _with_layout_aliases(model: onnx.ModelProto, source: PinSource, run_candidate: RunCandidate,
                         feeds: Mapping[str, np.ndarray], tolerance: Tolerance,
                         say: Callable[[str], None]) -> PinSource:
    """``source`` widened by layout aliases (step 1): a tensor upstream of a selection that the source does not
    return under its name, made by a node standing for a source node (its provenance) whose output it equals
    in another axis order - within the tolerance, checked on the first feeds. Without it a pass that moved a
    Transpose (a softmax over the channel axis, then NMS) leaves the selection's scores unpinnable and its
    rounding ties unproved."""
    names = source.names()
    points = selection_points(model, names)
    index = GraphIndex(model)
    region: set[str] = set()
    for point in points:
        for tensor in point.inputs:
            region |= _upstream(index, tensor) | {tensor}
    wanted: dict[str, list[str]] = {}
    present = set(index.order) | index.initializers | set(index.inputs)
    for tensor in sorted(region - names - index.initializers - set(index.inputs), key=lambda t: -index.position.get(t, -1)):
        k = index.producer.get(tensor)
        # only a source tensor the candidate lost (its name is gone): one it still has is pinned by name
        found = [n for n in _source_names_of(model.graph.node[k], names) if n not in present] if k is not None else []
        if found:
            wanted[tensor] = found
        if len(wanted) >= MAX_ALIASES:
            break
    if not wanted:
        return source
    say(f"pinning: comparing {len(wanted)} tensor(s) with the source's in other layouts")
    try:
        (src,) = source.values([feeds], list(dict.fromkeys(n for found in wanted.values() for n in found)))
        cand = run_candidate(with_outputs(model, list(wanted)), feeds)
    except Exception as exc:  # extra evidence only: without aliases the proof goes on with the names it has
        log.info("pinning: layout aliases not measured: %s", exc)
        return source
    aliases: dict[str, tuple[str, tuple[int, ...]]] = {}
    for tensor, found in wanted.items():
        if tensor not in cand:
            continue
        for name in found:
            axes = _matching_axes(np.asarray(src[name]), np.asarray(cand[tensor]), tolerance) if name in src else None
            if axes is not None:
                aliases[tensor] = (name, axes)
                break
    return _AliasedSource(source, aliases) if aliases else source


def _matching_axes(src: np.ndarray, cand: np.ndarray, tolerance: Tolerance) -> tuple[int, ...] | None:
    """The axis order that makes ``src`` ``cand`` within the tolerance (the identity first), or None."""
    from itertools import permutations

    if src.ndim != cand.ndim or src.ndim > 6 or sorted(src.shape) != sorted(cand.shape):
        return None
    for axes in permutations(range(src.ndim)):
        if tuple(src.shape[a] for a in axes) != cand.shape:
            continue
        with np.errstate(all="ignore"):
            if np.allclose(np.transpose(src, axes), cand, atol=tolerance.atol, rtol=tolerance.rtol, equal_nan=True):
                return tuple(axes)
    return None


def _judge_all_pins(result: PinningResult, sites: _Sites, src: Mapping[str, np.ndarray],
                    cand: Mapping[str, np.ndarray], pins: Sequence[str], feeds: Mapping[str, np.ndarray],
                    tolerance: Tolerance, run_candidate: RunCandidate) -> list[str]:
    """Judge every pin against the source (step 2); a pin downstream of a selection is judged again with the
    selections above it deciding on the source's values of the pins above it. Returns the pins that fail."""
    judged = _judge_pins(src, cand, pins, tolerance)
    with_pinned: dict[str, list[str]] = {}
    bad = [p for p in pins if not judged[p].passed]
    settled: list[str] = []
    while bad:
        ups = [p for p in pins if judged[p].passed and p not in settled
               and any(p in _upstream(sites.index, b) for b in bad)]
        if not ups:
            break
        settled.extend(ups)
        settled_values = {p: src[p] for p in settled}
        part, _ = sites.pinned(settled_values, bad)
        again = run_candidate(part, _pinned_feeds(part, feeds, settled_values))
        for p, o in _judge_pins(src, again, bad, tolerance).items():
            judged[p] = o
            with_pinned[p] = list(settled)
        bad = [p for p in bad if not judged[p].passed]
    for p in pins:
        o = judged[p]
        entry = result.pins.setdefault(p, {"max_abs": o.max_abs, "passed": o.passed})
        entry["max_abs"] = max(v for v in (entry["max_abs"], o.max_abs) if v is not None) if o.max_abs is not None \
            else entry["max_abs"]
        entry["passed"] = entry["passed"] and o.passed
        if not o.passed:
            entry.update(mismatch=o.mismatch_fraction, note=o.note)
        if p in with_pinned:
            entry["judged_with_pinned"] = with_pinned[p]
    return bad


def _bound(sites: _Sites, changes: list[dict[str, Any]], decided: Sequence[DecisionSite],
           cand: Mapping[str, np.ndarray], after: Mapping[str, np.ndarray], strict: bool) -> str:
    """Step 5: mark root selections and check their changes against the bound; the reason it is broken, or ""."""
    # a reorder counts as a change for what lies downstream (NMS visits a TopK's output in its order)
    changed = {k for k, c in enumerate(changes) if c.get("compared") and (_changed(c) or c.get("reordered"))}
    broken = []
    for k, (point, entry) in enumerate(zip(sites.points, changes, strict=True)):
        if not entry.get("compared"):
            continue
        root = not (set(sites.upstream_of(k)) & changed)
        entry["root"] = root
        if not root or k not in changed:
            continue
        entry["allowed"] = allowed = _allowed(int(entry.get("choices") or entry.get("selected") or 0))
        site = decided[k]
        node = sites.model.graph.node[point.position]
        if _changed(entry) > allowed and not _over_share_is_tied(
                point, node, entry, after.get(site.reads[0]) if site.reads else None, cand.get(point.indices),
                after.get(point.indices)):
            # set changes are bounded (unless the source's own values tie them all, above); a reorder is measured
            # in ulps below
            broken.append(f"{point.op} {point.node} changed {_changed(entry)} of {entry.get('choices')} choices, more "
                          f"than the {allowed} ({MAX_ROOT_CHANGE_SHARE:.0%}) a near-tie may change at a selection whose "
                          "own inputs the candidate computes within the tolerance" + (
                              f", and a changed choice sits {entry['source_tie_ulps']:.3g} float32 ulps from the "
                              f"source's cut in the source's own values (ties within {SOURCE_TIE_ULPS} only)"
                              if entry.get("source_tie_ulps") is not None else ""))
            continue
        unpinned = [cand.get(i) for i in site.inputs]
        pinned = [after.get(r) for r in site.reads]
        if any(v is None for v in (*unpinned, *pinned)):
            continue
        ulps = decisive_ulps(point, sites.model.graph.node[point.position], unpinned, pinned,  # type: ignore[arg-type]
                             np.asarray(cand[point.indices]), np.asarray(after[point.indices]))
        entry["ulps"] = ulps
        if strict and ulps is not None and ulps > STRICT_TIE_ULPS:
            broken.append(f"{point.op} {point.node} changed {_changed(entry)} choice(s) whose inputs differ from the "
                          f"source's by up to {ulps:.3g} float32 ulps of their magnitude (--strict excuses rounding "
                          f"ties of at most {STRICT_TIE_ULPS} ulps only)")
    return "; ".join(broken)


def source_tie_band(point: SelectionPoint, node: onnx.NodeProto, x: np.ndarray, before: np.ndarray,
                     after: np.ndarray) -> dict[str, Any] | None:
    """The evidence that every choice a root TopK or ArgMax changed is a rounding tie *in the source's own values*
    ``x`` (its decision input in the pinned run): each element a TopK slice chose in one run only lies within
    ``SOURCE_TIE_ULPS`` float32 ulps (at ``x``'s magnitude, as ``decisive_ulps``) of the source's cut (its K-th
    value), and at each position an ArgMax changed the source's values of the two picks lie that close. A swap at a
    cut needs ``x[e] - x[e'] <= |d(e)| + |d(e')|`` (d: the candidate's input error), so two rounding errors of
    ``STRICT_TIE_ULPS`` each move a choice at most ``SOURCE_TIE_ULPS`` from the cut; a candidate whose error is
    larger than rounding brings in choices from farther away. Returns ``{"ulps": farthest changed choice from the
    cut, "band": source elements within SOURCE_TIE_ULPS of their cut}`` or None (another op, or it cannot be told)."""
    if point.op not in ("TopK", "ArgMax", "ArgMin"):
        return None
    x, a, b = np.asarray(x), np.asarray(before).astype(np.int64), np.asarray(after).astype(np.int64)
    if x.dtype.kind != "f" or a.shape != b.shape or not np.isfinite(x).all():
        return None
    attrs = {at.name: onnx.helper.get_attribute_value(at) for at in node.attribute}
    axis = int(attrs.get("axis", -1 if point.op == "TopK" else 0)) % max(x.ndim, 1)
    finite = np.abs(x)
    step = float(np.spacing(np.float32(finite.max(initial=0.0)))) or float(np.finfo(np.float32).tiny)
    xs = np.moveaxis(x.astype(np.float64), axis, -1).reshape(-1, x.shape[axis])
    try:
        if point.op == "TopK":
            ia, ib = np.moveaxis(a, axis, -1).reshape(len(xs), -1), np.moveaxis(b, axis, -1).reshape(len(xs), -1)
            largest = bool(attrs.get("largest", 1))
            far, band = 0.0, 0
            for row, pa, pb in zip(xs, ia, ib, strict=True):
                cut = row[pb].min() if largest else row[pb].max()  # the source's K-th value
                swapped = np.asarray(sorted(set(pa.tolist()) ^ set(pb.tolist())), np.int64)
                if swapped.size:
                    far = max(far, float(np.abs(row[swapped] - cut).max()) / step)
                band += int((np.abs(row - cut) <= SOURCE_TIE_ULPS * step).sum())
            return {"ulps": far, "band": band}
        keep = attrs.get("keepdims", 1)
        ia = (a if keep else np.expand_dims(a, axis))
        ib = (b if keep else np.expand_dims(b, axis))
        va = np.take_along_axis(x.astype(np.float64), ia, axis)
        vb = np.take_along_axis(x.astype(np.float64), ib, axis)
        moved = ia != ib
        far = float(np.abs(va - vb)[moved].max(initial=0.0)) / step
        return {"ulps": far, "band": int(moved.sum())}
    except (IndexError, ValueError):
        return None


def _over_share_is_tied(point: SelectionPoint, node: onnx.NodeProto, entry: dict[str, Any], x: np.ndarray | None,
                        before: np.ndarray | None, after: np.ndarray | None) -> bool:
    """A root selection changing more than its share is still a near-tie when the source's own values tie every
    choice it changed (``source_tie_band``): a model scoring hundreds of anchors alike to a few ulps (random
    weights: softmax probabilities all 1/C to 1e-7) has that many rounding ties at its cut. Recorded in ``entry``."""
    if x is None or before is None or after is None:
        return False
    tie = source_tie_band(point, node, x, before, after)
    if tie is None:
        return False
    entry["source_tie_ulps"], entry["source_tie_band"] = tie["ulps"], tie["band"]
    return bool(tie["ulps"] <= SOURCE_TIE_ULPS)


def _merge_selections(result: PinningResult, changes: list[dict[str, Any]], first: bool) -> None:
    """The selections' figures over every size: the first size's entries, the worst counts of the others."""
    if first or not result.selections:
        result.selections = changes
        return
    for mine, other in zip(result.selections, changes, strict=True):
        for key in ("changed", "dropped", "reordered", "ulps"):
            if other.get(key) is not None:
                mine[key] = max(mine.get(key) or 0, other[key])
        mine["root"] = bool(mine.get("root")) and bool(other.get("root", True))


def _account_rows(result: PinningResult, comparison: Comparison, reference: Mapping[str, np.ndarray],
                  unpinned: Mapping[str, np.ndarray], pinned: Mapping[str, np.ndarray], tolerance: Tolerance,
                  detections: Sequence[DetectionSpec] | Mapping[str, str] | None) -> None:
    """Step 4: per failing output, the rows the unpinned comparison would need excused, the rows decision pinning
    changed in the candidate's output, and excused rows outside them (summed over sizes)."""
    specs = {s.label: s for s in as_detection_specs(detections)}
    for o in comparison.failures:
        account = result.rows.setdefault(o.name, RowAccount(o.name))
        spec = specs.get(o.name)
        try:
            if spec is not None:
                account.unit = "detections"
                _account_detections(account, spec, reference, unpinned, pinned, tolerance)
            elif o.name in unpinned and o.name in pinned and o.name in reference:
                account.unit = "elements"
                _account_elements(account, o.name, reference, unpinned, pinned, tolerance)
        except (ValueError, KeyError) as exc:  # an output that cannot be read: nothing is excused there
            account.outside += 1
            log.debug("pinning: rows of %s not accounted: %s", o.name, exc)


def _account_detections(account: RowAccount, spec: DetectionSpec, reference: Mapping[str, np.ndarray],
                        unpinned: Mapping[str, np.ndarray], pinned: Mapping[str, np.ndarray],
                        tolerance: Tolerance) -> None:
    """A candidate row the unpinned comparison fails on is accounted for when the decision pinning changed it, or
    when it overlaps, through a chain of overlapping rows of its class (either run's), a row pinning changed:
    greedy matching only ever pairs overlapping boxes, so a changed row can push its unchanged neighbours, and
    theirs, onto other partners. A reference row the candidate lacks stands for a row the pinned run has and the
    unpinned lacks: counted against those, not named."""
    atol, rtol = detection_tolerance(spec, tolerance)
    ref, cand = read_detection_pair(spec, reference, unpinned)
    excused = problem_rows(ref, cand, score_tol=atol, score_rtol=rtol)
    ref_again, decided = read_detection_pair(spec, reference, pinned)
    changed = problem_rows(decided, cand, iou=1.0, box_atol=0.0, score_tol=0.0, mask_tol=(0.0, 0.0))
    # rows the pinned comparison itself has as problem rows (it passed, so its tie rules excused them, with
    # their own evidence): the same rows in the unpinned run are the tie rules' excuse, not pinning's
    tied = problem_rows(ref_again, decided, score_tol=atol, score_rtol=rtol)
    for image, ((ref_rows, cand_rows), (decided_rows, changed_rows), (ref_tied, decided_tied)) in enumerate(
            zip(excused, changed, tied, strict=True)):
        account.excused += len(ref_rows) + len(cand_rows)
        account.changed += len(decided_rows) + len(changed_rows)
        u, d = cand[image], decided[image]
        same_as_tied = {_row_key(d, k) for k, r in enumerate(d.row_ids().tolist()) if r in decided_tied}
        left = {r for k, r in enumerate(u.row_ids().tolist())
                if r in cand_rows and r not in changed_rows and _row_key(u, k) not in same_as_tied}
        account.tied += len(cand_rows - changed_rows) - len(left) + min(len(ref_rows), len(ref_tied))
        if left:
            account.outside += _unreached(u, d, left, changed_rows, decided_rows)
        account.outside += max(0, len(ref_rows) - len(decided_rows) - len(ref_tied))


def _row_key(d: Detections, k: int) -> tuple[float, ...]:
    """A detection as its class, score and box (an unchanged row is bit-identical in both runs)."""
    return (float(d.classes[k]), float(d.scores[k]), *(float(v) for v in d.boxes[k]))


def _unreached(unpinned: Detections, decided: Detections, left: set[int], changed: set[int],
               decided_changed: set[int]) -> int:
    """How many rows ``left`` of ``unpinned`` no changed row reaches through overlapping rows of their class
    (rows of both runs; more than ``MAX_CHAIN_ROWS`` in a class: counted against the changed rows instead)."""
    ids_u, ids_d = [int(r) for r in unpinned.row_ids()], [int(r) for r in decided.row_ids()]
    boxes = np.concatenate([unpinned.boxes, decided.boxes])
    classes = np.concatenate([unpinned.classes, decided.classes])
    seeds = np.asarray([r in changed for r in ids_u] + [r in decided_changed for r in ids_d], bool)
    wanted = np.asarray([r in left for r in ids_u] + [False] * len(ids_d), bool)
    missing = 0
    for cls in np.unique(classes[wanted]):
        members = np.flatnonzero(classes == cls)
        need = wanted[members]
        if len(members) > MAX_CHAIN_ROWS:
            missing += max(0, int(need.sum()) - int(seeds[members].sum()))
            continue
        missing += int((need & ~_overlap_reach(boxes[members], seeds[members])).sum())
    return missing


def _overlap_reach(boxes: np.ndarray, seeds: np.ndarray, chunk: int = 256) -> np.ndarray:
    """Per box: a seed reaches it through a chain of boxes overlapping with positive area (breadth first, the
    frontier compared with every box ``chunk`` rows at a time: memory O(chunk x boxes))."""
    reached = seeds.copy()
    frontier = np.flatnonzero(seeds)
    with np.errstate(invalid="ignore"):
        while len(frontier):
            hit = np.zeros(len(boxes), bool)
            for start in range(0, len(frontier), chunk):
                b = boxes[frontier[start:start + chunk]]
                iw = np.minimum(b[:, None, 2], boxes[None, :, 2]) - np.maximum(b[:, None, 0], boxes[None, :, 0])
                ih = np.minimum(b[:, None, 3], boxes[None, :, 3]) - np.maximum(b[:, None, 1], boxes[None, :, 1])
                hit |= ((iw > 0) & (ih > 0)).any(axis=0)
            new = hit & ~reached
            reached |= new
            frontier = np.flatnonzero(new)
    return reached


def _account_elements(account: RowAccount, name: str, reference: Mapping[str, np.ndarray],
                      unpinned: Mapping[str, np.ndarray], pinned: Mapping[str, np.ndarray],
                      tolerance: Tolerance) -> None:
    r, u, p = (np.asarray(x[name]) for x in (reference, unpinned, pinned))
    if r.shape != u.shape or u.shape != p.shape:
        raise ValueError(f"shapes {list(r.shape)}, {list(u.shape)}, {list(p.shape)}")
    atol, rtol = tolerance.for_output(name)
    with np.errstate(all="ignore"):
        if u.dtype.kind in "fc":
            bad = ~np.isclose(u.astype(np.float64), r.astype(np.float64), atol=atol, rtol=rtol, equal_nan=True)
            moved = ~((u == p) | (np.isnan(u) & np.isnan(p)))
        else:
            bad, moved = u != r, u != p
    account.excused += int(bad.sum())
    account.changed += int(moved.sum())
    account.outside += int((bad & ~moved).sum())


def _upstream(index: GraphIndex, tensor: str) -> set[str]:
    """Every node-produced tensor ``tensor`` depends on (main graph)."""
    seen: set[str] = set()
    stack = [tensor]
    while stack:
        k = index.producer.get(stack.pop())
        if k is None:
            continue
        for i in index.model.graph.node[k].input:
            if i and i not in seen:
                seen.add(i)
                stack.append(i)
    return seen


def _index_aliases(model: onnx.ModelProto, points: Sequence[SelectionPoint], available: set[str]) -> dict[str, str]:
    """TopK index output -> the tensor the source returns for it: itself, or the end of a chain of single-use
    Casts/Identities after it (an MXNet topk's float32 indices are a Cast of ONNX's int64 ones)."""
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for n in model.graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    aliases: dict[str, str] = {}
    for p in points:
        name = p.indices
        while p.op == "TopK" and name and name not in available:
            users = consumers.get(name, [])
            name = users[0].output[0] if len(users) == 1 and users[0].op_type in ("Cast", "Identity") else ""
        if p.op == "TopK" and name:
            aliases[p.indices] = name
    return aliases


def _tie_orders(model: onnx.ModelProto, points: Sequence[SelectionPoint], values: Mapping[str, np.ndarray],
                src: Mapping[str, np.ndarray], aliases: Mapping[str, str]) -> dict[str, tuple[np.ndarray, int]]:
    """TopK index outputs that differ from the source's only in the order of exactly equal scores: both index
    sets pick the same values, bit for bit, from the same (pinned) scores. -> the tensor to pin (the indices or
    their alias, ``_index_aliases``): (the source's value in the candidate's dtype, positions that differ). An
    index set picking any other value is not a tie and is left out (the failure stands)."""
    nodes = {n.output[1]: n for n in model.graph.node if n.op_type == "TopK" and len(n.output) > 1}
    tied: dict[str, tuple[np.ndarray, int]] = {}
    for p in points:
        node, alias = nodes.get(p.indices), aliases.get(p.indices)
        if p.op != "TopK" or node is None or alias is None or not p.inputs:
            continue
        x, ci, raw, own = values.get(p.inputs[0]), values.get(p.indices), src.get(alias), values.get(alias)
        if x is None or ci is None or raw is None or own is None:
            continue
        x, ci, raw, own = np.asarray(x), np.asarray(ci), np.asarray(raw), np.asarray(own)
        axis = next((a.i for a in node.attribute if a.name == "axis"), -1)
        if ci.shape != raw.shape or own.shape != raw.shape or x.ndim != ci.ndim or not np.all(np.isfinite(raw)):
            continue
        si = raw.astype(ci.dtype)
        if not np.array_equal(si, raw) or np.array_equal(si, ci) or si.min() < 0 or si.max() >= x.shape[axis]:
            continue
        picked_c, picked_s = np.take_along_axis(x, ci, axis), np.take_along_axis(x, si, axis)
        if picked_c.tobytes() == picked_s.tobytes():
            tied[alias] = (raw.astype(own.dtype), int((si != ci).sum()))
    return tied


def _take_pinned(comparison: Comparison, pinned: Comparison, text: str) -> None:
    """The failing outputs take the pinned run's verdict and figures; their unpinned figures stay in the note."""
    by_name = {o.name: o for o in pinned.outputs}
    for o in comparison.outputs:
        p = by_name.get(o.name)
        if o.passed or p is None:
            continue
        unpinned = o.note or f"max abs {_fig(o.max_abs)}"
        for figure in ("passed", "shape_match", "dtype_match", "cand_shape", "cand_dtype", "max_abs", "max_rel",
                       "mismatch_fraction", "nonfinite_mismatch", "tie_ambiguous", "detection"):
            setattr(o, figure, getattr(p, figure))
        o.note = f"{p.note + '; ' if p.note else ''}{text}; unpinned: {unpinned}"
        if p.vacuous:
            o.add_vacuous(p.vacuous_reason)


@dataclass
class SelectionInputsProof:
    """What ``prove_selection_inputs`` found: ``ran`` (the source returned the selection inputs and both sides were
    run), ``bad`` (pins beyond the tolerance), ``outputs`` (the graph outputs those pins reach) and the statement."""

    ran: bool
    text: str
    pins: dict[str, dict[str, Any]] = field(default_factory=dict)
    bad: list[str] = field(default_factory=list)
    outputs: set[str] = field(default_factory=set)

    @property
    def failed(self) -> bool:
        return bool(self.bad)


def prove_selection_inputs(model: onnx.ModelProto, source: PinSource, run_candidate: RunCandidate,
                           feeds: Mapping[str, np.ndarray], tolerance: Tolerance, *, shape_only: Sequence[str] = (),
                           say: Callable[[str], None] = lambda _m: None) -> SelectionInputsProof:
    """The selection inputs of a *passing* comparison judged in full (steps 1-2 of the module docstring, no pinning).

    A selection shows the outputs only what it selected: a box decoded wrong at an anchor no validation image
    selects, a score scaled in a class none of them scores high, pass every output comparison and are wrong on the
    next image. The selections' inputs (every anchor's decoded box, every class score) are computed for every row
    on every image, so comparing them with the source's tensors of the same name checks each row the outputs can
    ever select. A pin downstream of another selection is judged with the selections above it deciding on the
    source's values (``_judge_all_pins``), as the tie proof judges it.
    Points whose selections reach only ``shape_only`` outputs (random ones) are left out."""
    if not has_selection_ops(model):
        return SelectionInputsProof(False, "the model has no selection op")
    # by name only: a tensor a pass moved a Transpose across is left out (the pins are then the nearest tensors
    # above it the source names; measuring layout aliases would cost a run on every passing check)
    index = GraphIndex(model)
    outputs = [o.name for o in model.graph.output]
    reaches = {o: _upstream(index, o) | {o} for o in outputs}
    judged_outputs = [o for o in outputs if o not in set(shape_only)]
    available = source.names()
    points = [p for p in selection_points(model, available)
              if any(p.indices in reaches[o] or set(p.inputs) & reaches[o] for o in judged_outputs)]
    # the rows a selection's choice is read from (gathered by its indices) are judged like its inputs
    rows = [r for r in gathered_rows(model, available) if any(r in reaches[o] for o in judged_outputs)]
    pins = sorted(dict.fromkeys([*(p for point in points for p in point.pins), *rows]),
                  key=lambda p: index.position.get(p, -1))
    if not pins:
        return SelectionInputsProof(False, "no tensor upstream of a selection op is one the source can return")
    say(f"comparing {len(pins)} selection input(s) with the source's on every row")
    (src,) = source.values([feeds], pins)
    missing = [p for p in pins if p not in src]
    if missing:
        return SelectionInputsProof(False, f"the source returned no value for {', '.join(missing)}")
    point_pins = {q for point in points for q in point.pins}
    pins = [p for p in pins if p not in rows or p in point_pins or np.ndim(src[p]) <= MAX_GATHERED_RANK]
    if not pins:
        return SelectionInputsProof(False, "the only tensors the source returns upstream of a selection are feature "
                                    "maps its choice reads from, not rows")
    cand = run_candidate(with_outputs(model, pins), feeds)
    # a tensor of the source's name in another axis order (a foreign exporter's layout) is no evidence either way:
    # left out, and said; any other shape difference (rows added or dropped) is judged, and fails
    relaid = [p for p in pins if p in cand and _other_layout(np.shape(src[p]), np.shape(cand[p]))]
    pins = [p for p in pins if p not in relaid]
    result = PinningResult(False, points=points)
    bad = _judge_all_pins(result, _Sites(model, points), src, cand, pins, feeds, tolerance, run_candidate) \
        if pins else []
    reached = {o for o in outputs if any(b in reaches[o] for b in bad)}
    figures = ", ".join(f"{n} (" + (f"shape {list(np.shape(cand[n]))} vs the source's {list(np.shape(src[n]))}"
                                     if n in cand and np.shape(cand[n]) != np.shape(src[n]) else
                                     f"max abs {_fig(p.get('max_abs'))}" + (
                                         f", mismatch {_fig(p.get('mismatch'))}" if not p.get("passed") else ""))
                        + ")" for n, p in result.pins.items())
    left = (f"; not compared, in another axis order than the source's: {', '.join(relaid)}") if relaid else ""
    if not pins:
        return SelectionInputsProof(False, f"every selection input is in another axis order than the source's "
                                    f"({', '.join(relaid)})")
    if bad:
        text = (f"the selection input(s) {', '.join(bad)} differ from the source's beyond the tolerance, though the "
                f"outputs matched (the rows the selections kept, within the outputs' tolerance, hide it; other inputs "
                f"show it) [{figures}]{left}")
    else:
        text = f"selection inputs agree with the source's on every row: {figures}{left}"
    return SelectionInputsProof(True, text, result.pins, bad, reached)


def _other_layout(src: tuple[int, ...], cand: tuple[int, ...]) -> bool:
    """The same dimensions in another order (a transpose), not the same shape."""
    return src != cand and sorted(src) == sorted(cand)
