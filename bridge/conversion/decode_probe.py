"""The decode-stage probe: the candidate's decode region against the source framework's decode node, both fed the
same synthetic inputs over every anchor.

Output comparison sees an anchor (and the decode of its box) only where some detection on the feeds decodes from
it; a converter bug in one folded anchor value is invisible on realistic feeds. For a source whose adapter has
``decode_probes`` (MXNet: each MultiBoxDetection node, ``adapters.mxnet.decode_probe``), the candidate is cut at
the computed inputs of the nodes whose provenance (``bridge.source.node``) is that node, each cut point is mapped
to the source node's input (cls_prob, loc_pred, anchor) by value on the validation feeds (as is, last two axes
transposed, or reshaped: never by name), and the cut region runs in onnxruntime on the source's synthetic rounds.
The rows the node sorts and keeps (the first nms_topk) must agree within the box tolerance (scores are distinct
by construction: no tie can excuse a row); past them only the class (-1) is compared, the one thing MXNet defines
there. A difference FAILs the detection group the region feeds, naming the node, the worst row and the anchors seen.
A probe that should have run and did not (the source side failed, no region stands for the node, the region could
not run) leaves that group vacuous, with why: the verdict line says it and ``--strict`` fails it. Where the probe
does not apply (no decode node in the source; onnxruntime not among the candidates; the region gives its rows in
another layout than the node's [B, N, 6], e.g. ``--detection-format boxes-scores-classes``) it is a statement only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
import onnx

from bridge import provenance
from bridge.validation.compare import Comparison, OutputComparison
from bridge.validation.detection.matching import DEFAULT_BOX_ATOL
from bridge.validation.pinned_graph import subgraph_names

PROBE_RUNTIME = "onnxruntime"
_COLUMNS = {0: "class", 1: "score"}  # columns 2.. are the box corners


@dataclass(frozen=True)
class Region:
    """The candidate nodes standing for one source node: the computed tensors they read from outside (``cuts``) and
    the tensors they give to the rest of the graph (``outputs``), and the graph outputs downstream of them."""

    nodes: tuple[str, ...]
    cuts: tuple[str, ...]
    outputs: tuple[str, ...]
    graph_outputs: frozenset[str]


def decode_region(model: onnx.ModelProto, source_node: str) -> Region | None:
    """The region of ``model``'s main-graph nodes whose provenance names ``source_node``; None when there is none.
    Only tensors computed from a graph input are cut points (folded constants stay inside the region)."""
    graph = model.graph
    inside = [n for n in graph.node if (p := provenance.read(n)) is not None and p.node == source_node]
    if not inside:
        return None
    initializers = {t.name for t in graph.initializer}
    computed = {i.name for i in graph.input if i.name not in initializers}
    for node in graph.node:  # topological order: a tensor is computed when any of its inputs is
        if any(i in computed for i in node.input if i):
            computed.update(o for o in node.output if o)
    made = {o for n in inside for o in n.output}
    cuts = dict.fromkeys(i for n in inside for i in n.input if i and i not in made and i in computed)
    ids = {id(n) for n in inside}
    read_outside = {i for n in graph.node if id(n) not in ids for i in n.input}
    graph_outputs = {o.name for o in graph.output}
    outputs = tuple(o for n in inside for o in n.output if o in read_outside or o in graph_outputs)
    downstream = set(outputs)
    for node in graph.node:
        if id(node) not in ids and any(i in downstream for i in node.input):
            downstream.update(node.output)
    return Region(tuple(n.name for n in inside), tuple(cuts), outputs, frozenset(downstream & graph_outputs))


_TRANSFORMS: dict[str, Callable[[np.ndarray, tuple[int, ...]], np.ndarray]] = {
    "as is": lambda a, shape: a,
    "transposed (last two axes)": lambda a, shape: np.swapaxes(a, -1, -2),
    "reshaped": lambda a, shape: a.reshape(shape) if a.size == int(np.prod(shape)) else a,
    "transposed and reshaped": lambda a, shape: (np.swapaxes(a, -1, -2).reshape(shape)
                                                 if a.size == int(np.prod(shape)) else a),
}


def map_cuts(cut_values: Mapping[str, np.ndarray], internals: Mapping[str, np.ndarray], atol: float,
             rtol: float) -> tuple[dict[str, tuple[str, str]], list[str]]:
    """Each cut point -> (the source input it holds, how): the first role and transform whose values agree with the
    cut's within ``atol + rtol * |ref|``. Returns the mapping and the cut points nothing matched."""
    mapping: dict[str, tuple[str, str]] = {}
    unmatched = []
    for cut, value in cut_values.items():
        found = None
        for role, ref in internals.items():
            for how, transform in _TRANSFORMS.items():
                moved = transform(np.asarray(ref), tuple(value.shape))
                if moved.shape == value.shape and np.allclose(value, moved, atol=atol, rtol=rtol):
                    found = (role, how)
                    break
            if found:
                break
        if found is None:
            unmatched.append(cut)
        else:
            mapping[cut] = found
    return mapping, unmatched


def _reads(node: onnx.NodeProto) -> list[str]:
    """Every tensor ``node`` reads, those its subgraphs read from the outer scope included."""
    return [*(i for i in node.input if i), *sorted(subgraph_names(node))]


def cut_model(model: onnx.ModelProto, region: Region, cut_values: Mapping[str, np.ndarray]) -> onnx.ModelProto:
    """The part of ``model`` computing the region's outputs from its cut points (graph inputs, typed from the
    values the cut tensors held; dims left free), with the initializers it reads. Written here rather than with
    ``onnx.utils.Extractor``, which needs shape-inferred value_info for every cut tensor."""
    graph = model.graph
    producers = {o: n for n in graph.node for o in n.output if o}
    chosen: set[int] = set()
    stack, visited = list(region.outputs), set(region.cuts)
    while stack:
        name = stack.pop()
        if name in visited:
            continue
        visited.add(name)
        node = producers.get(name)
        if node is not None and id(node) not in chosen:
            chosen.add(id(node))
            stack.extend(_reads(node))
    nodes = [n for n in graph.node if id(n) in chosen]
    read = {i for n in nodes for i in _reads(n)}
    initializers = [t for t in graph.initializer if t.name in read]
    inputs = [onnx.helper.make_tensor_value_info(c, onnx.helper.np_dtype_to_tensor_dtype(v.dtype), [None] * v.ndim)
              for c, v in cut_values.items()]
    outputs = [onnx.helper.make_empty_tensor_value_info(o) for o in region.outputs]
    cut = onnx.helper.make_model(onnx.helper.make_graph(nodes, "decode_region", inputs, outputs, initializers),
                                 opset_imports=list(model.opset_import), ir_version=model.ir_version)
    cut.functions.extend(model.functions)
    return cut


@dataclass
class CandidateProbe:
    """The candidate side's answer: the cut mapping and the region's rows per round, or why it could not run."""

    mapping: dict[str, tuple[str, str]] = field(default_factory=dict)
    rows: list[np.ndarray] = field(default_factory=list)
    why_not: str = ""
    # the region runs but gives its rows in a layout the probe does not read (boxes / scores / classes apart): a
    # limit of the probe, said, not a probe that failed to run
    unread_layout: bool = False


def _session(model: onnx.ModelProto) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def run_candidate_probe(model_bytes: bytes, region: Region, feeds: Mapping[str, np.ndarray],
                        internals: Mapping[str, np.ndarray], rounds: Sequence[Mapping[str, np.ndarray]],
                        rows_shape: tuple[int, ...], atol: float, rtol: float) -> CandidateProbe:
    """The candidate side (run in a child when isolation is on): the cut tensors on ``feeds`` mapped to the
    source's ``internals``, then the cut region in onnxruntime on every synthetic round. The whole model already
    ran in the comparison: onnxruntime refusing the cut model or the cut region is said as why the probe did not
    run."""
    try:
        return _candidate_probe(model_bytes, region, feeds, internals, rounds, rows_shape, atol, rtol)
    except Exception as exc:  # onnxruntime's own errors (InvalidGraph, Fail, ...): a reason, not a crash
        text = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
        return CandidateProbe(why_not=f"onnxruntime could not run the cut decode region: {type(exc).__name__}: {text}")


def _candidate_probe(model_bytes: bytes, region: Region, feeds: Mapping[str, np.ndarray],
                     internals: Mapping[str, np.ndarray], rounds: Sequence[Mapping[str, np.ndarray]],
                     rows_shape: tuple[int, ...], atol: float, rtol: float) -> CandidateProbe:
    model = onnx.load_from_string(model_bytes)
    probed = onnx.ModelProto()
    probed.CopyFrom(model)
    known = {o.name for o in probed.graph.output}
    for cut in region.cuts:
        if cut not in known:
            probed.graph.output.append(onnx.helper.make_empty_tensor_value_info(cut))
    session = _session(probed)
    wanted = {i.name for i in session.get_inputs()}
    values = session.run(list(region.cuts), {k: v for k, v in feeds.items() if k in wanted})
    mapping, unmatched = map_cuts(dict(zip(region.cuts, values, strict=True)), internals, atol, rtol)
    if unmatched:
        return CandidateProbe(mapping, why_not=f"the cut point(s) {', '.join(unmatched)} match none of the source "
                                               f"node's inputs ({', '.join(internals)}) on the validation feeds, "
                                               "as they are, transposed or reshaped")
    session = _session(cut_model(model, region, dict(zip(region.cuts, values, strict=True))))
    shapes = dict(zip(region.cuts, (v.shape for v in values), strict=True))
    result = CandidateProbe(mapping)
    for fed in rounds:
        arrays = {}
        for cut, (role, how) in mapping.items():
            arrays[cut] = _TRANSFORMS[how](np.asarray(fed.get(role, internals[role])), shapes[cut])
        got = session.run(list(region.outputs), arrays)
        fitting = [g for g in got if tuple(g.shape) == tuple(rows_shape)]
        if not fitting:
            return CandidateProbe(mapping, why_not=f"no output of the region ({', '.join(region.outputs)}) has the "
                                                   f"source node's shape {list(rows_shape)}: the probe reads the "
                                                   "node's own [B, N, 6] rows only", unread_layout=True)
        result.rows.append(np.asarray(fitting[0]))
    return result


@dataclass
class ProbeVerdict:
    """One decode node's probe: passed, the text for the verdict, and the figures for the JSON."""

    node: str
    ran: bool
    passed: bool
    text: str
    figures: dict[str, Any] = field(default_factory=dict)


def judge_rows(node: str, source_rows: Sequence[np.ndarray], scores: Sequence[np.ndarray],
               candidate_rows: Sequence[np.ndarray], mapping: Mapping[str, tuple[str, str]],
               kept: int) -> ProbeVerdict:
    """The candidate's rows against the source's, round by round: max |diff| <= the box tolerance (a share of the
    coordinate scale) or FAIL at the worst row. The first ``kept`` rows (those the node sorts and keeps: nms_topk)
    are compared whole; past them only the class column, the one thing MXNet defines there (-1: what follows is
    kernel-specific, ``adapters.mxnet.decode_probe.kept_rows``), so another correct lowering is not refused for
    the scores and boxes it leaves in rows every consumer drops. An anchor counts as seen when its (distinct) score
    is on one of the first ``kept`` rows."""
    anchors = int(scores[0].shape[1])
    past = max(0, int(source_rows[0].shape[1]) - kept)
    scale = max(1.0, max(float(np.abs(r[..., 2:]).max()) for r in source_rows))
    tol = DEFAULT_BOX_ATOL * scale
    seen: set[int] = set()
    worst, where = 0.0, (0, 0, 0, 0)
    for k, (ref, got, sc) in enumerate(zip(source_rows, candidate_rows, scores, strict=True)):
        for b in range(ref.shape[0]):
            anchor_of = {float(s): a for a, s in enumerate(sc[b])}
            seen.update(anchor_of[float(s)] for s in ref[b, :kept, 1] if float(s) in anchor_of)
        diff = np.abs(ref.astype(np.float64) - got.astype(np.float64))
        diff = np.where(np.isnan(diff), np.inf, diff)
        diff[:, kept:, 1:] = 0.0  # past the kept rows only the class is defined (docstring)
        at = np.unravel_index(int(np.argmax(diff)), diff.shape)
        if float(diff[at]) > worst:
            worst, where = float(diff[at]), (k, int(at[0]), int(at[1]), int(at[2]))
    head = (f"decode probe of MultiBoxDetection '{node}' (synthetic scores over all {anchors} anchors, "
            f"{len(source_rows)} rounds)")
    if len(seen) < anchors:  # the generator ranks every anchor among the kept rows somewhere: a source-side fault
        head += f" [only {len(seen)} of {anchors} anchors reached a kept row]"
    cuts = ", ".join(f"{c} = {role} {how}" for c, (role, how) in mapping.items())
    compared = f"; rows past the first {kept} (nms_topk): class only, all MXNet defines there" if past else ""
    figures = {"node": node, "ran": True, "rounds": len(source_rows), "anchors": anchors, "anchors_seen": len(seen),
               "max_abs": worst, "tolerance": tol, "cut_points": {c: list(v) for c, v in mapping.items()},
               "rows_compared_whole": kept, "rows_compared_by_class": past}
    if worst <= tol:
        return ProbeVerdict(node, True, True, f"{head}: rows agree (max abs {worst:.3g} <= {tol:g}){compared}; "
                                              f"anchors seen {len(seen)}/{anchors}; cut at {cuts}",
                            {**figures, "passed": True})
    k, b, row, col = where
    column = _COLUMNS.get(col, "box")
    text = (f"{head}: row {row} (image {b}, round {k}) differs by {worst:.3g} ({column}){compared}; anchors seen "
            f"{len(seen)}/{anchors}; cut at {cuts}")
    return ProbeVerdict(node, True, False, text, {**figures, "passed": False, "worst": {
        "round": k, "image": b, "row": row, "column": column}})


def not_run(node: str, why: str) -> ProbeVerdict:
    """The probe of ``node`` should have run and did not (the source side failed, the candidate has no region
    standing for the node or it could not run): ``attach`` leaves the detection group unproved."""
    return ProbeVerdict(node, False, True, f"decode probe: not run ({why})", {"node": node, "ran": False, "why": why})


def probe_candidate(model: onnx.ModelProto, source_probes: Sequence[Any], feeds: Mapping[str, np.ndarray],
                    atol: float, rtol: float, call: Callable[..., CandidateProbe]) -> list[tuple[ProbeVerdict,
                                                                                                  Region | None]]:
    """Every source decode node's probe against ``model`` (``call(fn)`` runs the candidate side: in a child or not)."""
    verdicts: list[tuple[ProbeVerdict, Region | None]] = []
    data = model.SerializeToString()
    for probe in source_probes:
        region = decode_region(model, probe.node)
        if region is None:
            verdicts.append((not_run(probe.node, f"no nodes stand for MultiBoxDetection '{probe.node}'"), None))
            continue
        if not region.cuts:
            verdicts.append((not_run(probe.node, f"the nodes standing for MultiBoxDetection '{probe.node}' read no "
                                                 "computed tensor"), region))
            continue
        got = call(partial(run_candidate_probe, data, region, dict(feeds), dict(probe.internals),
                           list(probe.rounds), tuple(probe.rows[0].shape), atol, rtol))
        if got.why_not:
            verdict = not_run(probe.node, got.why_not)
            verdict.figures["unread_layout"] = got.unread_layout
            verdicts.append((verdict, region))
            continue
        verdicts.append((judge_rows(probe.node, probe.rows, probe.scores, got.rows, got.mapping,
                                     probe.kept or probe.rows[0].shape[1]), region))
    return verdicts


def attach(comparison: Comparison | None, verdict: ProbeVerdict, region: Region | None,
           warnings: list[str]) -> None:
    """State ``verdict`` on the detection group(s) of ``comparison`` the region feeds (all detection groups when the
    region is unknown), failing them when it failed; an entry of its own when no group takes it. A probe that did
    not run (``not_run``), or passed having reached only some anchors, marks them vacuous with why: the verdict line
    says it, ``--strict`` fails it (``CheckResult.unproved_by_strict``, the one mechanism for what a check did not
    prove). With no comparison to take it, it is said among the warnings."""
    if comparison is None:
        warnings.append(verdict.text)
        return
    detection = [o for o in comparison.outputs if o.detection is not None or len(o.covers) > 1]
    groups = [o for o in detection if region is not None and region.graph_outputs & {o.name, *o.covers}]
    groups = groups or detection
    if not groups:
        groups = [OutputComparison(f"decode probe of '{verdict.node}'" if verdict.node else "decode probe",
                                   True, True, True)]
        comparison.outputs.append(groups[0])
    for o in groups:
        o.decode_probe = {**verdict.figures, "text": verdict.text}
        if not verdict.ran and verdict.figures.get("unread_layout"):  # the probe's limit: said, not held against it
            o.note = "; ".join(n for n in (o.note, verdict.text) if n)
            continue
        if not verdict.ran:
            o.add_vacuous(verdict.text)
            continue
        o.note = "; ".join(n for n in (o.note, verdict.text) if n)
        if not verdict.passed:
            o.passed = False
        elif (seen := verdict.figures.get("anchors_seen", 0)) < (anchors := verdict.figures.get("anchors", 0)):
            o.add_vacuous(f"the decode probe of '{verdict.node}' reached {seen} of {anchors} anchors only")
