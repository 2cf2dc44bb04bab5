"""A reduced-precision variant, built and judged on the dataset, with the accuracy-aware fallback.

``deliver_variant`` is the one entry (``convert`` calls it once the fp32 artefact passed its elementwise
validation). Round 0 builds the variant with the float region of ``bridge.precision.regions`` (plus
``--keep-float``) and judges it with the dataset judge's run (``bridge.validation.dataset.validate_with_settings``,
what ``bridge.conversion.dataset_check`` runs; ``convert`` calls this from its check as
``bridge.conversion.precision_check.PrecisionJudge``): the source framework is the reference, the fp32 artefact
and the variant are the candidates (side by side, same images), and the variant passes when its agreement with the source (AP@0.5) and its mAP drop (with ``--labels``) stay within
the reduced-precision budget.

When it fails and the builder can keep chosen layers float, the cost of quantizing each layer is measured
once (``bridge.precision.sensitivity``, on the onnxruntime QDQ model: the same ranking serves every target),
and round r keeps the 2^r - 1 most costly layers float (1, 3, 7, ...), rebuilt and judged again, for at most
``--fallback-rounds`` rounds; then a clear FAIL naming the worst layers and their costs. The source's
outputs are computed once and reused by every round (``CachedReference``).
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from bridge.errors import BridgeError
from bridge.precision.base import VariantBuild, VariantBuilder, file_size
from bridge.precision.calibration import Calibration, load_calibration
from bridge.precision.options import PrecisionSettings
from bridge.precision.sensitivity import LayerCost
from bridge.runtimes.base import Runtime, TensorMeta

logger = logging.getLogger(__name__)
Progress = Callable[[str], None]
CandidateSource = Runtime | Callable[[], Runtime]
COST_SAMPLES = 16  # calibration images the per-layer cost is measured on
WORST_SHOWN = 5  # layers named in a failure
CACHE_LIMIT = 1 << 30  # bytes of source outputs kept for the rounds after the first


class CachedReference:
    """A reference runtime whose outputs are kept by input (a hash of the feeds) up to ``limit`` bytes, so
    every judging round after the first reuses the source's results; loaded only on a miss."""

    def __init__(self, runtime: Runtime, limit: int = CACHE_LIMIT) -> None:
        self.runtime, self.limit = runtime, limit
        self.name = runtime.name
        self._cache: dict[str, dict[str, np.ndarray]] = {}
        self._bytes = 0
        self._active = False
        self.misses = 0

    def activate(self) -> None:  # on the first miss
        pass

    def infer(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        digest = hashlib.sha256()
        for name in sorted(feeds):
            array = np.ascontiguousarray(feeds[name])
            digest.update(f"{name}{array.dtype}{array.shape}".encode())
            digest.update(array.tobytes())
        key = digest.hexdigest()
        if key in self._cache:
            return {k: v.copy() for k, v in self._cache[key].items()}
        if not self._active:
            self.runtime.activate()
            self._active = True
        self.misses += 1
        outputs = self.runtime.infer(feeds)
        size = sum(np.asarray(v).nbytes for v in outputs.values())
        if self._bytes + size <= self.limit:
            self._cache[key] = {k: np.array(v) for k, v in outputs.items()}
            self._bytes += size
        return outputs

    def deactivate(self) -> None:
        if self._active:
            self.runtime.deactivate()
            self._active = False

    def input_metadata(self) -> Sequence[TensorMeta]:
        return self.runtime.input_metadata()


@dataclass
class Round:
    """One build and its judgement."""

    index: int
    kept_float: list[str]
    build: VariantBuild | None = None
    figures: dict[str, Any] = field(default_factory=dict)  # the variant's dataset figures
    failures: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def passed(self) -> bool:
        return not self.failures and self.error is None and self.build is not None

    def to_dict(self) -> dict[str, Any]:
        return {"round": self.index, "kept_float": self.kept_float, "passed": self.passed,
                "build": None if self.build is None else self.build.to_dict(), "figures": self.figures,
                "failures": self.failures, "error": self.error}


@dataclass
class PrecisionResult:
    """The reduced-precision delivery: every round, the figures of fp32 and the variant side by side, the
    per-layer costs when measured, the verdict, and (after ``convert``'s bench) the speed of both."""

    precision: str
    target: str
    runtime: str
    settings: PrecisionSettings
    destination: Path
    fp32_artefact: Path | None = None
    rounds: list[Round] = field(default_factory=list)
    costs: list[LayerCost] = field(default_factory=list)
    costs_measured_on: str = ""
    source: dict[str, Any] = field(default_factory=dict)  # the source's dataset figures
    fp32: dict[str, Any] = field(default_factory=dict)  # the fp32 artefact's dataset figures
    dataset: Any = None  # the last round's DatasetResult
    calibration: str | None = None
    sizes: dict[str, int] = field(default_factory=dict)  # "fp32" / precision -> bytes on disk
    speed: dict[str, Any] | None = None  # bridge.bench figures: {"runners": {...}, "p50_ms": {...}, "ratio": {...}}
    written: bool = False
    failure: str | None = None
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return bool(self.rounds) and self.rounds[-1].passed and self.failure is None

    @property
    def final(self) -> Round | None:
        return self.rounds[-1] if self.rounds else None

    @property
    def variant_key(self) -> str:
        return f"{self.runtime} {self.precision}"

    @property
    def fp32_key(self) -> str:
        return f"{self.runtime} fp32"

    def side_by_side(self) -> list[dict[str, Any]]:
        """One row for fp32 and one for the variant: agreement, mAP (and drop), latency b1/b4, size."""
        rows = []
        src = self.source
        for label, figures in (("fp32", self.fp32), (self.precision, self.final.figures if self.final else {})):
            row: dict[str, Any] = {"precision": label, "runtime": self.runtime,
                                   "agreement_ap50": figures.get("agreement_ap50"),
                                   "agreement_ap50_95": figures.get("agreement_ap50_95"),
                                   "map50": figures.get("map50"), "map50_95": figures.get("map50_95"),
                                   "map50_drop": None if figures.get("map50") is None or src.get("map50") is None
                                   else round(src["map50"] - figures["map50"], 6),
                                   "size_bytes": self.sizes.get(label)}
            for key, cell in ((self.speed or {}).get("p50_ms", {}).get(label, {}) or {}).items():
                row[f"latency_b{key}_ms"] = cell
            rows.append(row)
        return rows

    def summary(self) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        parts = [f"{self.precision} {self.target} ({self.runtime}): {verdict}"]
        for row in self.side_by_side():
            figs = [f"{k.replace('_', ' ')} {v:.3f}" for k in ("agreement_ap50", "map50") for v in [row.get(k)]
                    if isinstance(v, float)]
            parts.append(f"{row['precision']} " + ", ".join(figs))
        kept = self.final.kept_float if self.final else []
        if kept:
            parts.append(f"kept float: {', '.join(kept)}")
        if self.failure:
            parts.append(self.failure)
        return "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {"precision": self.precision, "target": self.target, "runtime": self.runtime, "passed": self.passed,
                "written": self.written, "destination": str(self.destination),
                "settings": self.settings.to_dict(), "calibration": self.calibration,
                "side_by_side": self.side_by_side(), "source": self.source,
                "rounds": [r.to_dict() for r in self.rounds],
                "layer_costs": [c.to_dict() for c in self.costs], "costs_measured_on": self.costs_measured_on,
                "sizes": self.sizes, "speed": self.speed, "failure": self.failure, "notes": self.notes,
                "seconds": round(self.seconds, 3),
                "dataset": None if self.dataset is None else self.dataset.to_dict(),
                "dataset_run": None if self.dataset is None else self.dataset.run_dict()}


def fallback_keep(costs: Sequence[LayerCost], round_index: int, given: Sequence[str]) -> list[str]:
    """The nodes kept float in fallback round ``round_index`` (1, 2, ...): ``given`` and the 2^r - 1 most
    costly layers."""
    count = 2 ** round_index - 1
    picked = [c.node for c in costs if c.node not in given][:count]
    return [*given, *picked]


def measure_costs(fp32: Path, calibration: Calibration, keep_float: Sequence[str], workdir: Path,
                  progress: Progress) -> list[LayerCost]:
    """Every quantized layer's cost on the onnxruntime QDQ model of ``fp32`` (``bridge.precision.sensitivity``)."""
    from bridge.precision.onnx_int8 import int8_qdq, quantized_nodes
    from bridge.precision.sensitivity import layer_costs

    progress("measuring what quantizing each layer costs")
    qdq_path = workdir / "costs.qdq.onnx"
    prepared, region, _info = int8_qdq(fp32, qdq_path, calibration, keep_float, workdir)
    qdq = onnx.load(str(qdq_path))
    done = set(quantized_nodes(qdq))
    layers = [n for n in region.quantized if n in done]  # the --keep-float nodes are not in region.quantized
    return layer_costs(onnx.load(str(prepared.path)), qdq, region.head_tensors, calibration.samples(COST_SAMPLES),
                       layers=layers, progress=progress)


def deliver_variant(
    settings: PrecisionSettings,
    dataset_settings: Any,
    builder: VariantBuilder,
    *,
    fp32_onnx: Path,
    fp32_artefact: Path | None,
    reference: Runtime,
    fp32_candidate: CandidateSource | None,
    load_variant: Callable[[Path], CandidateSource],
    model: onnx.ModelProto,
    detections: Sequence[Any],
    destination: Path,
    staging: Path,
    workdir: Path,
    framework: str = "",
    preprocessing_defaults: Mapping[str, Any] | None = None,
    sample_shapes: Mapping[str, Sequence[int]] | None = None,
    progress: Progress | None = None,
) -> PrecisionResult:
    """Build the variant, judge it on the dataset, fall back while it fails (module docstring)."""
    from dataclasses import replace

    from bridge.validation.dataset import AccuracyBudget, validate_with_settings

    say = progress or (lambda _m: None)
    start = time.perf_counter()
    result = PrecisionResult(settings.precision, builder.target, builder.runtime, settings, destination,
                             fp32_artefact=fp32_artefact)
    weights = {i.name for i in model.graph.initializer}
    inputs = [TensorMeta.from_value_info(vi) for vi in model.graph.input if vi.name not in weights]
    preprocessing = dataset_settings.preprocessing(preprocessing_defaults, framework)
    loaded: list[Calibration] = []

    def calibration() -> Calibration:
        """The calibration images, prepared once (a dynamic-range tflite build needs them only to name costs)."""
        if not loaded:
            path = settings.calibration or dataset_settings.spec.path
            loaded.append(load_calibration(path, dataset_settings.spec, settings.calibration_limit, preprocessing,
                                           inputs, sample_shapes))
            result.calibration = loaded[0].describe()
            if settings.calibration is None:
                result.notes.append("calibrated on the first images of --dataset, the images the variant is judged "
                                    "on (give --calibration other images for an independent judgement)")
        return loaded[0]

    budget = AccuracyBudget(settings.min_agreement, settings.max_map_drop)
    judged_with = replace(dataset_settings, budget=budget)  # the dataset run, under the reduced-precision budget
    cached = CachedReference(reference)
    # tflite's int8 is dynamic range: its build takes no calibration
    calibrated = settings.precision == "int8" and builder.target != "tflite"
    keep = list(settings.keep_float)
    try:
        for index in range(settings.fallback_rounds + 1):
            this = Round(index, list(keep))
            result.rounds.append(this)
            say(f"building the {settings.precision} {builder.target} variant" +
                (f" (fallback round {index}: {len(keep)} node(s) kept float)" if index else ""))
            (staging / f"round{index}").mkdir(parents=True, exist_ok=True)
            try:
                this.build = builder.build(fp32_onnx, settings.precision, staging / f"round{index}",
                                           calibration=calibration() if calibrated else None, keep_float=keep,
                                           workdir=workdir)
            except BridgeError as exc:
                if index == 0:
                    raise  # no variant can be built at all: a conversion error, not a verdict
                this.error = f"building the variant failed: {exc}"
                break
            candidates: dict[str, CandidateSource] = {}
            if index == 0 and fp32_candidate is not None:
                candidates[result.fp32_key] = fp32_candidate
            candidates[result.variant_key] = load_variant(this.build.path)
            try:
                judged = validate_with_settings(judged_with, cached, candidates, model, detections,
                                                framework=framework, defaults=preprocessing_defaults,
                                                sample_shapes=sample_shapes, progress=say)
            except BridgeError as exc:
                if type(exc).__name__ == "DatasetCancelled":
                    raise
                this.error = f"running the variant failed: {exc}"
                break
            result.dataset = judged
            entries = judged.entries
            if index == 0:
                result.source = dict(entries["source"].figures) if "source" in entries else {}
                if result.fp32_key in entries:
                    result.fp32 = dict(entries[result.fp32_key].figures)
            if result.variant_key in entries:
                this.figures = {k: v for k, v in entries[result.variant_key].figures.items() if k != "ap_per_class"}
            this.failures = [f for f in judged.failures if f.startswith(result.variant_key + ":")]
            if this.passed:
                break
            if settings.precision != "int8":
                break  # fp16 has no per-layer fallback
            if not result.costs:
                images = calibration()
                result.costs = measure_costs(fp32_onnx, images, settings.keep_float, workdir, say)
                result.costs_measured_on = ("onnxruntime QDQ model, one layer quantized at a time, relative squared "
                                            f"error at the heads on {min(COST_SAMPLES, images.images)} "
                                            "calibration images")
            if not builder.keeps_layers_float or index == settings.fallback_rounds:
                break
            keep = fallback_keep(result.costs, index + 1, settings.keep_float)
            if keep == this.kept_float:
                break  # nothing more to keep float
    finally:
        cached.deactivate()
    final = result.final
    if final is not None and final.build is not None:
        result.sizes[settings.precision] = file_size(final.build.path)
    if fp32_artefact is not None and Path(fp32_artefact).exists():
        result.sizes["fp32"] = file_size(Path(fp32_artefact))
    if not result.passed:
        result.failure = _failure(result, builder)
    result.seconds = time.perf_counter() - start
    return result


def _failure(result: PrecisionResult, builder: VariantBuilder) -> str:
    final = result.final
    if final is None:
        return "no variant was built"
    if final.error:
        return final.error
    what = "; ".join(final.failures) or "over budget"
    worst = ", ".join(f"{c.node} ({c.op}, cost {c.cost:.3g})" for c in result.costs[:WORST_SHOWN])
    named = f"; worst layers: {worst}" if worst else ""
    if not builder.keeps_layers_float:
        return (f"the {result.precision} variant breaks the budget ({what}){named}; the {builder.target} "
                "converter cannot keep chosen layers float, so no fallback was tried")
    rounds = len(result.rounds) - 1
    if rounds == 0:
        return f"the {result.precision} variant breaks the budget ({what}){named}; no fallback round was allowed"
    return (f"the {result.precision} variant still breaks the budget after {rounds} fallback round(s) keeping "
            f"{len(final.kept_float)} node(s) float ({what}){named}")


__all__ = ["CachedReference", "PrecisionResult", "Round", "deliver_variant", "fallback_keep", "measure_costs"]
