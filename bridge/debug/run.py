"""``bridge debug``: convert like ``bridge convert``, then find where the converted model goes wrong.

Steps: export with the adapter; run the ONNX stage one pass at a time with snapshots
(``passes.trace_pipeline``); run the source reference and the final model on the same inputs and
compare the outputs (the one validation run, ``conversion.check``: detection-aware where the stage recorded
detection outputs, on a second input and at a second size of every dynamic axis as ``convert`` does: the
verdict agrees with convert's on a model wrong only at another batch); compare every intermediate tensor the source and
the converted model share (``localize.compare_tensors`` over ``sources.source_taps``) and name the culprit node, the pass or
translator that produced it (``StageTrace.provenance``); compare the model before and after each pass
(``passes.localize_passes``); the tensor and pass localisation run at the first size only (a note says
so when the outputs were checked at more). The result also carries plain data for the HTML report:
per-element error histograms of failing outputs and detection overlays (boxes of both sides on the input images).
Runs in the debug child process (``bridge.api.debug``), one chunk of tensors at a time; the final comparison
runs there too, without further children (the reference's taps come next in the same process).
"""

from __future__ import annotations

import tempfile
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from bridge.config import ConvertConfig, Tolerance
from bridge.conversion.sources import AliasedTaps, SourceTaps, source_taps
from bridge.debug.localize import Divergence, compare_tensors
from bridge.debug.passes import EXPORT, StageTrace, localize_passes, node_makers, trace_pipeline
from bridge.debug.tensors import TensorError, error_histogram, tensor_error
from bridge.errors import AdapterUnavailableError, NodeError, ReferenceUnavailableError, RuntimeLoadError
from bridge.inspection import graph_metas
from bridge.provenance import tensor_aliases
from bridge.report.images import Box, Overlay, as_display_image
from bridge.runtimes.base import TensorMeta
from bridge.validation.compare import Comparison, compare_outputs
from bridge.validation.detection.layouts import DetectionSpec
from bridge.validation.graph import DEFAULT_BUDGET_BYTES, OnnxTaps
from bridge.validation.layout_aliases import check_claimed_aliases
from bridge.validation.run import random_outputs

Progress = Callable[[str], None]
MAX_OVERLAYS = 4  # images drawn per detection output


@dataclass
class DebugResult:
    """Everything ``bridge debug`` found; ``overlays`` are pictures' data for the HTML report (not in to_dict)."""

    source: str
    framework: str
    exporter: str
    opset: int
    inputs: list[TensorMeta]
    outputs: list[TensorMeta]
    stage: StageTrace
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    validation: list[Comparison] = field(default_factory=list)
    validation_skipped: str | None = None
    validation_inputs: dict[str, list[int]] = field(default_factory=dict)
    validation_sizes: list[dict[str, list[int]]] = field(default_factory=list)  # input shapes of every size checked
    second_size_skipped: str | None = None  # why a model with dynamic axes was checked at one size only
    divergence: Divergence | None = None
    granularity: str = ""
    provenance: dict[str, str] = field(default_factory=dict)  # culprit region node -> pass that made it (or export)
    histograms: dict[str, dict[str, Any]] = field(default_factory=dict)
    overlays: list[Overlay] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    output: str | None = None

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.validation) and self.culprit() is None

    def culprit_pass(self) -> str | None:
        """The pass that created most of the culprit's nodes, or EXPORT (the adapter). Passes whose own
        before/after comparison covered the culprit tensor and found it unchanged are not blamed: the
        difference was there before them."""
        made = list(self.provenance.values())
        d = self.divergence.culprit if self.divergence is not None else None
        cleared = self.stage.cleared(d.tensor) if d is not None else set()
        passes = [p for p in made if p != EXPORT and p not in cleared]
        if passes:
            return Counter(passes).most_common(1)[0][0]
        return EXPORT if made else None

    def culprit(self) -> dict[str, Any] | None:
        """The verdict: the node (and pass) to blame, or None when nothing diverges."""
        d = self.divergence.culprit if self.divergence is not None else None
        if d is not None:
            made_by = self.culprit_pass()
            changed = self.stage.culprit
            if changed is not None and made_by in (EXPORT, None):
                # a pass moved a tensor's values: it outranks "this node came from the export" (e.g. a wrong
                # constant folded into an input of an exported node)
                made_by, by = changed.record.name, f"rewritten by {changed.record.name} ({changed.summary()})"
            elif made_by == EXPORT:
                by = f"emitted by the {self.framework} adapter" + (
                    f" (its translation of {d.source_node.op})" if d.source_node else "")
            else:
                by = f"rewritten by {made_by}" if made_by else ""
            node = d.source_node.name if d.source_node else (d.node.name if d.node else d.tensor)
            op = d.source_node.op if d.source_node else (d.node.op if d.node else "?")
            attrs = d.source_node.attributes if d.source_node else (d.node.attributes if d.node else {})
            return {"kind": "source-vs-converted", "node": node, "op": op, "attributes": attrs, "tensor": d.tensor,
                    "onnx_node": d.node.to_dict() if d.node else None, "pass": made_by, "made_by": by,
                    "error": d.error.to_dict(), "reference": d.reference.to_dict(), "candidate": d.candidate.to_dict(),
                    "inputs": [{"tensor": n, "reference": r.to_dict() if r else None,
                                "candidate": c.to_dict() if c else None}
                               for n, r, c in self.divergence.culprit_inputs()],  # type: ignore[union-attr]
                    "summary": f"{self.divergence.summary()}" + (f"; {by}" if by else "")}  # type: ignore[union-attr]
        p = self.stage.culprit
        if p is not None and p.divergence is not None:
            row = p.divergence.culprit or p.divergence.first_divergent
            assert row is not None
            return {"kind": "pass", "node": row.node.name if row.node else row.tensor,
                    "op": row.node.op if row.node else (row.source_node.op if row.source_node else "?"),
                    "attributes": row.node.attributes if row.node else {}, "tensor": row.tensor,
                    "onnx_node": row.node.to_dict() if row.node else None, "pass": p.record.name,
                    "made_by": f"rewritten by {p.record.name}", "error": row.error.to_dict(),
                    "reference": row.reference.to_dict(), "candidate": row.candidate.to_dict(),
                    "inputs": [{"tensor": n, "reference": r.to_dict() if r else None,
                                "candidate": c.to_dict() if c else None} for n, r, c in p.divergence.culprit_inputs()],
                    "summary": p.summary()}
        return None

    def to_dict(self) -> dict[str, Any]:
        return {
            "command": "debug", "source": self.source, "framework": self.framework, "exporter": self.exporter,
            "opset": self.opset, "output": self.output, "written": self.output is not None,
            "inputs": [asdict(m) for m in self.inputs], "outputs": [asdict(m) for m in self.outputs],
            "notes": self.notes, "warnings": self.warnings, "passed": self.passed, "culprit": self.culprit(),
            "passes": [v.to_dict() for v in self.stage.verdicts],
            "pass_localization": {"culprit": self.stage.to_dict()["culprit"], "notes": self.stage.notes},
            "validation": [c.to_dict() for c in self.validation], "validation_skipped": self.validation_skipped,
            "validation_inputs": self.validation_inputs, "validation_sizes": self.validation_sizes,
            "second_size_skipped": self.second_size_skipped, "granularity": self.granularity,
            "divergence": self.divergence.to_dict() if self.divergence else None, "provenance": self.provenance,
            "histograms": self.histograms, "overlays": [o.title for o in self.overlays], "timings": self.timings,
        }


def debug_conversion(cfg: ConvertConfig, *, model: onnx.ModelProto | None = None, budget: int = DEFAULT_BUDGET_BYTES,
                     progress: Progress | None = None, workdir: Path | None = None) -> DebugResult:
    """Convert ``cfg.source`` pass by pass and localise any divergence from the source framework.

    With ``model`` (an already converted ONNX model, e.g. ``bridge validate --localize``) the source is
    exported only for its reference runner and taps, and ``model`` is compared with it (no passes run).
    """
    from bridge.conversion import recipe

    say = progress or (lambda _m: None)
    cfg = recipe.with_inputs_from(cfg, model)  # --localize of a given model: its input shapes, or the feeds'
    stages = recipe.new_stages()
    with recipe.staged(stages, "adapter"):
        adapter = recipe.pick_adapter(cfg)
    export = recipe.export(cfg, adapter, stages, say)
    timings: dict[str, float] = {"export_s": stages["export"].seconds or 0.0}
    with tempfile.TemporaryDirectory(prefix="bridge-debug-", dir=workdir) as tmp:
        if model is None:
            container = recipe.container_of(adapter, export, cfg)
            t = time.perf_counter()
            trace = trace_pipeline(container, recipe.onnx_stage_steps(cfg, export), Path(tmp), say)
            timings["passes_s"] = time.perf_counter() - t
            final, warnings = container.to_proto(), list(container.warnings)
        else:
            from bridge.passes.attributes import check_model_attributes

            try:  # a bad attribute (group=0) would crash the runtime loading it, naming nothing
                check_model_attributes(model)
            except NodeError as exc:
                raise NodeError(exc.node, exc.op, f"the converted model (--model): {exc}") from None
            trace, final, warnings = StageTrace([], []), model, list(export.warnings)
            trace.notes.append("a converted model was given: the ONNX stage's passes were not re-run")
        result = DebugResult(
            source=cfg.source.describe(), framework=adapter.framework, exporter=export.exporter,
            opset=export.opset or cfg.export.opset, inputs=graph_metas(final.graph.input, final),
            outputs=graph_metas(final.graph.output, final), stage=trace, notes=list(export.notes),
            warnings=warnings, timings=timings)
        # the groups convert compares; a given model's recorded groups only where its graph computes them
        detections = recipe.detection_groups(final, cfg.detections, trusted=model is None, warnings=result.warnings)
        feeds, ref_outputs = _compare_outputs(cfg, adapter, export, final, detections, result, say)
        t = time.perf_counter()
        if ref_outputs is not None:
            taps = _checked_taps(source_taps(adapter.framework, cfg.source, export,
                                             adapter.reference_runner(cfg.source, export), trace_feeds=feeds),
                                 final, feeds, cfg.tolerance, result, say)
            result.granularity = taps.granularity
            say(f"comparing every tensor {taps.framework} and the converted model share")
            result.divergence = _localize_source(taps, final, feeds, cfg.tolerance, detections, budget)
            culprit = result.divergence.culprit
            if culprit is not None:  # read from the nodes' provenance (a given model carries it too)
                result.provenance = node_makers(final, [n.name for n in culprit.region] or
                                                ([culprit.node.name] if culprit.node else []))
        timings["localize_s"] = time.perf_counter() - t
        if trace.snapshots:
            t = time.perf_counter()
            localize_passes(trace, feeds, cfg.tolerance, budget, say)
            timings["passes_compare_s"] = time.perf_counter() - t
        result.notes.extend(trace.notes)
        if len(result.validation_sizes) > 1:
            result.notes.append(_sizes_note(result))
        if ref_outputs is not None:
            _visuals(result, final, feeds, ref_outputs, detections)
    return result


def _checked_taps(taps: SourceTaps, final: onnx.ModelProto, feeds: Mapping[str, np.ndarray], tolerance: Tolerance,
                  result: DebugResult, say: Progress) -> SourceTaps:
    """``taps`` plus the layout aliases ``final`` records (a tensor a pass moved a Transpose across is the source's,
    transposed) that hold: measured against the source on ``feeds`` first, as validation's tie proof measures them
    (``check_claimed_aliases``) - the model may be a given file, and a false claim would show a divergence (or an
    agreement) at a tensor where there is none. A claim not used is said in the warnings."""
    claimed = tensor_aliases({p.key: p.value for p in final.metadata_props})
    if not claimed:
        return taps
    candidate = OnnxTaps(final)
    checked = check_claimed_aliases(final, claimed, taps.names(), feeds, lambda names: taps.run(feeds, list(names)),
                                    lambda names: candidate.run(feeds, list(names)), tolerance, say)
    if checked.rejected:
        result.warnings.append(checked.statement())
    return AliasedTaps(taps, checked.as_metadata()) if checked.kept else taps


def _sizes_note(result: DebugResult) -> str:
    """What was compared at which size: the outputs at every size, the tensors and passes at the first only."""
    first = ", ".join(f"{k}{v}" for k, v in result.validation_sizes[0].items())
    others = " and ".join(", ".join(f"{k}{v}" for k, v in s.items()) for s in result.validation_sizes[1:])
    note = f"the outputs were compared at {first} and {others}; the tensors and passes at {first} only"
    d = result.divergence
    if not all(c.passed for c in result.validation) and d is not None and not any(r.diverges for r in d.rows):
        note += (f": the outputs differ, yet no compared tensor diverges at {first}, so the model goes wrong at "
                 "another size (no culprit node can be named from this size)")
    return note


def write_debug_report(result: DebugResult, path: Path) -> None:
    """``.html``: the self-contained report with pictures; ``.json`` / ``.md`` as every command writes them."""
    if Path(path).suffix.lower() in (".html", ".htm"):
        from bridge.report.html import write_html

        write_html(result.to_dict(), Path(path), result.overlays)
    else:
        from bridge.report import write_report

        write_report(result.to_dict(), Path(path))


def _compare_outputs(cfg: ConvertConfig, adapter: Any, export: Any, final: onnx.ModelProto,
                     detections: Sequence[DetectionSpec], result: DebugResult, say: Progress
                     ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray] | None]:
    """The final outputs compared as ``bridge convert`` does (one ``Check``: the source, the model in the
    runtimes convert validates the delivery format in, the same inputs, second input and size); the inputs
    used and the reference outputs. In the debug child the reference runs here (its taps come next)."""
    from bridge.conversion.check import Check, Isolation, SourceReference, model_candidates, run_check
    from bridge.conversion.recipe import feed_source
    from bridge.runtimes.isolated import in_isolated_child
    from bridge.targets import get_target

    source = feed_source(cfg, export, final)  # the inputs convert validates with (graph-derived values included)
    isolation = Isolation(cfg.isolate and not in_isolated_child(), cfg.timeout)
    t = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bridge-debug-check-") as workdir:
        candidates = model_candidates(final, get_target(cfg.to).default_runtimes, Path(workdir), isolation)
        check = Check(SourceReference(adapter.framework, cfg.source, export), candidates, source, cfg.tolerance,
                      detections=detections, model=final, random_outputs=random_outputs(export.model),
                      isolation=isolation, workdir=Path(workdir), progress=say)
        try:
            say(f"validating in {', '.join(candidates)} against the {adapter.framework} source")
            checked = run_check(check)
        except (AdapterUnavailableError, ReferenceUnavailableError, RuntimeLoadError) as exc:
            result.validation_skipped = f"source reference unavailable: {exc}"
            result.warnings.append(result.validation_skipped + "; only the passes are compared")
            weights = {i.name for i in final.graph.initializer}
            return source.make([m for m in graph_metas(final.graph.input, final) if m.name not in weights]), None
        finally:
            result.timings["validate_s"] = time.perf_counter() - t
    result.warnings.extend(checked.warnings)
    result.validation = checked.comparisons
    result.validation_inputs = checked.input_shapes()
    result.validation_sizes = checked.sizes
    result.second_size_skipped = checked.second_size_skipped
    return dict(checked.run.feeds), dict(checked.run.reference_outputs)


def _localize_source(taps: SourceTaps, final: onnx.ModelProto, feeds: Mapping[str, np.ndarray], tolerance: Tolerance,
                     detections: Sequence[DetectionSpec], budget: int) -> Divergence:
    candidate = OnnxTaps(final)
    # node outputs, and constants the ONNX stage folded from source tensors (compared as read from the model)
    shared = sorted(taps.names() & (set(candidate.index.order) | candidate.index.initializers))
    if not shared:
        shared = sorted(set(candidate.index.outputs) & taps.names())

    def run_reference(f: Mapping[str, np.ndarray], names: Sequence[str]) -> dict[str, np.ndarray]:
        return taps.run(f, names)

    divergence = compare_tensors(candidate.index, shared, run_reference, candidate.run, feeds, tolerance,
                                 reference=taps.framework, candidate="converted", describe=taps.describe,
                                 budget=budget, judge=_detection_judge(detections, tolerance))
    if len(shared) <= len(candidate.index.outputs):
        divergence.notes.append(f"{taps.framework}: {taps.granularity}")
    return divergence


def _detection_judge(detections: Sequence[DetectionSpec], tolerance: Tolerance
                     ) -> Callable[[str, np.ndarray, np.ndarray], TensorError | None]:
    """A detection output held in one tensor is judged detection by detection (NMS order among tied
    scores is not an error); groups spread over several tensors are compared elementwise, tensor by tensor."""
    single = {spec.candidate_names()[0]: spec for spec in detections
              if spec.candidate_names() == spec.reference_names() and len(spec.candidate_names()) == 1}

    def judge(name: str, ref: np.ndarray, cand: np.ndarray) -> TensorError | None:
        spec = single.get(name)
        if spec is None:
            return None
        comp = compare_outputs({name: ref}, {name: cand}, tolerance, detection_outputs=[spec])
        o = next((x for x in comp.outputs if x.name == name or name in x.covers), None)
        if o is None:
            return None
        figures = tensor_error(ref, cand, tolerance, name)
        return TensorError(o.passed, figures.max_abs, figures.max_rel, figures.mismatch_fraction, o.note)
    return judge


def _visuals(result: DebugResult, final: onnx.ModelProto, feeds: Mapping[str, np.ndarray],
             ref_outputs: Mapping[str, np.ndarray], detections: Sequence[DetectionSpec]) -> None:
    """Error histograms of failing outputs and detection overlays (plain data for bridge.report)."""
    failing = {n for c in result.validation for o in c.outputs if not o.passed for n in (o.covers or [o.name])}
    groups = {n for spec in detections for n in spec.candidate_names()}
    wanted = sorted((failing | groups) & {o.name for o in final.graph.output})
    if not wanted:
        return
    cand = OnnxTaps(final).run(feeds, wanted)
    for name in sorted(failing):
        if name in cand and name in ref_outputs:
            hist = error_histogram(ref_outputs[name], cand[name])
            if hist is not None:
                result.histograms[name] = hist
    image_input = next((k for k, v in feeds.items() if v.ndim == 4 and (v.shape[1] in (1, 3) or v.shape[-1] in (1, 3))),
                       None)
    if image_input is None or not detections:
        return
    try:
        from bridge.validation.detection.layouts import read_detection_pair
        from bridge.validation.detection.matching import match_pairs

        for spec in detections:
            ref_dets, cand_dets = read_detection_pair(spec, ref_outputs, cand)
            for i, (r, c) in enumerate(zip(ref_dets, cand_dets, strict=False)):
                if i >= MAX_OVERLAYS:
                    break
                ri, cj, _iou = match_pairs(r, c)
                image = as_display_image(feeds[image_input][i])
                coords = np.concatenate([np.asarray(r.boxes).reshape(-1), np.asarray(c.boxes).reshape(-1)])
                finite = coords[np.isfinite(coords)]
                normalised = bool(finite.size == 0 or np.abs(finite).max() <= 1.5)
                result.overlays.append(Overlay(
                    f"{spec.label}: image {i}", image,
                    _boxes(r, set(ri.tolist())), _boxes(c, set(cj.tolist())), normalised))
    except Exception as exc:  # the overlays are a picture: never fail the diagnosis over them
        result.warnings.append(f"detection overlays left out: {type(exc).__name__}: {exc}")


def _boxes(d: Any, matched: set[int]) -> list[Box]:
    boxes = np.asarray(d.boxes, np.float64).reshape(-1, 4)
    return [Box(float(boxes[k, 0]), float(boxes[k, 1]), float(boxes[k, 2]), float(boxes[k, 3]), int(d.classes[k]),
                float(d.scores[k]), k in matched) for k in range(len(boxes))]
