"""Per-output comparison of a candidate run against a reference run, against a Tolerance.

For every output name: shape and dtype match, max absolute and relative error, the fraction of
elements outside ``atol + rtol * |ref|`` (numpy.isclose semantics, NaNs equal only to NaNs), and a
pass/fail verdict. Outputs present on one side only fail with a note.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from bridge.config import DEFAULT_TOLERANCE, Tolerance
from bridge.validation.detection import (
    compare_detections,
    detection_output_names,
    from_mxnet,
    read_detections,
)


@dataclass
class OutputComparison:
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


@dataclass
class Comparison:
    """All outputs of one candidate runtime against one reference."""

    reference: str
    candidate: str
    outputs: list[OutputComparison] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return bool(self.outputs) and all(o.passed for o in self.outputs)

    @property
    def failures(self) -> list[OutputComparison]:
        return [o for o in self.outputs if not o.passed]

    def summary(self) -> str:
        worst = max((o.max_abs or 0.0 for o in self.outputs), default=0.0)
        verdict = "PASS" if self.passed else f"FAIL ({', '.join(o.name for o in self.failures)})"
        return f"{self.candidate} vs {self.reference}: {verdict}, {len(self.outputs)} outputs, max abs err {worst:.3g}"

    def to_dict(self) -> dict[str, Any]:
        return {"reference": self.reference, "candidate": self.candidate, "passed": self.passed,
                "outputs": [asdict(o) for o in self.outputs]}


_INT_DTYPE_KINDS = "iub"


def compare_outputs(
    reference: Mapping[str, np.ndarray],
    candidate: Mapping[str, np.ndarray],
    tolerance: Tolerance = DEFAULT_TOLERANCE,
    *,
    reference_name: str = "reference",
    candidate_name: str = "candidate",
    detection_outputs: Mapping[str, str] | None = None,
) -> Comparison:
    """Compare every output; ``detection_outputs`` (reference output name -> the candidate's detection
    format) are compared detection-aware instead of elementwise (the reference is in MXNet's layout)."""
    result = Comparison(reference_name, candidate_name)
    detection_outputs = dict(detection_outputs or {})
    consumed: set[str] = set()
    for name, output_format in detection_outputs.items():
        names = detection_output_names(name, output_format)
        consumed.update(names)
        if name not in reference or any(n not in candidate for n in names):
            result.outputs.append(OutputComparison(name, False, False, False, note="detection output missing"))
            continue
        det = compare_detections(from_mxnet(reference[name]), read_detections(candidate, name, output_format),
                                 reference_name=reference_name, candidate_name=candidate_name)
        result.outputs.append(OutputComparison(
            name, passed=det.passed, shape_match=True, dtype_match=True, ref_shape=list(reference[name].shape),
            cand_shape=list(np.asarray(candidate[names[0]]).shape), max_abs=det.max_score_diff,
            mismatch_fraction=(det.unmatched_reference + det.unmatched_candidate) / max(det.matched + det.unmatched_reference
                                                                                        + det.unmatched_candidate, 1),
            atol=det.score_tolerance, note=f"detection-aware ({output_format}): {det.matched} matched, "
            f"{det.unmatched_reference} only in reference, {det.unmatched_candidate} only in candidate, "
            f"min IoU {det.min_iou:.6f}"))
    for name in [n for n in reference if n not in detection_outputs] + [
            n for n in candidate if n not in reference and n not in consumed]:
        atol, rtol = tolerance.for_output(name)
        if name not in candidate or name not in reference:
            side = candidate_name if name not in candidate else reference_name
            result.outputs.append(OutputComparison(name, False, False, False, atol=atol, rtol=rtol,
                                                   note=f"output missing from {side}"))
            continue
        ref = np.asarray(reference[name])
        cand = np.asarray(candidate[name])
        item = OutputComparison(
            name, passed=False, shape_match=ref.shape == cand.shape, dtype_match=_same_kind(ref.dtype, cand.dtype),
            ref_shape=list(ref.shape), cand_shape=list(cand.shape), ref_dtype=ref.dtype.name,
            cand_dtype=cand.dtype.name, atol=atol, rtol=rtol,
        )
        if not item.shape_match:
            item.note = f"shape {list(cand.shape)} != reference {list(ref.shape)}"
        elif ref.size == 0:
            item.max_abs = item.max_rel = item.mismatch_fraction = 0.0
            item.passed = item.dtype_match
        else:
            r = ref.astype(np.float64)
            c = cand.astype(np.float64)
            both_nan = np.isnan(r) & np.isnan(c)
            diff = np.where(both_nan, 0.0, np.abs(c - r))
            diff = np.where(np.isnan(diff), np.inf, diff)  # NaN on one side only is a full mismatch
            abs_ref = np.abs(np.nan_to_num(r, nan=0.0))  # a NaN reference must not make the threshold NaN
            rel = diff / np.maximum(abs_ref, np.finfo(np.float64).tiny)
            bad = diff > atol + rtol * abs_ref
            item.max_abs = float(diff.max())
            item.max_rel = float(np.where(diff == 0, 0.0, rel).max())
            item.mismatch_fraction = float(bad.mean())
            item.passed = item.dtype_match and not bad.any()
            if not item.dtype_match:
                item.note = f"dtype {cand.dtype.name} != reference {ref.dtype.name}"
        result.outputs.append(item)
    return result


def _same_kind(a: np.dtype, b: np.dtype) -> bool:
    """Float widths may differ between frameworks only if both are floats; ints must stay ints."""
    if a == b:
        return True
    return a.kind == b.kind == "f" or (a.kind in _INT_DTYPE_KINDS and b.kind in _INT_DTYPE_KINDS and a.kind != "b" and b.kind != "b")
