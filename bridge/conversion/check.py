"""One validation run, described once (``Check``) and run once (``run_check``): reference, candidates, inputs,
tolerance, the excuses and the verdict.

``convert`` (``bridge.conversion.delivery``), ``validate`` (``bridge.conversion.validate``), ``debug``'s final
comparison, ``shapes fix`` / ``shapes dynamic``, ``bench --verify`` and the migrate worker (through ``convert``)
say what they check as a ``Check`` and call ``run_check``; nothing else builds reference runners, feeds and
comparisons for a verdict. The engine is ``bridge.validation.run.run_and_compare`` (the reference's runs, every
candidate at the sample, on a second input and at a second size); the one excuse that re-judges a failure, the
upstream tie proof (``bridge.conversion.pinning.pin_failures``), is called from here only.

What decides the judgement comes from the reference side, never from the file under test:
- the reference is the source framework (its adapter's runner), another model in a runtime (``shapes fix``: the
  original) or a saved ``RunResults``. A framework reference runs in a child process (time and memory limits,
  a native crash ends the child, not the caller) unless isolation is off; an adapter that knows its framework
  crashes on some models (``reference_isolation``: MXNet's ROI layers read out of bounds) keeps it in a child
  even then, and says so; a live framework object cannot travel and stays in this process.
- random outputs (compared by shape and dtype only, a vacuous verdict) are those the source's export computes
  from a random op (``Check.random_outputs``, from ``bridge.validation.run.random_outputs`` of the source's
  export), those the reference gives differently on the same input twice (measured), or those a saved
  reference recorded; a candidate's ``bridge.nondeterministic_outputs`` metadata is not read.
- every candidate also runs on a second, different input (a static model too: a second sample of the same
  shapes) and fails where its outputs stay bit for bit while the reference's change.

Adding a judgement (a dataset-level agreement, a reduced-precision variant judged by accuracy): give it as a
``Judge`` in ``Check.judges``. It runs after the comparisons and the excuses, reads the check (reference,
candidates, feeds) and the result so far, and adds what it found to the result: a ``Comparison`` per candidate
in ``CheckResult.comparisons`` (its verdict then counts like any other), or a line in ``warnings``.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import onnx

from bridge.config import DEFAULT_TOLERANCE, Source, Tolerance
from bridge.conversion.pinning import onnx_runtimes, pin_failures
from bridge.conversion.selection_inputs import attach as attach_selection_inputs
from bridge.conversion.selection_inputs import prove_passing
from bridge.errors import BridgeError
from bridge.runtimes.base import Runtime, TensorMeta
from bridge.runtimes.isolated import DEFAULT_TIMEOUT_S, IsolatedRuntime, KeptWorker, call_isolated, isolate
from bridge.validation.compare import Comparison
from bridge.validation.detection.layouts import DetectionSpec
from bridge.validation.pinning import SelectionInputsProof
from bridge.validation.results import RunResults
from bridge.validation.run import (
    CandidateSource,
    ComparisonRun,
    FeedSource,
    run_and_compare,
    vacuous_warnings,
)

Progress = Callable[[str], None]


def _quiet(_message: str) -> None:
    return None


@dataclass(frozen=True)
class Isolation:
    """How the reference and the candidates run: each in a child process (``enabled``) with ``timeout`` seconds
    per step and an address-space limit (``max_memory``; None: twice the memory limit in force)."""

    enabled: bool = True
    timeout: float | None = DEFAULT_TIMEOUT_S
    max_memory: int | None = None

    def limit(self) -> int:
        if self.max_memory is not None:
            return self.max_memory
        from bridge.limits import max_memory

        return 2 * max_memory()


# ------------------------------------------------------------------------------------------------ references


@dataclass(frozen=True)
class SourceReference:
    """The source framework, run now by its adapter's reference runner. ``export`` is what the runner needs (the
    inputs, the output names): the source's own export in ``convert``, a stand-in built from the candidate in
    ``validate``. ``worker``: a kept export child the reference may run in (the framework imported once)."""

    framework: str
    source: Source
    export: Any
    worker: KeptWorker | None = None

    @property
    def name(self) -> str:
        return f"{self.framework} ({self.source.describe()})"


@dataclass(frozen=True)
class RuntimeReference:
    """Any runtime as the reference (``shapes fix``: the original model in onnxruntime): how to build it, what
    to call it, and the outputs its graph computes from a random op."""

    factory: Callable[[], Runtime]
    name: str
    random_outputs: Sequence[str] = ()


@dataclass(frozen=True)
class SavedReference:
    """A reference run saved earlier (``--save-reference``): its inputs and outputs at every size it holds, its
    second input, and the outputs it recorded as random."""

    results: RunResults
    name: str

    def random_outputs(self) -> list[str]:
        recorded = self.results.meta.get("random_outputs")
        return [str(n) for n in recorded] if isinstance(recorded, list) else []


Reference = SourceReference | RuntimeReference | SavedReference


# ------------------------------------------------------------------------------------------------ candidates


class ModelCandidate:
    """A candidate's loader and, when known without loading it, its inputs (``declared_inputs``, which the engine
    reads instead of loading the first candidate once more only to ask them)."""

    def __init__(self, load: Callable[[], Runtime], declared_inputs: list[TensorMeta] | None = None) -> None:
        self.load, self.declared_inputs = load, declared_inputs

    def __call__(self) -> Runtime:
        return self.load()


def model_candidates(model: onnx.ModelProto, runtimes: Sequence[str], workdir: Path, isolation: Isolation, *,
                     artefacts: Mapping[str, Path] | None = None,
                     model_file: Path | None = None) -> dict[str, ModelCandidate]:
    """One candidate per runtime of ``runtimes``: the ONNX ``model`` (or, for a runtime a target artefact is for,
    that artefact: ``artefacts`` runtime -> path), each isolated as ``isolation`` says. A child gets the model
    as a file (``model_file``, else saved once into ``workdir``), not a pickled copy of the proto."""
    from bridge.runtimes import declared_input_metadata
    from bridge.targets import candidate_runtime

    handed: Any = model
    if isolation.enabled:
        if model_file is None:
            from bridge.io import save_model

            model_file = workdir / "candidate.onnx"
            save_model(model, model_file)
        handed = model_file
    by_runtime = dict(artefacts or {})
    direct = onnx_runtimes(by_runtime)  # runtimes that run the .onnx itself: their inputs are the graph's
    return {name: ModelCandidate(partial(isolate, partial(candidate_runtime, name, handed, workdir, by_runtime),
                                         name=name, stage=f"the {name} candidate", enabled=isolation.enabled,
                                         timeout=isolation.timeout, max_memory=isolation.limit()),
                                 declared_input_metadata(name, model) if name in direct else None)
            for name in runtimes}


# ------------------------------------------------------------------------------------------------ the check


class Judge(Protocol):
    """A further judgement of one check, run after the comparisons and excuses (see the module docstring)."""

    def __call__(self, check: Check, result: CheckResult) -> None: ...


@dataclass
class Check:
    """What one validation compares, on what, and how strictly.

    ``model``: the candidate ONNX model (its selection ops are what the upstream tie proof pins; None when the
    candidates are other formats only). ``random_outputs``: outputs the reference side declares random (the
    source's export). ``second_input`` / ``second_size``: every candidate also runs on a second input, and a
    model with dynamic axes at a second size. ``pinning``: a failure at a selection may be re-judged with the
    source's values pinned (source references only). ``artefact_runtimes``: runtime -> the target artefact it
    runs; ``target``: the delivering target's name and options, which pinning uses to convert each pinned variant
    the same way, so those runtimes get the tie proof on their own artefacts. ``workdir``: where candidate
    variants are written (a temporary folder when None)."""

    reference: Reference
    candidates: Mapping[str, CandidateSource]
    feeds: FeedSource = field(default_factory=FeedSource)
    tolerance: Tolerance = DEFAULT_TOLERANCE
    detections: Sequence[DetectionSpec] = ()
    model: onnx.ModelProto | None = None
    random_outputs: Sequence[str] = ()
    strict: bool = False
    isolation: Isolation = field(default_factory=Isolation)
    second_input: bool = True
    second_size: bool = True
    pinning: bool = True
    artefact_runtimes: Mapping[str, Any] = field(default_factory=dict)
    target: tuple[str, Mapping[str, Any]] | None = None
    workdir: Path | None = None
    judges: Sequence[Judge] = ()
    progress: Progress = _quiet


@dataclass
class CheckResult:
    """The verdict of one check: every candidate's ``Comparison`` (all inputs and sizes), the runs behind them,
    and what the verdict cannot cover (``second_size_skipped``, ``second_input_skipped``: ``strict`` fails those,
    as it fails a vacuous verdict)."""

    run: ComparisonRun
    reference: str
    strict: bool = False
    warnings: list[str] = field(default_factory=list)
    # what a dataset judge found (bridge.conversion.dataset_check: a DatasetResult); its budget is part of the verdict
    dataset: Any = None
    # what a precision judge delivered (bridge.conversion.precision_check: a PrecisionResult); its budget is part of
    # the verdict
    precision: Any = None

    @property
    def comparisons(self) -> list[Comparison]:
        return self.run.comparisons

    @property
    def sizes(self) -> list[dict[str, list[int]]]:
        return self.run.sizes

    @property
    def second_size_skipped(self) -> str | None:
        return self.run.second_size_skipped

    @property
    def second_input_skipped(self) -> str | None:
        return self.run.second_input_skipped

    @property
    def random_outputs(self) -> list[str]:
        return self.run.random_outputs

    @property
    def vacuous(self) -> bool:
        return any(c.vacuous for c in self.comparisons)

    @property
    def matched(self) -> bool:
        """Every candidate matched the reference (what ``strict`` adds is not asked)."""
        return all(c.passed for c in self.comparisons)

    @property
    def passed(self) -> bool:
        return (self.matched and not (self.strict and self.unproved_by_strict())
                and (self.dataset is None or self.dataset.passed)
                and (self.precision is None or self.precision.passed))

    def unproved_by_strict(self) -> list[str]:
        """What ``--strict`` fails although every comparison passed: a vacuous verdict, one size, one input."""
        found = [f"{c.candidate}: vacuous ({'; '.join(c.vacuous_reasons)})" for c in self.comparisons if c.vacuous]
        return found + [why for why in (self.second_size_skipped, self.second_input_skipped) if why]

    def failure(self) -> str:
        """Why the check did not pass, one clause per reason."""
        failing = [c.summary() for c in self.comparisons if not c.passed or c.vacuous]
        if self.matched and self.strict:
            failing += [f"{why} (--strict)" for why in (self.second_size_skipped, self.second_input_skipped) if why]
        if self.dataset is not None and not self.dataset.passed:
            failing.append("dataset accuracy budget: " + "; ".join(self.dataset.failures))
        if self.precision is not None and not self.precision.passed:
            failing.append(f"the --precision {self.precision.precision} variant: {self.precision.failure}")
        return "; ".join(failing)

    def input_shapes(self) -> dict[str, list[int]]:
        return self.run.input_shapes()

    def reference_results(self, runtime: str, meta: Mapping[str, Any]) -> RunResults:
        """The reference's runs as RunResults (``--save-reference``): every size, the second input, the random
        outputs, so a later ``validate --reference`` checks as much as this one did."""
        return self.run.results(runtime, meta)


def run_check(check: Check) -> CheckResult:
    """Run ``check``: the reference, every candidate, the excuses, then each judge. Raises
    ``ReferenceUnavailableError`` / ``AdapterUnavailableError`` when the reference cannot run here (the caller
    decides whether that skips validation or fails it)."""
    say = check.progress
    warnings: list[str] = []
    if isinstance(check.reference, SavedReference):
        reference: Runtime | RunResults = check.reference.results
        name = check.reference.name
        random = [*check.random_outputs, *check.reference.random_outputs()]
    elif isinstance(check.reference, RuntimeReference):
        reference = isolate(check.reference.factory, name=check.reference.name,
                            stage=f"the reference ({check.reference.name})", enabled=check.isolation.enabled,
                            timeout=check.isolation.timeout, max_memory=check.isolation.limit())
        name = check.reference.name
        random = [*check.random_outputs, *check.reference.random_outputs]
    else:
        reference = source_runtime(check.reference, check.isolation, warnings)
        name = None  # the runner names itself once activated (an isolated one learns it from its child)
        random = list(check.random_outputs)
    live = not isinstance(reference, RunResults)
    held: _Held | None = None
    if isinstance(check.reference, SourceReference) and check.model is not None and not isinstance(reference, RunResults):
        from adapters import has_decode_probes
        from bridge.validation.pinning import has_selection_ops

        # the decode probe and the selection-inputs proof run where the reference ran, after the comparisons
        if has_decode_probes(check.reference.framework) or has_selection_ops(check.model):
            held = _Held(reference)
    try:
        if isinstance(check.reference, SourceReference) and check.model is not None and check.detections:
            # before the comparisons, which judge the detection groups by it; read where the reference runs when
            # it is held (``_reading``: started for it, not again in run_and_compare), not in a child of its own
            check = replace(check, detections=source_nms(check.reference, check.model, check.detections, warnings,
                                                         run=_reading(held, say) if held is not None else None))
        run = run_and_compare(held if held is not None else reference, check.candidates, check.feeds, check.tolerance,
                              detections=check.detections, reference_name=name,
                              shape_only=list(dict.fromkeys(random)), check_sensitivity=live,
                              second_size=check.second_size and live, second_input=check.second_input, repeat=live,
                              progress=say)
        probed = decode_probes(check, held, run, warnings) if held is not None else []
        passing = [c for c in run.comparisons if c.passed]  # before any excuse: a failure is the tie proof's
        selection_proof = _prove_selection_inputs(check, held, run, warnings)
    finally:
        if held is not None:
            held.release()
    if isinstance(check.reference, SourceReference) and check.model is not None:  # off: each failure says so
        _pin(check, check.reference, run)
    attach_probes(run, probed, warnings)  # after the tie proof: nothing re-judges a probe's failure
    attach_selection_inputs(passing, selection_proof)
    result = CheckResult(run, run.reference_name, strict=check.strict, warnings=warnings)
    result.warnings += vacuous_warnings(run.comparisons, feeds_given=check.feeds.file is not None)
    result.warnings += [why for why in (run.second_input_skipped,) if why]
    for judge in check.judges:
        judge(check, result)
    return result


def source_nms(reference: SourceReference, model: onnx.ModelProto, detections: Sequence[DetectionSpec],
               warnings: list[str], run: Callable[[Callable[[], Any]], Any] | None = None) -> list[DetectionSpec]:
    """The detection groups with the NMS IoU threshold the source states (its adapter reads it from the source
    file: ``adapters.source_nms_thresholds``; ``run``: where the reference runs, see ``_reading``), not the
    candidate's: the tie rules' evidence and a FAIL where the candidate's threshold is another
    (``with_source_nms``). What could not be read from the source is said."""
    from adapters import source_nms_thresholds
    from bridge.validation.detection.layouts import with_source_nms

    try:
        stated = source_nms_thresholds(reference.framework, reference.source, run)
    except (BridgeError, OSError) as exc:  # an unreadable source fails its reference run, said there; here only the threshold
        warnings.append(f"the source's NMS IoU thresholds could not be read ({exc})")
        stated = None
    specs, said = with_source_nms(model, detections, stated)
    warnings.extend(said)
    return specs


class _Held:
    """The reference runtime with its ``deactivate`` deferred to ``release``: the decode probe runs after the
    comparisons in the reference's own process (its child, the source framework already loaded there)."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.name = runtime.name
        self.active = False
        self.failed: Exception | None = None

    def activate(self) -> None:
        """Once: started early (``_reading``), run_and_compare's own activation is a no-op, and a failed start is
        raised to it again (the same error, where it always was raised; the source is not loaded twice)."""
        if self.failed is not None:
            raise self.failed
        if self.active:
            return
        try:
            self.runtime.activate()
        except Exception as exc:
            self.failed = exc
            raise
        self.name, self.active = self.runtime.name, True  # an isolated runtime learns its name from its child

    def infer(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return self.runtime.infer(feeds)

    def input_metadata(self) -> Sequence[TensorMeta]:
        return self.runtime.input_metadata()

    def deactivate(self) -> None:
        return None

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.runtime, attr)

    def run(self, job: Callable[[], Any]) -> Any:
        """``job()`` where the reference runs: in its child when it is isolated, else here (as the reference)."""
        if not self.active:  # a failed activation: nothing runs the source now
            raise BridgeError("the reference did not start")
        inner = self.runtime
        if isinstance(inner, IsolatedRuntime):
            return inner.call(_run_job, job)
        return job()

    def release(self) -> None:
        if self.active:
            self.active = False
            self.runtime.deactivate()


def _run_job(_runtime: Runtime, job: Callable[[], Any]) -> Any:
    """``IsolatedRuntime.call``'s function: ``job()`` in the reference's child."""
    return job()


def _reading(held: _Held, say: Progress) -> Callable[[Callable[[], Any]], Any]:
    """``held.run`` for a reading made before the comparisons (the source's NMS thresholds): the reference is
    started by the first job (``_Held.activate``: once; a failed start is said to the reading as a BridgeError and
    raised by run_and_compare as ever), and a job's failure comes back as a BridgeError instead of ending the
    child the reference runs in (an error there stops it)."""

    def run(job: Callable[[], Any]) -> Any:
        if not held.active:
            say(f"starting the {held.name} reference (the source's NMS thresholds are read there)")
            try:
                held.activate()
            except Exception as exc:
                raise BridgeError(f"the reference did not start: {exc}") from exc
        done, value = held.run(partial(_answered, job))
        if not done:
            raise BridgeError(value)
        return value

    return run


def _answered(job: Callable[[], Any]) -> tuple[bool, Any]:
    """``job()`` in the reference's child: (True, its value), or (False, why it failed) rather than a raise."""
    try:
        return True, job()
    except Exception as exc:
        return False, str(exc) if isinstance(exc, BridgeError) else f"{type(exc).__name__}: {exc}"


def decode_probes(check: Check, held: _Held, run: ComparisonRun, warnings: list[str]) -> list[tuple[Any, Any]]:
    """The decode-stage probe (``bridge.conversion.decode_probe``) of every decode node the source's adapter probes
    (``adapters.source_decode_probes``, run in the reference's process): the candidate model's decode region in
    onnxruntime against the source's node on synthetic inputs over every anchor. Returns (verdict, region) per
    node for ``attach_probes``. Where it does not apply it is a statement (no onnxruntime candidate, said when the
    source has a decode node) or nothing (the source has none); where it should have run and did not (the source
    side failed, the candidate's region is missing or failed), a ``not_run`` verdict, which leaves the detection
    group vacuous (``--strict`` fails it)."""
    from adapters import source_decode_probes
    from bridge.conversion.decode_probe import PROBE_RUNTIME, CandidateProbe, not_run, probe_candidate

    reference = check.reference
    assert isinstance(reference, SourceReference) and check.model is not None
    inputs = getattr(reference.export, "inputs", ())
    if not any(c.candidate == PROBE_RUNTIME for c in run.comparisons):

        class Found(Exception):
            """The adapter handed ``run`` a job: the source has a decode node (it hands none when it has none)."""

        def stop(job: Callable[[], Any]) -> Any:
            raise Found  # before anything runs

        try:
            has = bool(source_decode_probes(reference.framework, reference.source, inputs, run.feeds, stop))
        except (Found, BridgeError, OSError):  # what the adapter cannot read: the statement is said, not lost
            has = True
        if has:
            warnings.append(f"decode probe: not run (it is judged on the {PROBE_RUNTIME} candidate, not among these)")
        return []
    try:
        probes = source_decode_probes(reference.framework, reference.source, inputs, run.feeds, held.run)
    except (BridgeError, OSError) as exc:  # the source has a decode node (none: [] before anything runs)
        return [(not_run("", f"the {reference.framework} side failed: {exc}"), None)]
    if not probes:
        return []
    check.progress(f"decode probe of {len(probes)} decode node(s)")

    def call(job: Callable[[], CandidateProbe]) -> CandidateProbe:
        try:
            return call_isolated(job, stage="the decode probe's onnxruntime run", enabled=check.isolation.enabled,
                                 timeout=check.isolation.timeout, max_memory=check.isolation.limit())
        except BridgeError as exc:  # the child crashed or timed out: this node's probe did not run
            return CandidateProbe(why_not=f"the candidate's decode region failed: {exc}")

    return list(probe_candidate(check.model, probes, run.feeds, check.tolerance.atol, check.tolerance.rtol, call))


def attach_probes(run: ComparisonRun, probed: Sequence[tuple[Any, Any]], warnings: list[str]) -> None:
    """Each probe's verdict stated on (and failing, when it failed; vacuous, when it did not run) the onnxruntime
    candidate's detection group (``decode_probe.attach``)."""
    if not probed:
        return
    from bridge.conversion.decode_probe import PROBE_RUNTIME, attach

    comparison = next((c for c in run.comparisons if c.candidate == PROBE_RUNTIME), None)
    for verdict, region in probed:
        attach(comparison, verdict, region, warnings)


def _prove_selection_inputs(check: Check, held: _Held | None, run: ComparisonRun,
                            warnings: list[str]) -> SelectionInputsProof | None:
    """``bridge.conversion.selection_inputs`` for a check against the source framework (where its reference is
    held, when it is)."""
    if not isinstance(check.reference, SourceReference) or check.model is None:
        return None
    reference = check.reference
    iso = check.isolation
    return prove_passing(run, check.model, check.tolerance, framework=reference.framework, source=reference.source,
                         export=reference.export, run_there=held.run if held is not None and held.active else None,
                         isolated=iso.enabled, timeout=iso.timeout, max_memory=iso.limit(), workdir=check.workdir,
                         warnings=warnings, progress=check.progress)


def source_runtime(reference: SourceReference, isolation: Isolation, warnings: list[str]) -> Runtime:
    """The source framework's reference runner, in a child process unless isolation is off and the adapter does not
    ask for one (a live framework object cannot travel: it runs here)."""
    from adapters import get_adapter, reference_runner

    adapter = get_adapter(reference.framework)
    asks = getattr(adapter, "reference_isolation", None)
    why = asks(reference.source, reference.export) if asks is not None else None
    portable = reference.source.obj is None
    enabled = (isolation.enabled or why is not None) and portable
    if why is not None and not isolation.enabled and portable:
        warnings.append(f"the {reference.framework} reference ran in a child process although isolation is off: {why}")
    return isolate(partial(reference_runner, reference.framework, reference.source, reference.export),
                   name=reference.framework, stage=f"the {reference.framework} reference", enabled=enabled,
                   timeout=isolation.timeout, max_memory=isolation.limit(), worker=reference.worker)


def _pin(check: Check, reference: SourceReference, run: ComparisonRun) -> None:
    """The upstream tie proof for the failed comparisons (``pin_failures``): the one place an excuse is called."""
    assert check.model is not None
    with tempfile.TemporaryDirectory(prefix="bridge-pin-", dir=check.workdir) as workdir:
        pin_failures(run, framework=reference.framework, source=reference.source, export=reference.export,
                     model=check.model, workdir=Path(workdir), feeds=check.feeds, tolerance=check.tolerance,
                     detections=check.detections, shape_only=run.random_outputs, isolated=check.isolation.enabled,
                     timeout=check.isolation.timeout, max_memory=check.isolation.limit(),
                     artefact_runtimes=check.artefact_runtimes, target=check.target, progress=check.progress,
                     strict=check.strict, enabled=check.pinning)
