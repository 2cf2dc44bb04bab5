"""``bridge shapes buckets``: static models for a few input sizes chosen from the data, plus buckets.json.

Runtimes that compile per shape (TensorRT, NPUs, MindSpore Lite, onnxruntime with static-shape
optimisations) are fastest on static models, but real inputs vary in size. Padding everything to the
largest size wastes compute; a handful of shape buckets chosen from the size statistics of the data
keeps the waste small (the idea of MindSpore Lite's automatic shape scaling, here runtime-neutral:
the buckets are plain static ONNX files).

Choosing candidates for one axis (heights, widths, or box counts as batch), from its values:

* ``height_range`` / ``width_range`` (after ``limit_side_len`` scaling) first drop the sizes outside
  them from the statistics; those images are reported: smaller ones go to the nearest (smallest
  fitting) bucket, larger ones fit none and are refused;
* range: ``max_min`` uses [min, max]; ``mean_std`` uses [mean - n_std*std, mean + n_std*std] clipped to
  [min, max] (outliers beyond it do not fit any bucket and are counted as ``unfit``);
* the top of the range is raised by ``expand_ratio`` (headroom for sizes the sample did not show);
* the range is cut into ``max_buckets`` equal steps, candidate k is ``lo + (hi - lo) * k / max_buckets``
  rounded *up* to a multiple of ``interval`` (1 for batch); duplicates merge, so there are at most
  ``max_buckets`` candidates per axis; with a range, no candidate exceeds its MAX (one that would is
  lowered to the largest multiple of ``interval`` <= MAX, or to MAX when that multiple is too small
  for the largest in-range size).

Height and width candidates combine into (height, width) pairs; only pairs some sample is routed to
(the smallest-area pair it fits) are kept, plus the largest pair so anything inside the envelope fits.
Without data the pairs come from ``default_scaling`` (or the built-in default for ``limit_side_len``,
see ``bridge.shapes.scaling``). Batch values: ``batch_choices``, else box counts of an annotation
file (the batch of a per-box second stage), else ``DEFAULT_BATCH_CHOICES``; the report says which.

Two output layouts:

* ``static``: each (batch, height, width) becomes a static model through ``fix_shapes`` (validated
  against the original at that shape), for runtimes that compile per shape;
* ``per-batch``: one model per batch value, ``<stem>_dynamic_bs<B>_hw.onnx``: the original with the
  batch pinned in its signature and height/width left symbolic (nothing folded, so shape computations
  that read height/width keep working; compared with the original at the smallest and largest
  bucket); its ONNX metadata ``bridge.buckets`` lists the (height, width) buckets and the min/max
  shapes, for runtimes that compile one profile per batch (TensorRT optimisation profiles, OpenVINO
  reshape).

An ``input_shape`` with no -1 is the plain no-scaling case: one static model (as ``bridge shapes fix``
writes) in the same folder format. ``buckets.json`` records the buckets, the layout and how to
un-pad each output (see ``bridge.shapes.BucketedSession``, which serves both layouts).
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
from bridge.errors import BadInputFileError, BridgeError, SourceNotFoundError, UsageError, ValidationMismatch
from bridge.io import atomic_write_text
from bridge.shapes.common import Progress, dims, graph_inputs, load, quiet, write_checked
from bridge.shapes.datasets import MAX_IMAGE_PIXELS, Sample, limit_side, load_samples
from bridge.shapes.fix import complete_specs, fix_proto, fix_shapes, validate_same
from bridge.shapes.scaling import DEFAULT_BATCH_CHOICES, STRATEGIES, ScalingConfig, default_scaling_for

logger = logging.getLogger(__name__)

MANIFEST = "buckets.json"
FORMAT = "bridge.buckets/1"
METADATA_KEY = "bridge.buckets"  # ONNX metadata_props key of a per-batch model
AXES = ("batch", "height", "width")


# ---------------------------------------------------------------------------------------------- choosing


def candidate_range(values: Sequence[int], *, strategy: str = "mean_std", n_std: float = 3.0,
                    expand_ratio: float = 0.2) -> tuple[float, float]:
    """The [lo, hi] range the candidates of one axis are cut from (before rounding)."""
    if strategy not in STRATEGIES:
        raise UsageError(f"--strategy '{strategy}': choose {' or '.join(STRATEGIES)}")
    if expand_ratio < 0 or n_std < 0:
        raise UsageError("--expand-ratio and --n-std must be >= 0")
    if not values:
        raise UsageError("no values to choose buckets from")
    lo, hi = float(min(values)), float(max(values))
    if strategy == "mean_std":
        mean, std = statistics.fmean(values), statistics.pstdev(values)
        lo, hi = max(lo, mean - n_std * std), min(hi, mean + n_std * std)
    return lo, hi * (1.0 + expand_ratio)


def candidates(values: Sequence[int], *, strategy: str = "mean_std", n_std: float = 3.0, expand_ratio: float = 0.2,
               interval: int = 32, max_buckets: int = 4, top: int | None = None) -> list[int]:
    """Candidate sizes for one axis from observed values (see the module docstring for the rule).

    ``top`` (a range's MAX) caps them: a candidate above it becomes the largest multiple of
    ``interval`` <= ``top``, or ``top`` itself when that multiple would leave the largest value out.
    """
    if interval < 1 or max_buckets < 1:
        raise UsageError("--interval and --max-buckets must be >= 1")
    lo, hi = candidate_range(values, strategy=strategy, n_std=n_std, expand_ratio=expand_ratio)
    ceiling = None
    if top is not None:
        ceiling = top // interval * interval
        ceiling = ceiling if ceiling >= max(values) else top
    out = set()
    for k in range(1, max_buckets + 1):
        v = lo + (hi - lo) * k / max_buckets
        c = max(interval, math.ceil(round(v, 6) / interval) * interval)
        out.add(ceiling if ceiling is not None and top is not None and c > top else c)
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
                 batch_from_boxes: bool, spatial_exact: bool = False) -> BucketReport:
    """Route every sample to its smallest fitting bucket and total the padding per model file.

    ``spatial_exact`` (the per-batch layout): height and width run at their real size, so only the
    batch is padded; one row per batch model, its shape -1 on the dynamic axes.
    """
    rows: dict[str, WasteRow] = {}
    for b in buckets:
        shape = list(b.shape)
        if spatial_exact:
            for axis in (layout.height, layout.width):
                if axis is not None:
                    shape[axis] = -1
        rows.setdefault(b.file, WasteRow(b.file, shape))
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
            row.padded_pixels += 0 if spatial_exact else bucket.height * bucket.width - h * w
        if n is not None and bucket.batch is not None:
            row.real_slots += n
            row.padded_slots += bucket.batch - n
    return report


# ---------------------------------------------------------------------------------------------- building


@dataclass
class RangeReport:
    """The images ``height_range`` / ``width_range`` left out of the statistics, and where they went."""

    height_range: tuple[int, int] | None = None
    width_range: tuple[int, int] | None = None
    inside: int = 0
    outside: int = 0
    routed: int = 0  # fit a bucket anyway (smaller than the range): run padded in the nearest one
    refused: int = 0  # fit no bucket
    examples: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"height_range": list(self.height_range) if self.height_range else None,
                "width_range": list(self.width_range) if self.width_range else None, "inside": self.inside,
                "outside": self.outside, "routed_to_nearest_bucket": self.routed, "refused": self.refused,
                "examples": self.examples}


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
    model_layout: str = "static"  # "static" | "per-batch"
    batch: dict[str, Any] = field(default_factory=dict)  # where the batch values came from, explained
    ranges: RangeReport = field(default_factory=RangeReport)

    @property
    def manifest(self) -> Path:
        return self.out_dir / MANIFEST

    @property
    def files(self) -> list[str]:
        """The model files written, in order (per-batch buckets share their batch's file)."""
        return list(dict.fromkeys(b.file for b in self.buckets))

    def to_dict(self) -> dict[str, Any]:
        return {"command": "shapes buckets", "model": self.model, "out_dir": str(self.out_dir),
                "manifest": str(self.manifest), "layout": self.model_layout, "files": self.files,
                **self.layout.to_dict(), "settings": self.settings, "candidates": self.candidates,
                "stats": self.stats, "batch": self.batch, "range": self.ranges.to_dict(),
                "buckets": [b.to_dict() for b in self.buckets], "unpad": self.unpad, "report": self.report.to_dict(),
                "validation": self.validation, "warnings": self.warnings, "timings": self.timings}


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


def _in_range(v: int, r: tuple[int, int] | None) -> bool:
    return r is None or r[0] <= v <= r[1]


def _config(config: ScalingConfig | str | Path | None, options: dict[str, Any]) -> ScalingConfig:
    base = config if isinstance(config, ScalingConfig) else (
        ScalingConfig.load(config) if config is not None else ScalingConfig())
    return base.override(options, "arguments")


def _stem(model: str | Path | onnx.ModelProto, name: str) -> str:
    return Path(name).stem if not isinstance(model, onnx.ModelProto) else "model"


def _explain_boxes(boxes: Sequence[int], zero: int, cfg: ScalingConfig, cands: list[int]) -> str:
    lo, hi = candidate_range(boxes, strategy=cfg.strategy, n_std=cfg.n_std, expand_ratio=cfg.expand_ratio)
    over = sum(1 for b in boxes if b > max(cands))
    text = (f"from the box counts of {len(boxes)} annotated image(s) (the batch a per-box stage sees): min {min(boxes)}, "
            f"mean {statistics.fmean(boxes):.1f}, std {statistics.pstdev(boxes):.1f}, max {max(boxes)}; "
            f"{cfg.strategy} range with expand_ratio {cfg.expand_ratio} is [{lo:.1f}, {hi:.1f}], cut into "
            f"{cfg.max_buckets} step(s) and rounded up -> {cands}")
    if zero:
        text += f"; {zero} image(s) without boxes are left out (a per-box stage does not run on them)"
    if over:
        text += (f"; {over} image(s) have more boxes than the largest batch {max(cands)} and fit no bucket "
                 "(BucketedSession runs them in chunks)")
    return text


def _choose_batch(layout: Layout, samples: Sequence[Sample], cfg: ScalingConfig,
                  is_annotations: bool) -> tuple[list[int] | None, dict[str, Any], dict[str, float] | None]:
    """(batch values or None, {"source", "choices", "explanation"}, box statistics or None)."""
    if layout.batch is None:
        fixed = layout.shape[0] if layout.shape and layout.shape[0] > 0 else None
        return None, {"source": "input_shape", "choices": [fixed] if fixed else [],
                      "explanation": "the batch axis is not bucketed (axis 0 of --input-shape is not -1)"}, None
    if cfg.batch_choices:
        choices = list(cfg.batch_choices)
        return choices, {"source": "batch_choices", "choices": choices,
                         "explanation": f"given by --batch-choices: {choices}"}, None
    boxes = [s.boxes for s in samples if s.boxes]
    if boxes:
        cands = candidates(boxes, strategy=cfg.strategy, n_std=cfg.n_std, expand_ratio=cfg.expand_ratio, interval=1,
                           max_buckets=cfg.max_buckets)
        zero = sum(1 for s in samples if not s.boxes)
        return cands, {"source": "box counts", "choices": cands,
                       "explanation": _explain_boxes(boxes, zero, cfg, cands)}, _stats(boxes)
    why = ("the annotation file has no boxes" if is_annotations else
           "an image folder has no box counts" if samples else "no --data")
    choices = list(DEFAULT_BATCH_CHOICES)
    return choices, {"source": "default", "choices": choices,
                     "explanation": f"{why}, so the default batch choices {choices} apply "
                                    "(give --batch-choices, or an annotation file with boxes, to change them)"}, None


def _choose_pairs(layout: Layout, samples: Sequence[Sample], cfg: ScalingConfig, data: str | None,
                  cands: dict[str, list[int]], stats: dict[str, dict[str, float]],
                  warnings: list[str]) -> tuple[list[tuple[int, int]], str, RangeReport]:
    """The (height, width) buckets, where they came from, and the range filter's count."""
    ranges = RangeReport(cfg.height_range, cfg.width_range)
    sizes = [(s.source, *limit_side(s.height, s.width, cfg.limit_side_len)) for s in samples
             if s.height is not None and s.width is not None]
    inside = [(h, w) for _, h, w in sizes if _in_range(h, cfg.height_range) and _in_range(w, cfg.width_range)]
    ranges.inside, ranges.outside = len(inside), len(sizes) - len(inside)
    given = cfg.default_scaling or (None if data is not None else (
        default_scaling_for(cfg.limit_side_len, cfg.interval) if cfg.limit_side_len else None))
    if given is not None:
        source = ("default_scaling" if cfg.default_scaling else
                  f"built-in default for limit_side_len {cfg.limit_side_len} (square, 4:3, 3:4, 16:9, 9:16)")
        for h, w in given:
            if h * w > MAX_IMAGE_PIXELS:  # each bucket model is validated on an input of this size
                raise UsageError(f"{source} pair {h}x{w} is over the limit of {MAX_IMAGE_PIXELS:,} pixels")
        pairs = [(h, w) for h, w in given if _in_range(h, cfg.height_range) and _in_range(w, cfg.width_range)]
        if len(pairs) < len(given):
            warnings.append(f"{len(given) - len(pairs)} {source} pair(s) outside --height-range/--width-range dropped: "
                            + ", ".join(f"{h}x{w}" for h, w in given if (h, w) not in pairs))
        if not pairs:
            raise UsageError(f"every {source} pair ({', '.join(f'{h}x{w}' for h, w in given)}) is outside "
                             f"--height-range {cfg.height_range} / --width-range {cfg.width_range}")
        cands["height"] = sorted({h for h, _ in pairs})
        cands["width"] = sorted({w for _, w in pairs})
        return sorted(set(pairs)), source, ranges
    if data is None:
        raise UsageError("no --data: give --default-scaling H1xW1,H2xW2,... or --limit-side-len S for the built-in "
                         "default buckets (S x S, 4:3, 3:4, 16:9, 9:16 with long side S)")
    if not sizes:
        raise UsageError(f"--data {data}: no image sizes (annotation images need height and width)")
    if not inside:
        hs, ws = [h for _, h, _ in sizes], [w for _, _, w in sizes]
        raise UsageError(f"all {len(sizes)} image(s) of --data {data} fall outside --height-range {cfg.height_range} "
                         f"/ --width-range {cfg.width_range} (after limit_side_len: heights {min(hs)}..{max(hs)}, "
                         f"widths {min(ws)}..{max(ws)}); nothing is left to choose buckets from")
    for axis, values, r in (("height", [h for h, _ in inside], cfg.height_range),
                            ("width", [w for _, w in inside], cfg.width_range)):
        stats[axis] = _stats(values)
        cands[axis] = candidates(values, strategy=cfg.strategy, n_std=cfg.n_std, expand_ratio=cfg.expand_ratio,
                                 interval=cfg.interval, max_buckets=cfg.max_buckets, top=r[1] if r else None)
    # (height, width) pairs: keep those some in-range sample is routed to, and the largest
    all_pairs = [Bucket("", (h * w,), None, h, w) for h in cands["height"] for w in cands["width"]]
    used = {(cands["height"][-1], cands["width"][-1])}
    for h, w in inside:
        b = smallest_fitting(all_pairs, None, h, w)
        if b is not None and b.height is not None and b.width is not None:
            used.add((b.height, b.width))
    return sorted(used), "data", ranges


def _pin_batch(proto: onnx.ModelProto, layout: Layout, batch: int | None,
               unpad: dict[str, list[dict[str, Any]]]) -> onnx.ModelProto:
    """A copy of ``proto`` with the fixed axes of the bucketed input (``batch`` on axis 0, and every positive
    ``input_shape`` dim) pinned wherever their symbol appears in the signature; height/width stay symbolic.

    Nothing is folded: shape computations that read height/width (a Reshape to [B, H*W/64, 4]) stay
    run-time computations, so the model keeps working at every bucket size.
    """
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    vi = next(v for v in graph_inputs(copy) if v.name == layout.input)
    pins: dict[str, int] = {}
    for axis, dim in enumerate(vi.type.tensor_type.shape.dim):
        size = batch if axis == layout.batch else (layout.shape[axis] if layout.shape[axis] > 0 else None)
        if size is None:
            continue
        if dim.dim_param:
            pins[dim.dim_param] = size
        dim.Clear()
        dim.dim_value = size
    for value in [*graph_inputs(copy), *copy.graph.output]:
        for dim in value.type.tensor_type.shape.dim:
            if dim.dim_param in pins:
                size = pins[dim.dim_param]
                dim.Clear()
                dim.dim_value = size
    if batch is not None:  # outputs whose batch axis has no symbol: from the un-padding rules
        for out in copy.graph.output:
            for rule in unpad.get(out.name, []):
                d = out.type.tensor_type.shape.dim
                if rule["follows"] == "batch" and rule["axis"] < len(d) and not d[rule["axis"]].HasField("dim_value"):
                    d[rule["axis"]].Clear()
                    d[rule["axis"]].dim_value = batch * rule["ratio"][0] // rule["ratio"][1]
    del copy.graph.value_info[:]
    try:
        inferred = onnx.shape_inference.infer_shapes(copy, strict_mode=False, data_prop=True)
    except Exception as exc:  # custom ops or a model onnx cannot infer: keep the signature only
        logger.info("shape inference on the per-batch model failed: %s", exc)
        return copy
    return inferred


def _write_per_batch(proto: onnx.ModelProto, layout: Layout, file: Path, batch: int | None,
                     pairs: Sequence[tuple[int, int]], unpad: dict[str, list[dict[str, Any]]], *, validate: bool,
                     tolerance: Tolerance, seed: int, timeout: float | None = None) -> tuple[str, list[str]]:
    """Batch pinned, height/width dynamic, the buckets in metadata; compared with the original at two buckets."""
    assert layout.height is not None and layout.width is not None
    pinned = _pin_batch(proto, layout, batch, unpad)
    by_area = sorted(set(pairs), key=lambda p: (p[0] * p[1], p))
    small, large = by_area[0], by_area[-1]
    b = batch if layout.batch is not None else None
    meta = {"format": FORMAT, "input": layout.input, "batch": batch, "height_axis": layout.height,
            "width_axis": layout.width, "hw": [list(p) for p in sorted(set(pairs))],
            "min_shape": list(_bucket_shape(layout, b, *small)), "max_shape": list(_bucket_shape(layout, b, *large))}
    onnx.helper.set_model_props(pinned, {**{p.key: p.value for p in pinned.metadata_props},
                                         METADATA_KEY: json.dumps(meta)})
    summary = "validation disabled"
    if validate:
        results = []
        for h, w in dict.fromkeys([small, large]):
            shape = _bucket_shape(layout, b, h, w)
            specs = [InputSpec(layout.input, shape), *_other_specs(proto, layout, batch)]
            comps = validate_same(proto, pinned, complete_specs(proto, specs), tolerance, seed, timeout=timeout)
            failing = [c for c in comps if not c.passed]
            if failing:
                raise ValidationMismatch(f"{file.name} differs from the original at {list(shape)}: "
                                         + "; ".join(c.summary() for c in failing) + f"; {file} was not written")
            results += [f"at {list(shape)}: {c.summary()}" for c in comps]
        summary = "; ".join(results)
    warnings = write_checked(pinned, file, require_static=False)
    return summary, warnings


def buckets(
    model: str | Path | onnx.ModelProto,
    out_dir: str | Path,
    *,
    config: ScalingConfig | str | Path | None = None,
    tolerance: Tolerance = DEFAULT_TOLERANCE,
    seed: int = 0,
    progress: Progress | None = None,
    **options: Any,
) -> BucketsResult:
    """Choose shape buckets and write their models plus ``buckets.json`` into ``out_dir``.

    Settings are ``bridge.shapes.scaling.ScalingConfig`` fields: from ``config`` (a ScalingConfig or a
    YAML file), overridden by ``options`` (``input_shape="-1,3,-1,-1"``, ``data=...``, ``strategy=...``,
    ``layout="per-batch"``, ...); an unknown name is a UsageError. ``input_shape`` marks the bucketed
    axes with -1; with no -1 it writes one static model.
    """
    say = progress or quiet
    start = time.perf_counter()
    cfg = _config(config, options)
    if cfg.input_shape is None:
        raise UsageError("give --input-shape (e.g. -1,3,-1,-1; no -1 for one static model)")
    proto, name = load(model)
    layout = make_layout(proto, parse_input_shape(cfg.input_shape), cfg.input_name)
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise UsageError(f"-o {out}: exists and is not a folder")
    spatial = layout.height is not None
    if cfg.batch_choices is not None and layout.batch is None:
        raise UsageError("--batch-choices given but the batch axis is not bucketed (axis 0 of --input-shape is not -1)")
    if not spatial:
        given = [k for k in ("height_range", "width_range", "default_scaling") if getattr(cfg, k) is not None]
        if given:
            raise UsageError(f"{', '.join('--' + k.replace('_', '-') for k in given)} need height and width bucketed "
                             "(two -1 spatial axes in --input-shape)")
        if cfg.layout == "per-batch":
            raise UsageError("--layout per-batch leaves height/width dynamic: mark them -1 in --input-shape")
    warnings: list[str] = []
    samples: list[Sample] = []
    if cfg.data is not None:
        say(f"reading sizes from {cfg.data}")
        samples, warnings = load_samples(cfg.data, say)
    settings = {**cfg.to_dict(), "data": cfg.data}
    cands: dict[str, list[int]] = {}
    stats: dict[str, dict[str, float]] = {}
    ranges = RangeReport(cfg.height_range, cfg.width_range)
    pairs: list[tuple[int | None, int | None]] = [(None, None)]
    scaling = "none"
    if spatial:
        hw, scaling, ranges = _choose_pairs(layout, samples, cfg, cfg.data, cands, stats, warnings)
        pairs = [(h, w) for h, w in hw]
    is_annotations = cfg.data is not None and Path(cfg.data).is_file()
    batch_values, batch_info, box_stats = _choose_batch(layout, samples, cfg, is_annotations)
    if batch_values is not None:
        cands["batch"] = batch_values
    if box_stats is not None:
        stats["batch"] = box_stats
    batch_from_boxes = batch_info["source"] == "box counts"
    settings["batch_from_boxes"] = batch_from_boxes
    settings["scaling"] = scaling
    stem = _stem(model, name)
    batches: list[int | None] = [*batch_values] if batch_values is not None else [None]
    fixed_batch = layout.shape[0] if layout.batch is None and layout.shape[0] > 0 else None
    if layout.batch is None and not spatial:  # no -1 at all: the plain static model
        plan = [Bucket(f"{stem}_{'x'.join(str(d) for d in layout.shape)}.onnx", layout.shape)]
    elif cfg.layout == "per-batch":
        plan = [Bucket(f"{stem}_dynamic_bs{b if b is not None else fixed_batch}_hw.onnx",
                       _bucket_shape(layout, b, h, w), b, h, w) for b in batches for h, w in pairs]
    else:
        plan = [Bucket(_file_name(stem, b, h, w), _bucket_shape(layout, b, h, w), b, h, w)
                for b in batches for h, w in pairs]
    report = waste_report(plan, samples, layout, limit_side_len=cfg.limit_side_len, batch_from_boxes=batch_from_boxes,
                          spatial_exact=cfg.layout == "per-batch")
    if ranges.outside:
        min_batch = min((b for b in batches if b is not None), default=None)
        for s in samples:
            if s.height is None or s.width is None:
                continue
            h, w = limit_side(s.height, s.width, cfg.limit_side_len)
            if _in_range(h, cfg.height_range) and _in_range(w, cfg.width_range):
                continue
            fits = smallest_fitting(plan, min_batch, h, w) is not None
            ranges.routed += fits
            ranges.refused += not fits
            if len(ranges.examples) < 10:
                ranges.examples.append(f"{s.source} ({h}x{w}): {'nearest bucket' if fits else 'refused'}")
    result = BucketsResult(name, out, layout, settings, cands, stats, plan, {}, report, warnings,
                           model_layout=cfg.layout, batch=batch_info, ranges=ranges)
    if layout.batch is not None or spatial:
        say("finding how outputs follow the bucketed axes")
        try:
            result.unpad, unpad_warnings = unpad_rules(proto, layout, cfg.interval)
            result.warnings += unpad_warnings
        except BridgeError as exc:
            result.warnings.append(f"un-padding rules unavailable (probe shapes failed: {exc}); outputs are returned "
                                   "padded")
    if cfg.layout == "per-batch":
        for k, b in enumerate(batches, 1):
            file = plan[(k - 1) * len(pairs)].file
            say(f"model {k}/{len(batches)}: {file} (height/width dynamic, {len(pairs)} bucket(s) in metadata)")
            hw_pairs = [(h, w) for h, w in pairs if h is not None and w is not None]
            summary, more = _write_per_batch(proto, layout, out / file, b if b is not None else fixed_batch, hw_pairs,
                                             result.unpad, validate=cfg.validate, tolerance=tolerance, seed=seed,
                                             timeout=cfg.timeout)
            result.validation[file] = summary
            result.warnings += [f"{file}: {w}" for w in more]
    else:
        for k, bucket in enumerate(plan, 1):
            say(f"bucket {k}/{len(plan)}: {bucket.file} {list(bucket.shape)}")
            specs = [InputSpec(layout.input, bucket.shape), *_other_specs(proto, layout, bucket.batch or fixed_batch)]
            fixed = fix_shapes(proto, out / bucket.file, inputs=specs, validate=cfg.validate, tolerance=tolerance,
                               seed=seed, timeout=cfg.timeout)
            result.validation[bucket.file] = ("; ".join(c.summary() for c in fixed.validation)
                                              if fixed.validation else fixed.validation_skipped or "")
            result.warnings += [f"{bucket.file}: {w}" for w in fixed.warnings]
    manifest = {"format": FORMAT, "source_model": name, "layout": cfg.layout, **layout.to_dict(), "settings": settings,
                "candidates": cands, "stats": stats, "batch": batch_info, "range": ranges.to_dict(),
                "buckets": [b.to_dict() for b in plan], "unpad": result.unpad, "report": report.to_dict()}
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
    model_layout: str = "static"  # "per-batch": one model per batch, height/width dynamic


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
    kind = raw.get("layout", "static")
    if kind not in ("static", "per-batch"):
        raise BadInputFileError(f"{path}: layout {kind!r}, expected 'static' or 'per-batch'")
    return Manifest(path, layout, items, dict(raw.get("unpad") or {}), dict(raw.get("settings") or {}), raw, kind)


def bucket_report(out_dir: str | Path, data: str | Path | None = None, *,
                  progress: Progress | None = None) -> BucketReport:
    """Padding waste per bucket of an existing bucket folder, on ``data`` (default: the data it was built from)."""
    m = read_manifest(out_dir)
    source = data if data is not None else m.settings.get("data")
    if source is None:
        raise UsageError("give --data: buckets.json does not record the data it was built from")
    samples, _ = load_samples(source, progress or quiet)
    return waste_report(m.buckets, samples, m.layout, limit_side_len=m.settings.get("limit_side_len"),
                        batch_from_boxes=bool(m.settings.get("batch_from_boxes")),
                        spatial_exact=m.model_layout == "per-batch")
