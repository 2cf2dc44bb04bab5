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
from functools import partial
from pathlib import Path
from typing import Any

import onnx

from bridge.config import (
    ConvertConfig,
    Source,
)
from bridge.conversion.delivery import convert as _convert
from bridge.conversion.options import api_signature, build_config, convert_options
from bridge.conversion.recipe import ConvertResult, child_memory_limit
from bridge.conversion.validate import ValidateResult, validate_options
from bridge.errors import BadInputFileError, BridgeError, UsageError, is_cli_calling
from bridge.inspection import InspectReport, inspect_model
from bridge.io import check_writable, load_model, refuse_overwriting_inputs
from bridge.limits import max_memory, memory_limit
from bridge.runtimes.isolated import call_isolated

Progress = Callable[[str], None]
__all__ = ["ConvertResult", "ValidateResult", "child_memory_limit"]  # re-exported: callers name them from here


def _in_api_words(options: Callable[[], Sequence[Any]] | None = None, inner: Callable[[], Any] | None = None,
                  lists: dict[str, str] | None = None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Errors of a call from Python also name the API's keywords of the command line's flags they mention:
    ``--input image: no such input (from Python: --input is inputs=)`` (``conversion.options.api_keywords_note``; ``options``: the
    declarations the entry point takes, ``inner``: the function whose keywords it passes on, ``lists``: flags of
    list keywords spelled otherwise). A call from the CLI (``bridge.errors.cli_calling``) keeps the flags."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except BridgeError as exc:
                if not is_cli_calling() and exc.args and isinstance(exc.args[0], str):
                    from bridge.conversion.options import api_keywords_note

                    keywords = [*_inspect.signature(wrapper).parameters,
                                *(_inspect.signature(inner()).parameters if inner is not None else ())]
                    exc.args = (api_keywords_note(exc.args[0], options() if options else (), keywords, lists),
                                *exc.args[1:])
                raise

        return wrapper

    return decorate


def _graft() -> Any:
    from bridge.graft import graft_nms as _graft_nms

    return _graft_nms


def _fix() -> Any:
    from bridge.shapes import fix_shapes as _fix_shapes

    return _fix_shapes


def _dynamic() -> Any:
    from bridge.shapes import make_dynamic as _make_dynamic

    return _make_dynamic


def _buckets() -> Any:
    from bridge.shapes import buckets as _bucket_models

    return _bucket_models


def _bench_options() -> Any:
    from bridge.bench.command import bench_options

    return bench_options()


def _under_memory_limit(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Run ``fn`` under its ``max_memory`` keyword (``--max-memory``; None = the default limit): sizes files
    declare are checked against it, and isolated children get twice it as their address-space limit."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with memory_limit(kwargs.get("max_memory")):
            return fn(*args, **kwargs)

    return wrapper


# ---------------------------------------------------------------------------------------------- convert


@_in_api_words(convert_options)
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
    if result.precision is not None and result.precision.written and cfg is not None:  # --precision (issue 34)
        _bench_precision(cfg, result, progress)
        if cfg.report:
            from bridge.report import write_report

            write_report(result.to_dict(), cfg.report)
    if values.get("bench") and result.written and cfg is not None:  # the written model's speed, vs the source
        result.bench = _bench_converted(cfg, progress)
        if cfg.report:
            from bridge.report import write_report

            write_report(result.to_dict(), cfg.report)
    return result


def _bench_precision(cfg: ConvertConfig, result: ConvertResult, progress: Progress | None) -> None:
    """--precision (issue 34): the fp32 artefact and the variant timed in the variant's runtime, in the same
    interleaved rounds, at batch 1 and 4 (the model's own batch when it is fixed); figures into ``variant.speed``."""
    from bridge.bench.run import model_inputs

    variant = result.precision
    # the written fp32 artefact the variant's runtime runs: the target's own (IR, .tflite; ``result.target`` is set
    # only for a target that writes one), else the .onnx
    fp32 = Path(result.target["path"]) if result.target and result.target.get("path") else cfg.output
    metas = model_inputs(load_model(cfg.output))
    fixed = [m.shape[0] for m in metas if m.shape and isinstance(m.shape[0], int)]
    batches = (fixed[0],) if fixed else (1, 4)
    fp32_label, variant_label = f"{variant.runtime} fp32", f"{variant.runtime} {variant.precision}"
    with tempfile.TemporaryDirectory(prefix="bridge-precision-bench-") as tmp:
        try:
            # the dataset's first images as inputs: a detector's run time depends on how many boxes reach NMS
            feeds = cfg.feeds or _dataset_feeds(cfg, result, Path(tmp) / "feeds.npz")
            data = bench(cfg.output, runtime=[], batch=batches, iterations=20, rounds=5, isolated=cfg.isolate,
                         timeout=cfg.timeout, max_memory=max_memory(), feeds=feeds,
                         inputs=[s for s in cfg.export.inputs if s.shape], seed=cfg.seed, progress=progress,
                         variants={fp32_label: (variant.runtime, fp32),
                                   variant_label: (variant.runtime, variant.destination)})
        except BridgeError as exc:
            variant.notes.append(f"speed not measured: {exc}")
            return
    p50 = {label: {b: (round(c.latency.p50 * 1e3, 3) if c is not None and c.latency is not None else None)
                   for b in batches for c in [data.cell(name, b)]}
           for label, name in (("fp32", fp32_label), (variant.precision, variant_label))}
    variant.speed = {"batches": list(batches), "p50_ms": p50,
                     "speedup": {b: data.relative(variant_label, fp32_label, b) for b in batches},
                     "threads": data.settings.threads, "iterations": data.settings.iterations,
                     "rounds": data.settings.rounds, "load_avg": data.machine.get("load_avg"),
                     "load_avg_end": data.machine.get("load_avg_end")}


def _dataset_feeds(cfg: ConvertConfig, result: ConvertResult, path: Path) -> Path:
    """The first batch of --dataset, preprocessed as the dataset run does, as an .npz of inputs."""
    from adapters import get_adapter
    from bridge.validation.dataset import dataset_settings
    from bridge.validation.dataset.options import first_batch

    settings = dataset_settings(cfg.values)
    assert settings is not None  # --precision requires --dataset
    return first_batch(settings, load_model(cfg.output), path, framework=result.framework,
                       defaults=getattr(get_adapter(result.framework), "dataset_preprocessing", None),
                       sample_shapes={s.name: s.shape for s in cfg.export.inputs if s.shape})


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


@_in_api_words(inner=_graft)
def graft_nms(model: str | Path | onnx.ModelProto, **options: Any) -> onnx.ModelProto:
    """Add decoding + NMS to a headless detector's ONNX model (see ``bridge.graft.graft_nms`` for options)."""
    from bridge.graft import graft_nms as _graft

    return _graft(model, **options)


def graft(model: str | Path, output: str | Path | None, **options: Any) -> Any:
    """``bridge graft-nms``: plan, build, check that it detects, write (see ``bridge.graft.command.graft_file``)."""
    from bridge.graft.command import graft_file

    return graft_file(model, output, **options)


# ---------------------------------------------------------------------------------------------- shapes
# Entry points of `bridge shapes fix|dynamic|buckets`; the logic lives in bridge.shapes (imported lazily).


@_in_api_words(inner=_fix, lists={"--input": "inputs"})
def fix_shapes(model: str | Path, output: str | Path, *, max_memory: int | str | None = None, **options: Any) -> Any:
    """Make every dim concrete at the given input shapes (see ``bridge.shapes.fix_shapes``), under ``max_memory``."""
    from bridge.shapes import fix_shapes as _fix

    with memory_limit(max_memory):
        return _fix(model, output, **options)


@_in_api_words(inner=_dynamic, lists={"--axis": "axes"})
def make_dynamic(model: str | Path, output: str | Path, *, max_memory: int | str | None = None,
                 **options: Any) -> Any:
    """Name dynamic axes and make the graph work at other sizes (see ``bridge.shapes.make_dynamic``), under
    ``max_memory``."""
    from bridge.shapes import make_dynamic as _dynamic

    with memory_limit(max_memory):
        return _dynamic(model, output, **options)


@_in_api_words(inner=_buckets)
def buckets(model: str | Path, output_dir: str | Path, **options: Any) -> Any:
    """Build static shape buckets from data statistics (see ``bridge.shapes.buckets``)."""
    from bridge.shapes import buckets as _buckets

    return _buckets(model, output_dir, **options)


# ---------------------------------------------------------------------------------------------- inspect


@_in_api_words()
def inspect(model: str | Path, *, load_in_runtime: bool = True, nodes: bool = False) -> InspectReport:
    """Describe an ONNX file: opsets, IR version, signature (symbolic dims flagged), ops, size, problems;
    ``nodes``: every node's inferred types and shapes, flagging where inference loses a dim. A file of
    another framework (an MXNet symbol JSON, a PyTorch checkpoint, ...) is a UsageError saying so and how to
    convert it, not the ONNX parser's complaint."""
    try:
        return inspect_model(model, load_in_runtime=load_in_runtime, nodes=nodes)
    except BadInputFileError as exc:
        raise _other_framework(model, "inspect") or exc from None


def _anchors() -> Any:
    from bridge.graft.anchor_fit import inspect_anchors as _inspect_anchors

    return _inspect_anchors


@_in_api_words(inner=_anchors)
def inspect_anchors(anchors: str | Path, anchor_options: dict[str, str] | None = None, **options: Any) -> Any:
    """``bridge inspect --anchors``: the anchors a spec generates, per layer (as ``graft-nms`` generates them) and,
    given ``model=``, its regressor row counts against them (see ``bridge.graft.anchor_fit.inspect_anchors``)."""
    from bridge.graft.anchor_fit import inspect_anchors as _inspect_anchors

    try:
        return _inspect_anchors(anchors, anchor_options, **options)
    except BadInputFileError as exc:
        model = options.get("model")
        raise (_other_framework(model, "inspect") if model is not None else None) or exc from None


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


@_in_api_words(validate_options)
@_under_memory_limit
def validate(model: str | Path, *, progress: Progress | None = None, options: dict[str, str] | None = None,
             **values: Any) -> ValidateResult:
    """Compare ``model`` in ``runtime`` (default: the runtimes the ONNX delivery validates in) with a source model
    (``source``, run now) or a saved RunResults file (``reference``): ``bridge.conversion.validate``, one
    ``bridge.conversion.check.Check``. The keywords are validate's options (its own, then the source, inputs,
    tolerance, check, isolation and report groups of ``bridge.conversion.options``; ``tolerance`` may be a
    ``Tolerance``; ``options``: raw framework knobs for the source).

    ``detections`` declares detector output groups (else those recorded in the model where its graph computes
    them through a selection, else those fed by NonMaxSuppression); ``input_kind`` / ``input_range`` shape
    generated inputs as in ``convert``.

    ``save_reference`` stores the reference run (inputs + outputs, at every size checked and on the second input,
    and the outputs the source gives randomly) so another environment can validate against it later with
    ``reference=``. ``isolated`` runs the reference and each runtime in a child process with ``timeout`` seconds
    per step and the memory limit (``bridge.runtimes.isolated``). MODEL runs on a second, different input too,
    and a model with dynamic axes at a second size of them (the source run there as well); ``.sizes`` lists the
    input shapes of every size checked; ``.second_size_skipped`` / ``.second_input_skipped`` say why a model was
    checked at one size or on one input only: the verdict stands, ``strict`` fails it. A failure on a model
    with selections gets the upstream tie proof (``bridge.conversion.pinning``) unless ``pinning`` is False;
    ``strict`` lets it excuse rounding ties only. ``progress`` hears each step. Raises ValidationMismatch (with ``.result``).
    """
    from bridge.conversion.validate import validate as _validate

    return _validate(model, progress=progress, options=options, **values)


validate.__signature__ = api_signature(  # type: ignore[attr-defined]
    [_inspect.Parameter("model", _inspect.Parameter.POSITIONAL_OR_KEYWORD)], _TAIL, options=validate_options())


# ---------------------------------------------------------------------------------------------- migrate


@_in_api_words(lists={"--only": "only"})
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


@_in_api_words(convert_options)
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
        check_writable(cfg.report, "--report")
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


@_in_api_words(_bench_options)
def bench(model: str | Path, *, progress: Progress | None = None, options: dict[str, str] | None = None,
          **values: Any) -> Any:
    """How fast ``model`` (ONNX) runs in each runtime (default: every installed one) and, with ``source``, in
    its source framework on the same inputs: a ``bridge.bench.BenchResult`` (latency min/p50/p90/p99/max,
    throughput, first run, peak memory per runner and batch size; ``.ratio(runtime, batch)`` against the
    source). ``iterations`` timed calls (default 50) or ``seconds`` per runner and batch size, in
    ``rounds`` interleaved rounds; ``report``: .json, .md or .html. ``verify``: first check the model against
    ``source`` or a saved ``reference`` as ``validate`` does (ValidationMismatch, nothing timed, when it fails;
    the verdict in ``.verification``). The keywords are ``bridge.bench.command.bench_options()``."""
    from bridge.bench.command import bench as _bench

    return _bench(model, progress=progress, options=options, **values)


def _bench_signature() -> _inspect.Signature:
    from bridge.bench.command import bench_options

    return api_signature([_inspect.Parameter("model", _inspect.Parameter.POSITIONAL_OR_KEYWORD)], _TAIL,
                         options=bench_options())


bench.__signature__ = _bench_signature()  # type: ignore[attr-defined]
