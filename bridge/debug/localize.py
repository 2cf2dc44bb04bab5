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
from bridge.conversion.sources import SourceNode
from bridge.debug.propagation import LocalCheck, local_check
from bridge.debug.tensors import TensorError, TensorStats, stats_of, tensor_error
from bridge.validation.graph import DEFAULT_BUDGET_BYTES, GraphIndex, NodeFacts, chunks, node_facts

RunFn = Callable[[Mapping[str, np.ndarray], Sequence[str]], dict[str, np.ndarray]]
MAX_LOCAL_CHECKS = 64  # differing tensors re-judged from the reference's inputs, in order


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
    local: LocalCheck | None = None  # its nodes' own error, from the reference's inputs (differing rows)

    @property
    def diverges(self) -> bool:
        return not self.error.agree

    @property
    def propagated(self) -> bool:
        """Differs, but only by error inherited from its inputs: given the reference's inputs it agrees."""
        return self.diverges and self.local is not None and not self.local.own_error

    def to_dict(self) -> dict[str, Any]:
        return {"tensor": self.tensor, "position": self.position, "diverges": self.diverges, "culprit": self.culprit,
                "error": self.error.to_dict(), "reference": self.reference.to_dict(),
                "candidate": self.candidate.to_dict(), "node": self.node.to_dict() if self.node else None,
                "source_node": self.source_node.to_dict() if self.source_node else None, "inputs": self.inputs,
                "region": [{"name": n.name, "op": n.op} for n in self.region], "propagated": self.propagated,
                "local_error": self.local.error.to_dict() if self.local else None}


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
        """The first tensor that differs by more than inherited float error (None: all agree or propagate)."""
        return next((r for r in self.rows if r.diverges and not r.propagated), None)

    @property
    def propagated(self) -> list[TensorRow]:
        """Tensors beyond the flat tolerance only by error inherited from their inputs."""
        return [r for r in self.rows if r.propagated]

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
            inherited = self.propagated
            if inherited:
                worst = max(inherited, key=lambda r: r.error.max_abs or 0.0)
                return (f"all {len(self.rows)} compared tensors agree up to float error propagated from their inputs: "
                        f"{len(inherited)} differ beyond the flat tolerance (largest: '{worst.tensor}', max abs err "
                        f"{worst.error.max_abs or 0.0:.3g}) but each agrees when computed from the reference's inputs")
            return f"all {len(self.rows)} compared tensors agree"
        where = f"node '{c.node.name}' ({c.node.op})" if c.node else f"the constant '{c.tensor}'"
        if c.source_node is not None:
            where = f"{self.reference} node '{c.source_node.name}' ({c.source_node.op}), converted as " + where
        err = f"max abs err {c.error.max_abs:.3g}" if c.error.max_abs is not None else c.error.note
        if c.local is not None and c.local.error.max_abs is not None:
            err += f"; {c.local.error.max_abs:.3g} when computed from the reference's own inputs"
        by_name = {r.tensor: r for r in self.rows}
        inherits = any(by_name[i].propagated for i in c.inputs if i in by_name)
        inputs = "its inputs agree up to inherited float error" if inherits else "its inputs agree"
        return f"first divergence: {where}: output '{c.tensor}' differs ({err}) while {inputs}"

    def to_dict(self) -> dict[str, Any]:
        c = self.culprit
        return {"reference": self.reference, "candidate": self.candidate, "summary": self.summary(),
                "culprit": c.to_dict() if c else None,
                "culprit_inputs": [{"tensor": n, "reference": r.to_dict() if r else None,
                                    "candidate": k.to_dict() if k else None} for n, r, k in self.culprit_inputs()],
                "compared": len(self.rows), "diverging": sum(r.diverges for r in self.rows),
                "propagated": len(self.propagated),
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
    _judge_locally(index, rows, run_reference, feeds, tolerance, budget, divergence.notes)
    by_name = {r.tensor: r for r in rows}
    for row in rows:
        if not row.diverges or row.propagated:
            continue
        if row.local is not None:  # computed wrongly from the very inputs the reference had
            row.culprit = True
            break
        # no local verdict (the region cannot run alone): the frontier rule, inherited noise counting as agreement
        if all(by_name[i].error.agree or by_name[i].propagated for i in row.inputs if i in by_name):
            row.culprit = True
        break
    return divergence


def _judge_locally(index: GraphIndex, rows: list[TensorRow], run_reference: RunFn, feeds: Mapping[str, np.ndarray],
                   tolerance: Tolerance, budget: int, notes: list[str]) -> None:
    """Give differing rows, in order, their local verdict until one is the node's own error (that one is
    the culprit; what follows usually inherits it). Reference values are fetched a group at a time."""
    pending = [r for r in rows if r.diverges and r.node is not None]
    if len(pending) > MAX_LOCAL_CHECKS:
        notes.append(f"{len(pending)} tensors differ: only the first {MAX_LOCAL_CHECKS} were re-judged from the "
                     "reference's inputs")
        pending = pending[:MAX_LOCAL_CHECKS]
    producers = index.producer
    sizes = index.estimated_bytes() if pending else {}
    group: list[TensorRow] = []
    used = 0

    def judge(group: list[TensorRow]) -> bool:
        wanted = sorted({n for r in group for n in (*r.inputs, r.tensor) if n in producers})
        values = dict(run_reference(feeds, wanted)) if wanted else {}
        values.update({k: v for k, v in feeds.items() if k in index.inputs})
        for r in group:
            _inputs, region = index.frontier(r.tensor, {*r.inputs})
            r.local = local_check(index, region, r.inputs, r.tensor, values, tolerance)
            if r.local is not None and r.local.own_error:
                return True
        return False

    for row in pending:
        size = sum(sizes.get(n, 0) for n in (*row.inputs, row.tensor))
        if group and used + size > budget // 2:
            if judge(group):
                return
            group, used = [], 0
        group.append(row)
        used += size
    if group:
        judge(group)
