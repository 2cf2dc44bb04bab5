"""Judging a mutant: is it equivalent (decided by running it), and does validation FAIL it (as users run it)?

Equivalence is decided by running the base and the mutant in onnxruntime on dozens of realistic inputs plus the
validation feeds: a mutant is equivalent when every output is identical within float noise (``NOISE``) on every
input, or - for a detection group - reports the same detections (same class, score and box within the noise,
in any row order). Everything else is a wrong model that validation must FAIL.

The verdict comes from ``bridge.api.validate(mutant, source=SOURCE, feeds=FEEDS)``, the call behind ``bridge
validate MUTANT --source SOURCE --feeds FEEDS``: FAIL is ``ValidationMismatch`` (exit 1). It runs with
``isolated=False`` (the source and onnxruntime in this process instead of child processes): isolation guards
against crashes, time and memory, and does not change a verdict; every mutant here runs without crashing in
onnxruntime (equivalence ran it first). A survivor is validated again with ``strict=True`` to say whether
``--strict`` would stop it.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from bridge.errors import BridgeError, ValidationMismatch
from bridge.validation.detection.layouts import DetectionSpec
from bridge.validation.detection.matching import Detections

NOISE = 1e-5  # |a - b| <= NOISE * (1 + |a|): float32 noise (a correct conversion of these models is ~1e-6 off)


def run_onnx(model: onnx.ModelProto, inputs: Sequence[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    """``model``'s outputs on each of ``inputs`` (onnxruntime, one thread: other tests share the cores)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    taken = {i.name for i in session.get_inputs()}
    return [dict(zip(names, session.run(None, {k: v for k, v in feed.items() if k in taken}), strict=True))
            for feed in inputs]


def _deviation(a: np.ndarray, b: np.ndarray) -> float | None:
    """max |a - b| / (1 + |a|) (NaN only where both are NaN), or None when shapes or integer values differ."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return None
    if a.dtype.kind not in "fc" or b.dtype.kind not in "fc":
        return 0.0 if np.array_equal(a, b) else None
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    if not np.array_equal(np.isnan(a64), np.isnan(b64)):
        return None
    finite = ~np.isnan(a64)
    if not finite.any():
        return 0.0
    with np.errstate(invalid="ignore", over="ignore"):
        same = a64[finite] == b64[finite]  # equal infinities
        diff = np.where(same, 0.0, np.abs(a64[finite] - b64[finite]) / (1 + np.abs(a64[finite])))
    return float(diff.max()) if np.isfinite(diff).all() else None


def _sorted(d: Detections) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    boxes = np.asarray(d.boxes, np.float64).reshape(-1, 4)
    scores = np.asarray(d.scores, np.float64).reshape(-1)
    labels = np.asarray(d.classes).reshape(-1)
    order = np.lexsort((*boxes.T[::-1], -scores, labels))
    return boxes[order], scores[order], labels[order]


def _detections_deviation(spec: DetectionSpec, a: dict[str, np.ndarray], b: dict[str, np.ndarray]
                          ) -> tuple[float | None, str]:
    """How far the detections of ``spec`` in run ``b`` are from run ``a``'s: (max relative |delta| of scores and
    boxes between the same detections in any row order, "") or (None, what differs)."""
    try:
        left, right = spec.read(a, "candidate"), spec.read(b, "candidate")
    except (KeyError, ValueError) as exc:
        return None, f"the mutant's outputs do not read as {spec.layout}: {exc}"
    if len(left) != len(right):
        return None, f"{len(left)} vs {len(right)} images"
    worst = 0.0
    for image, (x, y) in enumerate(zip(left, right, strict=True)):
        (bx, sx, lx), (by, sy, ly) = _sorted(x), _sorted(y)
        if len(sx) != len(sy):
            return None, f"image {image}: {len(sx)} vs {len(sy)} detections"
        if not np.array_equal(lx, ly):
            return None, f"image {image}: other classes"
        devs = [_deviation(sx, sy), _deviation(bx, by)]
        if devs[0] is None or devs[1] is None:
            return None, f"image {image}: other detections"
        worst = max(worst, devs[0], devs[1])
    return worst, ""


@dataclass(frozen=True)
class Equivalence:
    equivalent: bool
    why: str
    deviation: float | None = None  # the largest relative difference seen, None when the structure differs


def equivalence(base_outputs: Sequence[dict[str, np.ndarray]], mutant: onnx.ModelProto,
                inputs: Sequence[dict[str, np.ndarray]], specs: Sequence[DetectionSpec]) -> Equivalence:
    """Whether ``mutant`` computes what the base computes on every one of ``inputs`` (``base_outputs`` are the
    base's outputs on them): the same detections, every value within ``NOISE``."""
    try:
        got = run_onnx(mutant, inputs)
    except Exception as exc:  # a mutant that does not run is not equivalent (and validation must say so)
        return Equivalence(False, f"the mutant fails in onnxruntime: {str(exc).splitlines()[0][:200]}")
    grouped = {name for spec in specs for name in spec.outputs.values()}
    worst, where = 0.0, ""
    for k, (ref, out) in enumerate(zip(base_outputs, got, strict=True)):
        for spec in specs:
            dev, differ = _detections_deviation(spec, ref, out)
            if dev is None:
                return Equivalence(False, f"input {k}, group '{spec.label}': {differ}")
            if dev > worst:
                worst, where = dev, f"input {k}, group '{spec.label}'"
        for name, value in ref.items():
            if name in grouped:
                continue
            dev = _deviation(value, out[name]) if name in out else None
            if dev is None:
                return Equivalence(False, f"input {k}, output '{name}': other shape or values")
            if dev > worst:
                worst, where = dev, f"input {k}, output '{name}'"
    if worst > NOISE:
        return Equivalence(False, f"max relative |delta| {worst:.2g} at {where}", worst)
    how = "outputs bitwise identical" if worst == 0 else f"the same outputs within float noise (max |delta| {worst:.1g})"
    return Equivalence(True, f"{how} on {len(inputs)} inputs ({sum(_batch(i) for i in inputs)} images: realistic "
                             "ones and the validation feeds); detections compared in any row order", worst)


def _batch(feed: dict[str, np.ndarray]) -> int:
    first = next(iter(feed.values()))
    return int(first.shape[0]) if np.ndim(first) else 1


@dataclass(frozen=True)
class Verdict:
    outcome: str  # "FAIL" (ValidationMismatch, exit 1), "PASS", or "ERROR <type>" (another BridgeError)
    summary: str  # the failing comparisons, or for a PASS the comparison lines


def validate(mutant: Path, source: str, feeds: Path, *, strict: bool = False, **extra: Any) -> Verdict:
    """``bridge validate MUTANT --source SOURCE --feeds FEEDS [--strict]`` through the library entry point."""
    from bridge import api

    try:
        result = api.validate(str(mutant), source=source, feeds=str(feeds), isolated=False, strict=strict, **extra)
    except ValidationMismatch as exc:
        return Verdict("FAIL", str(exc)[:600])
    except BridgeError as exc:
        return Verdict(f"ERROR {type(exc).__name__}", str(exc)[:600])
    return Verdict("PASS", "; ".join(_line(o) for c in result.comparisons for o in c.outputs))


def _line(o: Any) -> str:
    """One output's verdict line: the detection-aware note, or the elementwise error against the tolerance."""
    vacuous = f" (vacuous: {o.vacuous_reason})" if o.vacuous else ""
    if o.note:
        return f"{o.name}: {o.note}{vacuous}"
    rule = getattr(o, "tolerance_rule", "") or f"atol {o.atol:g} + rtol {o.rtol:g}"
    return f"{o.name}: max_abs {o.max_abs:.3g} within {rule}{vacuous}"


def command(mutant: Path, source: str, feeds: Path, strict: bool = False) -> str:
    """The CLI command reproducing a verdict."""
    args = ["bridge", "validate", str(mutant), "--source", source, "--feeds", str(feeds)]
    return shlex.join([*args, "--strict"] if strict else args)
