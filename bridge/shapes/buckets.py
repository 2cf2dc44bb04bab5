"""``bridge shapes buckets``: static models for a few input sizes chosen from the data, plus buckets.json.

Runtimes that compile per shape (TensorRT, NPUs, MindSpore Lite, onnxruntime with static-shape
optimisations) are fastest on static models, but real inputs vary in size. Padding everything to the
largest size wastes compute; a handful of shape buckets chosen from the size statistics of the data
keeps the waste small (the idea of MindSpore Lite's automatic shape scaling, here runtime-neutral:
the buckets are plain static ONNX files).

Choosing candidates for one axis (heights, widths, or box counts as batch), from its values:

* range: ``max_min`` uses [min, max]; ``mean_std`` uses [mean - n_std*std, mean + n_std*std] clipped to
  [min, max] (outliers beyond it do not fit any bucket and are counted as ``unfit``);
* the top of the range is raised by ``expand_ratio`` (headroom for sizes the sample did not show);
* the range is cut into ``max_buckets`` equal steps, candidate k is ``lo + (hi - lo) * k / max_buckets``
  rounded *up* to a multiple of ``interval`` (1 for batch); duplicates merge, so there are at most
  ``max_buckets`` candidates per axis.

Height and width candidates combine into (height, width) pairs; only pairs some sample is routed to
(the smallest-area pair it fits) are kept, plus the largest pair so anything inside the envelope fits.
Each batch value is combined with each kept pair, each combination becomes a static model through
``fix_shapes`` (validated against the original at that shape), and ``buckets.json`` records the
buckets and how to un-pad each output (see ``bridge.runtime.BucketedSession``).
"""

from __future__ import annotations

import json
import logging
import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import onnx

from bridge.config import DEFAULT_TOLERANCE, InputSpec, Tolerance
from bridge.errors import BadInputFileError, BridgeError, SourceNotFoundError, UsageError
from bridge.io import atomic_write_text
from bridge.shapes.common import Progress, dims, graph_inputs, load, quiet
from bridge.shapes.datasets import Sample, limit_side, load_samples
from bridge.shapes.fix import complete_specs, fix_proto, fix_shapes

logger = logging.getLogger(__name__)

MANIFEST = "buckets.json"
FORMAT = "bridge.buckets/1"
STRATEGIES = ("mean_std", "max_min")
AXES = ("batch", "height", "width")


# ---------------------------------------------------------------------------------------------- choosing


def candidates(values: Sequence[int], *, strategy: str = "mean_std", n_std: float = 3.0, expand_ratio: float = 0.2,
               interval: int = 32, max_buckets: int = 4) -> list[int]:
    """Candidate sizes for one axis from observed values (see the module docstring for the rule)."""
    if strategy not in STRATEGIES:
        raise UsageError(f"--strategy '{strategy}': choose {' or '.join(STRATEGIES)}")
    if interval < 1 or max_buckets < 1 or expand_ratio < 0 or n_std < 0:
        raise UsageError("--interval and --max-buckets must be >= 1, --expand-ratio and --n-std >= 0")
    if not values:
        raise UsageError("no values to choose buckets from")
    lo, hi = float(min(values)), float(max(values))
    if strategy == "mean_std":
        mean, std = statistics.fmean(values), statistics.pstdev(values)
        lo, hi = max(lo, mean - n_std * std), min(hi, mean + n_std * std)
    hi *= 1.0 + expand_ratio
    out = set()
    for k in range(1, max_buckets + 1):
        v = lo + (hi - lo) * k / max_buckets
        out.add(max(interval, math.ceil(round(v, 6) / interval) * interval))
    return sorted(out)


@dataclass(frozen=True)
class Layout:
    """Which input axes the buckets vary: batch (axis 0) and height/width (the other two -1 axes)."""

    input: str
    shape: tuple[int, ...]  # the --input-shape, -1 for the bucketed axes
    batch: int | None
    height: int | None
    width: int | None

    def axis(self, name: str) -> int | None:
        return {"batch": self.batch, "height": self.height, "width": self.width}[name]

    def to_dict(self) -> dict[str, Any]:
        return {"input": self.input, "input_shape": list(self.shape),
                "axes": {a: self.axis(a) for a in AXES if self.axis(a) is not None}}


def parse_input_shape(text: str | Sequence[int]) -> tuple[int, ...]:
    if isinstance(text, str):
        try:
            shape = tuple(int(t) for t in text.replace("x", ",").split(","))
        except ValueError:
            raise UsageError(f"--input-shape '{text}': comma-separated ints, -1 for bucketed axes, e.g. -1,3,-1,-1") from None
    else:
        shape = tuple(int(t) for t in text)
    if not shape or any(d == 0 or d < -1 for d in shape):
        raise UsageError(f"--input-shape {list(shape)}: dims are positive or -1")
    return shape


def make_layout(proto: onnx.ModelProto, shape: Sequence[int], input_name: str | None) -> Layout:
    inputs = {vi.name: vi for vi in graph_inputs(proto)}
    name = input_name or next(iter(inputs), None)
    if name is None or name not in inputs:
        raise UsageError(f"--input-name {name}: the model's inputs are {', '.join(inputs) or 'none'}")
    model_dims = dims(inputs[name])
    if model_dims is not None and len(model_dims) != len(shape):
        raise UsageError(f"--input-shape has rank {len(shape)}, input '{name}' has rank {len(model_dims)} ({model_dims})")
    for i, (given, have) in enumerate(zip(shape, model_dims or [None] * len(shape), strict=True)):
        if given == -1 and isinstance(have, int):
            raise UsageError(f"--input-shape: axis {i} of '{name}' is static ({have}) in the model; it cannot be bucketed")
        if given > 0 and isinstance(have, int) and have != given:
            raise UsageError(f"--input-shape: axis {i} of '{name}' is {have} in the model, {given} given")
    free = [i for i, d in enumerate(shape) if d == -1]
    batch = 0 if 0 in free else None
    spatial = [i for i in free if i != 0]
    if len(spatial) not in (0, 2):
        raise UsageError(f"--input-shape {list(shape)}: bucket the batch (axis 0) and/or exactly two spatial axes "
                         f"(height, width); {len(spatial)} other -1 axes given")
    if not free:
        raise UsageError(f"--input-shape {list(shape)}: no -1 axis, nothing to bucket")
    return Layout(name, tuple(shape), batch, spatial[0] if spatial else None, spatial[1] if spatial else None)


@dataclass(frozen=True)
class Bucket:
    """One static model: its file and the sizes of the bucketed axes (None when that axis is not bucketed)."""

    file: str
    shape: tuple[int, ...]
    batch: int | None = None
    height: int | None = None
    width: int | None = None

    @property
    def volume(self) -> int:
        return math.prod(self.shape)

    def fits(self, batch: int | None, height: int | None, width: int | None) -> bool:
        return all(cap is None or need is None or need <= cap
                   for cap, need in ((self.batch, batch), (self.height, height), (self.width, width)))

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "shape": list(self.shape), "batch": self.batch, "height": self.height,
                "width": self.width}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Bucket:
        return cls(str(d["file"]), tuple(int(x) for x in d["shape"]), d.get("batch"), d.get("height"), d.get("width"))


def smallest_fitting(buckets: Sequence[Bucket], batch: int | None, height: int | None,
                     width: int | None) -> Bucket | None:
    """The bucket with the smallest volume that fits (ties: the first listed); None if none fits."""
    fitting = [b for b in buckets if b.fits(batch, height, width)]
    return min(fitting, key=lambda b: b.volume) if fitting else None


# --------------------------------------------------------------------------------------------- reporting


@dataclass
class WasteRow:
    """How much padding one bucket costs on the data routed to it."""

    bucket: str
    shape: list[int]
    items: int = 0
    real_pixels: int = 0
    padded_pixels: int = 0
    real_slots: int = 0
    padded_slots: int = 0

    @property
    def waste(self) -> float:
        total = self.real_pixels + self.padded_pixels
        return self.padded_pixels / total if total else 0.0

    @property
    def batch_waste(self) -> float:
        total = self.real_slots + self.padded_slots
        return self.padded_slots / total if total else 0.0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["waste"], d["batch_waste"] = self.waste, self.batch_waste
        return d


@dataclass
class BucketReport:
    """Padding waste per bucket for a dataset; ``unfit`` lists samples no bucket holds."""

    rows: list[WasteRow]
    unfit: list[str] = field(default_factory=list)
    samples: int = 0

    @property
    def waste(self) -> float:
        real = sum(r.real_pixels for r in self.rows)
        pad = sum(r.padded_pixels for r in self.rows)
        return pad / (real + pad) if real + pad else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"samples": self.samples, "waste": self.waste, "unfit": len(self.unfit), "unfit_examples": self.unfit[:10],
                "rows": [r.to_dict() for r in self.rows]}


def _sample_sizes(samples: Sequence[Sample], layout: Layout, limit: int | None,
                  batch_from_boxes: bool) -> list[tuple[str, int | None, int | None, int | None]]:
    out = []
    for s in samples:
        h = w = None
        if layout.height is not None and s.height is not None and s.width is not None:
            h, w = limit_side(s.height, s.width, limit)
        b = s.boxes if (batch_from_boxes and layout.batch is not None and s.boxes) else None
        if batch_from_boxes and layout.batch is not None and not s.boxes and layout.height is None:
            continue  # no boxes: a per-box stage never runs for this image
        out.append((s.source, b, h, w))
    return out


def waste_report(buckets: Sequence[Bucket], samples: Sequence[Sample], layout: Layout, *, limit_side_len: int | None,
                 batch_from_boxes: bool) -> BucketReport:
    """Route every sample to its smallest fitting bucket and total the padding per bucket."""
    rows = {b.file: WasteRow(b.file, list(b.shape)) for b in buckets}
    report = BucketReport(list(rows.values()))
    min_batch = min((b.batch for b in buckets if b.batch is not None), default=None)
    for source, n, h, w in _sample_sizes(samples, layout, limit_side_len, batch_from_boxes):
        report.samples += 1
        need_b = n if n is not None else min_batch
        bucket = smallest_fitting(buckets, need_b, h, w)
        if bucket is None:
            report.unfit.append(f"{source} (batch {n}, {h}x{w})" if n is not None else f"{source} ({h}x{w})")
            continue
        row = rows[bucket.file]
        row.items += 1
        if h is not None and w is not None and bucket.height is not None and bucket.width is not None:
            row.real_pixels += h * w
            row.padded_pixels += bucket.height * bucket.width - h * w
        if n is not None and bucket.batch is not None:
            row.real_slots += n
            row.padded_slots += bucket.batch - n
    return report


# ---------------------------------------------------------------------------------------------- building


@dataclass
class BucketsResult:
    model: str
    out_dir: Path
    layout: Layout
    settings: dict[str, Any]
    candidates: dict[str, list[int]]
    stats: dict[str, dict[str, float]]
    buckets: list[Bucket]
    unpad: dict[str, list[dict[str, Any]]]
    report: BucketReport
    warnings: list[str] = field(default_factory=list)
    validation: dict[str, str] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def manifest(self) -> Path:
        return self.out_dir / MANIFEST

    def to_dict(self) -> dict[str, Any]:
        return {"command": "shapes buckets", "model": self.model, "out_dir": str(self.out_dir),
                "manifest": str(self.manifest), **self.layout.to_dict(), "settings": self.settings,
                "candidates": self.candidates, "stats": self.stats, "buckets": [b.to_dict() for b in self.buckets],
                "unpad": self.unpad, "report": self.report.to_dict(), "validation": self.validation,
                "warnings": self.warnings, "timings": self.timings}


def _stats(values: Sequence[int]) -> dict[str, float]:
    return {"count": len(values), "min": min(values), "max": max(values), "mean": statistics.fmean(values),
            "std": statistics.pstdev(values)}


def _bucket_shape(layout: Layout, b: int | None, h: int | None, w: int | None) -> tuple[int, ...]:
    shape = list(layout.shape)
    for axis, v in ((layout.batch, b), (layout.height, h), (layout.width, w)):
        if axis is not None:
            assert v is not None
            shape[axis] = v
    return tuple(shape)


def _file_name(stem: str, b: int | None, h: int | None, w: int | None) -> str:
    parts = [stem] + ([f"b{b}"] if b is not None else []) + ([f"h{h}", f"w{w}"] if h is not None else [])
    return "_".join(parts) + ".onnx"


def _other_specs(proto: onnx.ModelProto, layout: Layout, batch: int | None) -> list[InputSpec]:
    """Specs for the inputs that are not bucketed: static as they are, or a dynamic axis 0 following the batch."""
    specs = []
    for vi in graph_inputs(proto):
        if vi.name == layout.input:
            continue
        d = dims(vi)
        if d is None:
            raise UsageError(f"input '{vi.name}' has no shape; bucketing needs every other input static")
        fixed = []
        for i, x in enumerate(d):
            if isinstance(x, int):
                fixed.append(x)
            elif i == 0 and batch is not None:
                fixed.append(batch)
            else:
                raise UsageError(f"input '{vi.name}' axis {i} is dynamic ({x}); only the bucketed input may vary "
                                 "(other inputs may share its batch on axis 0)")
        specs.append(InputSpec(vi.name, tuple(fixed)))
    return specs


def unpad_rules(proto: onnx.ModelProto, layout: Layout, interval: int) -> tuple[dict[str, list[dict[str, Any]]], list[str]]:
    """For each output axis that follows a bucketed input axis: {"axis", "follows", "ratio": [num, den]}.

    Found by shape inference at two probe sizes (multiples of ``interval`` with distinct ratios): an
    output dim equal to ``ratio * size`` of the same input axis at both probes follows that axis, so
    un-padding keeps ``ceil(actual * ratio)`` of it.
    """
    probes = [{"batch": 2, "height": 2 * interval, "width": 3 * interval},
              {"batch": 3, "height": 5 * interval, "width": 4 * interval}]
    outs = []
    for p in probes:
        shape = _bucket_shape(layout, p["batch"] if layout.batch is not None else None,
                              p["height"] if layout.height is not None else None,
                              p["width"] if layout.width is not None else None)
        specs = [InputSpec(layout.input, shape), *_other_specs(proto, layout, p["batch"] if layout.batch is not None else None)]
        fixed, _ = fix_proto(proto, complete_specs(proto, specs))
        outs.append({o.name: dims(o) for o in fixed.graph.output})
    rules: dict[str, list[dict[str, Any]]] = {}
    warnings = []
    for name, d0 in outs[0].items():
        d1 = outs[1].get(name)
        if d0 is None or d1 is None or len(d0) != len(d1):
            warnings.append(f"output '{name}': shape unknown at the probe sizes; it is returned padded")
            continue
        for axis, (a, b) in enumerate(zip(d0, d1, strict=True)):
            if a == b or not isinstance(a, int) or not isinstance(b, int):
                continue
            follows = [ax for ax in AXES if layout.axis(ax) is not None
                       and Fraction(a, probes[0][ax]) == Fraction(b, probes[1][ax])]
            if len(follows) == 1:
                r = Fraction(a, probes[0][follows[0]])
                rules.setdefault(name, []).append({"axis": axis, "follows": follows[0],
                                                   "ratio": [r.numerator, r.denominator]})
            else:
                warnings.append(f"output '{name}' axis {axis} varies with the input but not as a fixed ratio of one "
                                "bucketed axis; it is returned padded")
    return rules, warnings


def buckets(
    model: str | Path | onnx.ModelProto,
    out_dir: str | Path,
    *,
    input_shape: str | Sequence[int],
    data: str | Path,
    input_name: str | None = None,
    strategy: str = "mean_std",
    n_std: float = 3.0,
    expand_ratio: float = 0.2,
    interval: int = 32,
    max_buckets: int = 4,
    batch_choices: Sequence[int] | None = None,
    limit_side_len: int | None = None,
    validate: bool = True,
    tolerance: Tolerance = DEFAULT_TOLERANCE,
    seed: int = 0,
    progress: Progress | None = None,
) -> BucketsResult:
    """Choose shape buckets from ``data`` (image folder or annotation JSON) and write one static model per
    bucket plus ``buckets.json`` into ``out_dir``. ``input_shape`` marks the bucketed axes with -1."""
    say = progress or quiet
    start = time.perf_counter()
    proto, name = load(model)
    layout = make_layout(proto, parse_input_shape(input_shape), input_name)
    if batch_choices is not None and layout.batch is None:
        raise UsageError("--batch-choices given but the batch axis is not bucketed (axis 0 of --input-shape is not -1)")
    if batch_choices is not None and (not batch_choices or any(int(b) < 1 for b in batch_choices)):
        raise UsageError(f"--batch-choices {list(batch_choices)}: positive integers")
    if limit_side_len is not None and limit_side_len < 1:
        raise UsageError("--limit-side-len must be positive")
    say(f"reading sizes from {data}")
    samples, warnings = load_samples(data, say)
    settings = {"strategy": strategy, "n_std": n_std, "expand_ratio": expand_ratio, "interval": interval,
                "max_buckets": max_buckets, "batch_choices": list(batch_choices) if batch_choices else None,
                "limit_side_len": limit_side_len, "data": str(data)}
    cands: dict[str, list[int]] = {}
    stats: dict[str, dict[str, float]] = {}
    if layout.height is not None:
        sizes = [limit_side(s.height, s.width, limit_side_len) for s in samples
                 if s.height is not None and s.width is not None]
        if not sizes:
            raise UsageError(f"--data {data}: no image sizes (annotation images need height and width)")
        for axis, values in (("height", [h for h, _ in sizes]), ("width", [w for _, w in sizes])):
            stats[axis] = _stats(values)
            cands[axis] = candidates(values, strategy=strategy, n_std=n_std, expand_ratio=expand_ratio,
                                     interval=interval, max_buckets=max_buckets)
    batch_from_boxes = False
    if layout.batch is not None:
        boxes = [s.boxes for s in samples if s.boxes]
        if batch_choices:
            cands["batch"] = sorted({int(b) for b in batch_choices})
        elif boxes:
            batch_from_boxes = True
            stats["batch"] = _stats(boxes)
            cands["batch"] = candidates(boxes, strategy=strategy, n_std=n_std, expand_ratio=expand_ratio,
                                        interval=1, max_buckets=max_buckets)
        else:
            cands["batch"] = [1]
            warnings.append("batch is bucketed but neither --batch-choices nor box counts were given: batch 1 only")
    settings["batch_from_boxes"] = batch_from_boxes
    # (height, width) pairs: keep those some sample is routed to, and the largest
    pairs: list[tuple[int | None, int | None]] = [(None, None)]
    if layout.height is not None:
        all_pairs = [Bucket("", (h * w,), None, h, w) for h in cands["height"] for w in cands["width"]]
        used = {(all_pairs[-1].height, all_pairs[-1].width)}
        for s in samples:
            if s.height is None or s.width is None:
                continue
            h, w = limit_side(s.height, s.width, limit_side_len)
            b = smallest_fitting(all_pairs, None, h, w)
            if b is not None:
                used.add((b.height, b.width))
        pairs = sorted(used)  # type: ignore[arg-type]
    stem = Path(name).stem if not isinstance(model, onnx.ModelProto) else "model"
    batches: list[int | None] = [*cands["batch"]] if "batch" in cands else [None]
    plan = [Bucket(_file_name(stem, b, h, w), _bucket_shape(layout, b, h, w), b, h, w)
            for b in batches for h, w in pairs]
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise UsageError(f"-o {out}: exists and is not a folder")
    result = BucketsResult(name, out, layout, settings, cands, stats, plan, {},
                           waste_report(plan, samples, layout, limit_side_len=limit_side_len,
                                        batch_from_boxes=batch_from_boxes), warnings)
    say("finding how outputs follow the bucketed axes")
    try:
        result.unpad, unpad_warnings = unpad_rules(proto, layout, interval)
        result.warnings += unpad_warnings
    except BridgeError as exc:
        result.warnings.append(f"un-padding rules unavailable (probe shapes failed: {exc}); outputs are returned padded")
    for k, bucket in enumerate(plan, 1):
        say(f"bucket {k}/{len(plan)}: {bucket.file} {list(bucket.shape)}")
        specs = [InputSpec(layout.input, bucket.shape), *_other_specs(proto, layout, bucket.batch)]
        fixed = fix_shapes(proto, out / bucket.file, inputs=specs, validate=validate, tolerance=tolerance, seed=seed)
        result.validation[bucket.file] = ("; ".join(c.summary() for c in fixed.validation)
                                          if fixed.validation else fixed.validation_skipped or "")
        result.warnings += [f"{bucket.file}: {w}" for w in fixed.warnings]
    manifest = {"format": FORMAT, "source_model": name, **layout.to_dict(), "settings": settings,
                "candidates": cands, "stats": stats, "buckets": [b.to_dict() for b in plan], "unpad": result.unpad,
                "report": result.report.to_dict()}
    atomic_write_text(result.manifest, json.dumps(manifest, indent=2) + "\n")
    result.timings["total_s"] = time.perf_counter() - start
    return result


# ------------------------------------------------------------------------------------------ reading back


@dataclass
class Manifest:
    """A parsed buckets.json."""

    path: Path
    layout: Layout
    buckets: list[Bucket]
    unpad: dict[str, list[dict[str, Any]]]
    settings: dict[str, Any]
    raw: dict[str, Any]


def read_manifest(out_dir: str | Path) -> Manifest:
    path = Path(out_dir)
    path = path if path.name == MANIFEST else path / MANIFEST
    if not path.is_file():
        raise SourceNotFoundError(f"{path}: no buckets.json (create it with `bridge shapes buckets`)")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        axes = raw["axes"]
        layout = Layout(raw["input"], tuple(raw["input_shape"]), axes.get("batch"), axes.get("height"), axes.get("width"))
        items = [Bucket.from_dict(b) for b in raw["buckets"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise BadInputFileError(f"{path}: not a valid buckets.json ({type(exc).__name__}: {exc})") from exc
    if raw.get("format") != FORMAT:
        raise BadInputFileError(f"{path}: format {raw.get('format')!r}, expected {FORMAT!r}")
    return Manifest(path, layout, items, dict(raw.get("unpad") or {}), dict(raw.get("settings") or {}), raw)


def bucket_report(out_dir: str | Path, data: str | Path | None = None, *,
                  progress: Progress | None = None) -> BucketReport:
    """Padding waste per bucket of an existing bucket folder, on ``data`` (default: the data it was built from)."""
    m = read_manifest(out_dir)
    source = data if data is not None else m.settings.get("data")
    if source is None:
        raise UsageError("give --data: buckets.json does not record the data it was built from")
    samples, _ = load_samples(source, progress or quiet)
    return waste_report(m.buckets, samples, m.layout, limit_side_len=m.settings.get("limit_side_len"),
                        batch_from_boxes=bool(m.settings.get("batch_from_boxes")))
