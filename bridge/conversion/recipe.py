"""The one conversion recipe: pick the adapter, export, run the ONNX stage, record the detection groups,
build the validation inputs - each with a status (as torch.onnx reports one status per stage).

``convert``, ``debug`` (and ``--localize``) and the migrate worker go through these functions, so they
export with the same inputs, generate the same feeds (graph-derived values for indices, shapes, axes) and
compare the same detection groups; ``validate`` reads an existing model's detection groups and output names
here too (``detection_groups(trusted=False)``). ``bridge.conversion.delivery`` runs the rest of ``convert``
(target artefacts, validation of every written file through ``bridge.conversion.check``, writing) and is its
entry.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import onnx

from bridge.config import DETECTION_META, ConvertConfig, InputSpec, check_names
from bridge.errors import UsageError
from bridge.io import tensor_size
from bridge.model import ModelContainer, PassRecord
from bridge.runtimes.base import TensorMeta
from bridge.runtimes.isolated import KeptWorker
from bridge.validation.compare import Comparison
from bridge.validation.detection.layouts import DetectionSpec, as_detection_specs
from bridge.validation.run import FeedSource, saved_detection_outputs

logger = logging.getLogger(__name__)
Progress = Callable[[str], None]
STAGES = ("adapter", "export", "onnx_stage", "target", "validation", "write")
# why validation did not run: asked not to / the source cannot run here / the model holds ops no runtime runs
SKIP_DISABLED, SKIP_SOURCE, SKIP_UNRUNNABLE = "disabled", "source", "unrunnable"


@dataclass
class StageStatus:
    """One stage of the recipe: ``ok``, ``failed``, ``skipped`` (``reason``, ``cause``) or ``not run``."""

    status: str = "not run"
    reason: str | None = None
    cause: str | None = None
    seconds: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


def new_stages() -> dict[str, StageStatus]:
    return {name: StageStatus() for name in STAGES}


class staged:
    """``with staged(stages, "export"):`` marks the stage ok (with its time) or failed (with the error)."""

    def __init__(self, stages: dict[str, StageStatus], name: str) -> None:
        self.stage, self.start = stages[name], time.perf_counter()

    def __enter__(self) -> StageStatus:
        return self.stage

    def __exit__(self, kind: Any, exc: BaseException | None, _tb: Any) -> None:
        self.stage.seconds = time.perf_counter() - self.start
        if isinstance(exc, KeyboardInterrupt):  # Ctrl-C: where it stopped, not a failure of the stage
            self.stage.status, self.stage.reason = "interrupted", "interrupted (Ctrl-C)"
        elif exc is not None:
            self.stage.status, self.stage.reason = "failed", f"{type(exc).__name__}: {exc}"
        elif self.stage.status == "not run":
            self.stage.status = "ok"


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
    validation_sizes: list[dict[str, list[int]]] = field(default_factory=list)  # input shapes of every size checked
    # why a model with dynamic axes was checked at one size only (the source failed at the second): the verdict
    # stands, proving nothing about those axes; --strict fails it
    second_size_skipped: str | None = None
    # why the candidates ran on one input only (the source failed on the second): --strict fails it
    second_input_skipped: str | None = None
    timings: dict[str, float] = field(default_factory=dict)
    written: bool = False
    target: dict[str, Any] | None = None  # the target's artefact report (e.g. the TensorFlow SavedModel)
    strict: bool = False  # a vacuous verdict (nothing real was compared) counts as a failure
    detections: list[dict[str, Any]] = field(default_factory=list)  # detector output groups compared detection-aware
    validation_feeds: dict[str, dict[str, Any]] = field(default_factory=dict)  # per input: shape, dtype, range, source
    export_inputs: str = ""  # what the exporter traced with
    warning_details: list[str] = field(default_factory=list)  # every grouped warning in full (report only)
    stages: dict[str, StageStatus] = field(default_factory=new_stages)
    files: list[dict[str, Any]] = field(default_factory=list)  # every delivered file and the verdicts covering it
    validation_required: bool = False  # --strict or an explicit --validate: a validation that cannot run fails
    bench: dict[str, Any] | None = None  # ``convert(bench=True)``: bridge.bench figures of the written model
    dataset: Any = None  # --dataset: bridge.validation.dataset.DatasetResult (its verdict is part of ``passed``)
    precision: Any = None  # --precision: bridge.precision.run.PrecisionResult (its verdict is part of ``passed``)
    config: ConvertConfig | None = field(default=None, repr=False, compare=False)  # what ran (not reported)

    @property
    def passed(self) -> bool:
        return (all(c.passed for c in self.validation) and not (self.strict and self.vacuous)
                and not (self.strict and (self.second_size_skipped or self.second_input_skipped))
                and not self.unproved and (self.dataset is None or self.dataset.passed)
                and (self.precision is None or self.precision.passed))  # --precision (issue 34)

    @property
    def vacuous(self) -> bool:
        return any(c.vacuous for c in self.validation)

    @property
    def unproved(self) -> bool:
        """Validation was required (``--strict`` or an explicit ``--validate``) but could not run."""
        stage = self.stages["validation"]
        return self.validation_required and stage.status == "skipped" and stage.cause != SKIP_DISABLED

    def to_dict(self) -> dict[str, Any]:
        return {
            "command": "convert", "source": self.source, "framework": self.framework, "output": str(self.output),
            "written": self.written, "exporter": self.exporter, "opset": self.opset,
            "inputs": [asdict(m) for m in self.inputs], "outputs": [asdict(m) for m in self.outputs],
            "notes": self.notes, "warnings": self.warnings, "passes": [asdict(p) for p in self.passes],
            "validation": [c.to_dict() for c in self.validation], "validation_skipped": self.validation_skipped,
            "validation_inputs": self.validation_inputs, "validation_sizes": self.validation_sizes,
            "second_size_skipped": self.second_size_skipped, "second_input_skipped": self.second_input_skipped,
            "passed": self.passed, "timings": self.timings,
            "target": self.target, "vacuous": self.vacuous, "strict": self.strict,
            "detections": self.detections, "validation_feeds": self.validation_feeds,
            "export_inputs": self.export_inputs, "warning_details": self.warning_details,
            "stages": {k: v.to_dict() for k, v in self.stages.items()}, "files": self.files, "bench": self.bench,
            **({} if self.dataset is None else {"dataset": self.dataset.to_dict(),  # --dataset (issue 33)
                                                "dataset_run": self.dataset.run_dict()}),
            **({} if self.precision is None else {"precision": self.precision.to_dict()}),  # issue 34
        }


# ---------------------------------------------------------------------------------------------- stages


def pick_adapter(cfg: ConvertConfig) -> Any:
    """``--framework``'s adapter (which must claim the source), or the first registered one that claims it;
    UsageError for an option given that this adapter would not read."""
    from adapters import detect_adapter, get_adapter
    from bridge.conversion.options import check_applies

    adapter = get_adapter(cfg.framework) if cfg.framework else detect_adapter(cfg.source)
    if not adapter.claims(cfg.source):
        raise UsageError(f"'{cfg.source.describe()}' does not look like a {adapter.framework} source")
    check_applies(cfg, adapter)  # an option this adapter would not read is refused, not ignored
    return adapter


def with_inputs_from(cfg: ConvertConfig, model: onnx.ModelProto | None) -> ConvertConfig:
    """``cfg`` with input shapes taken from an already converted ``model`` (every fixed input) or from the
    ``--feeds`` arrays, when the user gave no ``--input``: a source whose shapes cannot be inferred (an
    MXNet symbol) exports at the sizes the candidate was made for."""
    if cfg.export.inputs:
        return cfg
    specs: list[InputSpec] = []
    if cfg.feeds is not None:
        import numpy as np

        with np.load(cfg.feeds) as data:
            specs = [InputSpec(k, tuple(data[k].shape), data[k].dtype.name) for k in data.files]
    elif model is not None:
        from adapters.onnx import graph_input_specs

        specs = [s for s in graph_input_specs(model) if s.shape is not None]
    return replace(cfg, export=replace(cfg.export, inputs=tuple(specs))) if specs else cfg


def export(cfg: ConvertConfig, adapter: Any, stages: dict[str, StageStatus], progress: Progress,
           worker: KeptWorker | None = None) -> Any:
    """The adapter's export (in a child process when ``exports_in_child``); with ``worker``, that child is kept
    there when the adapter can run its reference in it (``keeps_export_child``)."""
    progress(f"exporting with the {adapter.framework} adapter")
    if cfg.export.opset_asked:  # every adapter exports at the asked opset: refuse one nothing runs first
        from opsets.conversion import check_target

        check_target(cfg.export.opset)

    with staged(stages, "export"):
        exported = export_in_child(cfg, adapter, keep=worker if keeps_export_child(adapter) else None) \
            if exports_in_child(cfg, adapter) else adapter.export(cfg.source, cfg.export)
    # imported after the export (onnxscript's version converter): while an export child runs, this process
    # stays small, and the two together are the process tree's peak
    from opsets.target import target_opset

    exported.opset, why = target_opset(cfg.export, exported.model)
    if why:
        exported.notes = [*exported.notes, why]
    return exported


def child_memory_limit() -> int:
    """The address-space limit of an export/reference/runtime child: twice the memory limit in force
    (frameworks reserve far more address space than they touch; the limit stops runaway allocations)."""
    from bridge.limits import max_memory

    return 2 * max_memory()


def exports_in_child(cfg: ConvertConfig, adapter: Any) -> bool:
    """Whether ``adapter`` exports ``cfg.source`` in a child process: adapters that import a heavy framework
    say so (``export_in_child``, with ``require_framework()`` checking it is installed); a live object stays in this process (it cannot travel), as does
    everything under ``--no-isolate``."""
    return bool(getattr(adapter, "export_in_child", False)) and cfg.isolate and cfg.source.obj is None


def keeps_export_child(adapter: Any) -> bool:
    """Whether ``adapter``'s export child may go on to run its reference (``reference_in_export_child``): the
    framework is then imported once per conversion. An adapter says so only when a model it builds again
    in that process is the one a fresh process would build (the PyTorch adapter restores the random
    generators a factory draws its weights from)."""
    return bool(getattr(adapter, "reference_in_export_child", False))


def export_in_child(cfg: ConvertConfig, adapter: Any, keep: KeptWorker | None = None) -> Any:
    """``adapter.export`` run in a child process, its ExportResult sent back and its model read from a file.

    The framework (torch, TensorFlow: hundreds of MB once imported, more after an exporter ran) then never
    enters this process, which keeps only the ONNX model while the validation children run the framework
    reference and the candidate runtimes: the process tree peaks at about the plain exporter's memory instead
    of the framework twice. The model travels as a file, read here once the child has ended: sent through the
    pipe it would be serialised in the child and received and parsed here while the child, at its largest,
    still lives (the exporter's peak plus the model two or three times over). No time limit (an export takes
    as long as it takes; the heartbeat says so) and the reference's memory limit. ``keep``: the child is
    kept there once the export succeeded (the reference runs in it next); the file is then read while it waits,
    freed of the export's leftovers, smaller than when it runs the reference next to this process. An adapter
    whose first attempt failed may ask for its fallback in a fresh child (``adapters.base.ExportRetry``): the
    export runs once more there, with the source options it names."""
    import shutil
    import tempfile

    from adapters.base import ExportRetry
    from bridge.runtimes.isolated import call_isolated

    adapter.require_framework()  # a missing framework is named here, before a child starts
    folder = Path(tempfile.mkdtemp(prefix="bridge-export-"))
    source = cfg.source
    try:
        for attempt in range(2):
            try:
                exported = call_isolated(partial(_export, adapter.framework, source, cfg.export,
                                                 folder / "exported.onnx"),
                                         stage=f"the {adapter.framework} export", timeout=None,
                                         max_memory=child_memory_limit(), keep=keep)
                break
            except ExportRetry as retry:  # the adapter's fallback, in a fresh child: its first try's leftovers died
                if attempt:
                    raise
                logger.info("%s", retry)
                source = replace(source, options={**source.options, **retry.options})
        exported.model = onnx.load(str(folder / "exported.onnx"))  # external data (over 2 GiB) read back too
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return exported


def _export(framework: str, source: Any, spec: Any, path: Path | None = None) -> Any:
    """The export (in the child): with ``path``, the model is written there and sent back without it, and the
    adapter may ask for its fallback in a fresh child (``adapters.base.ExportRetry``)."""
    from adapters import get_adapter
    from adapters.base import FRESH_RETRY

    token = FRESH_RETRY.set(path is not None)
    try:
        exported = get_adapter(framework).export(source, spec)
    finally:
        FRESH_RETRY.reset(token)
    if path is not None:
        from bridge.io import save_model

        save_model(exported.model, path)  # streamed: no serialised copy of the whole model in memory
        exported.model = onnx.ModelProto()
    return exported


def onnx_stage_steps(cfg: ConvertConfig, export: Any) -> Any:
    """The ONNX stage's passes for this conversion (``run_pipeline`` runs them, ``debug`` traces them)."""
    from bridge.passes.pipeline import conversion_pipeline
    from bridge.targets import get_target
    from bridge.validation.probe import probe_output_shapes

    target = get_target(cfg.to, **cfg.target_options)
    target_steps = getattr(target, "onnx_stage_steps", lambda: ())()
    return conversion_pipeline(opset=export.opset or cfg.export.opset, inputs=export.inputs, dynamic=cfg.export.dynamic,
                               detection_format=cfg.detection_format, max_detections=cfg.max_detections,
                               probe=probe_output_shapes, target_steps=target_steps)


def container_of(adapter: Any, export: Any, cfg: ConvertConfig) -> ModelContainer:
    return ModelContainer.from_proto(export.model, source_framework=adapter.framework, exporter=export.exporter,
                                     inputs=export.inputs, dynamic=cfg.export.dynamic, warnings=list(export.warnings))


def feed_source(cfg: ConvertConfig, export: Any, model: onnx.ModelProto, *, vary_dynamic: bool = True) -> FeedSource:
    """The validation inputs: ``--feeds``, or seeded data at the export's sizes, with values valid for the
    consumers in both the source's export and the converted ``model`` (indices in bounds, shapes, axes)."""
    graphs = (export.model, model) if isinstance(export.model, onnx.ModelProto) and export.model is not model else model
    return FeedSource(cfg.feeds, export.inputs, cfg.seed, vary_dynamic=vary_dynamic, values=cfg.input_values,
                      model=graphs)


def detection_groups(proto: onnx.ModelProto, declared: Sequence[str], *, trusted: bool = True,
                     warnings: list[str] | None = None) -> list[DetectionSpec]:
    """The detector output groups of the converted model, recorded in its metadata (``DETECTION_META``) so
    ``bridge validate`` compares them the same way later: ``--detections`` when given (names checked), else
    those a lowering pass recorded plus those found fed by NonMaxSuppression.

    ``trusted=False`` (a model bridge did not just write, e.g. ``validate``'s file under test): a recorded group
    decides *how* outputs are compared (matched by IoU, rows excused as ties), so it is kept only where the graph
    computes every output of it through a selection (NonMaxSuppression, TopK); a group recorded over outputs no
    selection feeds is compared elementwise, and ``warnings`` says so. Nor does a recorded group decide how the
    candidate's coordinates are read: its boxes are read in the source's box format (a recorded ``yxyx`` against
    an ``xyxy`` source would excuse swapped x and y), said in ``warnings``."""
    from bridge.validation.detection.layouts import (
        detect_detection_outputs,
        dump_detection_specs,
        with_nms_thresholds,
    )

    outputs = [o.name for o in proto.graph.output]
    if declared:
        specs = as_detection_specs(list(declared))
        for spec in specs:
            check_names("--detections", spec.candidate_names(), outputs, "output")
    else:
        specs = saved_detection_outputs(proto)
        if not trusted:
            specs = _selected(proto, specs, warnings if warnings is not None else [])
        covered = {n for s in specs for n in s.candidate_names()}
        if _has_op(proto.graph, "NonMaxSuppression"):  # shape inference inside is not free: only for detectors
            found = detect_detection_outputs(without_weights(proto))
            specs += [s for s in found if not covered & set(s.candidate_names())]
    if specs:
        props = {p.key: p for p in proto.metadata_props}
        entry = props.get(DETECTION_META) or proto.metadata_props.add(key=DETECTION_META)
        entry.value = dump_detection_specs(specs)
    return with_nms_thresholds(proto, specs)  # the tie rules' NMS threshold: read from the graph each time


# what makes a detector's rows a selection: the ops whose ties reorder or swap rows
_DETECTION_SELECTIONS = frozenset({"NonMaxSuppression", "TopK"})


def _selected(proto: onnx.ModelProto, specs: Sequence[DetectionSpec], warnings: list[str]) -> list[DetectionSpec]:
    """The recorded groups whose every output the graph computes through a selection op (a subgraph holding one
    counts); the others are said in ``warnings`` and left to the elementwise comparison."""
    producer = {o: n for n in proto.graph.node for o in n.output}
    memo: dict[str, bool] = {}

    def selected(name: str) -> bool:
        stack, seen = [name], set()
        while stack:
            value = stack.pop()
            if value in memo:
                if memo[value]:
                    return True
                continue
            node = producer.get(value)
            if node is None or value in seen:
                continue
            seen.add(value)
            if node.op_type in _DETECTION_SELECTIONS or any(
                    _has_op(g, op) for a in node.attribute for g in [*([a.g] if a.type == a.GRAPH else []), *a.graphs]
                    for op in _DETECTION_SELECTIONS):
                memo[name] = True
                return True
            stack.extend(i for i in node.input if i)
        memo[name] = False
        return False

    kept = []
    for spec in specs:
        unselected = [n for n in spec.candidate_names() if not selected(n)]
        if unselected:
            warnings.append(f"the model's metadata declares {', '.join(spec.candidate_names())} a detection group "
                            f"({spec.layout}), but no {' or '.join(sorted(_DETECTION_SELECTIONS))} computes "
                            f"{', '.join(unselected)}: compared elementwise (the file under test does not decide "
                            "how it is judged; declare a group with --detections)")
            continue
        if spec.box_format != spec.ref_box_format:  # a claim that turns the candidate's boxes before matching
            warnings.append(f"the model's metadata declares {spec.label}'s boxes {spec.box_format} while the "
                            f"source's are {spec.ref_box_format}: compared as {spec.ref_box_format} (the file under "
                            "test does not decide how its coordinates are read; declare the group with --detections "
                            "... box_format=FORMAT)")
            spec = replace(spec, box_format=spec.ref_box_format, reference_box_format=None)
        kept.append(spec)
    return kept


def _has_op(graph: onnx.GraphProto, op_type: str) -> bool:
    return any(n.op_type == op_type or any(_has_op(a.g, op_type) for a in n.attribute if a.type == a.GRAPH)
               or any(_has_op(g, op_type) for a in n.attribute for g in a.graphs) for n in graph.node)


def without_weights(proto: onnx.ModelProto, keep_bytes: int = 4096) -> onnx.ModelProto:
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


def source_output_names(model: onnx.ModelProto, detections: Sequence[DetectionSpec]) -> tuple[str, ...]:
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


def failure_report(cfg: ConvertConfig, exc: BaseException, stages: dict[str, StageStatus] | None = None) -> None:
    """The report of a conversion that raised: the error and how far each stage got; a Ctrl-C (KeyboardInterrupt)
    says the stage it stopped in (``interrupted``)."""
    from bridge.errors import EXIT_INTERRUPTED
    from bridge.report import write_report

    assert cfg.report is not None
    stopped = isinstance(exc, KeyboardInterrupt)
    reached = next((k for k, v in (stages or {}).items() if v.status == "interrupted"), None)
    message = f"interrupted (Ctrl-C) in the {reached or 'setup'} stage" if stopped else str(exc)
    write_report({"command": "convert", "source": cfg.source.describe(), "output": str(cfg.output), "written": False,
                  "passed": False, "interrupted": reached or "setup" if stopped else None,
                  "stages": {k: v.to_dict() for k, v in (stages or {}).items()},
                  "error": {"type": type(exc).__name__, "message": message,
                            "exit_code": EXIT_INTERRUPTED if stopped else getattr(exc, "exit_code", None)}}, cfg.report)
