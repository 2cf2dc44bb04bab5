"""An upstream tie proof by pinning: a failed comparison re-run with the source's values at the selection inputs.

A detector selects: TopK keeps the N best scores, NonMaxSuppression keeps boxes in score order, ArgMax picks
one class, a comparison keeps peaks (CenterNet's ``x * (MaxPool(x) == x)``) or scores over a threshold. Two runtimes that compute the same scores to within a float32 ulp (onnxruntime's Sigmoid is not
MXNet's) can select differently where two scores are tied to that ulp, and everything downstream then sees
other rows; with random weights many such rows are identical in all but position, and the final outputs'
matcher has no evidence that the difference came from a tie upstream. Bit-exact agreement is not achievable
across runtimes (different ``exp`` implementations), so this module proves the tie instead:

1. ``selection_points``: the score (and box) inputs of every selection op of the candidate graph
   (``SELECTION_OPS``; and the float data inputs of comparisons, ``COMPARISON_OPS``), each walked back to the nearest tensors the source also returns (its *pins*);
2. the pins' values from the source and from the candidate (the unpinned model with the pins as extra
   outputs) on the same feeds must agree within the tolerance - the part of the model above the selections
   is proved by this, not assumed (a pin downstream of another is judged again with the upstream pins set
   to the source's values, so a selection difference upstream of it is not counted against it);
3. ``pinned_model``: the candidate with the pins as graph inputs (the nodes that only fed them dropped) is run
   on the feeds plus the source's pin values, and its final outputs are compared with the reference by the
   ordinary comparison (ties rules unchanged).

Only if all of that holds is the verdict a pass; the comparison then says which tensors were pinned, their
largest difference, how many selections the pins changed, and that with them pinned every output matches
(``PinningResult.text``). Anything else leaves the failure standing, saying why pinning did not explain it.
This module is runtime-agnostic: the caller runs the candidate (``RunCandidate``) and the source (``PinSource``)
wherever they run (``bridge.conversion.pinning`` wires it into ``convert``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import onnx
from onnx import helper

from bridge.config import Tolerance
from bridge.validation.compare import Comparison, OutputComparison, compare_outputs
from bridge.validation.detection.layouts import DetectionSpec
from bridge.validation.graph import GraphIndex, with_outputs

log = logging.getLogger(__name__)

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
UNPINNED_SUFFIX = "__bridge_unpinned"  # a pinned tensor's producer keeps its other outputs; this one is renamed

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
        if any(i in fed for i in (*node.input, *_subgraph_names(node))):
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
        elif facts is None:
            continue
        else:
            positions, out = facts
            inputs = tuple(node.input[i] for i in positions if i < len(node.input) and node.input[i])
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
                                     tuple(sorted(pins, key=lambda p: index.position.get(p, -1)))))
    return points


def has_selection_ops(model: onnx.ModelProto) -> bool:
    return any(n.op_type in SELECTION_OPS or n.op_type in COMPARISON_OPS for n in model.graph.node
               if n.domain in ("", "ai.onnx"))


def _subgraph_names(node: onnx.NodeProto) -> set[str]:
    """Every tensor name a node's subgraphs read (outer-scope values they use are inputs of the node too)."""
    names: set[str] = set()
    for attr in node.attribute:
        graphs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
        for g in graphs:
            for n in g.node:
                names.update(i for i in n.input if i)
                names |= _subgraph_names(n)
    return names


def pinned_model(model: onnx.ModelProto, pins: Mapping[str, np.ndarray], outputs: Sequence[str]) -> onnx.ModelProto:
    """``model`` with the tensors ``pins`` (name -> a value, for dtype and shape) as graph inputs, outputs
    ``outputs``, and only the nodes, initializers and inputs those outputs still need: what only fed a pin
    is gone, so the pinned run cannot compute the pin's own value anywhere."""
    pinned = onnx.ModelProto()
    pinned.CopyFrom(model)
    g = pinned.graph
    for node in g.node:  # a producer with other outputs stays; its pinned output is renamed away
        for i, o in enumerate(node.output):
            if o in pins:
                node.output[i] = o + UNPINNED_SUFFIX
    producer = {o: k for k, n in enumerate(g.node) for o in n.output if o}
    needed_nodes: set[int] = set()
    needed: set[str] = set()
    stack = [o for o in outputs if o not in pins]
    while stack:
        name = stack.pop()
        if name in needed:
            continue
        needed.add(name)
        k = producer.get(name)
        if k is None or k in needed_nodes:
            continue
        needed_nodes.add(k)
        stack.extend(i for i in (*g.node[k].input, *_subgraph_names(g.node[k])) if i and i not in pins)
    kept = [n for k, n in enumerate(g.node) if k in needed_nodes]
    del g.node[:]
    g.node.extend(kept)
    inits = [t for t in g.initializer if t.name in needed]
    del g.initializer[:]
    g.initializer.extend(inits)
    old_inputs = [i for i in g.input if i.name in needed and i.name not in pins]
    del g.input[:]
    g.input.extend(old_inputs)
    for name, value in pins.items():
        arr = np.asarray(value)
        g.input.append(helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(arr.dtype), list(arr.shape)))
    declared = {o.name: o for o in model.graph.output}
    del g.output[:]
    for name in outputs:
        if name in declared:
            g.output.append(declared[name])
        else:
            g.output.add().name = name
    vi = [v for v in g.value_info if v.name in needed and v.name not in pins]
    del g.value_info[:]
    g.value_info.extend(vi)
    return pinned


def graph_input_names(model: onnx.ModelProto) -> set[str]:
    inits = {t.name for t in model.graph.initializer}
    return {i.name for i in model.graph.input if i.name not in inits}


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


def selection_changes(point: SelectionPoint, before: np.ndarray | None, after: np.ndarray | None) -> dict[str, Any]:
    """How differently ``point`` selected between the unpinned candidate (``before``) and the pinned one."""
    if before is None or after is None:
        return {"node": point.node, "op": point.op, "compared": False}
    a, b = np.asarray(before), np.asarray(after)
    entry: dict[str, Any] = {"node": point.node, "op": point.op, "compared": True, "selected": int(b.size)}
    if point.op == "NonMaxSuppression":  # rows (batch, class, box): kept by one run only
        rows_a = {tuple(r) for r in a.reshape(-1, 3).tolist()}
        rows_b = {tuple(r) for r in b.reshape(-1, 3).tolist()}
        entry.update(selected=len(rows_b), changed=len(rows_a - rows_b),
                     reordered=int((a != b).any(axis=-1).sum()) if a.shape == b.shape else None)
        return entry
    if a.shape != b.shape:
        entry.update(changed=None, note=f"shape {list(a.shape)} unpinned vs {list(b.shape)} pinned")
        return entry
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

    @property
    def text(self) -> str:
        pins = ", ".join(f"{n} (max abs {_fig(p.get('max_abs'))}" + (
            f", judged with {', '.join(p['judged_with_pinned'])} pinned" if p.get("judged_with_pinned") else "") + ")"
            for n, p in self.pins.items())
        if not self.explained:
            return f"pinning did not explain the failure: {self.reason}" + (f" [pins: {pins}]" if pins else "")
        compared = [s for s in self.selections if s.get("compared")]
        same = [s for s in compared if s.get("comparison") and s.get("changed") == 0]  # one count, not one line each
        changed = [s for s in compared if s not in same]
        sel = "; ".join(f"{s['op']} {s['node']}: {s.get('changed')} of {s.get('selected')} "
                        + ("comparison results changed" if s.get("comparison") else "selected changed")
                        + (f", {s['reordered']} positions reordered" if s.get("reordered") is not None else "")
                        for s in changed) + (f"{'; ' if changed else ''}{len(same)} more comparison(s) unchanged"
                                             if same else "")
        return (f"passed with the source's values pinned at {len(self.pins)} selection input(s): {pins}; each agrees "
                f"with the source within the tolerance; selections changed by pinning: {sel or 'none measured'}; "
                + "".join(f"{n}: {c} positions hold exactly equal scores in the source's order (ONNX TopK orders "
                          "exact ties by index; the same scores selected), pinned too; "
                          for n, c in self.tie_orders.items())
                + "with them pinned every output matches (the unpinned difference comes from selections reacting to "
                "within-tolerance differences of their inputs: near-ties, e.g. 1-ulp scores at a top-N cut)")

    def to_dict(self) -> dict[str, Any]:
        return {"explained": self.explained, "reason": self.reason, "text": self.text,
                "points": [p.to_dict() for p in self.points], "pins": self.pins, "selections": self.selections, "tie_orders": self.tie_orders}


def _fig(x: Any) -> str:
    return "n/a" if x is None else f"{x:.3g}"


def _judge_pins(src: Mapping[str, np.ndarray], cand: Mapping[str, np.ndarray], names: Sequence[str],
                tolerance: Tolerance) -> dict[str, OutputComparison]:
    comp = compare_outputs({n: src[n] for n in names}, {n: cand[n] for n in names if n in cand}, tolerance)
    return {o.name: o for o in comp.outputs}


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
    say: Callable[[str], None] = lambda _m: None,
) -> PinningResult:
    """Prove ``comparison``'s failure is a tie at a selection (module docstring) and, if it is, turn it into a
    pass with the evidence in every failing output's note and ``comparison.pinning``; else only record why not.

    ``sizes``: per input size compared, the feeds and the reference's outputs (None: taken from the source).
    Nothing here runs for a comparison that passed."""
    if comparison.passed:
        return PinningResult(False, "the comparison passed: nothing to explain")
    result = _explain(comparison, model, source, run_candidate, sizes, tolerance, detections, shape_only, say)
    comparison.pinning = result.to_dict()
    if result.explained and result.pinned_comparison is not None:
        _take_pinned(comparison, result.pinned_comparison, result.text)
    return result


def _explain(comparison: Comparison, model: onnx.ModelProto, source: PinSource, run_candidate: RunCandidate,
             sizes: Sequence[tuple[Mapping[str, np.ndarray], Mapping[str, np.ndarray] | None]], tolerance: Tolerance,
             detections: Sequence[DetectionSpec] | Mapping[str, str] | None, shape_only: Sequence[str],
             say: Callable[[str], None]) -> PinningResult:
    if not has_selection_ops(model):
        return PinningResult(False, "the model has no selection op (" + ", ".join([*SELECTION_OPS, *sorted(COMPARISON_OPS)])
                             + ")")
    if len(sizes) < len(comparison.sizes):  # a pass must cover every size the failure was measured at
        return PinningResult(False, f"the comparison covers {len(comparison.sizes)} input sizes, pinning could be "
                             f"run at {len(sizes)} only")
    points = selection_points(model, source.names())
    pins = list(dict.fromkeys(p for point in points for p in point.pins))
    if not pins:
        return PinningResult(False, "no tensor upstream of a selection op is one the source can return", points)
    bare = [p.node for p in points if not p.pins]
    if bare:  # a selection left to the candidate's own values would keep its tie unexplained
        return PinningResult(False, f"selection op(s) {', '.join(bare)} have no source tensor upstream to pin", points)
    outputs = [o.name for o in model.graph.output]
    indices = [p.indices for p in points if p.indices]
    say(f"pinning: fetching {len(pins)} selection input(s) from the source")
    # a TopK's exact ties (equal scores, bit for bit) are ordered by index in ONNX, by the source's own rule there
    ordered = _index_aliases(model, points, source.names())
    source_values = source.values([f for f, _ in sizes], list(dict.fromkeys(
        [*pins, *ordered.values(), *(o for o in outputs if any(r is None for _, r in sizes))])))
    index = GraphIndex(model)
    order = {p: index.position.get(p, -1) for p in pins}
    pins.sort(key=lambda p: order[p])
    result = PinningResult(False, points=points)
    pinned_comps: list[Comparison] = []
    for n_size, ((feeds, ref_out), src) in enumerate(zip(sizes, source_values, strict=True)):
        missing = [p for p in pins if p not in src]
        if missing:
            result.reason = f"the source returned no value for {', '.join(missing)}"
            return result
        say("pinning: running the candidate with the selection inputs as outputs")
        cand = run_candidate(with_outputs(model, list(dict.fromkeys([*outputs, *pins, *indices]))), feeds)
        judged = _judge_pins(src, cand, pins, tolerance)
        with_pinned: dict[str, list[str]] = {}
        bad = [p for p in pins if not judged[p].passed]
        settled: list[str] = []
        while bad:  # a pin downstream of a selection is judged again with the pins above it set to the source's
            ups = [p for p in pins if judged[p].passed and p not in settled
                   and any(p in _upstream(index, b) for b in bad)]
            if not ups:
                break
            settled.extend(ups)
            part = pinned_model(model, {p: src[p] for p in settled}, bad)
            again = run_candidate(part, {**_fed(part, feeds), **{p: src[p] for p in settled}})
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
            if p in with_pinned:
                entry["judged_with_pinned"] = with_pinned[p]
        if bad:
            o = judged[bad[0]]
            result.reason = (f"the candidate's {bad[0]} differs from the source's beyond the tolerance (max abs "
                             f"{_fig(o.max_abs)}, mismatch {_fig(o.mismatch_fraction)}"
                             + (f"; {o.note}" if o.note else "") + "): the difference is upstream of the selections")
            return result
        say("pinning: running the candidate with the source's values pinned")
        topk_inputs = [p.inputs[0] for p in points if p.op == "TopK" and p.inputs and p.inputs[0] not in pins]
        pinned = pinned_model(model, {p: src[p] for p in pins},
                              list(dict.fromkeys([*outputs, *indices, *topk_inputs, *ordered.values()])))
        after = run_candidate(pinned, {**_fed(pinned, feeds), **{p: src[p] for p in pins}})
        if n_size == 0:
            result.selections = [selection_changes(p, cand.get(p.indices), after.get(p.indices)) for p in points]
        final = {o: (cand[o] if o in pins else after[o]) for o in outputs if o in after or o in pins}
        reference = ref_out if ref_out is not None else {o: src[o] for o in outputs if o in src}
        comp = compare_outputs(reference, final, tolerance, reference_name=comparison.reference,
                               candidate_name=comparison.candidate, detection_outputs=detections, shape_only=shape_only)
        tied = {} if comp.passed else _tie_orders(model, points, {**after, **{p: src[p] for p in pins}}, src, ordered)
        if tied:  # the same scores selected, exact ties in another order: the source's order pinned too
            say("pinning: re-running with the source's order of exactly tied TopK scores")
            both = {**{p: src[p] for p in pins}, **{n: v for n, (v, _) in tied.items()}}
            again_model = pinned_model(model, both, outputs)
            again = run_candidate(again_model, {**_fed(again_model, feeds), **both})
            final = {o: (cand[o] if o in pins else after[o] if o in tied else again[o]) for o in outputs
                     if o in again or o in pins or o in tied}
            comp = compare_outputs(reference, final, tolerance, reference_name=comparison.reference,
                                   candidate_name=comparison.candidate, detection_outputs=detections,
                                   shape_only=shape_only)
            for n, (_, count) in tied.items():
                result.tie_orders[n] = result.tie_orders.get(n, 0) + count
        pinned_comps.append(comp)
    merged = pinned_comps[0]
    merged.sizes = [{k: list(np.shape(v)) for k, v in sizes[0][0].items()}]
    for n_size, other in enumerate(pinned_comps[1:], start=1):
        merged.add_size(other, {k: list(np.shape(v)) for k, v in sizes[n_size][0].items()})
    result.pinned_comparison = merged
    if not merged.passed:
        result.reason = ("with the source's values pinned at the selection inputs the outputs still differ ("
                         + "; ".join(f"{o.name}: {o.note or 'max abs ' + _fig(o.max_abs)}" for o in merged.failures)
                         + "): the difference is not (only) a tie at a selection")
        return result
    result.explained = True
    return result


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


def _fed(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    wanted = graph_input_names(model)
    return {k: v for k, v in feeds.items() if k in wanted}


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
