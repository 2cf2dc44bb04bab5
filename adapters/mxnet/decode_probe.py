"""The source side of the decode-stage probe: MXNet's own MultiBoxDetection fed synthetic inputs over every anchor.

Comparing a converted SSD's outputs sees an anchor only when some detection on the feeds decodes from it: one
anchor value shifted in the candidate's folded anchor constants is invisible on realistic feeds. The probe
(``bridge.conversion.decode_probe`` judges it) runs the decode stage alone on inputs that exercise every anchor:
cls_prob with a distinct score per anchor above the threshold (MultiBoxDetection keeps NMS-suppressed rows with
class -1, their boxes and scores in place, so the decoded box of every anchor among the first nms_topk rows appears
in its output; the rounds rotate which anchors rank there) and loc_pred offsets 0, then N(0, 0.5).

``decode_nodes`` lists the symbol's MultiBoxDetection nodes (numpy only); ``run_source_probe`` runs where the
reference runs (its child process, MXNet already imported there; ``MXNetAdapter.decode_probes``): the node's three
inputs (cls_prob, loc_pred, anchor) computed by the source on the validation feeds (the candidate side maps its cut
points to them by value), and MXNet's MultiBoxDetection with the node's own attributes on the synthetic rounds.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from adapters.base import SourceDecodeProbe, source_failures
from adapters.mxnet.symbol import read_symbol_json
from bridge.config import InputSpec

DECODE_OPS = frozenset({"MultiBoxDetection", "_contrib_MultiBoxDetection"})
ROLES = ("cls_prob", "loc_pred", "anchor")  # MultiBoxDetection's inputs, in its order
ROUNDS = 3  # round 0: loc offsets 0 (the anchors' own boxes); then N(0, LOC_SIGMA) offsets
LOC_SIGMA = 0.5


def decode_nodes(symbol_path: str | Path, outputs: Sequence[str] = ()) -> list[str]:
    """The names of the symbol's MultiBoxDetection nodes (main graph) that the compared outputs depend on: upstream
    of the symbol's heads, or of the nodes ``outputs`` names (the ``outputs`` source option's cut points), read
    without MXNet. A graph cut before its decode node has none to probe."""
    graph = read_symbol_json(Path(symbol_path))
    index = {n.name: k for k, n in enumerate(graph.nodes)}
    wanted = [re.sub(r"_output\d*$", "", o) for o in outputs]
    stack = [index[w] for w in wanted if w in index] if wanted else [k for k, _ in graph.heads]
    upstream: set[int] = set()
    while stack:
        k = stack.pop()
        if k not in upstream:
            upstream.add(k)
            stack.extend(i for i, _ in graph.nodes[k].inputs)
    return [graph.nodes[k].name for k in sorted(upstream) if graph.nodes[k].op in DECODE_OPS]


def kept_rows(anchors: int, nms_topk: int) -> int:
    """How many rows MultiBoxDetection sorts and keeps when every anchor is valid: nms_topk when 0 < nms_topk < N,
    else all. The rows after it get class -1 and nothing else MXNet defines: its CPU kernel leaves there the valid
    rows at those positions in anchor order (so some anchors twice, some not at all), its GPU kernel the sorted
    rest (src/operator/contrib/multibox_detection.cc / .cu, 1.9.1)."""
    return nms_topk if 0 < nms_topk < anchors else anchors


def effective_topk(nms_threshold: float, nms_topk: int) -> int:
    """The nms_topk MultiBoxDetection applies: none (-1) when NMS is off (nms_threshold outside (0, 1]), where it
    returns the valid rows in anchor order, unsorted and uncut (multibox_detection.cc: ``continue`` before the
    sort)."""
    return nms_topk if 0.0 < nms_threshold <= 1.0 else -1


def rounds_needed(batch: int, anchors: int, nms_topk: int) -> int:
    """Rounds for every anchor to rank among the kept rows of some image in some round (at least ``ROUNDS``)."""
    blocks = -(-anchors // kept_rows(anchors, nms_topk))
    return max(ROUNDS, -(-blocks // batch))


def synthetic_round(batch: int, classes: int, anchors: int, threshold: float, k: int, nms_topk: int = -1,
                    seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """cls_prob [B, classes, N] with one foreground class per anchor holding a score distinct over the whole batch
    (above ``threshold``; every other class, background included, far below it), loc_pred [B, 4N] (zeros in round
    0, N(0, LOC_SIGMA) after), and the scores [B, N]. Distinct scores leave MultiBoxDetection's sort no ties. Image
    b of round k gives its highest scores to the anchors of block (k * B + b) of the kept-row count
    (``kept_rows``), so over ``rounds_needed`` rounds every anchor is among the sorted, kept rows."""
    rng = np.random.default_rng(seed + k)
    low = max(float(threshold), 0.0) + 0.01
    pool = rng.permutation(np.linspace(low, 0.99, batch * anchors, dtype=np.float64)).astype(np.float32)
    pool = pool.reshape(batch, anchors)
    kept = kept_rows(anchors, nms_topk)
    blocks = -(-anchors // kept)
    scores = np.empty((batch, anchors), np.float32)
    for b in range(batch):
        start = ((k * batch + b) % blocks) * kept
        first = np.arange(start, min(start + kept, anchors))
        rest = np.setdiff1d(np.arange(anchors), first)
        values = np.sort(pool[b])[::-1]
        scores[b, rng.permutation(first)] = values[:first.size]
        scores[b, rng.permutation(rest)] = values[first.size:]
    assert np.unique(scores).size == scores.size, "synthetic scores must be distinct (no ties in the sort)"
    floor = np.float32(min(0.001, low / 10))
    cls = np.full((batch, classes, anchors), floor, np.float32)
    picked = rng.integers(1, classes, (batch, anchors)) if classes > 1 else np.zeros((batch, anchors), np.int64)
    for b in range(batch):
        cls[b, picked[b], np.arange(anchors)] = scores[b]
    loc = (rng.standard_normal((batch, 4 * anchors)) * (0.0 if k == 0 else LOC_SIGMA)).astype(np.float32)
    return cls, loc, scores


def run_source_probe(symbol_path: str, params_path: str | None, inputs: Sequence[InputSpec],
                     feeds: Mapping[str, np.ndarray], node: str) -> SourceDecodeProbe:
    """Run where the reference runs (its child process): the MultiBoxDetection node ``node``'s inputs on ``feeds``
    and MXNet's MultiBoxDetection (the node's attributes) on synthetic rounds (``rounds_needed``) at the same batch
    and anchors. MXNet's failures become ``InferenceError`` (the verdict then says the probe did not run, and why)."""
    from adapters.mxnet.reference import MXNetReferenceRuntime, import_mxnet

    mx = import_mxnet("running the MXNet decode probe")
    doing = f"preparing the decode probe of MultiBoxDetection '{node}'"
    with source_failures("mxnet", doing, hint="the probe states it did not run"):
        det = mx.sym.load(symbol_path).get_internals()[f"{node}_output"]
        names = [c.list_outputs()[0] for c in det.get_children()]
    runner = MXNetReferenceRuntime(symbol_path, params_path, inputs, dict(zip(ROLES, names, strict=True)))
    try:
        runner.activate()
        takes = runner.takes()
        got = runner.infer({k: v for k, v in feeds.items() if k in takes})
    finally:
        runner.deactivate()
    with source_failures("mxnet", f"running MultiBoxDetection '{node}' on the probe's inputs",
                         hint="the probe states it did not run"):
        return _rounds(mx, det, node, got)


def _rounds(mx: Any, det: Any, node: str, got: Mapping[str, np.ndarray]) -> SourceDecodeProbe:
    """MXNet's MultiBoxDetection with ``det``'s attributes on every synthetic round (``run_source_probe``)."""
    from adapters.mxnet.reference import SUBGRAPH_BACKEND, _subgraph_backend

    probe = SourceDecodeProbe(node, {k: np.asarray(v) for k, v in got.items()})
    attrs = {k: v for k, v in det.list_attr().items() if not k.startswith("__")}
    threshold = float(attrs.get("threshold", 0.01))
    topk = effective_topk(float(attrs.get("nms_threshold", 0.5)), int(float(attrs.get("nms_topk", -1))))
    variables = [mx.sym.var(r) for r in ROLES]
    op = mx.sym.contrib.MultiBoxDetection(*variables, **attrs)
    anchor = probe.internals["anchor"]
    batch, classes = probe.internals["cls_prob"].shape[:2]
    probe.kept = kept_rows(anchor.shape[1], topk)
    for k in range(rounds_needed(batch, anchor.shape[1], topk)):
        cls, loc, scores = synthetic_round(batch, classes, anchor.shape[1], threshold, k, topk)
        with warnings.catch_warnings():  # mx.nd.array checks scipy.sparse.csr, which SciPy deprecates
            warnings.simplefilter("ignore", DeprecationWarning)
            arrays = {"cls_prob": mx.nd.array(cls), "loc_pred": mx.nd.array(loc), "anchor": mx.nd.array(anchor)}
        with _subgraph_backend(SUBGRAPH_BACKEND):
            rows = op.bind(mx.cpu(), arrays, grad_req="null").forward(is_train=False)[0].asnumpy()
        probe.rounds.append({"cls_prob": cls, "loc_pred": loc})
        probe.rows.append(rows)
        probe.scores.append(scores)
    return probe
