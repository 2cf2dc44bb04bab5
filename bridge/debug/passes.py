"""Localisation across bridge's own ONNX stage: the model before and after each pass, compared.

``trace_pipeline`` runs the conversion pipeline one step at a time (the same ``Step`` list and
``run_pipeline`` as ``bridge convert``), saving a snapshot of the model after every step that changed
it to a work folder (only node names stay in memory). ``localize_passes`` then runs each consecutive
pair of runnable snapshots on the same inputs and compares every tensor both contain; a pass that
moved a tensor is named with the node whose output it changed ("FoldConstantsPass changed node X's
output by 1.2"). Snapshots holding ``bridge.contrib`` ops cannot run in onnxruntime: comparison starts
at the first snapshot that runs, and the result says so. ``node_makers`` tells, for nodes of a converted
model, which pass created or last rewrote them (or EXPORT: the adapter), read from the provenance every
node carries (``bridge.provenance``), not re-derived from the snapshots.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir

from bridge import provenance
from bridge.config import Tolerance
from bridge.conversion.sources import SourceNode
from bridge.debug.localize import Divergence, compare_tensors
from bridge.io import load_model, save_model
from bridge.model import ModelContainer, PassRecord
from bridge.passes.pipeline import Step, run_pipeline
from bridge.validation.graph import DEFAULT_BUDGET_BYTES, GraphIndex, OnnxTaps

EXPORT = "export"


@dataclass
class Snapshot:
    """The model after ``after`` (a pass name, or EXPORT), saved at ``path``."""

    position: int
    after: str
    path: Path
    runnable: bool
    node_names: frozenset[str]
    fingerprint: str = ""  # of the computation only (nodes, constants): metadata and shapes left out

    def load(self) -> onnx.ModelProto:
        return load_model(self.path)


@dataclass
class PassVerdict:
    """What comparing the model before and after one pass showed."""

    record: PassRecord
    nodes_added: int = 0
    nodes_removed: int = 0
    compared: bool = False
    note: str = ""
    divergence: Divergence | None = None

    @property
    def changed_values(self) -> bool:
        return self.divergence is not None and self.divergence.first_divergent is not None

    def summary(self) -> str:
        d = self.divergence
        row = d.culprit or d.first_divergent if d is not None else None
        if row is None:
            if self.compared:
                return "no compared tensor changed" + (f"; {self.note}" if self.note else "")
            return self.note or "not compared"
        by = f"{row.error.max_abs:.3g}" if row.error.max_abs is not None else f"({row.error.note})"
        if row.node is not None:
            what = f"node '{row.node.name}' ({row.node.op})'s output '{row.tensor}'"
        elif row.source_node is not None:
            what = f"node '{row.source_node.name}' ({row.source_node.op}), now the constant '{row.tensor}',"
        else:
            what = f"tensor '{row.tensor}'"
        return f"{self.record.name} changed {what} by {by}"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.record.name, "reason": self.record.reason, "modified": self.record.modified,
                "seconds": self.record.seconds, "nodes_added": self.nodes_added, "nodes_removed": self.nodes_removed,
                "compared": self.compared, "changed_values": self.changed_values, "summary": self.summary(),
                "note": self.note, "compared_tensors": len(self.divergence.rows) if self.divergence else 0,
                # the per-tensor table only where the pass changed something (the rest agree by definition)
                "divergence": self.divergence.to_dict() if self.divergence and self.changed_values else None}


@dataclass
class StageTrace:
    """Snapshots of the ONNX stage and one verdict per pass, in pipeline order."""

    snapshots: list[Snapshot]
    verdicts: list[PassVerdict]
    notes: list[str] = field(default_factory=list)
    final: dict[str, provenance.Provenance] = field(default_factory=dict)  # node name -> provenance, last snapshot

    @property
    def culprit(self) -> PassVerdict | None:
        """The first pass that changed a compared tensor's values."""
        return next((v for v in self.verdicts if v.changed_values), None)

    def cleared(self, tensor: str) -> set[str]:
        """Passes whose before/after comparison included ``tensor`` and found it unchanged."""
        out = set()
        for v in self.verdicts:
            row = v.divergence.row(tensor) if v.divergence is not None else None
            if row is not None and (row.error.agree or row.propagated):
                out.add(v.record.name)
        return out

    def provenance(self, node_names: Sequence[str]) -> dict[str, str]:
        """For each node name of the final model: the pass that created (or last rewrote) it, or EXPORT."""
        return _makers(self.final, node_names)

    def to_dict(self) -> dict[str, Any]:
        c = self.culprit
        return {"passes": [v.to_dict() for v in self.verdicts], "culprit": c.summary() if c else None,
                "notes": self.notes}


def maker(prov: provenance.Provenance) -> str:
    """The pass to answer for a node: the last that rewrote it in place, else the pass that made it;
    EXPORT for a node the adapter made and no pass touched."""
    if prov.rewritten_by:
        return prov.rewritten_by[-1]
    if prov.kind == provenance.PASS:
        return prov.maker
    return EXPORT


def _makers(known: Mapping[str, provenance.Provenance], node_names: Sequence[str]) -> dict[str, str]:
    return {name: maker(known[name]) for name in node_names if name in known}


def node_makers(model: onnx.ModelProto, node_names: Sequence[str]) -> dict[str, str]:
    """``StageTrace.provenance`` for any converted model (e.g. one ``bridge validate --localize`` is given)."""
    return _makers(provenance.by_node_name(model), node_names)


def _snapshot(model: ir.Model | onnx.ModelProto, position: int, after: str, folder: Path) -> Snapshot:
    proto = model if isinstance(model, onnx.ModelProto) else ir.serde.serialize_model(model)
    path = folder / f"{position:02d}_{after}.onnx"
    save_model(proto, path)
    index = GraphIndex(proto)
    return Snapshot(position, after, path, index.runnable, frozenset(index.node_names()), _fingerprint(proto))


def _fingerprint(model: onnx.ModelProto) -> str:
    """A hash of what the graph computes: nodes in order (attributes and subgraphs included), constants by
    name, the signature's names and the opsets of the domains nodes use (value_info and metadata left out)."""
    digest = hashlib.sha256()
    for node in model.graph.node:
        if len(node.metadata_props):  # provenance and exporter notes: not part of the computation
            bare = onnx.NodeProto()
            bare.CopyFrom(node)
            del bare.metadata_props[:]
            node = bare
        digest.update(node.SerializeToString(deterministic=True))
    for init in sorted(model.graph.initializer, key=lambda t: t.name):
        digest.update(init.SerializeToString(deterministic=True))
    digest.update(repr([i.name for i in model.graph.input] + [o.name for o in model.graph.output]).encode())
    used = {n.domain or "" for n in model.graph.node}
    digest.update(repr(sorted((o.domain or "", o.version) for o in model.opset_import if (o.domain or "") in used)).encode())
    return digest.hexdigest()


def trace_pipeline(container: ModelContainer, steps: Sequence[Step], folder: Path,
                   progress: Callable[[str], None] | None = None) -> StageTrace:
    """Run ``steps`` on ``container`` one at a time, snapshotting the model after each that modified it."""
    folder.mkdir(parents=True, exist_ok=True)
    snapshots = [_snapshot(container.model, 0, EXPORT, folder)]
    verdicts: list[PassVerdict] = []
    for step in steps:
        run_pipeline(container, [step], progress)
        record = container.history[-1]
        verdict = PassVerdict(record)
        if record.modified:
            snap = _snapshot(container.model, len(snapshots), record.name, folder)
            before = snapshots[-1]
            verdict.nodes_added = len(snap.node_names - before.node_names)
            verdict.nodes_removed = len(before.node_names - snap.node_names)
            snapshots.append(snap)
        verdicts.append(verdict)
    final = {node.name: prov for node in container.model.graph
             if node.name and (prov := provenance.read(node)) is not None}
    return StageTrace(snapshots, verdicts, final=final)


def localize_passes(trace: StageTrace, feeds: Mapping[str, np.ndarray], tolerance: Tolerance,
                    budget: int = DEFAULT_BUDGET_BYTES, progress: Callable[[str], None] | None = None) -> StageTrace:
    """Compare every consecutive pair of runnable snapshots on ``feeds``; fills each verdict in place."""
    first_runnable = next((s for s in trace.snapshots if s.runnable), None)
    if first_runnable is None:
        trace.notes.append("every snapshot of the ONNX stage holds bridge.contrib ops (no onnxruntime kernel): "
                           "passes were compared only on the tensors upstream of those ops")
    elif first_runnable.position > 0:
        trace.notes.append(f"the model holds bridge.contrib ops (no onnxruntime kernel) until {first_runnable.after}: "
                           "passes before it are compared only on the tensors upstream of those ops; what the "
                           "lowerings compute is judged by the source-vs-converted comparison")
    modified = [v for v in trace.verdicts if v.record.modified]
    for before, after, verdict in zip(trace.snapshots, trace.snapshots[1:], modified, strict=False):
        if before.fingerprint == after.fingerprint:
            verdict.note = "the computation is unchanged (only metadata, names of dims or value_info)"
            continue
        if progress:
            progress(f"comparing the model before and after {verdict.record.name}")
        a, b = OnnxTaps(before.load()), OnnxTaps(after.load())
        both_constant = a.index.initializers & b.index.initializers
        names = sorted((a.available() & b.available()) - both_constant)
        if not names:
            verdict.note = "not compared: no tensor both models have runs in onnxruntime (bridge.contrib ops)"
            continue
        if not (before.runnable and after.runnable):
            verdict.note = (f"compared on the {len(names)} tensors upstream of bridge.contrib ops "
                            "(onnxruntime has no kernel for those)")
        verdict.divergence = compare_tensors(
            b.index, names, a.run, b.run, feeds, tolerance, reference=f"before {verdict.record.name}",
            candidate=f"after {verdict.record.name}", describe=_before_node(a), budget=budget)
        verdict.compared = True
        del a, b
    for v in trace.verdicts:
        if not v.record.modified and not v.note:
            v.note = "did not modify the model"
    return trace


def _before_node(taps: OnnxTaps) -> Callable[[str], SourceNode | None]:
    def describe(tensor: str) -> SourceNode | None:
        facts = taps.index.node_of(tensor)
        return None if facts is None else SourceNode(facts.name, facts.op, facts.attributes)
    return describe
