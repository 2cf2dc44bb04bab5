"""The selection inputs of a passing check judged on every row (``bridge.validation.pinning.prove_selection_inputs``),
wired to the source (in the reference's own process when it is held there) and to onnxruntime.

A detector's outputs show only what its selections (TopK, NMS, ArgMax, a threshold) kept on the validation feeds:
one anchor decoded wrong, a class scored wrong, is invisible until an image selects it. Every comparison that
passed gets this proof when the model has selections and the source returns the tensors feeding them; a
difference there fails the outputs it reaches, naming the tensor. It runs on the ONNX model every artefact is made
from (onnxruntime, isolated like the candidates); the statement goes on every passing comparison. A failed
comparison is the tie proof's (``bridge.conversion.pinning``), which judges the same tensors first.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from bridge.config import Source, Tolerance
from bridge.conversion.pinning import TapsPinSource, candidate_runner, source_tap_names, source_tap_values
from bridge.errors import BridgeError
from bridge.validation.compare import Comparison
from bridge.validation.pinning import SelectionInputsProof, has_selection_ops, prove_selection_inputs
from bridge.validation.run import ComparisonRun

RUNTIME = "onnxruntime"  # the ONNX model itself: what every target's artefact is made from


class HeldPinSource:
    """``PinSource`` over the source's taps, computed where the reference already runs (``run_there``: its child
    process, the framework loaded), so the proof starts no process of its own for the source."""

    def __init__(self, run_there: Callable[[Callable[[], Any]], Any], framework: str, source: Source,
                 export: Any, trace_feeds: Mapping[str, np.ndarray] | None = None) -> None:
        self.run_there, self.framework, self.source, self.export = run_there, framework, source, export
        self.trace_feeds = dict(trace_feeds) if trace_feeds is not None else None
        self._names: set[str] | None = None

    def names(self) -> set[str]:
        if self._names is None:
            self._names = set(self.run_there(partial(source_tap_names, self.framework, self.source, self.export,
                                                     None, self.trace_feeds)))
        return self._names

    def values(self, feeds: Sequence[Mapping[str, np.ndarray]], names: Sequence[str]) -> list[dict[str, np.ndarray]]:
        return list(self.run_there(partial(source_tap_values, self.framework, self.source, self.export,
                                           [dict(f) for f in feeds], list(names), None, self.trace_feeds)))


def prove_passing(run: ComparisonRun, model: onnx.ModelProto, tolerance: Tolerance, *, framework: str,
                  source: Source, export: Any, run_there: Callable[[Callable[[], Any]], Any] | None, isolated: bool, timeout: float | None,
                  max_memory: int | None, workdir: Path | None, warnings: list[str],
                  progress: Callable[[str], None] = lambda _m: None) -> SelectionInputsProof | None:
    """The proof for ``run``'s passing comparisons (None: none passed, or the model selects nothing). What kept it
    from running is said in ``warnings``; it never fails a check by not running."""
    if not has_selection_ops(model) or not any(c.passed for c in run.comparisons):
        return None
    pins = HeldPinSource(run_there, framework, source, export, run.feeds) if run_there is not None else \
        TapsPinSource(framework, source, export, enabled=isolated and source.obj is None, timeout=timeout,
                      max_memory=max_memory, trace_feeds=run.feeds)
    with tempfile.TemporaryDirectory(prefix="bridge-selection-", dir=workdir) as folder:
        runner = candidate_runner(RUNTIME, Path(folder), enabled=isolated, timeout=timeout, max_memory=max_memory)
        try:
            proof = prove_selection_inputs(model, pins, runner, run.feeds, tolerance,
                                           shape_only=run.random_outputs, say=progress)
        except (BridgeError, OSError, RuntimeError, ValueError) as exc:
            warnings.append(f"selection inputs not compared with the source's ({type(exc).__name__}: {exc})")
            return None
    if not proof.ran:
        warnings.append(f"selection inputs not compared with the source's: {proof.text}")
        return None
    return proof


def attach(comparisons: Sequence[Comparison], proof: SelectionInputsProof | None) -> None:
    """State ``proof`` on each comparison that passed before any excuse; when it failed, fail the outputs its bad
    tensors reach (every output when none is named after them)."""
    if proof is None:
        return
    for comp in comparisons:
        comp.selection_inputs = {"passed": not proof.failed, "text": proof.text, "pins": proof.pins,
                                 "runtime": RUNTIME}
        if not proof.failed:
            continue
        hit = [o for o in comp.outputs if proof.outputs & {o.name, *o.covers}] or comp.outputs
        for o in hit:
            o.passed = False
            o.note = "; ".join(n for n in (o.note, proof.text) if n)
