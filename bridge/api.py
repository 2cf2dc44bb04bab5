"""The library entry points: convert, inspect, validate. The CLI only parses arguments and calls these.

Each accepts plain Python values (paths, "NAME:SHAPE" strings, objects) or the typed config
objects, returns a result object with ``to_dict()`` for reports, and raises BridgeError subclasses
for anything the user can fix (``ValidationMismatch`` carries the result that failed).
"""

from __future__ import annotations

import functools
import inspect as _inspect
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import onnx

from bridge.config import (
    DEFAULT_TOLERANCE,
    ConvertConfig,
    InputSpec,
    InputValues,
    Source,
    Tolerance,
    check_names,
)
from bridge.conversion.delivery import child_memory_limit
from bridge.conversion.delivery import convert as _convert
from bridge.conversion.options import api_signature, build_config
from bridge.conversion.pinning import pin_failures
from bridge.conversion.recipe import ConvertResult, detection_groups, source_output_names
from bridge.errors import BadInputFileError, BridgeError, UsageError, ValidationMismatch
from bridge.inspection import InspectReport, inspect_model
from bridge.io import load_model, refuse_overwriting_inputs
from bridge.limits import max_memory, memory_limit
from bridge.runtimes.isolated import DEFAULT_TIMEOUT_S, call_isolated, isolate
from bridge.validation.compare import Comparison
from bridge.validation.results import RunResults
from bridge.validation.run import FeedSource, nondeterministic_outputs, run_and_compare

Progress = Callable[[str], None]
__all__ = ["ConvertResult", "child_memory_limit"]  # re-exported: callers and reports name them from here


def _source(source: Any, weights: str | Path | None, options: dict[str, str] | None = None) -> Source:
    if isinstance(source, Source):
        return source
    w = Path(weights) if weights else None
    if isinstance(source, (str, Path)):
        return Source(location=str(source), weights=w, options=options or {})
    return Source(obj=source, weights=w, options=options or {})


def _under_memory_limit(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Run ``fn`` under its ``max_memory`` keyword (``--max-memory``; None = the default limit): sizes files
    declare are checked against it, and isolated children get twice it as their address-space limit."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with memory_limit(kwargs.get("max_memory")):
            return fn(*args, **kwargs)

    return wrapper


# ---------------------------------------------------------------------------------------------- convert


def convert(source: Any, output: str | Path, *, progress: Progress | None = None,
            options: dict[str, str] | None = None, **values: Any) -> ConvertResult:
    """Convert ``source`` (path, ``module:factory``, or a framework object) to a validated ONNX file.

    The keywords are the convert options (``bridge.conversion.options``: one declaration each, the CLI's
    flags with underscores; ``options``: raw framework knobs for ``Source.options``). The model is
    written only if validation passes; the report is always written. Raises ValidationMismatch (with
    ``.result``) when a runtime's outputs differ beyond tolerance, with ``strict`` when the verdict is
    vacuous, and with ``strict`` or an explicit ``validate`` when validation could not run.
    """
    result = _convert(source, output, progress=progress, options=options, **values)
    cfg = result.config
    if values.get("bench") and result.written and cfg is not None:  # the written model's speed, vs the source
        result.bench = _bench_converted(cfg, progress)
        if cfg.report:
            from bridge.report import write_report

            write_report(result.to_dict(), cfg.report)
    return result


def _bench_converted(cfg: ConvertConfig, progress: Progress | None) -> dict[str, Any]:
    """``bench`` of the model ``convert`` just wrote, in the runtimes it was validated in, against the source
    on the same inputs (few calls: a migration records the order of magnitude; per-call samples left out)."""
    from bridge.bench.report import summary
    from bridge.targets import get_target

    data = bench(cfg.output, source=cfg.source if cfg.source.obj is None else None,
                 runtime=list(cfg.validate) if cfg.validate else get_target(cfg.to).default_runtimes,
                 feeds=cfg.feeds, inputs=[s for s in cfg.export.inputs if s.shape], seed=cfg.seed, iterations=20,
                 rounds=5, isolated=cfg.isolate, timeout=cfg.timeout, max_memory=max_memory(),
                 progress=progress).to_dict()
    data["results"] = [{k: v for k, v in c.items() if k != "samples_ms"} for c in data["results"]]
    data["summary"] = summary(data)
    return data


_POSITIONAL = [_inspect.Parameter(n, _inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in ("source", "output")]
_TAIL = [_inspect.Parameter(n, _inspect.Parameter.KEYWORD_ONLY, default=None) for n in ("progress", "options")]
convert.__signature__ = api_signature(_POSITIONAL, _TAIL)  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------------------------- graft-nms


def graft_nms(model: str | Path | onnx.ModelProto, **options: Any) -> onnx.ModelProto:
    """Add decoding + NMS to a headless detector's ONNX model (see ``bridge.graft.graft_nms`` for options)."""
    from bridge.graft import graft_nms as _graft

    return _graft(model, **options)


# ---------------------------------------------------------------------------------------------- shapes
# Entry points of `bridge shapes fix|dynamic|buckets`; the logic lives in bridge.shapes (imported lazily).


def fix_shapes(model: str | Path, output: str | Path, **options: Any) -> Any:
    """Make every dim concrete at the given input shapes (see ``bridge.shapes.fix_shapes``)."""
    from bridge.shapes import fix_shapes as _fix

    return _fix(model, output, **options)


def make_dynamic(model: str | Path, output: str | Path, **options: Any) -> Any:
    """Name dynamic axes and make the graph work at other sizes (see ``bridge.shapes.make_dynamic``)."""
    from bridge.shapes import make_dynamic as _dynamic

    return _dynamic(model, output, **options)


def buckets(model: str | Path, output_dir: str | Path, **options: Any) -> Any:
    """Build static shape buckets from data statistics (see ``bridge.shapes.buckets``)."""
    from bridge.shapes import buckets as _buckets

    return _buckets(model, output_dir, **options)


# ---------------------------------------------------------------------------------------------- inspect


def inspect(model: str | Path, *, load_in_runtime: bool = True, nodes: bool = False) -> InspectReport:
    """Describe an ONNX file: opsets, IR version, signature (symbolic dims flagged), ops, size, problems;
    ``nodes``: every node's inferred types and shapes, flagging where inference loses a dim. A file of
    another framework (an MXNet symbol JSON, a PyTorch checkpoint, ...) is a UsageError saying so and how to
    convert it, not the ONNX parser's complaint."""
    try:
        return inspect_model(model, load_in_runtime=load_in_runtime, nodes=nodes)
    except BadInputFileError as exc:
        raise _other_framework(model, "inspect") or exc from None


def _other_framework(model: str | Path, command: str) -> UsageError | None:
    """When ``model`` is not ONNX but another framework's adapter claims it: the error to raise instead."""
    from adapters import detect_adapter
    from adapters.onnx import OnnxFileAdapter

    try:
        adapter = detect_adapter(Source(location=str(model)))
    except BridgeError:
        return None
    if isinstance(adapter, OnnxFileAdapter):  # an ONNX file after all: the parser's complaint stands
        return None
    framework = adapter.framework
    return UsageError(f"{model} is not an ONNX file but a source model (--framework {framework}); bridge {command} "
                      f"reads .onnx files. Convert it first: bridge convert {model} -o model.onnx (then bridge "
                      f"{command} model.onnx)")


# ---------------------------------------------------------------------------------------------- validate


@dataclass
class ValidateResult:
    model: str
    reference: str
    comparisons: list[Comparison]
    inputs: dict[str, list[int]]
    saved_reference: str | None = None
    strict: bool = False
    sizes: list[dict[str, list[int]]] = field(default_factory=list)  # input shapes of every size checked
    warnings: list[str] = field(default_factory=list)
    # why a model with dynamic axes was checked at one size only (the source failed at the second size, or the
    # saved reference holds one): the verdict stands, proving nothing about those axes; --strict fails it
    second_size_skipped: str | None = None

    @property
    def passed(self) -> bool:
        return (all(c.passed for c in self.comparisons) and not (self.strict and self.vacuous)
                and not (self.strict and self.second_size_skipped))

    @property
    def vacuous(self) -> bool:
        return any(c.vacuous for c in self.comparisons)

    def to_dict(self) -> dict[str, Any]:
        return {"command": "validate", "model": self.model, "reference": self.reference, "passed": self.passed,
                "vacuous": self.vacuous, "strict": self.strict, "second_size_skipped": self.second_size_skipped,
                "inputs": self.inputs, "sizes": self.sizes, "warnings": self.warnings,
                "comparisons": [c.to_dict() for c in self.comparisons],
                "saved_reference": self.saved_reference}


@_under_memory_limit
def validate(
    model: str | Path,
    *,
    source: Any = None,
    reference: str | Path | None = None,
    runtime: str | Sequence[str] = "onnxruntime",
    framework: str | None = None,
    inputs: Sequence[str | InputSpec] = (),
    weights: str | Path | None = None,
    options: dict[str, str] | None = None,
    tolerance: Tolerance = DEFAULT_TOLERANCE,
    seed: int = 0,
    save_reference: str | Path | None = None,
    report: str | Path | None = None,
    feeds: str | Path | None = None,
    isolated: bool = True,
    timeout: float | None = DEFAULT_TIMEOUT_S,
    strict: bool = False,
    detections: Sequence[str] = (),
    input_kind: str | None = None,
    input_range: str | tuple[float, float] | None = None,
    max_memory: int | str | None = None,
    pinning: bool = True,
    progress: Progress | None = None,
) -> ValidateResult:
    """Compare ``model`` in ``runtime`` with a source model (run now) or a saved RunResults file.

    ``detections`` declares detector output groups (else those recorded in the model, else those fed by
    NonMaxSuppression); ``input_kind`` / ``input_range`` shape generated inputs as in ``convert``.

    ``save_reference`` stores the reference run (inputs + outputs, at every size checked) so another
    environment can validate against it later with ``reference=``, at those sizes. ``isolated`` runs the reference and each runtime in a
    child process with ``timeout`` seconds per step and the memory limit (``bridge.runtimes.isolated``).
    A model with dynamic axes is checked at a second size of them too (the source run there as well);
    ``.sizes`` lists the input shapes of every size checked; ``.second_size_skipped`` says why a model with
    dynamic axes was checked at one size only (the source fails at the second, or the saved reference holds
    one size): the verdict stands, ``strict`` fails it. A failure on a model with selections gets the upstream
    tie proof (``bridge.conversion.pinning``) unless ``pinning`` is False; ``strict`` lets it excuse rounding
    ties only. ``progress`` hears each step (loading, the reference run, each runtime). Raises
    ValidationMismatch (with ``.result``).
    """
    say = progress or (lambda _msg: None)
    if (source is None) == (reference is None):
        raise UsageError("validate needs exactly one of --source (run the source model) or --reference (saved results)")
    from bridge.targets import candidate_runtime

    runtimes = [runtime] if isinstance(runtime, str) else list(runtime)
    say(f"loading {model}")
    proto = load_model(model)
    specs = [i if isinstance(i, InputSpec) else InputSpec.parse(i) for i in inputs]
    groups = detection_groups(proto, detections)
    check_names("--tolerance", tolerance.per_output,
                [*(o.name for o in proto.graph.output), *source_output_names(proto, groups)], "output")
    values = InputValues.parse(input_kind, input_range)
    with tempfile.TemporaryDirectory(prefix="bridge-") as workdir:
        candidates = {name: partial(isolate, partial(candidate_runtime, name, proto, Path(workdir)), name=name,
                                    stage=f"the {name} candidate", enabled=isolated, timeout=timeout,
                                    max_memory=child_memory_limit())
                      for name in runtimes}
        if reference is not None:
            saved = RunResults.load(Path(reference))
            run = run_and_compare(saved, candidates, FeedSource(), tolerance, detections=groups,
                                  shape_only=nondeterministic_outputs(proto),
                                  reference_name=f"{saved.runtime} ({reference})", progress=say)
            ref_name = str(reference)
        else:
            from adapters import detect_adapter, get_adapter, reference_runner
            from adapters.base import ExportResult
            from adapters.onnx import graph_input_specs

            src = _source(source, weights, options)
            adapter = get_adapter(framework) if framework else detect_adapter(src)
            given = {s.name: s for s in specs}
            model_specs = tuple(given.get(s.name, s) for s in graph_input_specs(proto))
            export = ExportResult(model=proto, exporter="(existing model)", inputs=model_specs,
                                  output_names=source_output_names(proto, groups))
            runner = isolate(partial(reference_runner, adapter.framework, src, export), name=adapter.framework,
                             stage=f"the {adapter.framework} reference", enabled=isolated and src.obj is None,
                             timeout=timeout, max_memory=child_memory_limit())
            feed_source = FeedSource(Path(feeds) if feeds else None, model_specs, seed, vary_dynamic=False, model=proto,
                                     values=values)
            run = run_and_compare(runner, candidates, feed_source, tolerance, detections=groups,
                                  shape_only=nondeterministic_outputs(proto), check_sensitivity=True, second_size=True,
                                  progress=say)
            # a failure that is only a tie at a selection (TopK, NMS) upstream is proved so, or said not to be
            pin_failures(run, framework=adapter.framework, source=src, export=export, model=proto,
                         workdir=Path(workdir), feeds=feed_source, tolerance=tolerance, detections=groups,
                         shape_only=nondeterministic_outputs(proto), isolated=isolated, timeout=timeout,
                         max_memory=child_memory_limit(), progress=say, strict=strict, enabled=pinning)
            ref_name = f"{runner.name} ({src.describe()})"
            if save_reference is not None:
                run.results(runner.name, {"source": src.describe(), "seed": seed}).save(Path(save_reference))
    comparisons = run.comparisons
    saved_to = str(save_reference) if save_reference and source is not None else None
    result = ValidateResult(str(model), ref_name, comparisons, run.input_shapes(), saved_to, strict=strict,
                            sizes=run.sizes, second_size_skipped=run.second_size_skipped)
    if report:
        from bridge.report import write_report

        write_report(result.to_dict(), Path(report))
    if not result.passed:
        failing = [c.summary() for c in comparisons if not c.passed or c.vacuous]
        if strict and run.second_size_skipped and all(c.passed for c in comparisons):
            failing.append(f"{run.second_size_skipped} (--strict)")
        raise ValidationMismatch("; ".join(failing), result=result)
    return result


# ---------------------------------------------------------------------------------------------- migrate


def migrate(
    manifest: Any,
    *,
    out: str | Path = "migration",
    jobs: int = 1,
    resume: bool = False,
    only: Sequence[str] | None = None,
    executor: Any = "local",
    on_result: Callable[[Any], None] | None = None,
    monitor: Any = None,
) -> Any:
    """Convert and validate every model of a manifest (YAML path, parsed dict or list of entry dicts),
    each in its own worker process; returns a ``bridge.migrate.BatchResult`` (``.exit_code`` is 0 only
    when every enabled model passed). ``executor``: "local" (``jobs`` processes at a time),
    "dask://HOST:PORT" or a ``distributed.Client``; ``resume`` reuses outcomes recorded in ``out``;
    ``on_result(ModelResult)`` is called as each model finishes. Reports go to ``out``/report.*."""
    from bridge.migrate.batch import run

    return run(manifest, convert=convert, out=out, jobs=jobs, resume=resume, only=only, executor=executor,
               on_result=on_result, monitor=monitor)


# ---------------------------------------------------------------------------------------------- debug


def debug(source: Any, *, model: str | Path | None = None, budget_mb: int = 256, progress: Progress | None = None,
          options: dict[str, str] | None = None, **values: Any) -> Any:
    """Convert ``source`` as ``convert`` does and find where it goes wrong: returns a
    ``bridge.debug.DebugResult`` (``.culprit()``: the first node whose output diverges while its inputs
    agree, and the pass or translator that made it; ``.stage``: every pass's before/after comparison).
    ``model``: compare an already converted ONNX file with the source instead (no passes re-run; input
    shapes come from it or from ``feeds`` when no ``inputs`` are given). The other keywords are the
    convert options debug takes (``bridge.conversion.options``); ``report``: .html, .json or .md."""
    from bridge.debug.run import debug_conversion, write_debug_report

    cfg = build_config(source, Path("debug.onnx"), values, raw_options=options)
    if cfg.report:
        refuse_overwriting_inputs(cfg.report, [source if isinstance(source, str | Path) else None, model,
                                               cfg.source.weights, cfg.feeds], "--report")
    from bridge.debug.breakage import ACTIVE as deliberate_breakages

    # in a child process like convert's runtimes: a native crash (SIGFPE) or a spinning Loop is an error
    # (in-process while a test breakage is applied: it patches this process only)
    # the pass-by-pass models go into a folder this process owns, so a child killed by --timeout or a
    # native crash leaves nothing behind
    with tempfile.TemporaryDirectory(prefix="bridge-debug-") as workdir:
        result = call_isolated(partial(debug_conversion, cfg, model=load_model(model) if model else None,
                                       budget=budget_mb * 2**20, workdir=Path(workdir)), stage="bridge debug",
                               timeout=cfg.timeout, enabled=not deliberate_breakages,
                               max_memory=child_memory_limit(), progress=progress or (lambda _m: None))
    if cfg.report:
        write_debug_report(result, cfg.report)
    return result


debug.__signature__ = api_signature(  # type: ignore[attr-defined]
    _POSITIONAL[:1], [*(_inspect.Parameter(n, _inspect.Parameter.KEYWORD_ONLY, default=d)
                        for n, d in (("model", None), ("budget_mb", 256))), *_TAIL], debug=True)


# ---------------------------------------------------------------------------------------------- bench


def bench(
    model: str | Path,
    *,
    source: Any = None,
    runtime: str | Sequence[str] | None = None,
    batch: Sequence[int] = (),
    iterations: int | None = None,
    seconds: float | None = None,
    warmup: int = 3,
    rounds: int = 10,
    threads: int | None = None,
    feeds: str | Path | None = None,
    inputs: Sequence[str | InputSpec] = (),
    framework: str | None = None,
    weights: str | Path | None = None,
    options: dict[str, str] | None = None,
    seed: int = 0,
    report: str | Path | None = None,
    isolated: bool = True,
    timeout: float | None = DEFAULT_TIMEOUT_S,
    max_memory: int | str | None = None,
    progress: Progress | None = None,
) -> Any:
    """How fast ``model`` (ONNX) runs in each runtime (default: every installed one) and, with ``source``, in
    its source framework on the same inputs: a ``bridge.bench.BenchResult`` (latency min/p50/p90/p99/max,
    throughput, first run, peak memory per runner and batch size; ``.ratio(runtime, batch)`` against the
    source). ``iterations`` timed calls (default 50) or ``seconds`` per runner and batch size, in
    ``rounds`` interleaved rounds; ``report``: .json, .md or .html."""
    from bridge.bench.report import report_format, write_bench_report
    from bridge.bench.run import DEFAULT_ITERATIONS, BenchSettings, run_bench

    if iterations is not None and seconds is not None:
        raise UsageError("give --iterations or --time, not both")
    if report:
        report_format(Path(report))
    settings = BenchSettings(batches=tuple(batch), iterations=iterations or DEFAULT_ITERATIONS, seconds=seconds, warmup=warmup,
                             rounds=rounds, threads=threads, isolated=isolated)
    with memory_limit(max_memory):
        result = run_bench(Path(model), source=_source(source, weights, options) if source is not None else None,
                           framework=framework, runtimes=[runtime] if isinstance(runtime, str) else runtime,
                           settings=settings, feeds=Path(feeds) if feeds else None, inputs=tuple(i if isinstance(i, InputSpec) else InputSpec.parse(i) for i in inputs),
                           seed=seed,
                           timeout=timeout, max_memory=child_memory_limit(), progress=progress)
    if report:
        write_bench_report(result.to_dict(), Path(report))
    return result
