"""``bridge shapes dynamic``: turn named axes of a static model into dynamic ones that really work.

Releasing an input axis is the easy part. The graph must then compute at other sizes, but a model
exported at batch 4 keeps 4 in Reshape targets, Expand/Tile/ConstantOfShape constants and Slice ends
(see ``bridge.passes.shape_dynamic``): those are rewritten where the meaning is unambiguous and
reported by node otherwise. Every output dim that follows a released axis is named after it - by
onnx shape inference where it can, else from measured sizes (``height/2``, ``batch*3``) - so outputs
are labelled consistently.

Validation: at the original size the new model must equal the original; at two other sizes it must
run, produce the shapes its signature promises, and - for batch-like axes (axis 0 of every input that
carries the label) - equal the original run chunk by chunk, sample by sample.
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx_ir.passes.common import CheckerPass, RemoveUnusedNodesPass, TopologicalSortPass

from bridge.config import DEFAULT_TOLERANCE, DynamicAxis, Tolerance
from bridge.conversion.check import Isolation
from bridge.errors import ExportError, UsageError, ValidationMismatch
from bridge.io import check_writable, refuse_overwriting_inputs, save_model
from bridge.model import ModelContainer, PassRecord
from bridge.passes.pipeline import Step, run_pipeline
from bridge.passes.shape_dynamic import BakedShape, ReleaseAxesPass, ResetShapesPass, RewriteBakedShapesPass
from bridge.passes.shapes import InferShapesPass
from bridge.runtimes.base import Runtime, TensorMeta, activated
from bridge.runtimes.isolated import DEFAULT_TIMEOUT_S, isolate
from bridge.shapes.common import (
    Progress,
    dims,
    graph_inputs,
    input_metas,
    load,
    quiet,
    static_dims,
    write_checked,
)
from bridge.validation.compare import Comparison
from bridge.validation.results import RunResults

logger = logging.getLogger(__name__)
_MAX_ROUNDS = 4  # a rewrite can expose the next baked constant downstream; real models settle in 1-2


class BakedShapeError(ExportError):
    """Constants still hold the old size of a dynamic axis; lists each node, op and constant."""

    def __init__(self, unresolved: Sequence[BakedShape]) -> None:
        self.unresolved = list(unresolved)
        lines = "\n  ".join(f.describe() for f in self.unresolved)
        super().__init__(f"{len(self.unresolved)} constant(s) baked the old size of a dynamic axis and cannot be "
                         f"rewritten soundly:\n  {lines}\nRe-export the model shape-generically, or pass "
                         "--allow-baked to write it anyway (validated at the original size only).")


@dataclass
class SizeCheck:
    """One run of the new model at other sizes: what was checked and how it went."""

    sizes: dict[str, int]
    kind: str  # "original" | "consistency" | "per-sample"
    passed: bool
    detail: str = ""
    comparison: Comparison | None = None

    def to_dict(self) -> dict[str, Any]:
        d = {"sizes": self.sizes, "kind": self.kind, "passed": self.passed, "detail": self.detail}
        d["comparison"] = self.comparison.to_dict() if self.comparison else None
        return d


@dataclass
class DynamicResult:
    model: str
    output: Path | None
    axes: list[DynamicAxis]
    old_sizes: dict[str, int]
    inputs: dict[str, list[Any]]
    outputs: dict[str, list[Any]]
    baked: list[BakedShape] = field(default_factory=list)
    checks: list[SizeCheck] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    passes: list[PassRecord] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    written: bool = False
    proto: onnx.ModelProto | None = field(default=None, repr=False)

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    @property
    def validation(self) -> list[Comparison]:
        return [c.comparison for c in self.checks if c.comparison is not None]

    def to_dict(self) -> dict[str, Any]:
        return {
            "command": "shapes dynamic", "model": self.model, "output": str(self.output) if self.output else None,
            "written": self.written, "axes": [asdict(a) for a in self.axes], "old_sizes": self.old_sizes,
            "inputs": self.inputs, "outputs": self.outputs, "baked": [b.to_dict() for b in self.baked],
            "checks": [c.to_dict() for c in self.checks], "passed": self.passed, "warnings": self.warnings,
            "passes": [asdict(p) for p in self.passes], "timings": self.timings,
        }


def _parse_axes(items: Sequence[str | DynamicAxis]) -> tuple[DynamicAxis, ...]:
    axes = tuple(i if isinstance(i, DynamicAxis) else DynamicAxis.parse(i) for i in items)
    if not axes:
        raise UsageError("give at least one --axis NAME:AXIS=LABEL")
    seen: set[tuple[str, int]] = set()
    for a in axes:
        if (a.input, a.axis) in seen:
            raise UsageError(f"--axis names {a.input} axis {a.axis} twice")
        seen.add((a.input, a.axis))
    return axes


def default_check_sizes(label: str, old: int, batch_like: bool) -> tuple[int, int]:
    """Two sizes other than ``old``: batch-like n+1 and 2n+1; spatial n+p and n+2p, p the largest power of
    two dividing n (keeps the stride divisibility the original size had)."""
    if batch_like:
        return old + 1, 2 * old + 1
    p = old & -old
    return old + p, old + 2 * p


def make_dynamic(
    model: str | Path | onnx.ModelProto,
    output: str | Path | None,
    *,
    axes: Sequence[str | DynamicAxis],
    check_sizes: Mapping[str, Sequence[int]] | None = None,
    rewrite: bool = True,
    allow_baked: bool = False,
    validate: bool = True,
    tolerance: Tolerance = DEFAULT_TOLERANCE,
    seed: int = 0,
    progress: Progress | None = None,
    timeout: float | None = DEFAULT_TIMEOUT_S,
    isolated: bool = True,
) -> DynamicResult:
    """Make the named axes (``images:0=batch``) of a static model dynamic; write ``output`` if given.

    ``check_sizes`` = {label: (size1, size2)} overrides the two other sizes validated at. Both models run in
    onnxruntime child processes (``isolated``), each step under ``timeout`` seconds. Raises
    BakedShapeError listing the nodes whose constants still hold an old size (unless ``allow_baked``),
    ValidationMismatch (with ``.result``) when a check fails; nothing is written then.
    """
    say = progress or quiet
    if output is not None and not isinstance(model, onnx.ModelProto):
        refuse_overwriting_inputs(output, [model])  # a failed run must not destroy its own source
        check_writable(output, "-o")  # before the work, not after it
    proto, name = load(model)
    parsed = _parse_axes(axes)
    for vi in graph_inputs(proto):
        d = dims(vi)
        if d is None or not all(isinstance(x, int) for x in d):
            raise UsageError(f"input '{vi.name}' is not static ({d}); `bridge shapes dynamic` starts from a static "
                             "model - fix it first with `bridge shapes fix`")
    timings: dict[str, float] = {}
    start = time.perf_counter()
    say("inferring the original model's shapes")
    static = static_dims(proto)
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    container = ModelContainer.from_proto(copy, source_framework="onnx", exporter="bridge shapes dynamic")
    release = ReleaseAxesPass(parsed)
    run_pipeline(container, [
        Step(TopologicalSortPass(), "later passes assume producers come first"),
        Step(release, "make the requested input axes symbolic under their labels"),
    ], say)
    baked = RewriteBakedShapesPass(parsed, release.old_sizes, static, rewrite=rewrite)
    for _ in range(_MAX_ROUNDS):
        run_pipeline(container, [
            Step(ResetShapesPass("all"), "forget every shape derived from the old static sizes"),
            Step(InferShapesPass(),
                 "propagate the labels: values that lose them show where a constant baked the old size"),
            Step(baked, "rewrite (or report) constants holding the old size of a released axis"),
        ], say)
        if not container.history[-1].modified:
            break
    run_pipeline(container, [
        Step(RemoveUnusedNodesPass(), "drop the constants the rewrites replaced"),
        Step(ResetShapesPass("all"), "final inference starts from the released inputs only"),
        Step(InferShapesPass(), "label every value the labels reach"),
        Step(CheckerPass(full_check=True), "the result must pass the full checker"),
    ], say)
    timings["passes_s"] = time.perf_counter() - start
    unresolved = baked.unresolved
    result = DynamicResult(model=name, output=Path(output) if output is not None else None, axes=list(parsed),
                           old_sizes=dict(release.old_sizes), inputs={}, outputs={}, baked=list(baked.findings),
                           passes=container.history, timings=timings)
    if unresolved and not allow_baked:
        raise BakedShapeError(unresolved)
    if unresolved:
        result.warnings.append(f"{len(unresolved)} baked constant(s) left (--allow-baked): the model is checked at "
                               "the original size only")
    new = container.to_proto()
    labels = dict(release.old_sizes)
    batch_like = _batch_like(parsed)
    sizes = _other_sizes(labels, batch_like, check_sizes)
    # the runs are not optional: output dims inference cannot size are named from the measured shapes
    start = time.perf_counter()
    say("running the original and the dynamic model")
    with tempfile.TemporaryDirectory(prefix="bridge-dynamic-") as tmp:
        sessions = _Sessions(Path(tmp) / "original.onnx", Path(tmp) / "dynamic.onnx", Isolation(isolated, timeout))
        save_model(proto, sessions.original)
        save_model(new, sessions.new)
        _check_and_name(sessions, new, parsed, labels, batch_like, [] if unresolved else sizes, tolerance, seed,
                        result, validate=validate)
    timings["validate_s"] = time.perf_counter() - start
    result.inputs = {vi.name: dims(vi) or [] for vi in graph_inputs(new)}
    result.outputs = {vi.name: dims(vi) or [] for vi in new.graph.output}
    result.proto = new
    if not result.passed:
        failing = "; ".join(f"{c.kind} at {c.sizes}: {c.detail}" for c in result.checks if not c.passed)
        raise ValidationMismatch(f"the dynamic model fails its checks ({failing})"
                                 + (f"; {output} was not written" if output else ""), result=result)
    if output is not None:
        say(f"writing {output}")
        result.warnings += write_checked(new, Path(output), require_static=False)
        result.written = True
    return result


def _batch_like(axes: Sequence[DynamicAxis]) -> dict[str, bool]:
    out: dict[str, bool] = {}
    for a in axes:
        out[a.label] = out.get(a.label, True) and a.axis == 0
    return out


def _other_sizes(labels: Mapping[str, int], batch_like: Mapping[str, bool],
                 given: Mapping[str, Sequence[int]] | None) -> list[dict[str, int]]:
    given = dict(given or {})
    unknown = sorted(set(given) - set(labels))
    if unknown:
        raise UsageError(f"--check-size labels {unknown} are not axis labels ({', '.join(labels)})")
    per = {}
    for label, old in labels.items():
        pair = tuple(given.get(label) or default_check_sizes(label, old, batch_like[label]))
        if len(pair) != 2 or any(int(s) <= 0 for s in pair):
            raise UsageError(f"--check-size {label}: give two positive sizes, e.g. {label}=2,7")
        per[label] = pair
    return [{label: int(pair[k]) for label, pair in per.items()} for k in range(2)]


def _shapes_for(metas: Sequence[TensorMeta], sizes: Mapping[str, int]) -> dict[str, tuple[int, ...]]:
    out = {}
    for m in metas:
        assert m.shape is not None
        out[m.name] = tuple(d if isinstance(d, int) else sizes[str(d)] for d in m.shape)
    return out


@dataclass
class _Sessions:
    """The original and the dynamic model, saved once, each run in an isolated onnxruntime child (time and
    memory limits, a crash reported as such) like every other run; comparisons go through
    the one validation run (``bridge.conversion.check.run_check``) against the saved reference outputs."""

    original: Path
    new: Path
    isolation: Isolation = field(default_factory=Isolation)

    def session(self, path: Path, what: str) -> Runtime:
        from bridge.runtimes.onnxruntime import OnnxRuntime

        # failures are raised and reported, not logged twice
        return isolate(partial(OnnxRuntime, str(path), log_severity=4, describe=what), name=OnnxRuntime.name,
                       stage=f"onnxruntime on {what}", enabled=self.isolation.enabled, timeout=self.isolation.timeout,
                       max_memory=self.isolation.limit())

    def run(self, which: str, feeds_list: Sequence[Mapping[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
        """Outputs of the original or new model for each feed dict (one child for them all)."""
        path = self.original if which == "original" else self.new
        with activated(self.session(path, f"the {which} model")) as rt:
            return [rt.infer(dict(f)) for f in feeds_list]

    def compare(self, feeds: Mapping[str, np.ndarray], reference: Mapping[str, np.ndarray], reference_name: str,
                candidate_name: str, tolerance: Tolerance, shape_only: Sequence[str] = ()) -> Comparison:
        """The new model on ``feeds`` against the reference outputs, through the one validation run (``Check``
        with the original's outputs as a saved reference). No second input here: the checks at the other sizes
        run the new model on other inputs (seed + 1) against the original's own runs."""
        from bridge.conversion.check import Check, SavedReference, run_check

        saved = RunResults(dict(feeds), dict(reference), reference_name, {"random_outputs": list(shape_only)})
        checked = run_check(Check(SavedReference(saved, reference_name),
                                  {candidate_name: self.session(self.new, "the dynamic model")}, tolerance=tolerance,
                                  second_input=False))
        return checked.comparisons[0]


def _fit_dim(values: Sequence[int], label_values: Mapping[str, Sequence[int]]) -> int | str | None:
    """Name one output dim from its sizes over the runs: a constant, a label, or label*ratio / label+offset."""
    if len(set(values)) == 1:
        return int(values[0])
    for label, lv in label_values.items():
        if list(values) == list(lv):
            return label
    for label, lv in label_values.items():
        if all(v > 0 for v in lv):
            ratios = {Fraction(int(v), int(x)) for v, x in zip(values, lv, strict=True)}
            if len(ratios) == 1:
                r = ratios.pop()
                if r.denominator == 1:
                    return f"{label}*{r.numerator}"
                if r.numerator == 1:
                    return f"{label}/{r.denominator}"
                return f"{label}*{r.numerator}/{r.denominator}"
        offsets = {int(v) - int(x) for v, x in zip(values, lv, strict=True)}
        if len(offsets) == 1:
            c = offsets.pop()
            return f"{label}+{c}" if c > 0 else f"{label}-{-c}"
    return None


def _eval_dim(dim: int | str | None, sizes: Mapping[str, int]) -> int | None:
    """The size a named dim promises at ``sizes`` (labels and the forms _fit_dim writes), None if unknown."""
    if isinstance(dim, int):
        return dim
    if dim is None:
        return None
    if dim in sizes:
        return sizes[dim]
    for label, n in sizes.items():
        if dim.startswith(label):
            rest = dim[len(label):]
            try:
                if rest.startswith("*"):
                    return int(Fraction(rest[1:]) * n) if "/" in rest else n * int(rest[1:])
                if rest.startswith("/"):
                    return int(Fraction(n, int(rest[1:])))
                if rest[:1] in "+-" and rest:
                    return n + int(rest)
            except ValueError:
                return None
    return None


def _check_and_name(sessions: _Sessions, new: onnx.ModelProto, axes: Sequence[DynamicAxis],
                    labels: Mapping[str, int], batch_like: Mapping[str, bool], others: Sequence[dict[str, int]],
                    tolerance: Tolerance, seed: int, result: DynamicResult, *, validate: bool) -> None:
    """Run at the original and other sizes, name the output dims from the measured shapes, check them."""
    metas = input_metas(new)
    orig_sizes = dict(labels)
    feeds0 = _feeds(metas, orig_sizes, seed)
    if validate:
        (ref0,) = sessions.run("original", [feeds0])
        comp = sessions.compare(feeds0, ref0, "original model", "dynamic model", tolerance)
        result.checks.append(SizeCheck(orig_sizes, "original", comp.passed, comp.summary(), comp))
    runs: list[tuple[dict[str, int], dict[str, np.ndarray]]] = []
    try:
        # the original size first: output dims are named from the sizes measured in these runs
        measured = sessions.run("dynamic", [feeds0, *(_feeds(metas, sizes, seed) for sizes in others)])
    except Exception as exc:  # onnxruntime's own error names the node that cannot take the new size
        if not validate:
            result.warnings.append(f"the model does not run at {list(others)}: {exc}")
            return
        result.checks.append(SizeCheck(others[0] if others else orig_sizes, "consistency", False,
                                       f"onnxruntime failed: {exc}"))
        return
    new0 = measured[0]
    runs = list(zip(others, measured[1:], strict=True))
    if runs:
        _name_outputs(new, new0, orig_sizes, runs, result)
    if not validate or not runs:
        return
    out_dims = {vi.name: dims(vi) or [] for vi in new.graph.output}
    for sizes, outs in runs:
        bad = []
        for oname, arr in outs.items():
            promised = [_eval_dim(d, sizes) for d in out_dims.get(oname, [])]
            if len(promised) != arr.ndim or any(p is not None and p != s for p, s in zip(promised, arr.shape, strict=False)):
                bad.append(f"{oname} {list(arr.shape)} vs promised {out_dims.get(oname)}")
        result.checks.append(SizeCheck(sizes, "consistency", not bad,
                                       "; ".join(bad) or "runs; output shapes follow the named dims"))
    batch_labels = [lab for lab, b in batch_like.items() if b]
    if len(batch_labels) != 1:
        if batch_labels:
            result.warnings.append("per-sample checks need exactly one batch-like label; skipped")
        return
    blabel = batch_labels[0]
    for sizes in others:
        bsizes = dict(orig_sizes)
        bsizes[blabel] = sizes[blabel]
        result.checks.append(_per_sample(sessions, metas, blabel, orig_sizes[blabel], bsizes, out_dims,
                                         tolerance, seed))


def _feeds(metas: Sequence[TensorMeta], sizes: Mapping[str, int], seed: int) -> dict[str, np.ndarray]:
    from bridge.shapes.common import feeds_at

    return feeds_at(metas, _shapes_for(metas, sizes), seed)


def _name_outputs(new: onnx.ModelProto, out0: Mapping[str, np.ndarray], sizes0: Mapping[str, int],
                  runs: Sequence[tuple[dict[str, int], dict[str, np.ndarray]]], result: DynamicResult) -> None:
    """Give every output dim inference left unknown a name fitted to the measured sizes."""
    label_values = {lab: [sizes0[lab], *(s[lab] for s, _ in runs)] for lab in sizes0}
    for vi in new.graph.output:
        if vi.name not in out0:
            continue
        measured = [out0[vi.name].shape, *(o[vi.name].shape for _, o in runs)]
        if len({len(m) for m in measured}) != 1:
            result.warnings.append(f"output '{vi.name}' changes rank with the input size")
            continue
        current = dims(vi) or [None] * len(measured[0])
        shape = vi.type.tensor_type.shape
        if len(shape.dim) != len(measured[0]):
            del shape.dim[:]
            for _ in measured[0]:
                shape.dim.add()
        for axis, dim in enumerate(current):
            if isinstance(dim, int) or (isinstance(dim, str) and dim in sizes0):
                continue  # concrete, or a label inference propagated
            name = _fit_dim([m[axis] for m in measured], label_values) or f"{vi.name}_dim{axis}"
            d = shape.dim[axis]
            if isinstance(name, int):
                d.dim_value = name
            else:
                d.dim_param = name


def _per_sample(sessions: _Sessions, metas: Sequence[TensorMeta], label: str, n0: int, sizes: dict[str, int],
                out_dims: Mapping[str, list[Any]], tolerance: Tolerance, seed: int) -> SizeCheck:
    """New model at batch B versus the original run on chunks of its static batch n0, sample by sample."""
    feeds = _feeds(metas, sizes, seed + 1)
    batch_axis = {o: d.index(label) for o, d in out_dims.items() if label in d}
    big = sizes[label]
    chunks, counts = [], []
    for start in range(0, big, n0):
        idx = list(range(start, min(start + n0, big)))
        take = idx + [idx[0]] * (n0 - len(idx))  # the original needs exactly n0 samples: repeat one
        chunk = {}
        for m in metas:
            assert m.shape is not None
            carries = bool(m.shape) and m.shape[0] == label
            chunk[m.name] = feeds[m.name][take] if carries else feeds[m.name]
        chunks.append(chunk)
        counts.append(len(idx))
    refs = sessions.run("original", chunks)
    if not batch_axis:
        return SizeCheck(sizes, "per-sample", True, f"no output carries '{label}'; nothing to compare per sample")
    reference = {o: np.concatenate([np.take(r[o], range(n), axis=ax) for r, n in zip(refs, counts, strict=True)],
                                   axis=ax) for o, ax in batch_axis.items()}
    # outputs without the batch axis do not depend on how the batch is split: checked by shape and dtype
    skipped = sorted(set(refs[0]) - set(batch_axis))
    reference.update({o: refs[0][o] for o in skipped})
    comp = sessions.compare(feeds, reference, f"original, {n0} samples at a time", f"dynamic model at {label}={big}",
                            tolerance, shape_only=skipped)
    detail = comp.summary() + (f"; outputs without a '{label}' axis compared by shape only: {skipped}"
                               if skipped else "")
    return SizeCheck(sizes, "per-sample", comp.passed, detail, comp)


__all__ = ["BakedShapeError", "DynamicResult", "SizeCheck", "make_dynamic"]
