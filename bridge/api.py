"""The library entry points: convert, inspect, validate. The CLI only parses arguments and calls these.

Each accepts plain Python values (paths, "NAME:SHAPE" strings, objects) or the typed config
objects, returns a result object with ``to_dict()`` for reports, and raises BridgeError subclasses
for anything the user can fix (``ValidationMismatch`` carries the result that failed).
"""

from __future__ import annotations

import functools
import gc
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import onnx

from bridge.config import (
    CONTRIB_DOMAIN,
    DEFAULT_OPSET,
    DEFAULT_TOLERANCE,
    DETECTION_META,
    ConvertConfig,
    DynamicAxis,
    ExportSpec,
    InputSpec,
    InputValues,
    Source,
    Tolerance,
    check_names,
)
from bridge.errors import (
    AdapterUnavailableError,
    BridgeError,
    ReferenceUnavailableError,
    UsageError,
    ValidationMismatch,
)
from bridge.inspection import InspectReport, graph_metas, inspect_model
from bridge.io import load_model, refuse_overwriting_inputs, tensor_size
from bridge.limits import max_memory, memory_limit
from bridge.model import ModelContainer, PassRecord
from bridge.runtimes.base import TensorMeta
from bridge.runtimes.isolated import DEFAULT_TIMEOUT_S, call_isolated, isolate
from bridge.validation.compare import Comparison
from bridge.validation.detection.layouts import DetectionSpec, as_detection_specs
from bridge.validation.probe import probe_output_shapes
from bridge.validation.results import RunResults
from bridge.validation.run import (
    FeedSource,
    nondeterministic_outputs,
    run_and_compare,
    saved_detection_outputs,
    vacuous_warnings,
)

Progress = Callable[[str], None]


def _specs(items: Iterable[str | InputSpec]) -> tuple[InputSpec, ...]:
    return tuple(i if isinstance(i, InputSpec) else InputSpec.parse(i) for i in items)


def _axes(items: Iterable[str | DynamicAxis]) -> tuple[DynamicAxis, ...]:
    return tuple(i if isinstance(i, DynamicAxis) else DynamicAxis.parse(i) for i in items)


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


@dataclass
class ConvertResult:
    source: str
    framework: str
    output: Path
    exporter: str
    opset: int
    inputs: list[TensorMeta]
    outputs: list[TensorMeta]
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    passes: list[PassRecord] = field(default_factory=list)
    validation: list[Comparison] = field(default_factory=list)
    validation_skipped: str | None = None
    validation_inputs: dict[str, list[int]] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    written: bool = False
    target: dict[str, Any] | None = None  # e.g. the TensorFlow SavedModel written next to the .onnx
    strict: bool = False  # a vacuous verdict (nothing real was compared) counts as a failure
    detections: list[dict[str, Any]] = field(default_factory=list)  # detector output groups compared detection-aware
    validation_feeds: dict[str, dict[str, Any]] = field(default_factory=dict)  # per input: shape, dtype, range, source
    export_inputs: str = ""  # what the exporter traced with
    warning_details: list[str] = field(default_factory=list)  # every grouped warning in full (report only)
    bench: dict[str, Any] | None = None  # ``convert(bench=True)``: bridge.bench figures of the written model

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.validation) and not (self.strict and self.vacuous)

    @property
    def vacuous(self) -> bool:
        return any(c.vacuous for c in self.validation)

    def to_dict(self) -> dict[str, Any]:
        return {
            "command": "convert", "source": self.source, "framework": self.framework, "output": str(self.output),
            "written": self.written, "exporter": self.exporter, "opset": self.opset,
            "inputs": [asdict(m) for m in self.inputs], "outputs": [asdict(m) for m in self.outputs],
            "notes": self.notes, "warnings": self.warnings, "passes": [asdict(p) for p in self.passes],
            "validation": [c.to_dict() for c in self.validation], "validation_skipped": self.validation_skipped,
            "validation_inputs": self.validation_inputs, "passed": self.passed, "timings": self.timings,
            "target": self.target, "vacuous": self.vacuous, "strict": self.strict,
            "detections": self.detections, "validation_feeds": self.validation_feeds,
            "export_inputs": self.export_inputs, "warning_details": self.warning_details, "bench": self.bench,
        }


@_under_memory_limit
def convert(
    source: Any,
    output: str | Path,
    *,
    framework: str | None = None,
    inputs: Sequence[str | InputSpec] = (),
    dynamic: Sequence[str | DynamicAxis] = (),
    opset: int = DEFAULT_OPSET,
    validate: Sequence[str] | None = None,
    tolerance: Tolerance = DEFAULT_TOLERANCE,
    report: str | Path | None = None,
    weights: str | Path | None = None,
    options: dict[str, str] | None = None,
    output_names: Sequence[str] = (),
    detection_format: str = "mxnet",
    max_detections: int | None = None,
    feeds: str | Path | None = None,
    to: str = "onnx",
    saved_model: str | Path | None = None,
    seed: int = 0,
    progress: Progress | None = None,
    isolated: bool = True,
    timeout: float | None = DEFAULT_TIMEOUT_S,
    strict: bool = False,
    detections: Sequence[str] = (),
    exporter: str = "auto",
    input_kind: str | None = None,
    input_range: str | tuple[float, float] | None = None,
    max_memory: int | str | None = None,
    external_data: bool | None = None,
    strip_provenance: bool = False,
    bench: bool = False,
) -> ConvertResult:
    """Convert ``source`` (path, ``module:factory``, or a framework object) to a validated ONNX file.

    ``detections``: detector output groups (``boxes=B,scores=S,labels=L[,batch_index=I]``) compared
    detection-aware; groups fed by NonMaxSuppression are found without it. ``exporter``: PyTorch's
    auto|dynamo|torchscript. ``input_kind`` ("image") / ``input_range`` ("LO,HI"): what generated inputs look
    like; tracing uses the same inputs as validation (``feeds`` when given). ``external_data``: write the
    weights to ``<output>.data`` beside the model (None: only when the model is over protobuf's 2 GiB limit).
    ``strip_provenance``: write the nodes without the metadata naming their source node and maker.

    The model is written only if validation passes (or is skipped); the report is always written.
    Raises ValidationMismatch (with ``.result``) when a runtime's outputs differ beyond tolerance, or with
    ``strict`` when the verdict is vacuous (e.g. an all-NaN output, no detections on either side).
    """
    from bridge.targets import get_target

    output = Path(output)
    if get_target(to).artefact and output.suffix.lower() != ".onnx" and saved_model is None:
        # `--to tensorflow -o OUT_DIR`: the target's artefact goes to OUT_DIR, the validated ONNX beside it
        output, saved_model = output.with_name(output.name + ".onnx"), output
    values = InputValues.parse(input_kind, input_range)
    feeds_path = Path(feeds) if feeds else None
    examples = partial(_example_inputs, feeds_path, values, seed)
    examples.description = FeedSource(feeds_path, (), seed, values=values).describe()  # type: ignore[attr-defined]
    cfg = ConvertConfig(
        source=_source(source, weights, options), output=output, framework=framework,
        export=ExportSpec(_specs(inputs), _axes(dynamic), opset, tuple(output_names),
                          examples=examples, exporter=exporter),
        validate=tuple(validate) if validate is not None else None, tolerance=tolerance,
        report=Path(report) if report else None, seed=seed, detection_format=detection_format,
        max_detections=max_detections, feeds=feeds_path, to=to,
        saved_model=Path(saved_model) if saved_model else None, isolate=isolated, timeout=timeout,
        detections=tuple(detections), input_values=values, external_data=external_data,
        strip_provenance=strip_provenance,
    )
    as_detection_specs(list(cfg.detections))  # a malformed --detections is a usage error before any export
    try:
        result = _convert(cfg, progress or (lambda _msg: None), strict=strict)
    except BridgeError as exc:  # the report is written on every outcome (ValidationMismatch writes its own)
        if cfg.report and not isinstance(exc, ValidationMismatch):
            _write_failure_report(cfg, exc)
        raise
    if bench and result.written:  # speed of the written model in the validated runtimes, against the source
        result.bench = _bench_converted(cfg, progress)
        if cfg.report:
            from bridge.report import write_report

            write_report(result.to_dict(), cfg.report)
    return result


def _bench_converted(cfg: ConvertConfig, progress: Progress | None) -> dict[str, Any]:
    """``bench`` of the model ``convert`` just wrote, in the runtimes it was validated in, against the source
    on the same inputs (few calls: a migration records the order of magnitude; per-call samples left out)."""
    from bridge.targets import get_target

    data = bench(cfg.output, source=cfg.source if cfg.source.obj is None else None,
                 runtime=list(cfg.validate) if cfg.validate else get_target(cfg.to).default_runtimes,
                 feeds=cfg.feeds,
                 inputs=[s for s in cfg.export.inputs if s.shape], seed=cfg.seed, iterations=20, rounds=5,
                 isolated=cfg.isolate, timeout=cfg.timeout, max_memory=max_memory(), progress=progress).to_dict()
    from bridge.bench.report import summary

    data["results"] = [{k: v for k, v in c.items() if k != "samples_ms"} for c in data["results"]]
    data["summary"] = summary(data)
    return data


def _example_inputs(feeds: Path | None, values: InputValues, seed: int,
                    specs: Sequence[InputSpec]) -> dict[str, Any]:
    """The arrays a tracing exporter runs the model on: the ``--feeds`` arrays, or generated ones like
    validation's (same seed and ``--input-kind/--input-range``, at the sample sizes)."""
    from bridge.validation.inputs import load_feeds, make_inputs

    metas = [TensorMeta(s.name, s.shape, s.dtype) for s in specs]
    if feeds is not None:
        return load_feeds(feeds, metas)
    return make_inputs(metas, specs, seed=seed, vary_dynamic=False, values=values)


def _write_failure_report(cfg: ConvertConfig, exc: BaseException) -> None:
    from bridge.report import write_report

    assert cfg.report is not None
    write_report({"command": "convert", "source": cfg.source.describe(), "output": str(cfg.output), "written": False,
                  "passed": False, "error": {"type": type(exc).__name__, "message": str(exc),
                                             "exit_code": getattr(exc, "exit_code", None)}}, cfg.report)


def _convert(cfg: ConvertConfig, progress: Progress, *, strict: bool = False) -> ConvertResult:
    from adapters import detect_adapter, get_adapter
    from bridge.passes.pipeline import conversion_pipeline, run_pipeline
    from bridge.targets import get_target

    target = get_target(cfg.to)
    _check_runtime_names(cfg.validate or ())
    timings: dict[str, float] = {}
    adapter = get_adapter(cfg.framework) if cfg.framework else detect_adapter(cfg.source)
    if not adapter.claims(cfg.source):
        raise UsageError(f"'{cfg.source.describe()}' does not look like a {adapter.framework} source")
    progress(f"exporting with the {adapter.framework} adapter")
    start = time.perf_counter()
    export = adapter.export(cfg.source, cfg.export)
    timings["export_s"] = time.perf_counter() - start

    container = ModelContainer.from_proto(
        export.model, source_framework=adapter.framework, exporter=export.exporter,
        inputs=export.inputs, dynamic=cfg.export.dynamic, warnings=list(export.warnings),
    )
    start = time.perf_counter()
    run_pipeline(container, conversion_pipeline(opset=cfg.export.opset, inputs=export.inputs,
                                                dynamic=cfg.export.dynamic, detection_format=cfg.detection_format,
                                                max_detections=cfg.max_detections,
                                                probe=probe_output_shapes), progress)
    container.check_inputs()  # the written model's inputs are the source's: anything else is an error naming it
    timings["passes_s"] = time.perf_counter() - start
    # the final model is written into the exporter's ModelProto around the weights it holds (a copy would hold
    # them twice); a weightless copy of the exporter's model stays for validation (metadata, inputs)
    weightless = _without_weights(export.model)
    proto = container.to_proto(reuse=export.model if export.model is not cfg.source.obj else None)
    export.model = weightless
    if cfg.strip_provenance:
        from bridge.provenance import strip

        strip(proto)
    # a per-output tolerance for an output that does not exist would be silently unused: a typo
    check_names("--tolerance", cfg.tolerance.per_output, [*export.output_names, *(o.name for o in proto.graph.output)],
                "output")
    specs = _detection_groups(proto, cfg.detections)
    warnings, history = container.warnings, container.history
    del container
    # the IR is a web of reference cycles (nodes <-> values): only the cycle collector frees it, and with it
    # any tensor proto it still points at (upb frees a model's memory only when nothing refers into it)
    gc.collect()

    result = ConvertResult(
        source=cfg.source.describe(), framework=adapter.framework, output=cfg.output, exporter=export.exporter,
        opset=cfg.export.opset, inputs=graph_metas(proto.graph.input, proto),
        outputs=graph_metas(proto.graph.output, proto),
        notes=list(export.notes), warnings=warnings, passes=history, timings=timings,
        strict=strict, detections=[s.to_dict() for s in specs], export_inputs=export.example_source,
        warning_details=list(export.warning_details),
    )

    with tempfile.TemporaryDirectory(prefix="bridge-") as workdir:
        artefacts: dict[str, Any] = {}
        staging: Path | None = None
        try:
            if target.artefact:  # the target writes an artefact of its own (a SavedModel, ...)
                progress(f"writing the {target.name} target")
                # staged beside its destination (same filesystem), moved there only once validation passes
                cfg.saved_model_dir.parent.mkdir(parents=True, exist_ok=True)
                staging = Path(tempfile.mkdtemp(prefix=f".{cfg.saved_model_dir.name}.",
                                                dir=cfg.saved_model_dir.parent))
                exported = target.export(proto, staging)
                if exported is not None:
                    timings["target_s"] = exported.seconds
                    result.target = exported.to_dict()
                    result.notes.extend(exported.notes)
                    result.warnings.extend(exported.warnings)
                    # validate the artefact actually written, not a re-conversion
                    artefacts.update({name: exported.path for name in target.runtimes})
            runtimes = cfg.validate if cfg.validate is not None else target.default_runtimes
            _validate_converted(cfg, adapter, export, proto, runtimes, artefacts, Path(workdir), result, progress)
            _write_outputs(cfg, target, proto, artefacts, result)
        finally:
            if staging is not None:
                shutil.rmtree(staging, ignore_errors=True)
    return result


def child_memory_limit() -> int:
    """The address-space limit of a reference/runtime child: twice the memory limit in force (frameworks
    reserve far more address space than they touch; the limit is there to stop runaway allocations)."""
    return 2 * max_memory()


def _check_runtime_names(names: Sequence[str]) -> None:
    from bridge.runtimes import available_runtimes

    unknown = [n for n in names if n not in available_runtimes()]
    if unknown:
        raise UsageError(f"--validate {','.join(unknown)}: choose from {', '.join(available_runtimes())}")


def _validate_converted(cfg: ConvertConfig, adapter: Any, export: Any, proto: onnx.ModelProto,
                        runtimes: Sequence[str], artefacts: dict[str, Any], workdir: Path,
                        result: ConvertResult, progress: Progress) -> None:
    from adapters import reference_runner
    from bridge.targets import candidate_runtime

    leftover = Counter(n.op_type for n in proto.graph.node if n.domain == CONTRIB_DOMAIN)
    if not runtimes:
        result.validation_skipped = "validation disabled (--validate none)"
        return
    if leftover:
        ops = ", ".join(f"{op} x{n}" for op, n in sorted(leftover.items()))
        result.validation_skipped = (f"the model still contains {CONTRIB_DOMAIN} ops ({ops}) that no standard runtime "
                                     "runs; they need lowering before validation")
        result.warnings.append(result.validation_skipped)
        return
    start = time.perf_counter()
    # live framework objects (an nn.Module passed to the API) cannot go to a child process: run in-process
    isolated = cfg.isolate and cfg.source.obj is None
    try:
        reference = isolate(partial(reference_runner, adapter.framework, cfg.source, export), name=adapter.framework,
                            stage=f"the {adapter.framework} reference", enabled=isolated, timeout=cfg.timeout,
                            max_memory=child_memory_limit())
        # a child process gets the model as a file, not a pickled copy of the proto (the weights once more)
        candidate_model: Any = proto
        if cfg.isolate:
            from bridge.io import save_model

            candidate_model = workdir / "candidate.onnx"
            save_model(proto, candidate_model)
        candidates = {name: partial(isolate, partial(candidate_runtime, name, candidate_model, workdir, artefacts),
                                    name=name, stage=f"the {name} candidate", enabled=cfg.isolate, timeout=cfg.timeout,
                                    max_memory=child_memory_limit())
                      for name in runtimes}
        progress(f"validating in {', '.join(runtimes)} against {reference.name}")
        feeds = FeedSource(cfg.feeds, export.inputs, cfg.seed, values=cfg.input_values, model=(export.model, proto))
        run = run_and_compare(reference, candidates, feeds, cfg.tolerance,
                              detections=saved_detection_outputs(proto), shape_only=nondeterministic_outputs(proto),
                              check_sensitivity=True)
    except (AdapterUnavailableError, ReferenceUnavailableError) as exc:
        # an unloadable reference (e.g. an old ONNX file onnxruntime itself refuses, or a missing framework)
        # skips validation with the reason
        reason = str(exc)
        result.validation_skipped = reason if reason.startswith("source reference") else f"source reference unavailable: {reason}"
        result.warnings.append(result.validation_skipped)
    else:
        result.warnings.extend(vacuous_warnings(run.comparisons))
        result.validation = run.comparisons
        result.validation_inputs = run.input_shapes()
        result.validation_feeds = run.input_summary(feeds.describe())
    result.timings["validate_s"] = time.perf_counter() - start


def _write_outputs(cfg: ConvertConfig, target: Any, proto: onnx.ModelProto, artefacts: dict[str, Any],
                   result: ConvertResult) -> None:
    """The model (and the target's artefact) only when validation passed; the report always."""
    if result.passed:
        from bridge.io import save_model

        save_model(proto, cfg.output, external_data=cfg.external_data)
        if result.target is not None and artefacts:
            result.target["path"] = str(target.commit(next(iter(artefacts.values())), cfg.saved_model_dir))
        result.written = True
    if cfg.report:
        from bridge.report import write_report

        write_report(result.to_dict(), cfg.report)
    if not result.passed:
        failing = "; ".join(c.summary() for c in result.validation if not c.passed or c.vacuous)
        what = "does not match the source" if not all(c.passed for c in result.validation) else \
            "was only checked vacuously (--strict)"
        raise ValidationMismatch(f"converted model {what} ({failing}); {cfg.output} was not written", result=result)


def _detection_groups(proto: onnx.ModelProto, declared: Sequence[str]) -> list[DetectionSpec]:
    """The detector output groups of the converted model, recorded in its metadata (``DETECTION_META``) so
    ``bridge validate`` compares them the same way later: ``--detections`` when given (names checked), else
    those a lowering pass recorded plus those found fed by NonMaxSuppression."""
    from bridge.validation.detection.layouts import detect_detection_outputs, dump_detection_specs

    outputs = [o.name for o in proto.graph.output]
    if declared:
        specs = as_detection_specs(list(declared))
        for spec in specs:
            check_names("--detections", spec.candidate_names(), outputs, "output")
    else:
        specs = saved_detection_outputs(proto)
        covered = {n for s in specs for n in s.candidate_names()}
        if _has_op(proto.graph, "NonMaxSuppression"):  # shape inference inside is not free: only for detectors
            found = detect_detection_outputs(_without_weights(proto))
            specs += [s for s in found if not covered & set(s.candidate_names())]
    if specs:
        props = {p.key: p for p in proto.metadata_props}
        entry = props.get(DETECTION_META) or proto.metadata_props.add(key=DETECTION_META)
        entry.value = dump_detection_specs(specs)
    return specs


def _has_op(graph: onnx.GraphProto, op_type: str) -> bool:
    return any(n.op_type == op_type or any(_has_op(a.g, op_type) for a in n.attribute if a.type == a.GRAPH)
               or any(_has_op(g, op_type) for a in n.attribute for g in a.graphs) for n in graph.node)


def _without_weights(proto: onnx.ModelProto, keep_bytes: int = 4096) -> onnx.ModelProto:
    """``proto`` with its large initializers turned into typed graph inputs: what shape inference needs
    (small ones - shapes, axes - stay as values), without copying the weights (a copy of a 400 MB model
    was the peak of a whole conversion)."""
    light = onnx.ModelProto(ir_version=proto.ir_version, producer_name=proto.producer_name)
    light.opset_import.extend(proto.opset_import)
    light.metadata_props.extend(proto.metadata_props)
    light.functions.extend(proto.functions)
    g = light.graph
    g.name = proto.graph.name
    g.node.extend(proto.graph.node)
    g.input.extend(proto.graph.input)
    g.output.extend(proto.graph.output)
    g.value_info.extend(proto.graph.value_info)
    for init in proto.graph.initializer:
        if tensor_size(init) <= keep_bytes:  # not ByteSize(): upb encodes the tensor to measure it
            g.initializer.append(init)
        else:
            g.input.append(onnx.helper.make_tensor_value_info(init.name, init.data_type, list(init.dims)))
    return light


def _source_output_names(model: onnx.ModelProto, detections: Sequence[DetectionSpec]) -> tuple[str, ...]:
    """The model's outputs as the source names them: a lowered detection group stands for its source output."""
    group: dict[str, str] = {}
    for spec in detections:
        refs = spec.reference_names()
        if len(refs) == 1:
            group.update({name: refs[0] for name in spec.candidate_names()})
    names: list[str] = []
    for o in model.graph.output:
        name = group.get(o.name, o.name)
        if name not in names:
            names.append(name)
    return tuple(names)


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
    ``nodes``: every node's inferred types and shapes, flagging where inference loses a dim."""
    return inspect_model(model, load_in_runtime=load_in_runtime, nodes=nodes)


# ---------------------------------------------------------------------------------------------- validate


@dataclass
class ValidateResult:
    model: str
    reference: str
    comparisons: list[Comparison]
    inputs: dict[str, list[int]]
    saved_reference: str | None = None
    strict: bool = False

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.comparisons) and not (self.strict and self.vacuous)

    @property
    def vacuous(self) -> bool:
        return any(c.vacuous for c in self.comparisons)

    def to_dict(self) -> dict[str, Any]:
        return {"command": "validate", "model": self.model, "reference": self.reference, "passed": self.passed,
                "vacuous": self.vacuous, "strict": self.strict,
                "inputs": self.inputs, "comparisons": [c.to_dict() for c in self.comparisons],
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
) -> ValidateResult:
    """Compare ``model`` in ``runtime`` with a source model (run now) or a saved RunResults file.

    ``detections`` declares detector output groups (else those recorded in the model, else those fed by
    NonMaxSuppression); ``input_kind`` / ``input_range`` shape generated inputs as in ``convert``.

    ``save_reference`` stores the reference run (inputs + outputs) so another environment can
    validate against it later with ``reference=``. ``isolated`` runs the reference and each runtime in a
    child process with ``timeout`` seconds per step and the memory limit (``bridge.runtimes.isolated``).
    Raises ValidationMismatch (with ``.result``).
    """
    if (source is None) == (reference is None):
        raise UsageError("validate needs exactly one of --source (run the source model) or --reference (saved results)")
    from bridge.targets import candidate_runtime

    runtimes = [runtime] if isinstance(runtime, str) else list(runtime)
    proto = load_model(model)
    specs = _specs(inputs)
    groups = _detection_groups(proto, detections)
    check_names("--tolerance", tolerance.per_output,
                [*(o.name for o in proto.graph.output), *_source_output_names(proto, groups)], "output")
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
                                  reference_name=f"{saved.runtime} ({reference})")
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
                                  output_names=_source_output_names(proto, groups))
            runner = isolate(partial(reference_runner, adapter.framework, src, export), name=adapter.framework,
                             stage=f"the {adapter.framework} reference", enabled=isolated and src.obj is None,
                             timeout=timeout, max_memory=child_memory_limit())
            run = run_and_compare(runner, candidates,
                                  FeedSource(Path(feeds) if feeds else None, model_specs, seed, vary_dynamic=False,
                                             model=proto,
                                             values=values),
                                  tolerance, detections=groups, shape_only=nondeterministic_outputs(proto),
                                  check_sensitivity=True)
            ref_name = f"{runner.name} ({src.describe()})"
            if save_reference is not None:
                RunResults(dict(run.feeds), run.reference_outputs, runner.name,
                           {"source": src.describe(), "seed": seed}).save(Path(save_reference))
    comparisons = run.comparisons
    saved_to = str(save_reference) if save_reference and source is not None else None
    result = ValidateResult(str(model), ref_name, comparisons, run.input_shapes(), saved_to, strict=strict)
    if report:
        from bridge.report import write_report

        write_report(result.to_dict(), Path(report))
    if not result.passed:
        raise ValidationMismatch("; ".join(c.summary() for c in comparisons if not c.passed or c.vacuous),
                                 result=result)
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


def debug(
    source: Any,
    *,
    model: str | Path | None = None,
    framework: str | None = None,
    inputs: Sequence[str | InputSpec] = (),
    dynamic: Sequence[str | DynamicAxis] = (),
    opset: int = DEFAULT_OPSET,
    tolerance: Tolerance = DEFAULT_TOLERANCE,
    weights: str | Path | None = None,
    options: dict[str, str] | None = None,
    detection_format: str = "mxnet",
    max_detections: int | None = None,
    feeds: str | Path | None = None,
    seed: int = 0,
    report: str | Path | None = None,
    budget_mb: int = 256,
    progress: Progress | None = None,
    timeout: float | None = DEFAULT_TIMEOUT_S,
) -> Any:
    """Convert ``source`` as ``convert`` does and find where it goes wrong: returns a
    ``bridge.debug.DebugResult`` (``.culprit()``: the first node whose output diverges while its inputs
    agree, and the pass or translator that made it; ``.stage``: every pass's before/after comparison).
    ``model``: compare an already converted ONNX file with the source instead (no passes re-run).
    ``report``: .html (self-contained, with detection overlays and error histograms), .json or .md."""
    from bridge.debug.run import debug_conversion, write_debug_report

    cfg = ConvertConfig(
        source=_source(source, weights, options), output=Path(model or "debug.onnx"), framework=framework,
        export=ExportSpec(_specs(inputs), _axes(dynamic), opset, ()), tolerance=tolerance, seed=seed,
        detection_format=detection_format, max_detections=max_detections, feeds=Path(feeds) if feeds else None,
    )
    if report:
        refuse_overwriting_inputs(report, [source if isinstance(source, str | Path) else None, model, weights, feeds],
                                  "--report")
    from bridge.debug.breakage import ACTIVE as deliberate_breakages

    # in a child process like convert's runtimes: a native crash (SIGFPE) or a spinning Loop is an error
    # (in-process while a test breakage is applied: it patches this process only)
    result = call_isolated(partial(debug_conversion, cfg, model=load_model(model) if model else None,
                                   budget=budget_mb * 2**20), stage="bridge debug", timeout=timeout,
                           enabled=not deliberate_breakages,
                           max_memory=child_memory_limit(), progress=progress or (lambda _m: None))
    if report:
        write_debug_report(result, Path(report))
    return result


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
                           settings=settings, feeds=Path(feeds) if feeds else None, inputs=_specs(inputs), seed=seed,
                           timeout=timeout, max_memory=child_memory_limit(), progress=progress)
    if report:
        write_bench_report(result.to_dict(), Path(report))
    return result
