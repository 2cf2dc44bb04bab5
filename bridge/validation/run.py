"""Run a reference and candidate runtimes on the same inputs and compare them: the one place validation runs.

Modelled on Polygraphy's ``Comparator.run``: runners behind one protocol (``bridge.runtimes.base.
Runtime``), one source of inputs (``FeedSource``: a ``--feeds`` file, seeded random data at the
model's sizes, or the inputs saved with a reference run), one comparison per candidate. ``convert``,
``validate``, the shape tools and batch migrations all call ``run_and_compare``; nothing else runs a
reference against a candidate.

The reference is a Runtime (the source framework, or another ONNX model) or a saved ``RunResults``.
Candidates are Runtimes or loader callables that build one (so a TensorFlow SavedModel is only
converted when validation gets to it). Every runtime is activated here and deactivated on the way
out, even on failure. A reference that cannot be loaded raises ``ReferenceUnavailableError`` so the
caller can skip validation with the reason instead of failing the conversion.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

from bridge.config import DETECTION_META, NONDETERMINISTIC_OUTPUTS_META, InputSpec, Tolerance
from bridge.errors import AdapterUnavailableError, ReferenceUnavailableError, RuntimeLoadError
from bridge.runtimes.base import Runtime, TensorMeta, activated
from bridge.validation.compare import Comparison, compare_outputs
from bridge.validation.detection_layouts import DetectionSpec, load_detection_specs
from bridge.validation.inputs import load_feeds, make_inputs
from bridge.validation.results import RunResults

CandidateSource = Runtime | Callable[[], Runtime]


@dataclass(frozen=True)
class FeedSource:
    """Where validation inputs come from: a ``.npz`` file, or seeded data at ``specs``' sample sizes
    (``vary_dynamic``: dynamic axes at sizes other than the export sample, to prove they are dynamic)."""

    file: Path | None = None
    specs: Sequence[InputSpec] = ()
    seed: int = 0
    vary_dynamic: bool = True

    def make(self, metas: Sequence[TensorMeta]) -> dict[str, np.ndarray]:
        if self.file is not None:
            return load_feeds(self.file, metas)
        return make_inputs(metas, self.specs, seed=self.seed, vary_dynamic=self.vary_dynamic)


@dataclass
class ComparisonRun:
    """The inputs used, the reference's outputs and one Comparison per candidate (in the order given)."""

    feeds: dict[str, np.ndarray]
    reference_outputs: dict[str, np.ndarray]
    reference_name: str
    comparisons: list[Comparison] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.comparisons)

    def input_shapes(self) -> dict[str, list[int]]:
        return {k: list(v.shape) for k, v in self.feeds.items()}


def saved_detection_outputs(model: onnx.ModelProto) -> list[DetectionSpec]:
    """The detection outputs recorded in the model (``DETECTION_META``, written by the pass that produced
    them, or by convert for detected/declared ones): compared detection by detection."""
    raw = next((p.value for p in model.metadata_props if p.key == DETECTION_META), None)
    return load_detection_specs(raw)


def nondeterministic_outputs(model: onnx.ModelProto) -> list[str]:
    """Outputs an adapter recorded as random samples (``NONDETERMINISTIC_OUTPUTS_META``): compared by shape
    and dtype only."""
    raw = next((p.value for p in model.metadata_props if p.key == NONDETERMINISTIC_OUTPUTS_META), None)
    return [str(n) for n in json.loads(raw)] if raw else []


def vacuous_warnings(comparisons: Sequence[Comparison]) -> list[str]:
    """One warning per candidate whose verdict proves little (no detections, all-NaN output, ...)."""
    return [f"{c.candidate}: the check proves little ({'; '.join(c.vacuous_reasons)}); validate on real inputs "
            "(--feeds FILE.npz), and use --strict to fail on this" for c in comparisons if c.vacuous]


def run_and_compare(
    reference: Runtime | RunResults,
    candidates: Mapping[str, CandidateSource],
    feeds: FeedSource,
    tolerance: Tolerance,
    *,
    detections: Sequence[DetectionSpec] | Mapping[str, str] | None = None,
    reference_name: str | None = None,
    shape_only: Sequence[str] = (),
) -> ComparisonRun:
    """Run ``reference`` and every candidate on the same inputs; compare each candidate with the reference.

    Inputs come from the saved run when ``reference`` is a RunResults, else from ``feeds`` sized by the
    first candidate's input metadata. ``detections`` (DetectionSpecs, or the legacy output name -> format
    map) are compared detection by detection instead of elementwise.
    """
    with contextlib.ExitStack() as stack:
        saved = reference if isinstance(reference, RunResults) else None
        if saved is None:
            assert not isinstance(reference, RunResults)
            try:
                stack.enter_context(activated(reference))
            except (AdapterUnavailableError, RuntimeLoadError) as exc:
                raise ReferenceUnavailableError(f"source reference unavailable: {exc}") from exc
        # named after activation: an isolated runtime learns its runner's name from the child
        name = reference_name or (saved.runtime if saved is not None else reference.name)  # type: ignore[union-attr]
        run: ComparisonRun | None = None
        if saved is not None:
            run = ComparisonRun(dict(saved.inputs), dict(saved.outputs), name)
        for cand_name, source in candidates.items():
            candidate = source if isinstance(source, Runtime) else source()
            with activated(candidate):
                if run is None:
                    made = feeds.make(candidate.input_metadata())
                    run = ComparisonRun(made, reference.infer(made), name)  # type: ignore[union-attr]
                outputs = candidate.infer(run.feeds)
            run.comparisons.append(compare_outputs(run.reference_outputs, outputs, tolerance, reference_name=name,
                                                   candidate_name=cand_name, detection_outputs=detections,
                                                   shape_only=shape_only))
        if run is None:  # no candidates: the reference still runs, so its outputs can be saved
            assert not isinstance(reference, RunResults)
            made = feeds.make(reference.input_metadata())
            run = ComparisonRun(made, reference.infer(made), name)
        return run
