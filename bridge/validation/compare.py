"""Per-output comparison of a candidate run against a reference run, against a Tolerance.

For every output name: shape and dtype match, max absolute and relative error, the fraction of
elements outside the tolerance, and a pass/fail verdict. Which difference is within the tolerance is decided by
``bridge.validation.tolerance`` (``atol + rtol * scale``: the scale rule, or ``atol + rtol * |ref|`` for an
explicit per-output tolerance; at float16's numbers when the tolerance is the default and the reference's output
is float16); ``tolerance_rule`` says which applied and why, ``scaled_elements`` how many elements only the scale
let through.
Outputs present on one side only fail with a note. Detector outputs named by ``DetectionSpec``s
are compared detection-aware instead (``bridge.validation.detection.matching``; scores judged against the
same tolerance as tensors: ``atol + rtol * |ref score|``).

Non-finite values are judged, not skipped: NaN, inf and -inf match the same value at the same
position on the other side (NaN == NaN here); anywhere else they are mismatches, counted in
``nonfinite_mismatch`` and named in the note (e.g. "NaN in the reference where the candidate is finite"). ``max_abs`` is over positions where both sides are finite (None if none).
``max_rel`` is ``|cand - ref| / |ref|`` over finite positions with ``ref != 0``; where the reference
is 0 the relative error is undefined and left out (an error there is judged by ``atol`` alone and
shows in ``max_abs``). With no such position it is 0.0 if nothing differs, else None ("n/a"). An
error too large for float64 is reported as the largest float64, so figures stay valid JSON. No
numpy warning escapes (errors are computed under ``np.errstate``).

A verdict can pass and still prove little: it is **vacuous** (``vacuous`` + ``vacuous_reason`` per
output, ``Comparison.vacuous`` / ``vacuous_reasons`` overall) when an output has no elements (a
0-sized dimension), is entirely NaN/inf on both sides, or both sides hold NaN at the same positions (NaN
against a finite value is a mismatch, not a vacuous pass); when the output's
magnitude is within the tolerance everywhere (an all-zero candidate would pass: ~1e-5 logits at atol
1e-4 prove nothing); when a detector
output has no detections on either side (or only tie-ambiguous differences); when the caller
marks outputs that ignore the input (``insensitive_outputs`` + ``Comparison.mark_vacuous``); or when an
output is compared by shape and dtype only (random on the reference side: ``SHAPE_ONLY``).

A candidate is also compared on a second input (``Comparison.add_input``); an output it gives bit for bit on
both inputs while the reference's changes beyond the tolerance fails (``ignored_input``,
``Comparison.mark_ignores_input``): the sample folded into the graph.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from bridge.config import DEFAULT_TOLERANCE, Tolerance
from bridge.validation.detection.layouts import DetectionSpec, as_detection_specs, read_detection_pair
from bridge.validation.detection.matching import compare_detections
from bridge.validation.tolerance import ElementwiseRule, decide, output_tolerance


@dataclass
class OutputComparison:
    """The verdict on one output (or one detector output group, named by its spec's label).

    ``vacuous`` / ``vacuous_reason``: the check passed or failed on evidence that proves little
    (module docstring). ``nonfinite_mismatch``: positions whose NaN/inf differs between the sides.
    ``tie_ambiguous``: detection rows excused as an NMS order difference between tied scores;
    ``detection`` the full DetectionComparison (tied and mismatched rows listed). ``covers``: the
    graph outputs this entry stands for (several for a detection group).
    """

    name: str
    passed: bool
    shape_match: bool
    dtype_match: bool
    ref_shape: list[int] | None = None
    cand_shape: list[int] | None = None
    ref_dtype: str | None = None
    cand_dtype: str | None = None
    max_abs: float | None = None
    max_rel: float | None = None
    mismatch_fraction: float | None = None
    atol: float = 0.0
    rtol: float = 0.0
    note: str = ""
    vacuous: bool = False
    vacuous_reason: str = ""
    nonfinite_mismatch: int = 0
    tie_ambiguous: int = 0
    detection: dict[str, Any] | None = None
    covers: list[str] = field(default_factory=list)
    within_tolerance: str = ""  # the vacuous reason "the whole reference is within the tolerance", when it holds
    tolerance_rule: str = ""  # which elementwise tolerance applied and why (bridge.validation.tolerance)
    scaled_elements: int = 0  # elements within the tolerance only by their scale (what the scale rule excused)
    # the decode-stage probe of the source's decode node behind this detection group (bridge.conversion.decode_probe)
    decode_probe: dict[str, Any] | None = None

    def add_vacuous(self, reason: str) -> None:
        self.vacuous = True
        self.vacuous_reason = "; ".join(r for r in (self.vacuous_reason, reason) if r)

    def settle_within_tolerance(self, wider: OutputComparison, scale: float) -> None:
        """The same output compared again on inputs ``scale`` times wider, where the reference is no longer
        within the tolerance: agreement there lifts the "any output that small passes" flag (a ThresholdedRelu
        whose generated inputs never reach its threshold); disagreement is said and the flag stays."""
        if not self.within_tolerance:
            return
        if wider.passed and not wider.within_tolerance:
            reasons = [r for r in self.vacuous_reason.split("; ") if r and r != self.within_tolerance]
            self.vacuous, self.vacuous_reason, self.within_tolerance = bool(reasons), "; ".join(reasons), ""
            self.note = "; ".join(n for n in (self.note, f"also compared on inputs x{scale:g}, where it is not "
                                              f"that small: agrees (max abs {wider.max_abs:.3g})") if n)
        elif not wider.passed:
            self.note = "; ".join(n for n in (self.note, f"on inputs x{scale:g} it differs (max abs "
                                              f"{wider.max_abs:.3g}): only the small values were proved") if n)


@dataclass
class Comparison:
    """All outputs of one candidate runtime against one reference."""

    reference: str
    candidate: str
    outputs: list[OutputComparison] = field(default_factory=list)
    sizes: list[dict[str, list[int]]] = field(default_factory=list)  # input shapes of every size compared at
    # an upstream tie proof tried on a failure (bridge.validation.pinning.PinningResult.to_dict()): the verdict
    # is a pass only when it explained the failure; its "text" says what was pinned and why
    pinning: dict[str, Any] | None = None
    # how much of each detection group the inputs exercised (bridge.validation.coverage.Coverage.to_dict())
    coverage: list[dict[str, Any]] = field(default_factory=list)
    second_input: bool = False  # the candidate also ran on a second, different input (``add_input``)
    # the selection inputs judged on every row (bridge.conversion.selection_inputs): {"passed", "text", "pins"}
    selection_inputs: dict[str, Any] | None = None

    def add_size(self, other: Comparison, shapes: Mapping[str, Sequence[int]], label: str = "") -> None:
        """Take in the verdicts of the same candidate at another input size (``shapes``), or on other inputs of
        the same size (``label`` says which): an output passes only when it passes on every input set; its
        figures are the worst of them, and a failure there is said."""
        self.sizes.append({k: list(v) for k, v in shapes.items()})
        self._merge(other, f"at {label or _shapes_text(shapes)}")

    def add_input(self, other: Comparison) -> None:
        """Take in the verdicts of the same candidate on a second, different input of the same shapes (what
        proves it computes with its input): merged as ``add_size`` merges another size."""
        self.second_input = True
        self._merge(other, "on a second input")

    def fail_on_input(self, error: str) -> None:
        """The candidate raised on the second input where the reference ran: every output fails there."""
        self.second_input = True
        for o in self.outputs:
            o.passed = False
            o.note = "; ".join(n for n in (o.note, f"on a second input the candidate failed: {error}") if n)

    def mark_ignores_input(self, names: Iterable[str]) -> list[str]:
        """Fail the entries covering any of the graph outputs ``names``: the candidate gave them bit for bit on
        two different inputs while the source's changed beyond the tolerance (a candidate with the sample
        folded in). Returns the entry names failed."""
        wanted = set(names)
        failed = []
        for o in self.outputs:
            if wanted & {o.name, *o.covers}:
                o.passed = False
                o.note = "; ".join(n for n in (o.note, IGNORES_INPUT) if n)
                failed.append(o.name)
        return failed

    def _merge(self, other: Comparison, where: str) -> None:
        mine = {o.name: o for o in self.outputs}
        for o in other.outputs:
            first = mine.get(o.name)
            if first is None:  # an output present at one size (or on one input) only
                o.note = "; ".join(n for n in (o.note, where) if n)
                self.outputs.append(o)
                continue
            for figure in ("max_abs", "max_rel", "mismatch_fraction"):
                values = [v for v in (getattr(first, figure), getattr(o, figure)) if v is not None]
                setattr(first, figure, max(values) if values else None)
            first.nonfinite_mismatch += o.nonfinite_mismatch
            if o.scaled_elements and not first.scaled_elements:  # say the rule where it excused something
                first.tolerance_rule = f"{o.tolerance_rule} (at {where})"
            first.scaled_elements += o.scaled_elements
            if not o.passed:
                first.passed = False
                first.shape_match &= o.shape_match
                first.dtype_match &= o.dtype_match
                figures = f"max abs {_figure(o.max_abs)}, mismatch {_figure(o.mismatch_fraction)}"
                first.note = "; ".join(n for n in (first.note, f"{where}: FAIL ({figures}"
                                                   + (f"; {o.note})" if o.note else ")")) if n)

    def fail_at_size(self, shapes: Mapping[str, Sequence[int]], error: str, label: str = "") -> None:
        """The candidate raised at another input size (or on the other inputs ``label``) where the reference ran:
        every output fails there."""
        self.sizes.append({k: list(v) for k, v in shapes.items()})
        for o in self.outputs:
            o.passed = False
            o.note = "; ".join(n for n in (o.note, f"at {label or _shapes_text(shapes)} the candidate failed: {error}")
                               if n)

    @property
    def passed(self) -> bool:
        return bool(self.outputs) and all(o.passed for o in self.outputs)

    @property
    def failures(self) -> list[OutputComparison]:
        return [o for o in self.outputs if not o.passed]

    @property
    def vacuous(self) -> bool:
        """Some output's verdict proves little (``--strict`` turns that into a failure)."""
        return not self.outputs or any(o.vacuous for o in self.outputs)

    @property
    def vacuous_reasons(self) -> list[str]:
        if not self.outputs:
            return ["no outputs were compared"]
        return [f"{o.name}: {o.vacuous_reason}" for o in self.outputs if o.vacuous]

    @property
    def tie_ambiguous(self) -> int:
        return sum(o.tie_ambiguous for o in self.outputs)

    def mark_vacuous(self, names: Iterable[str], reason: str) -> list[str]:
        """Flag the entries covering any of the graph outputs ``names`` (e.g. from ``insensitive_outputs``)
        as vacuous with ``reason``; returns the entry names flagged."""
        wanted = set(names)
        flagged = []
        for o in self.outputs:
            if wanted & {o.name, *o.covers}:
                o.add_vacuous(reason)
                flagged.append(o.name)
        return flagged

    def summary(self) -> str:
        worst = max((o.max_abs or 0.0 for o in self.outputs), default=0.0)
        verdict = "PASS" if self.passed else f"FAIL ({', '.join(o.name for o in self.failures)})"
        if self.vacuous:
            verdict += f" [vacuous: {'; '.join(self.vacuous_reasons)}]"
        ties = f", {self.tie_ambiguous} tie-ambiguous detections" if self.tie_ambiguous else ""
        distinct = [s for k, s in enumerate(self.sizes) if s not in self.sizes[:k]]
        if len(distinct) > 1:
            ties += f", at {len(distinct)} sizes ({' and '.join(_shapes_text(s) for s in distinct)})"
        if len(self.sizes) > len(distinct):  # more inputs of one size (bridge.validation.coverage)
            ties += f", on {len(self.sizes)} input sets"
        if self.second_input:
            ties += ", and on a second input"
        nonfinite = sum(o.nonfinite_mismatch for o in self.outputs)  # NaN/inf on one side only: not in max abs err
        ties += f" over finite positions, {nonfinite} positions NaN/inf vs finite (mismatches)" if nonfinite else ""
        if self.pinning:
            ties += f" [{self.pinning.get('text', '')}]"
        if self.selection_inputs and not self.selection_inputs.get("passed"):
            ties += f" [{self.selection_inputs.get('text', '')}]"
        for o in self.failures:  # a failed decode probe (bridge.conversion.decode_probe) is its own evidence: say it
            if o.decode_probe and o.decode_probe.get("passed") is False:
                ties += f" [{o.decode_probe.get('text', '')}]"
        return (f"{self.candidate} vs {self.reference}: {verdict}, {len(self.outputs)} outputs, "
                f"max abs err {worst:.3g}{ties}")

    def to_dict(self) -> dict[str, Any]:
        return {"reference": self.reference, "candidate": self.candidate, "passed": self.passed,
                "vacuous": self.vacuous, "vacuous_reasons": self.vacuous_reasons,
                "tie_ambiguous": self.tie_ambiguous, "sizes": self.sizes, "second_input": self.second_input,
                "pinning": self.pinning, "coverage": self.coverage, "selection_inputs": self.selection_inputs,
                "outputs": [asdict(o) for o in self.outputs]}


def _shapes_text(shapes: Mapping[str, Sequence[int]]) -> str:
    return ", ".join(f"{k}[{', '.join(str(d) for d in v)}]" for k, v in shapes.items())


def _figure(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3g}"


_INT_DTYPE_KINDS = "iub"
SHAPE_ONLY = "compared by shape and dtype only: nothing about its values was proved"
IGNORES_INPUT = ("the candidate ignores its input where the source does not: it gives this output bit for bit on "
                 "two different inputs while the source's changes beyond twice the tolerance (e.g. a sample input "
                 "folded into the graph)")


def compare_outputs(
    reference: Mapping[str, np.ndarray],
    candidate: Mapping[str, np.ndarray],
    tolerance: Tolerance = DEFAULT_TOLERANCE,
    *,
    reference_name: str = "reference",
    candidate_name: str = "candidate",
    detection_outputs: Mapping[str, str] | Sequence[DetectionSpec | str] | None = None,
    shape_only: Iterable[str] = (),
) -> Comparison:
    """Compare every output. ``detection_outputs`` - DetectionSpecs (or ``--detections`` strings), or the
    old mapping reference output name -> the candidate's lowered detection format (reference in MXNet's
    layout) - name the groups compared detection-aware instead of elementwise. ``shape_only`` outputs
    (random samples: both sides draw their own values) pass on matching shape and dtype, and say so."""
    shape_only = set(shape_only)
    result = Comparison(reference_name, candidate_name)
    consumed_ref: set[str] = set()
    consumed_cand: set[str] = set()
    for spec in as_detection_specs(detection_outputs):
        consumed_ref.update(spec.reference_names())
        consumed_cand.update(spec.candidate_names())
        result.outputs.append(_compare_detection_group(spec, reference, candidate, tolerance,
                                                       reference_name, candidate_name))
    names = [n for n in reference if n not in consumed_ref] + [
        n for n in candidate if n not in reference and n not in consumed_cand and n not in consumed_ref]
    for name in names:
        item = _compare_tensor(name, reference, candidate, tolerance, reference_name, candidate_name,
                               shape_only=name in shape_only)
        result.outputs.append(item)
    return result


def _compare_tensor(name: str, reference: Mapping[str, np.ndarray], candidate: Mapping[str, np.ndarray],
                    tolerance: Tolerance, reference_name: str, candidate_name: str, *,
                    shape_only: bool = False) -> OutputComparison:
    atol, rtol = tolerance.for_output(name)
    if name not in candidate or name not in reference:
        side = candidate_name if name not in candidate else reference_name
        return OutputComparison(name, False, False, False, atol=atol, rtol=rtol, note=f"output missing from {side}",
                                covers=[name])
    if isinstance(reference[name], (list, tuple)) or isinstance(candidate[name], (list, tuple)):
        return _compare_sequence(name, reference[name], candidate[name], tolerance, reference_name, candidate_name)
    ref = np.asarray(reference[name])
    cand = np.asarray(candidate[name])
    rule = ElementwiseRule.for_output(tolerance, name, ref.dtype)  # the float16 default for a float16 reference
    item = OutputComparison(
        name, passed=False, shape_match=ref.shape == cand.shape, dtype_match=_same_kind(ref.dtype, cand.dtype),
        ref_shape=list(ref.shape), cand_shape=list(cand.shape), ref_dtype=ref.dtype.name,
        cand_dtype=cand.dtype.name, atol=rule.atol, rtol=rule.rtol, covers=[name],
    )
    if not item.shape_match:
        item.note = f"shape {list(cand.shape)} != reference {list(ref.shape)}"
        return item
    if shape_only:
        item.passed = item.dtype_match
        item.note = ("random output: compared by shape and dtype only (each side draws its own samples)"
                     if item.dtype_match else f"dtype {cand.dtype.name} != reference {ref.dtype.name}")
        item.add_vacuous(SHAPE_ONLY)
        return item
    if ref.size == 0:
        item.max_abs = item.max_rel = item.mismatch_fraction = 0.0
        item.passed = item.dtype_match
        item.add_vacuous(f"no elements to compare (shape {list(ref.shape)} has a 0-sized dimension)")
    else:
        if rule.scaled and (ref.dtype.kind not in "fc" or cand.dtype.kind not in "fc"):  # counts, ids, indices
            rule = rule.elementwise("elementwise: not a float output")
        _judge_elements(item, ref, cand, rule)
    if not item.dtype_match:
        item.note = f"dtype {cand.dtype.name} != reference {ref.dtype.name}"
    return item


def _judge_elements(item: OutputComparison, ref: np.ndarray, cand: np.ndarray, rule: ElementwiseRule) -> None:
    """Fill the error figures, the verdict and the vacuous flag of a same-shape elementwise comparison."""
    atol, rtol = rule.atol, rule.rtol
    r = ref.astype(np.float64)
    c = cand.astype(np.float64)
    with np.errstate(all="ignore"):
        r_fin, c_fin = np.isfinite(r), np.isfinite(c)
        both = r_fin & c_fin
        # NaN matches NaN, inf matches inf of the same sign, at the same position
        same_nonfinite = ~r_fin & ~c_fin & ((np.isnan(r) & np.isnan(c)) | (r == c))
        nonfinite_bad = ~both & ~same_nonfinite
        diff = np.where(both, np.abs(c - r), 0.0)
        abs_ref = np.where(r_fin, np.abs(r), 0.0)
        decision = decide(diff, abs_ref, both, rule)
        bad = nonfinite_bad | (both & ~decision.within)
        defined = both & (abs_ref > 0)
        rel = np.divide(diff, abs_ref, out=np.zeros_like(diff), where=defined)
    big = float(np.finfo(np.float64).max)  # an error too large for float64 is reported as the largest float64
    item.max_abs = min(float(diff[both].max()), big) if both.any() else None
    if defined.any():
        item.max_rel = min(float(rel[defined].max()), big)
    else:  # the reference is 0 (or not finite) everywhere: no error is 0, any error has no relative size
        item.max_rel = 0.0 if not (diff > 0).any() else None
    item.mismatch_fraction = float(bad.mean())
    item.nonfinite_mismatch = int(nonfinite_bad.sum())
    item.passed = item.dtype_match and not bad.any()
    item.tolerance_rule, item.scaled_elements = decision.rule, decision.by_scale
    if item.nonfinite_mismatch:
        item.note = nonfinite_mismatch_text(r, c, nonfinite_bad, finite_agree=bool(both.any()))
    if ref.dtype.kind not in "fc" and cand.dtype.kind not in "fc":
        return
    # NaN/inf proves little only where both sides hold it: NaN against a finite value is a mismatch (above)
    for side, fin in (("reference", r_fin), ("candidate", c_fin)):
        if not fin.any() and not nonfinite_bad.any():
            item.add_vacuous(f"the {side} output is entirely NaN/inf")
    n_nan = int((np.isnan(r) & np.isnan(c)).sum())
    if n_nan and r_fin.any():
        item.add_vacuous(f"both sides have NaN at {n_nan} positions of {r.size}: those positions prove nothing")
    if reference_within_tolerance(r, atol, rtol):
        # an all-zero candidate would pass: the tolerance is as large as the output itself
        scale = float(abs_ref[r_fin].max())
        item.within_tolerance = (f"the reference's largest magnitude ({scale:.3g}) is within the tolerance (atol "
                                 f"{atol:g}): any output that small passes" +
                                 (f" (check it with --tolerance {item.name}={scale / 100:.1g},{rtol:g})"
                                  if scale > 0 else ""))
        item.add_vacuous(item.within_tolerance)


def nonfinite_mismatch_text(r: np.ndarray, c: np.ndarray, bad: np.ndarray, *, finite_agree: bool) -> str:
    """What differs at the ``bad`` positions (NaN/inf on one side only, or of another kind), named as the
    mismatch it is; the error figures cover only positions finite on both sides, which the note says."""
    with np.errstate(all="ignore"):
        r_nan, c_nan, r_fin, c_fin = np.isnan(r), np.isnan(c), np.isfinite(r), np.isfinite(c)
    kinds = [(int((bad & r_nan & c_fin).sum()), "NaN in the reference where the candidate is finite"),
             (int((bad & c_nan & r_fin).sum()), "NaN in the candidate where the reference is finite")]
    other = int(bad.sum()) - kinds[0][0] - kinds[1][0]
    kinds.append((other, "inf on one side only or NaN/inf of another kind"))
    text = "mismatch: " + ", ".join(f"{n} positions {what}" for n, what in kinds if n)
    return text + ("; max abs/rel are over the positions finite on both sides" if finite_agree else "")


def reference_within_tolerance(reference: np.ndarray, atol: float, rtol: float) -> bool:
    """Whether every finite value of ``reference`` is within the tolerance of zero (and one is finite): then any
    candidate that small passes, the ``OutputComparison.within_tolerance`` flag. The reference alone decides it,
    so validation knows before any candidate runs which outputs need a second look on wider inputs."""
    r = np.asarray(reference, dtype=np.float64)
    with np.errstate(all="ignore"):
        fin = np.isfinite(r)
        if not fin.any():
            return False
        magnitude = np.abs(r[fin])
        return bool((magnitude <= atol + rtol * magnitude).all())


def _compare_sequence(name: str, reference: Any, candidate: Any, tolerance: Tolerance, reference_name: str,
                      candidate_name: str) -> OutputComparison:
    """A sequence output (a list of tensors from onnxruntime): same length, then element by element."""
    atol, rtol = tolerance.for_output(name)
    ref, cand = ([*x] if isinstance(x, (list, tuple)) else [x] for x in (reference, candidate))
    item = OutputComparison(name, False, len(ref) == len(cand), True, ref_shape=[len(ref)], cand_shape=[len(cand)],
                            atol=atol, rtol=rtol, covers=[name])
    if not item.shape_match:
        item.note = f"sequence of {len(cand)} elements != reference {len(ref)}"
        return item
    parts = [_compare_tensor(name, {name: r}, {name: c}, tolerance, reference_name, candidate_name)
             for r, c in zip(ref, cand, strict=True)]
    item.passed = all(p.passed for p in parts)
    item.dtype_match = all(p.dtype_match for p in parts)
    item.max_abs = max((p.max_abs or 0.0 for p in parts), default=0.0)
    item.max_rel = max((p.max_rel or 0.0 for p in parts), default=0.0)
    item.mismatch_fraction = max((p.mismatch_fraction or 0.0 for p in parts), default=0.0)
    item.scaled_elements = sum(p.scaled_elements for p in parts)
    item.tolerance_rule = next((p.tolerance_rule for p in parts if p.scaled_elements), parts[0].tolerance_rule
                               if parts else "")
    bad = [f"[{i}] {p.note}" for i, p in enumerate(parts) if not p.passed]
    item.note = f"sequence of {len(ref)} elements" + (f"; {'; '.join(bad)}" if bad else "")
    if not parts:
        item.add_vacuous("empty sequence: no elements to compare")
    return item


def _compare_detection_group(spec: DetectionSpec, reference: Mapping[str, np.ndarray],
                             candidate: Mapping[str, np.ndarray], tolerance: Tolerance, reference_name: str,
                             candidate_name: str) -> OutputComparison:
    atol, rtol = detection_tolerance(spec, tolerance)
    covers = list(dict.fromkeys([*spec.reference_names(), *spec.candidate_names()]))
    item = OutputComparison(spec.label, False, False, False, atol=atol, rtol=rtol, covers=covers)
    missing = [f"'{n}' from {reference_name}" for n in spec.reference_names() if n not in reference] + [
        f"'{n}' from {candidate_name}" for n in spec.candidate_names() if n not in candidate]
    if missing:
        item.note = f"detection output missing: {', '.join(missing)}"
        return item
    # the group is named after one output (its label); the shapes shown are that output's on either side
    item.ref_shape = list(np.shape(reference[_labelled_output(spec.ref_outputs, spec.label, spec.outputs)]))
    item.cand_shape = list(np.shape(candidate[_labelled_output(spec.outputs, spec.label, spec.outputs)]))
    try:
        ref_dets, cand_dets = read_detection_pair(spec, reference, candidate)
    except (ValueError, KeyError) as exc:
        item.note = f"detection-aware ({spec.layout}): cannot read detections: {exc}"
        return item
    mask_atol, mask_rtol = tolerance.for_output(spec.outputs.get("masks", spec.label))
    det = compare_detections(ref_dets, cand_dets, score_tol=atol, score_rtol=rtol, mask_tol=mask_atol,
                             mask_rtol=mask_rtol, reference_name=reference_name, candidate_name=candidate_name,
                             nms_iou=spec.nms_iou)
    item.passed = det.passed and not spec.nms_disagreement
    item.shape_match = item.dtype_match = True
    item.max_abs = det.max_score_diff
    item.mismatch_fraction = det.mismatched / max(det.reference_count + det.candidate_count, 1)
    item.tie_ambiguous = det.tie_ambiguous
    item.detection = det.to_dict()
    item.note = (f"detection-aware ({spec.layout}): {det.matched} matched, {det.unmatched_reference} only in reference, "
                 f"{det.unmatched_candidate} only in candidate, min IoU {det.min_iou:.6f}")
    if det.max_mask_diff is not None:
        item.note += f", max mask diff {det.max_mask_diff:.3g}"
    if det.failed_pairs:
        item.note += f", {det.failed_pairs} matched pairs off (IoU < {det.iou_threshold}, score or mask)"
    if det.tie_ambiguous:
        item.note += (f"; {det.tie_ambiguous} rows tie-ambiguous (scores tied within float32 rounding: "
                      "NMS may keep either)")
        if det.bare_tied:
            item.note += (f", {det.bare_tied} of them not listed by the other side (judged by where they sit; at "
                          f"most {det.bare_bound} may be)")
    if det.bare_refused:
        item.note += (f"; {det.bare_refused} near-tie rows the other side does not list were refused: more than the "
                      f"{det.bare_bound} such rows a tie explains")
    if spec.nms_disagreement:  # the source states another threshold: FAIL whatever the rows (bridge.validation.
        item.note += f"; FAIL: {spec.nms_disagreement}"  # detection.layouts.with_source_nms)
    if det.vacuous:
        item.add_vacuous(det.vacuous_reason)
    return item


def _labelled_output(roles: Mapping[str, str], label: str, candidate_roles: Mapping[str, str]) -> str:
    """The output of ``roles`` (one side of a detection group) standing for the group's ``label``: the one with
    the role the label names on the candidate side, else the side's detections or boxes output."""
    role = next((r for r, name in candidate_roles.items() if name == label), None)
    for wanted in (role, "detections", "boxes"):
        if wanted is not None and wanted in roles:
            return roles[wanted]
    return next(iter(roles.values()))


def detection_tolerance(spec: DetectionSpec, tolerance: Tolerance) -> tuple[float, float]:
    """Score tolerance of a detection group: a per-output override for the group or its scores output wins."""
    for key in (spec.label, spec.outputs.get("scores")):
        if key is not None and key in tolerance.per_output:
            return tolerance.for_output(key)
    return tolerance.atol, tolerance.rtol


def insensitive_outputs(run_a: Mapping[str, np.ndarray], run_b: Mapping[str, np.ndarray]) -> list[str]:
    """Outputs (present in both runs, non-empty) that are bitwise the same for two different inputs.

    Given the reference's outputs on two different inputs, these are the outputs that ignore the
    input - a random-weight model can pass validation that way - so their verdict is vacuous
    (``Comparison.mark_vacuous``). NaN counts as equal to NaN.
    """
    same = []
    for name, a in run_a.items():
        if name not in run_b:
            continue
        x, y = np.asarray(a), np.asarray(run_b[name])
        if x.size == 0 or x.shape != y.shape:
            continue
        nan_ok = x.dtype.kind in "fc" and y.dtype.kind in "fc"
        if np.array_equal(x, y, equal_nan=nan_ok):
            same.append(name)
    return same


def _same_kind(a: np.dtype, b: np.dtype) -> bool:
    """Float widths may differ between frameworks only if both are floats; ints must stay ints."""
    if a == b:
        return True
    return a.kind == b.kind == "f" or (a.kind in _INT_DTYPE_KINDS and b.kind in _INT_DTYPE_KINDS and a.kind != "b" and b.kind != "b")


def ignored_input(reference: tuple[Mapping[str, Any], Mapping[str, Any]],
                  candidate: tuple[Mapping[str, Any], Mapping[str, Any]], tolerance: Tolerance = DEFAULT_TOLERANCE,
                  *, detections: Mapping[str, str] | Sequence[DetectionSpec | str] | None = None,
                  shape_only: Iterable[str] = ()) -> list[str]:
    """The candidate's outputs (graph names) that ignore its input: bit for bit the same in the candidate's runs on
    two different inputs (``candidate``) while the reference's runs on them (``reference``) differ beyond twice
    the tolerance - so no one value is within the tolerance of both, and the comparison on one of the inputs
    fails too; this names why. A detector group counts when every candidate output of it stays while the
    reference's boxes or scores move. Random outputs (``shape_only``) are left out: their source changes by
    itself."""
    (ref_a, ref_b), (cand_a, cand_b) = reference, candidate
    skip = set(shape_only)
    found: list[str] = []
    grouped: set[str] = set()
    for spec in as_detection_specs(detections):
        grouped.update(spec.candidate_names())
        moving = [n for role, n in spec.ref_outputs.items() if role in ("detections", "boxes", "scores")]
        if all(_bitwise_same(cand_a, cand_b, n) for n in spec.candidate_names()) and any(
                changed_beyond(ref_a, ref_b, n, tolerance, factor=2.0) for n in moving):
            found.extend(spec.candidate_names())
    for name in cand_a:
        if name in grouped or name in skip or name not in ref_a:
            continue
        if _bitwise_same(cand_a, cand_b, name) and changed_beyond(ref_a, ref_b, name, tolerance, factor=2.0):
            found.append(name)
    return found


def _bitwise_same(a: Mapping[str, Any], b: Mapping[str, Any], name: str) -> bool:
    if name not in a or name not in b or isinstance(a[name], (list, tuple)) or isinstance(b[name], (list, tuple)):
        return False
    x, y = np.asarray(a[name]), np.asarray(b[name])
    return x.shape == y.shape and x.size > 0 and bool(np.array_equal(x, y, equal_nan=x.dtype.kind in "fc"
                                                                        and y.dtype.kind in "fc"))


def changed_beyond(a: Mapping[str, Any], b: Mapping[str, Any], name: str, tolerance: Tolerance,
                   factor: float = 1.0) -> bool:
    """Whether ``name`` differs between the two runs ``a`` and ``b`` beyond ``factor`` times the tolerance
    (another shape counts)."""
    if name not in a or name not in b or isinstance(a[name], (list, tuple)) or isinstance(b[name], (list, tuple)):
        return False
    x, y = np.asarray(a[name]), np.asarray(b[name])
    if x.shape != y.shape:
        return True
    if x.size == 0:
        return False
    atol, rtol = output_tolerance(tolerance, name, x.dtype)  # a and b are two runs of one side (the reference)
    with np.errstate(all="ignore"):
        return not bool(np.isclose(y.astype(np.float64), x.astype(np.float64), atol=atol * factor, rtol=rtol * factor,
                                   equal_nan=True).all())
