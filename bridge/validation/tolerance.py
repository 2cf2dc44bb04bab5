"""Which elementwise differences between a candidate's output and the reference's are rounding (float32, float16).

The tolerance ``|cand_i - ref_i| <= atol + rtol * |ref_i|`` (numpy.isclose) judges each element by its own
magnitude. Float32 rounding does not follow that magnitude: it follows the magnitude of the values that were
*summed* to compute the element. An output of a convolution or matrix product that reaches 1e3 has elements near
zero where large terms cancel, and those carry the rounding error of the large terms, not of their own size
(two correct runtimes then FAIL on them: logits up to 1.7e3 off by 0.86 = 5e-4 of their range, a detector head
fed [-1, 1] off by 1e-6 of its range). So the scale rule (the default) judges element ``i`` by

    |cand_i - ref_i| <= atol + rtol * scale_i

where ``scale_i`` (>= |ref_i|) is the largest |ref| among the values computed alongside element ``i``: for each
axis along which the output has more than one slice holding more than one element, the largest |ref| of the slice
through ``i`` (its image of the batch, its channel, its row, its column, ...); ``scale_i`` is the smallest of
those (the whole output's largest |ref| when no axis qualifies, e.g. a vector; ``|ref_i|`` for a single value).

Why (float32 error analysis): a sum ``y = sum_k x_k w_k`` of K terms computed in floating point in any order
satisfies ``|fl(y) - y| <= gamma_K * sum_k |x_k w_k|``, ``gamma_K = K u / (1 - K u)``, ``u = 2**-24`` for float32
(N. J. Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., SIAM 2002, section 3.1, eq. (3.5);
the probabilistic bound of Higham & Mary, SIAM J. Sci. Comput. 41(5), 2019, is ``~ sqrt(K) u sum_k |x_k w_k|``).
Two correct implementations that differ only in summation order (blocked GEMM, im2col or Winograd, a Conv split
into partial sums, a fused bias) therefore differ by up to ``2 gamma_K sum_k |x_k w_k|`` - relative to the summed
magnitude ``sum_k |x_k w_k|``, not to ``|y|``. That magnitude is not in the output, but it is at least ``|y|`` for
every element, so the largest |ref| of the elements computed from the same weights (a channel) or the same inputs
(an image, a position) is what the output's own values say about it; ``rtol`` is then read as the accepted
rounding relative to that magnitude (the default 1e-3 is ``2 gamma_K`` for K ~ 8,400 terms: the worst case of
the reductions of common networks, 3x3x512 = 4,608 or 1x1x2,048, and ~10^3 times their typical sqrt(K) u).

What it never excuses: no element is allowed more than ``atol + rtol`` times the largest |ref| of any slice it
lies in, so an output's largest elements are judged exactly as before, any error beyond ``rtol`` of the scale of
its channel / row / image still FAILs (a wrong scale, a bias off by a fraction of the range, one element off by 1%
of it, a sign flipped near zero), and taking the smallest slice maximum keeps quantities of other units packed in
one tensor apart (YOLO's probability columns next to pixel coordinates are judged at their own scale). Whether
the whole reference is within the tolerance (a vacuous check) is unchanged: its largest element decides that.

Explicit values: ``--atol`` / ``--rtol`` set the rule's atol and rtol (``--rtol 0`` leaves only atol; both 0 ask
for equality); a per-output ``--tolerance NAME=ATOL,RTOL`` wins for that output and is applied elementwise as
numpy.isclose, without the scale; ``Tolerance(scale_rule=False)`` does that for every output. ``--strict`` is
unaffected (it fails vacuous checks). The scale is computed only where the elementwise rule alone fails, so a
comparison that passes elementwise costs what it did.

Float16 outputs (``float16_tolerance``): when the tolerance is the default (``--atol``/``--rtol`` at their defaults,
no ``--tolerance`` for the output) and the *reference's* output is float16 - the source computes it at float16
resolution - the output is judged by the same rule with float16's numbers instead of the float32 default's:

    rtol = 8 u = 4 eps = 2**-8 ~ 3.9e-3,   atol = 2 * 2**-14 = 2**-13 ~ 1.2e-4

Why (float16 error analysis): float16 (IEEE 754 binary16, 10 fraction bits) has ``eps = 2**-10`` (the spacing of
its numbers in [1, 2); one ulp of ``x`` lies between ``eps |x| / 2`` and ``eps |x|``) and unit roundoff
``u = 2**-11``: every float16 value a computation stores carries a relative error ``<= u`` (Higham, section 2.1,
eq. (2.4)), and an error ``<= u |v|`` made on an intermediate ``v`` no larger than the output's scale reaches the
output at that size through the products, quotients and sums that follow (to first order; Higham section 3.1).
Two correct implementations of a float16 output differ in how many such roundings they make and where: MXNet's
box_decode kernel rounds each output once, an ONNX graph stores every node's output in float16 (a box decode as
slices, products, sums and an Exp: several roundings on a path), onnxruntime accumulates float16 reductions in float32
(its ReduceSum / ReduceL2 are the exactly rounded results), MXNet's float16 L2 norm sums the squares in float16
(unless MXNET_SAFE_ACCUMULATION=1). Up to 8 roundings between the two sides differ by at most
``8 u scale = rtol scale``; a float16 accumulation of K terms has the probabilistic error ``sqrt(K) u sum_k |x_k|``
(Higham & Mary 2019), 8 u of the summed magnitude at K = 64. The float32 default (rtol 1e-3 ~ 1 float16 eps)
refuses correct conversions: MXNet 1.9.1's operator suite against onnxruntime on float16 ``sum``, ``norm``,
``contrib_box_decode`` differs by 1-2 float16 ulps (``bench/results/2026-11-29-mxnet-op-suite.md``: 0.03 at values
16-32, 0.002 at 1-2), MXNet's L2 norm of 360 squares summed in float16 by up to 5 ulps, 3.0e-3 of the value (106.1
for 106.45, measured on the suite's uniform(0, 10) inputs). That norm is the rule's edge: its relative error has a
standard deviation of about ``u sqrt(K) / 6`` = 1.5e-3 (K = 360 rounding errors uniform in [-u, u] on partial sums
growing linearly, halved by the square root), so ~1% of such inputs exceed rtol; a source summing more terms in
float16 exceeds it more often (the error grows as sqrt(K)): give ``--rtol`` then (or MXNET_SAFE_ACCUMULATION=1).
``atol`` is twice float16's smallest normal number 2**-14 ~ 6.1e-5: below it float16 has no relative precision
(subnormals are 2**-24 apart) and a runtime that flushes subnormals to zero gives 0 where another gives up to 6.1e-5.

What it never excuses: rtol 2**-8 is below 1/256 of the scale, so a scale off by 1.01, a bias of 1% of the range,
one element off by 1% of its scale and a sign flipped on a value above 2**-9 of its scale still FAIL; at the
elements that set their slices' scale (``scale_i = |ref_i|``) the bound is ``atol + 4 eps |ref_i|``, between 4 and
8 ulps of ``ref_i`` plus atol, so an output off by 9 ulps everywhere FAILs there (8 ulps too, unless each such
element lies within atol / (4 eps) of the next power of two), while 1-3 ulps always pass. It is
the default's, never the user's: an ``--atol``/``--rtol`` other than the default, or a ``--tolerance`` for the
output, is applied as given (a value equal to the default counts as the default: bridge cannot tell it from not
given; ``--tolerance NAME=0.0001,0.001`` keeps the float32 numbers for one output). A float32 reference keeps the
float32 default even where the candidate's output is float16: a conversion that computes at a lower precision
than its source is judged at the source's. The verdict and the reports name it (``float16 tolerance: atol ...``).
bfloat16 is not covered: no runtime bridge validates in hands a bfloat16 array to Python (onnxruntime's Python
API has none, MXNet's bfloat16 parameters are widened to float32), so the rule has nothing to see there.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bridge.config import DEFAULT_TOLERANCE, Tolerance

# float16 (IEEE 754 binary16): the spacing of its numbers in [1, 2) and its smallest normal number
FLOAT16_EPS = 2.0 ** -10
FLOAT16_SMALLEST_NORMAL = 2.0 ** -14
# the default tolerance of a float16 reference's output (module docstring): 8 roundings of unit roundoff eps / 2
# relative to the scale, and twice the smallest normal number absolute
FLOAT16_TOLERANCE = (2 * FLOAT16_SMALLEST_NORMAL, 8 * FLOAT16_EPS / 2)


def float16_tolerance(tolerance: Tolerance, name: str, reference_dtype: np.dtype | None) -> tuple[float, float] | None:
    """The float16 default (module docstring) for output ``name`` when it applies: ``tolerance`` is the default
    for that output (global atol/rtol at their defaults, no per-output entry) and the reference's output is
    float16; ``None`` otherwise (``tolerance.for_output(name)`` judges it)."""
    if reference_dtype is None or np.dtype(reference_dtype) != np.float16 or name in tolerance.per_output:
        return None
    if (tolerance.atol, tolerance.rtol) != (DEFAULT_TOLERANCE.atol, DEFAULT_TOLERANCE.rtol):
        return None
    return FLOAT16_TOLERANCE


def output_tolerance(tolerance: Tolerance, name: str, reference_dtype: np.dtype | None = None) -> tuple[float, float]:
    """(atol, rtol) that judge output ``name`` whose reference has ``reference_dtype``: the float16 default where
    it applies (``float16_tolerance``), else what ``tolerance`` says for the output."""
    return float16_tolerance(tolerance, name, reference_dtype) or tolerance.for_output(name)


@dataclass(frozen=True)
class ElementwiseRule:
    """How one output's elements are judged: ``atol + rtol * scale_i`` (``scaled``) or ``atol + rtol * |ref_i|``
    (``why_elementwise`` says why: an explicit per-output tolerance, or the scale rule turned off). ``label`` names
    a default other than the float32 one that set atol and rtol (``float16 tolerance``), for the verdict."""

    atol: float
    rtol: float
    scaled: bool = True
    why_elementwise: str = ""
    label: str = ""

    @classmethod
    def for_output(cls, tolerance: Tolerance, name: str, reference_dtype: np.dtype | None = None) -> ElementwiseRule:
        atol, rtol = tolerance.for_output(name)
        if name in tolerance.per_output:
            return cls(atol, rtol, False, f"--tolerance {name}={atol:g},{rtol:g}: elementwise, as given")
        half = float16_tolerance(tolerance, name, reference_dtype)
        label = "float16 tolerance" if half else ""
        atol, rtol = half or (atol, rtol)
        if not tolerance.scale_rule:
            return cls(atol, rtol, False, "elementwise: the scale rule is off", label)
        return cls(atol, rtol, rtol > 0, "" if rtol > 0 else "rtol 0: atol alone", label)

    def elementwise(self, why: str) -> ElementwiseRule:
        """The same numbers judged elementwise, for the reason ``why``."""
        return ElementwiseRule(self.atol, self.rtol, False, why, self.label)

    def text(self, by: str) -> str:
        """``atol A + rtol R x BY``, opened by the label of a float16 default (``float16 tolerance: atol ...``)."""
        head = f"{self.label}: " if self.label else ""
        return f"{head}atol {self.atol:g} + rtol {self.rtol:g} x {by}"


@dataclass(frozen=True)
class ToleranceDecision:
    """The verdict of ``decide`` on every element, and what to say about it."""

    within: np.ndarray  # bool per element: the difference is within the tolerance (meaningful where both finite)
    rule: str  # which tolerance applied and why, for the verdict line and the reports
    by_scale: int = 0  # elements within the tolerance only because of their scale (what the scale rule excused)


def element_scales(abs_ref: np.ndarray, index: tuple[np.ndarray, ...]) -> np.ndarray:
    """``scale_i`` (module docstring) at the elements ``index`` (``np.nonzero`` form) of ``abs_ref`` (the
    reference's magnitudes, 0 where not finite, at least 1-D): the smallest, over the axes whose slices hold more
    than one element and that have more than one slice, of the largest magnitude in the slice through each."""
    shape = abs_ref.shape
    axes = [a for a, d in enumerate(shape) if d > 1 and abs_ref.size // d > 1]
    if not axes:  # a vector (its one slice is the whole output) or a single value (its own magnitude)
        return np.full(len(index[0]), float(abs_ref.max()) if abs_ref.size else 0.0)
    scale: np.ndarray | None = None
    for a in axes:
        per_slice = abs_ref.max(axis=tuple(k for k in range(len(shape)) if k != a))
        at = per_slice[index[a]]
        scale = at if scale is None else np.minimum(scale, at)
    assert scale is not None
    return scale


# above this share of the elements outside the elementwise bound, the scale is computed for the whole output at
# once (ndim reductions and a broadcast) instead of gathered at each of those elements
DENSE_SHARE = 1 / 64


def dense_scales(abs_ref: np.ndarray) -> np.ndarray:
    """``scale_i`` (module docstring) for every element of ``abs_ref`` (as ``element_scales``, broadcast)."""
    a = np.atleast_1d(abs_ref)
    axes = [k for k, d in enumerate(a.shape) if d > 1 and a.size // d > 1]
    if not axes:
        return np.full(a.shape, float(a.max()) if a.size else 0.0)
    scale = a.max(axis=tuple(j for j in range(a.ndim) if j != axes[0]), keepdims=True)
    for k in axes[1:]:
        scale = np.minimum(scale, a.max(axis=tuple(j for j in range(a.ndim) if j != k), keepdims=True))
    return np.broadcast_to(scale, a.shape)


def decide(diff: np.ndarray, abs_ref: np.ndarray, both: np.ndarray, rule: ElementwiseRule) -> ToleranceDecision:
    """Judge every element: ``diff`` = |cand - ref| (0 where not both finite), ``abs_ref`` = |ref| (0 where not
    finite), ``both`` = both sides finite; all of the output's shape. The scale is computed only when the
    elementwise bound alone rejects some element: gathered at those elements when they are few, for the whole
    output when they are many (``DENSE_SHARE``)."""
    plain = rule.text("|ref|")
    within = diff <= rule.atol + rule.rtol * abs_ref
    if not rule.scaled:
        return ToleranceDecision(within, f"{plain} ({rule.why_elementwise})")
    outside = both & ~within
    count = int(np.count_nonzero(outside))
    if not count:
        return ToleranceDecision(within, f"{plain}: no element beyond it (the scale rule not needed)")
    d, a, out = np.atleast_1d(diff), np.atleast_1d(abs_ref), np.atleast_1d(outside)
    within = np.atleast_1d(within.copy())
    if count > DENSE_SHARE * d.size:
        scale = dense_scales(a)
        allowed = rule.atol + rule.rtol * scale
        rescued = out & (d <= allowed)
        within |= rescued
        beyond = out & ~rescued
        excused = _Excused.of(d[rescued], scale[rescued]) if rescued.any() else _Excused(0)
        worst = _Worst.dense(beyond, d, allowed, a, scale)
    else:
        index = np.nonzero(out)
        scale = element_scales(a, index)
        allowed = rule.atol + rule.rtol * scale
        excess = d[index]
        ok = excess <= allowed
        within[tuple(i[ok] for i in index)] = True
        excused = _Excused.of(excess[ok], scale[ok])
        worst = _Worst.of(tuple(i[~ok] for i in index), excess[~ok], allowed[~ok], a[index][~ok], scale[~ok])
    parts = [rule.text("scale") + ", the scale rule (float32 rounding follows the magnitude summed; an element's "
             "scale is the largest |ref| of its slices)"]
    parts += [excused.text()] if excused.count else []
    parts += [worst.text(np.ndim(abs_ref) > 0)] if worst.count else []
    return ToleranceDecision(within.reshape(np.shape(diff)), parts[0] + ": " + "; ".join(parts[1:]), excused.count)


@dataclass(frozen=True)
class _Excused:
    """The elements within the tolerance only by their scale: how many, their largest scale and error."""

    count: int
    scale: float = 0.0
    excess: float = 0.0
    ratio: float = 0.0

    @classmethod
    def of(cls, excess: np.ndarray, scale: np.ndarray) -> _Excused:
        if not excess.size:  # an excused element has a scale > its |ref| >= 0 (else atol alone decided it)
            return cls(0)
        return cls(int(excess.size), float(scale.max()), float(excess.max()), float((excess / scale).max()))

    def text(self) -> str:
        return (f"{_count(self.count)} within it only by their scale (up to {self.scale:.3g}; worst |delta| "
                f"{self.excess:.3g} = {self.ratio:.2g} x scale)")


@dataclass(frozen=True)
class _Worst:
    """The elements beyond the tolerance even with their scale: how many, and the worst of them (the largest
    error relative to what it was allowed)."""

    count: int
    where: tuple[int, ...] = ()
    excess: float = 0.0
    allowed: float = 0.0
    ref: float = 0.0
    scale: float = 0.0

    @classmethod
    def of(cls, index: tuple[np.ndarray, ...], excess: np.ndarray, allowed: np.ndarray, ref: np.ndarray,
           scale: np.ndarray) -> _Worst:
        if not excess.size:
            return cls(0)
        k = int(np.argmax(excess / np.maximum(allowed, np.finfo(np.float64).tiny)))
        return cls(int(excess.size), tuple(int(i[k]) for i in index), float(excess[k]), float(allowed[k]),
                   float(ref[k]), float(scale[k]))

    @classmethod
    def dense(cls, beyond: np.ndarray, excess: np.ndarray, allowed: np.ndarray, ref: np.ndarray, scale: np.ndarray
              ) -> _Worst:
        """``of`` for whole-output arrays and the mask ``beyond`` (no gather of every element beyond)."""
        count = int(np.count_nonzero(beyond))
        if not count:
            return cls(0)
        with np.errstate(divide="ignore", invalid="ignore"):
            k = int(np.argmax(np.where(beyond, excess / np.maximum(allowed, np.finfo(np.float64).tiny), -np.inf)))
        at = np.unravel_index(k, beyond.shape)
        return cls(count, tuple(int(i) for i in at), float(excess[at]), float(allowed[at]), float(ref[at]),
                   float(scale[at]))

    def text(self, with_index: bool) -> str:
        where = f" at {list(self.where)}" if with_index else ""
        return (f"{_count(self.count)} beyond it, the worst{where}: |delta| {self.excess:.3g} > {self.allowed:.3g} "
                f"allowed (|ref| {self.ref:.3g}, scale {self.scale:.3g})")


def _count(n: int) -> str:
    return f"{n} element{'' if n == 1 else 's'}"
