"""Per-tensor facts a divergence report needs: summary statistics and the error between two runs.

Only these small records outlive a comparison; the arrays themselves are dropped as soon as their
statistics are taken, so localising through a large model keeps memory bounded. The agreement rule is
validation's (numpy.isclose semantics, ``|cand - ref| <= atol + rtol * |ref|``, NaN/inf must match in
place), so "diverges" here means what FAIL means in ``bridge convert``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from bridge.config import Tolerance

HISTOGRAM_BINS = 24


@dataclass(frozen=True)
class TensorStats:
    """Shape, dtype and value summary of one tensor (min/max/mean over finite values; NaN/inf counted)."""

    shape: list[int]
    dtype: str
    min: float | None
    max: float | None
    mean: float | None
    nan: int
    inf: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def brief(self) -> str:
        if self.min is None:
            rng = "no finite values"
        else:
            rng = f"min {self.min:.4g} max {self.max:.4g} mean {self.mean:.4g}"
        bad = f", {self.nan} NaN, {self.inf} inf" if self.nan or self.inf else ""
        return f"{self.dtype}{self.shape} {rng}{bad}"


def stats_of(array: np.ndarray) -> TensorStats:
    a = np.asarray(array)
    nan = inf = 0
    if a.dtype.kind in "fc":
        nan = int(np.isnan(a).sum())
        inf = int(np.isinf(a).sum())
        finite = a[np.isfinite(a)] if (nan or inf) else a
    elif a.dtype.kind in "iub":
        finite = a
    else:  # strings, objects: shape and dtype only
        return TensorStats(list(a.shape), str(a.dtype), None, None, None, 0, 0)
    if finite.size == 0:
        return TensorStats(list(a.shape), str(a.dtype), None, None, None, nan, inf)
    f = finite.astype(np.float64, copy=False)
    return TensorStats(list(a.shape), str(a.dtype), float(f.min()), float(f.max()), float(f.mean()), nan, inf)


@dataclass(frozen=True)
class TensorError:
    """How far a candidate tensor is from the reference one, and whether that is within tolerance."""

    agree: bool
    max_abs: float | None
    max_rel: float | None
    mismatch_fraction: float | None
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def tensor_error(ref: np.ndarray, cand: np.ndarray, tolerance: Tolerance, name: str = "") -> TensorError:
    """Compare two tensors elementwise against ``tolerance`` (the per-name override applies)."""
    r, c = np.asarray(ref), np.asarray(cand)
    if r.shape != c.shape:
        if r.size == c.size and r.size > 0:  # same values in another layout (e.g. a Flatten folded away)
            c = c.reshape(r.shape)
        else:
            return TensorError(False, None, None, None, f"shape {list(c.shape)} != reference {list(r.shape)}")
    if r.dtype.kind not in "fciub" or c.dtype.kind not in "fciub":
        same = bool(np.array_equal(r, c))
        return TensorError(same, None, None, None if same else 1.0, "compared for equality")
    if r.size == 0:
        return TensorError(True, 0.0, 0.0, 0.0, "empty")
    atol, rtol = tolerance.for_output(name)
    with np.errstate(all="ignore"):
        r64, c64 = r.astype(np.float64), c.astype(np.float64)
        close = np.isclose(c64, r64, atol=atol, rtol=rtol, equal_nan=True)
        both = np.isfinite(r64) & np.isfinite(c64)
        diff = np.abs(c64 - r64)
        max_abs = float(diff[both].max()) if both.any() else None
        nz = both & (r64 != 0)
        max_rel = float((diff[nz] / np.abs(r64[nz])).max()) if nz.any() else (0.0 if max_abs == 0 else None)
    mismatch = float(1.0 - close.mean())
    return TensorError(bool(close.all()), max_abs, max_rel, mismatch)


def error_histogram(ref: np.ndarray, cand: np.ndarray, bins: int = HISTOGRAM_BINS) -> dict[str, Any] | None:
    """Histogram of per-element |cand - ref| (log10-spaced bins over the finite, non-zero errors)."""
    r, c = np.asarray(ref), np.asarray(cand)
    if r.shape != c.shape or r.dtype.kind not in "fiub" or c.dtype.kind not in "fiub" or r.size == 0:
        return None
    with np.errstate(all="ignore"):
        diff = np.abs(c.astype(np.float64) - r.astype(np.float64)).reshape(-1)
    finite = diff[np.isfinite(diff)]
    exact = int((finite == 0).sum())
    nonzero = finite[finite > 0]
    if nonzero.size == 0:
        return {"edges": [], "counts": [], "exact": exact, "nonfinite": int(diff.size - finite.size)}
    lo, hi = np.log10(nonzero.min()), np.log10(nonzero.max())
    if hi - lo < 1e-9:
        hi = lo + 1.0
    counts, edges = np.histogram(np.log10(nonzero), bins=bins, range=(lo, hi))
    return {"edges": [float(10 ** e) for e in edges], "counts": [int(x) for x in counts], "exact": exact,
            "nonfinite": int(diff.size - finite.size)}
