"""The library entry points: convert, inspect, validate. The CLI only parses arguments and calls these.

Each accepts plain Python values (paths, "NAME:SHAPE" strings, objects) or the typed config
objects, returns a result object with ``to_dict()`` for reports, and raises BridgeError subclasses
for anything the user can fix (``ValidationMismatch`` carries the result that failed).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from bridge.config import (
    CONTRIB_DOMAIN,
    DEFAULT_OPSET,
    DEFAULT_TOLERANCE,
    ConvertConfig,
    DynamicAxis,
    ExportSpec,
    InputSpec,
    Source,
    Tolerance,
)
from bridge.diagnose import Problem, find_problems
from bridge.errors import AdapterUnavailableError, RuntimeLoadError, UsageError, ValidationMismatch
from bridge.io import load_model
from bridge.model import ModelContainer, PassRecord, bridge_metadata
from bridge.runtimes import activated, get_runtime
from bridge.runtimes.base import Runtime, TensorMeta
from bridge.validation.compare import Comparison, compare_outputs
from bridge.validation.inputs import load_feeds, make_inputs
from bridge.validation.results import RunResults

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

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.validation)

    def to_dict(self) -> dict[str, Any]:
        return {
            "command": "convert", "source": self.source, "framework": self.framework, "output": str(self.output),
            "written": self.written, "exporter": self.exporter, "opset": self.opset,
            "inputs": [asdict(m) for m in self.inputs], "outputs": [asdict(m) for m in self.outputs],
            "notes": self.notes, "warnings": self.warnings, "passes": [asdict(p) for p in self.passes],
            "validation": [c.to_dict() for c in self.validation], "validation_skipped": self.validation_skipped,
            "validation_inputs": self.validation_inputs, "passed": self.passed, "timings": self.timings,
            "target": self.target,
        }


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
) -> ConvertResult:
    """Convert ``source`` (path, ``module:factory``, or a framework object) to a validated ONNX file.

    The model is written only if validation passes (or is skipped); the report is always written.
    Raises ValidationMismatch (with ``.result``) when a runtime's outputs differ beyond tolerance.
    """
    output = Path(output)
    if to == "tensorflow" and output.suffix.lower() != ".onnx" and saved_model is None:
        # `--to tensorflow -o OUT_DIR`: the SavedModel goes to OUT_DIR, the validated ONNX beside it as OUT_DIR.onnx
        output, saved_model = output.with_name(output.name + ".onnx"), output
    cfg = ConvertConfig(
        source=_source(source, weights, options), output=output, framework=framework,
        export=ExportSpec(_specs(inputs), _axes(dynamic), opset, tuple(output_names)),
        validate=tuple(validate) if validate is not None else None, tolerance=tolerance,
        report=Path(report) if report else None, seed=seed, detection_format=detection_format,
        max_detections=max_detections, feeds=Path(feeds) if feeds else None, to=to,
        saved_model=Path(saved_model) if saved_model else None,
    )
    return _convert(cfg, progress or (lambda _msg: None))


def _convert(cfg: ConvertConfig, progress: Progress) -> ConvertResult:
    from adapters import detect_adapter, get_adapter

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
    detections = _detection_outputs(export.model, cfg.detection_format)
    from bridge.passes.pipeline import conversion_pipeline, run_pipeline

    start = time.perf_counter()
    run_pipeline(container, conversion_pipeline(opset=cfg.export.opset, inputs=export.inputs,
                                                dynamic=cfg.export.dynamic, detection_format=cfg.detection_format,
                                                max_detections=cfg.max_detections), progress)
    timings["passes_s"] = time.perf_counter() - start
    if detections:
        container.model.metadata_props[DETECTION_META] = json.dumps(detections)
    proto = container.to_proto()

    result = ConvertResult(
        source=cfg.source.describe(), framework=adapter.framework, output=cfg.output, exporter=export.exporter,
        opset=cfg.export.opset, inputs=_metas(proto.graph.input, proto), outputs=_metas(proto.graph.output, proto),
        notes=list(export.notes), warnings=container.warnings, passes=container.history, timings=timings,
    )

    staging: Path | None = None
    candidates: dict[str, Any] = {}
    try:
        if cfg.to == "tensorflow":
            from bridge.targets.tensorflow import export_saved_model

            progress("writing a TensorFlow SavedModel (onnx-tf)")
            # staged beside its destination (same filesystem), moved there only once validation passes
            cfg.saved_model_dir.parent.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(prefix=f".{cfg.saved_model_dir.name}.", dir=cfg.saved_model_dir.parent))
            target = export_saved_model(proto, staging / "saved_model")
            timings["target_s"] = target.seconds
            result.target = target.to_dict()
            result.notes.extend(target.notes)
            result.warnings.extend(target.warnings)
            candidates["tensorflow"] = target.path  # validate the SavedModel actually written, not a re-conversion
        _validate_and_write(cfg, adapter, export, proto, detections, candidates, result, timings, progress)
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
    return result


def _validate_and_write(cfg: ConvertConfig, adapter: Any, export: Any, proto: onnx.ModelProto,
                        detections: dict[str, str], candidates: dict[str, Any], result: ConvertResult,
                        timings: dict[str, float], progress: Progress) -> None:
    default_runtimes = ("onnxruntime", "tensorflow") if cfg.to == "tensorflow" else ("onnxruntime",)
    runtimes = cfg.validate if cfg.validate is not None else default_runtimes
    leftover = Counter(n.op_type for n in proto.graph.node if n.domain == CONTRIB_DOMAIN)
    if runtimes and leftover:
        ops = ", ".join(f"{op} x{n}" for op, n in sorted(leftover.items()))
        result.validation_skipped = (f"the model still contains {CONTRIB_DOMAIN} ops ({ops}) that no standard runtime "
                                     "runs; they need lowering before validation")
        result.warnings.append(result.validation_skipped)
    elif runtimes:
        start = time.perf_counter()
        with contextlib.ExitStack() as stack:
            try:
                reference = adapter.reference_runner(cfg.source, export)
                # activated once, for the whole validation; an unloadable reference (e.g. an old ONNX file
                # onnxruntime itself refuses, or a missing framework) skips validation with the reason
                stack.enter_context(activated(reference))
            except (AdapterUnavailableError, RuntimeLoadError) as exc:
                result.validation_skipped = f"source reference unavailable: {exc}"
                result.warnings.append(result.validation_skipped)
            else:
                progress(f"validating in {', '.join(runtimes)} against {reference.name}")
                feeds, _, comparisons = _validate_against(
                    proto, reference, runtimes, export.inputs, cfg.tolerance, cfg.seed, detections=detections,
                    feeds_file=cfg.feeds, candidates=candidates)
                result.warnings.extend(_vacuous_checks(comparisons))
                result.validation = comparisons
                result.validation_inputs = {k: list(v.shape) for k, v in feeds.items()}
        timings["validate_s"] = time.perf_counter() - start
    else:
        result.validation_skipped = "validation disabled (--validate none)"

    if result.passed:
        from bridge.io import save_model

        save_model(proto, cfg.output)
        if result.target is not None:
            from bridge.targets.tensorflow import move_saved_model

            result.target["path"] = str(move_saved_model(candidates["tensorflow"], cfg.saved_model_dir))
        result.written = True
    if cfg.report:
        from bridge.report import write_report

        write_report(result.to_dict(), cfg.report)
    if not result.passed:
        failing = "; ".join(c.summary() for c in result.validation if not c.passed)
        raise ValidationMismatch(f"converted model does not match the source ({failing}); "
                                 f"{cfg.output} was not written", result=result)


def _validate_against(
    proto: onnx.ModelProto, reference: Runtime, runtimes: Sequence[str], specs: Sequence[InputSpec],
    tolerance: Tolerance, seed: int, vary_dynamic: bool = True, detections: dict[str, str] | None = None,
    feeds_file: Path | None = None, candidates: dict[str, Any] | None = None,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], list[Comparison]]:
    """Run ``reference`` (already activated by the caller) and each named runtime on the same inputs;
    returns (feeds, reference outputs, comparisons)."""
    comparisons = []
    feeds: dict[str, np.ndarray] = {}
    ref_out: dict[str, np.ndarray] | None = None
    for name in runtimes:
        candidate = get_runtime(name, (candidates or {}).get(name, proto))
        with activated(candidate):
            if ref_out is None:
                metas = candidate.input_metadata()
                feeds = (load_feeds(feeds_file, metas) if feeds_file is not None
                         else make_inputs(metas, specs, seed=seed, vary_dynamic=vary_dynamic))
                ref_out = reference.infer(feeds)
            cand_out = candidate.infer(feeds)
        comparisons.append(compare_outputs(ref_out, cand_out, tolerance, reference_name=reference.name,
                                           candidate_name=name, detection_outputs=detections))
    return feeds, ref_out or {}, comparisons


DETECTION_META = "bridge.detection_outputs"  # metadata: source output name -> detection format it is emitted in


def _detection_outputs(model: onnx.ModelProto, output_format: str) -> dict[str, str]:
    """Graph outputs produced by a detection layer (MultiBoxDetection): compared detection-aware."""
    outputs = {o.name for o in model.graph.output}
    return {n.output[0]: output_format for n in model.graph.node
            if n.domain == CONTRIB_DOMAIN and n.op_type == "MultiBoxDetection" and n.output[0] in outputs}


def _vacuous_checks(comparisons: Sequence[Comparison]) -> list[str]:
    return [f"{c.candidate}: output '{o.name}' had no detections on either side, so its check proves little; "
            "validate on real inputs with --feeds FILE.npz" for c in comparisons for o in c.outputs
            if o.note.startswith("detection-aware") and " 0 matched, 0 only in reference, 0 only in candidate" in o.note]


def _saved_detection_outputs(model: onnx.ModelProto) -> dict[str, str]:
    raw = next((p.value for p in model.metadata_props if p.key == DETECTION_META), None)
    return dict(json.loads(raw)) if raw else {}


def _source_output_names(model: onnx.ModelProto, detections: dict[str, str]) -> tuple[str, ...]:
    """The model's outputs as the source names them: a detection group stands for its source output."""
    from bridge.validation.detection import detection_output_names

    group = {n: src for src, fmt in detections.items() for n in detection_output_names(src, fmt)}
    names: list[str] = []
    for o in model.graph.output:
        name = group.get(o.name, o.name)
        if name not in names:
            names.append(name)
    return tuple(names)


def _metas(values: Iterable[onnx.ValueInfoProto], model: onnx.ModelProto) -> list[TensorMeta]:
    inits = {i.name for i in model.graph.initializer}
    return [TensorMeta.from_value_info(vi) for vi in values if vi.name not in inits]


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


@dataclass
class InspectReport:
    path: str
    ir_version: int
    opset_imports: dict[str, int]
    producer: str
    inputs: list[TensorMeta]
    outputs: list[TensorMeta]
    op_histogram: dict[str, int]
    parameter_count: int
    parameter_bytes: int
    problems: list[Problem]
    bridge: dict[str, str]

    @property
    def symbolic(self) -> list[str]:
        return [f"{m.name}[{i}]={d}" for m in (*self.inputs, *self.outputs) for i, d in m.symbolic_dims]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["symbolic_dims"] = self.symbolic
        return d


def inspect(model: str | Path, *, load_in_runtime: bool = True) -> InspectReport:
    """Describe an ONNX file: opsets, IR version, signature (symbolic dims flagged), ops, size, problems."""
    proto = load_model(model)
    hist = Counter((f"{n.domain}::{n.op_type}" if n.domain not in ("", "ai.onnx") else n.op_type)
                   for n in _all_nodes(proto.graph))
    count = 0
    nbytes = 0
    for init in proto.graph.initializer:
        n = int(np.prod(init.dims)) if init.dims else 1
        count += n
        nbytes += n * np.dtype(onnx.helper.tensor_dtype_to_np_dtype(init.data_type)).itemsize
    return InspectReport(
        path=str(model), ir_version=proto.ir_version,
        opset_imports={o.domain or "ai.onnx": o.version for o in proto.opset_import},
        producer=f"{proto.producer_name} {proto.producer_version}".strip(),
        inputs=_metas(proto.graph.input, proto), outputs=_metas(proto.graph.output, proto),
        op_histogram=dict(hist.most_common()), parameter_count=count, parameter_bytes=nbytes,
        problems=find_problems(proto, load_in_runtime=load_in_runtime), bridge=bridge_metadata(proto),
    )


def _all_nodes(graph: onnx.GraphProto) -> Iterable[onnx.NodeProto]:
    for node in graph.node:
        yield node
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _all_nodes(attr.g)
            for g in attr.graphs:
                yield from _all_nodes(g)


# ---------------------------------------------------------------------------------------------- validate


@dataclass
class ValidateResult:
    model: str
    reference: str
    comparisons: list[Comparison]
    inputs: dict[str, list[int]]
    saved_reference: str | None = None

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.comparisons)

    def to_dict(self) -> dict[str, Any]:
        return {"command": "validate", "model": self.model, "reference": self.reference, "passed": self.passed,
                "inputs": self.inputs, "comparisons": [c.to_dict() for c in self.comparisons],
                "saved_reference": self.saved_reference}


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
) -> ValidateResult:
    """Compare ``model`` in ``runtime`` with a source model (run now) or a saved RunResults file.

    ``save_reference`` stores the reference run (inputs + outputs) so another environment can
    validate against it later with ``reference=``. Raises ValidationMismatch (with ``.result``).
    """
    if (source is None) == (reference is None):
        raise UsageError("validate needs exactly one of --source (run the source model) or --reference (saved results)")
    runtimes = [runtime] if isinstance(runtime, str) else list(runtime)
    proto = load_model(model)
    specs = _specs(inputs)
    detections = _saved_detection_outputs(proto)
    comparisons: list[Comparison] = []
    if reference is not None:
        saved = RunResults.load(Path(reference))
        run_feeds = saved.inputs
        for name in runtimes:
            with activated(get_runtime(name, proto)) as candidate:
                out = candidate.infer(run_feeds)
            comparisons.append(compare_outputs(saved.outputs, out, tolerance,
                                               reference_name=f"{saved.runtime} ({reference})", candidate_name=name,
                                               detection_outputs=detections))
        ref_name = str(reference)
    else:
        from adapters import detect_adapter, get_adapter
        from adapters.base import ExportResult
        from adapters.onnx import graph_input_specs

        src = _source(source, weights, options)
        adapter = get_adapter(framework) if framework else detect_adapter(src)
        given = {s.name: s for s in specs}
        model_specs = tuple(given.get(s.name, s) for s in graph_input_specs(proto))
        export = ExportResult(model=proto, exporter="(existing model)", inputs=model_specs,
                              output_names=_source_output_names(proto, detections))
        runner = adapter.reference_runner(src, export)
        with activated(runner):
            run_feeds, ref_out, comparisons = _validate_against(proto, runner, runtimes, model_specs, tolerance, seed,
                                                                vary_dynamic=False, detections=detections,
                                                                feeds_file=Path(feeds) if feeds else None)
        ref_name = f"{runner.name} ({src.describe()})"
        if save_reference is not None:
            RunResults(dict(run_feeds), ref_out, runner.name,
                       {"source": src.describe(), "seed": seed}).save(Path(save_reference))
    result = ValidateResult(str(model), ref_name, comparisons, {k: list(v.shape) for k, v in run_feeds.items()},
                            str(save_reference) if save_reference and source is not None else None)
    if report:
        from bridge.report import write_report

        write_report(result.to_dict(), Path(report))
    if not result.passed:
        raise ValidationMismatch("; ".join(c.summary() for c in comparisons if not c.passed), result=result)
    return result
