"""Find the first tensor where two runs part ways: the culprit node of a failed conversion.

Both sides run on the same inputs; every tensor both can produce is compared, in the candidate
graph's topological order, a chunk at a time (``graph.chunks``), keeping only statistics. The culprit
is the first tensor that diverges while every tensor feeding it (its ``frontier``: the nearest compared
tensors upstream, or graph inputs) agrees - the node(s) between that frontier and the tensor computed
something different from the same inputs. Later divergences are listed too (they usually inherit it).

Used twice: source framework vs converted model (``localize``) and ONNX snapshot vs the next one
across a pass (``bridge.debug.passes``). A tensor the source taps cannot describe is named after the
source node its producer's provenance records (``bridge.provenance``), so a culprit is named in the
source framework's terms whenever the converted model says where its nodes come from.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bridge.config import Tolerance
from bridge.debug.graph import DEFAULT_BUDGET_BYTES, GraphIndex, NodeFacts, chunks, node_facts
from bridge.debug.sources import SourceNode
from bridge.debug.tensors import TensorError, TensorStats, stats_of, tensor_error

RunFn = Callable[[Mapping[str, np.ndarray], Sequence[str]], dict[str, np.ndarray]]


@dataclass
class TensorRow:
    """One compared tensor: where it comes from on each side, both sides' statistics, the error."""

    tensor: str
    position: int
    error: TensorError
    reference: TensorStats
    candidate: TensorStats
    node: NodeFacts | None = None  # the candidate-side ONNX producer
    source_node: SourceNode | None = None  # the reference side's node (source framework), when known
    inputs: list[str] = field(default_factory=list)  # the frontier: compared tensors / graph inputs feeding it
    region: list[NodeFacts] = field(default_factory=list)  # candidate nodes between the frontier and the tensor
    culprit: bool = False

    @property
    def diverges(self) -> bool:
        return not self.error.agree

    def to_dict(self) -> dict[str, Any]:
        return {"tensor": self.tensor, "position": self.position, "diverges": self.diverges, "culprit": self.culprit,
                "error": self.error.to_dict(), "reference": self.reference.to_dict(),
                "candidate": self.candidate.to_dict(), "node": self.node.to_dict() if self.node else None,
                "source_node": self.source_node.to_dict() if self.source_node else None, "inputs": self.inputs,
                "region": [{"name": n.name, "op": n.op} for n in self.region]}


@dataclass
class Divergence:
    """The per-tensor table and its verdict; ``culprit`` is None when every compared tensor agrees."""

    reference: str
    candidate: str
    rows: list[TensorRow]
    input_stats: dict[str, TensorStats] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def culprit(self) -> TensorRow | None:
        return next((r for r in self.rows if r.culprit), None)

    @property
    def first_divergent(self) -> TensorRow | None:
        return next((r for r in self.rows if r.diverges), None)

    def row(self, tensor: str) -> TensorRow | None:
        return next((r for r in self.rows if r.tensor == tensor), None)

    def culprit_inputs(self) -> list[tuple[str, TensorStats | None, TensorStats | None]]:
        """The culprit's inputs with both sides' statistics (graph inputs: the feeds, the same on both sides)."""
        c = self.culprit
        if c is None:
            return []
        out: list[tuple[str, TensorStats | None, TensorStats | None]] = []
        for name in c.inputs:
            row = self.row(name)
            if row is not None:
                out.append((name, row.reference, row.candidate))
            else:
                s = self.input_stats.get(name)
                out.append((name, s, s))
        return out

    def summary(self) -> str:
        c = self.culprit
        if c is None:
            if self.first_divergent is not None:
                return (f"'{self.first_divergent.tensor}' is the first tensor that differs, but an input feeding it "
                        "could not be compared; see the table")
            return f"all {len(self.rows)} compared tensors agree"
        where = f"node '{c.node.name}' ({c.node.op})" if c.node else f"the constant '{c.tensor}'"
        if c.source_node is not None:
            where = f"{self.reference} node '{c.source_node.name}' ({c.source_node.op}), converted as " + where
        err = f"max abs err {c.error.max_abs:.3g}" if c.error.max_abs is not None else c.error.note
        return f"first divergence: {where}: output '{c.tensor}' differs ({err}) while its inputs agree"

    def to_dict(self) -> dict[str, Any]:
        c = self.culprit
        return {"reference": self.reference, "candidate": self.candidate, "summary": self.summary(),
                "culprit": c.to_dict() if c else None,
                "culprit_inputs": [{"tensor": n, "reference": r.to_dict() if r else None,
                                    "candidate": k.to_dict() if k else None} for n, r, k in self.culprit_inputs()],
                "compared": len(self.rows), "diverging": sum(r.diverges for r in self.rows),
                "rows": [r.to_dict() for r in self.rows], "notes": self.notes}


def recorded_source(node: NodeFacts | None) -> SourceNode | None:
    """The source framework node a converted node's provenance names (None when it names none)."""
    prov = node.provenance if node is not None else None
    if prov is None or not prov.node:
        return None
    return SourceNode(prov.node, prov.op)


def compare_tensors(
    index: GraphIndex,
    names: Sequence[str],
    run_reference: RunFn,
    run_candidate: RunFn,
    feeds: Mapping[str, np.ndarray],
    tolerance: Tolerance,
    *,
    reference: str,
    candidate: str,
    describe: Callable[[str], SourceNode | None] = lambda _t: None,
    budget: int = DEFAULT_BUDGET_BYTES,
    on_chunk: Callable[[int, int], None] | None = None,
    judge: Callable[[str, np.ndarray, np.ndarray], TensorError | None] | None = None,
) -> Divergence:
    """Compare ``names`` (tensors of ``index``'s graph both runs produce) and mark the culprit.

    ``judge(name, ref, cand)`` may give the verdict for some tensors (detection outputs: detection by
    detection); None falls back to the elementwise comparison.
    """
    order = sorted(set(names), key=lambda n: index.position.get(n, -1))  # initializers (-1) first
    compared = set(order)
    sizes = index.estimated_bytes() if len(order) > 1 else {}
    rows: list[TensorRow] = []
    done = 0
    for chunk in chunks(order, sizes, budget // 2):  # both sides' arrays are alive at once
        ref_values = run_reference(feeds, chunk)
        cand_values = run_candidate(feeds, chunk)
        for name in chunk:
            if name not in ref_values or name not in cand_values:
                continue
            r, c = ref_values.pop(name), cand_values.pop(name)
            inputs, region = index.frontier(name, compared)
            error = (judge(name, r, c) if judge else None) or tensor_error(r, c, tolerance, name)
            node = index.node_of(name)
            rows.append(TensorRow(name, index.position.get(name, -1), error,
                                  stats_of(r), stats_of(c), node, describe(name) or recorded_source(node), inputs,
                                  [node_facts(index.model.graph.node[k], k) for k in region]))
            del r, c
        done += len(chunk)
        if on_chunk:
            on_chunk(done, len(order))
    divergence = Divergence(reference, candidate, rows,
                            {k: stats_of(v) for k, v in feeds.items() if k in index.inputs})
    by_name = {r.tensor: r for r in rows}
    for row in rows:  # first in order whose output diverges while everything feeding it agrees
        if row.diverges:
            if all(by_name[i].error.agree for i in row.inputs if i in by_name):
                row.culprit = True
            break
    return divergence
