"""Choosing shape buckets: candidate sizes per axis from data statistics, the (batch, height, width)
buckets they combine into, and the padding waste of a set of buckets on a dataset.

Pure computation (no model is touched, nothing is written): ``bridge.shapes.buckets`` calls it, see
that module's docstring for the rules.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import onnx

from bridge.errors import UsageError
from bridge.shapes.common import dims, graph_inputs
from bridge.shapes.datasets import MAX_IMAGE_PIXELS, Sample, limit_side
from bridge.shapes.scaling import (
    DEFAULT_BATCH_CHOICES,
    LIMITS,
    STRATEGIES,
    ScalingConfig,
    default_scaling_for,
)

AXES = ("batch", "height", "width")


def candidate_range(values: Sequence[int], *, strategy: str = "mean_std", n_std: float = 3.0,
                    expand_ratio: float = 0.2) -> tuple[float, float]:
    """The [lo, hi] range the candidates of one axis are cut from (before rounding)."""
    if strategy not in STRATEGIES:
        raise UsageError(f"--strategy '{strategy}': choose {' or '.join(STRATEGIES)}")
    if not (0 <= expand_ratio <= LIMITS["expand_ratio"] and 0 <= n_std <= LIMITS["n_std"]):
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
    if max_buckets > LIMITS["max_buckets"] or interval > LIMITS["interval"]:
        raise UsageError(f"--max-buckets is at most {LIMITS['max_buckets']:g} and --interval at most "
                         f"{LIMITS['interval']:g}")
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


def size_stats(values: Sequence[int]) -> dict[str, float]:
    return {"count": len(values), "min": min(values), "max": max(values), "mean": statistics.fmean(values),
            "std": statistics.pstdev(values)}


def in_range(v: int, r: tuple[int, int] | None) -> bool:
    return r is None or r[0] <= v <= r[1]


def bucket_shape(layout: Layout, b: int | None, h: int | None, w: int | None) -> tuple[int, ...]:
    shape = list(layout.shape)
    for axis, v in ((layout.batch, b), (layout.height, h), (layout.width, w)):
        if axis is not None:
            assert v is not None
            shape[axis] = v
    return tuple(shape)


def bucket_file_name(stem: str, b: int | None, h: int | None, w: int | None) -> str:
    parts = [stem] + ([f"b{b}"] if b is not None else []) + ([f"h{h}", f"w{w}"] if h is not None else [])
    return "_".join(parts) + ".onnx"


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


def choose_batch(layout: Layout, samples: Sequence[Sample], cfg: ScalingConfig,
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
                       "explanation": _explain_boxes(boxes, zero, cfg, cands)}, size_stats(boxes)
    why = ("the annotation file has no boxes" if is_annotations else
           "an image folder has no box counts" if samples else "no --data")
    choices = list(DEFAULT_BATCH_CHOICES)
    return choices, {"source": "default", "choices": choices,
                     "explanation": f"{why}, so the default batch choices {choices} apply "
                                    "(give --batch-choices, or an annotation file with boxes, to change them)"}, None


def choose_pairs(layout: Layout, samples: Sequence[Sample], cfg: ScalingConfig, data: str | None,
                  cands: dict[str, list[int]], stats: dict[str, dict[str, float]],
                  warnings: list[str]) -> tuple[list[tuple[int, int]], str, RangeReport]:
    """The (height, width) buckets, where they came from, and the range filter's count."""
    ranges = RangeReport(cfg.height_range, cfg.width_range)
    sizes = [(s.source, *limit_side(s.height, s.width, cfg.limit_side_len)) for s in samples
             if s.height is not None and s.width is not None]
    inside = [(h, w) for _, h, w in sizes if in_range(h, cfg.height_range) and in_range(w, cfg.width_range)]
    ranges.inside, ranges.outside = len(inside), len(sizes) - len(inside)
    given = cfg.default_scaling or (None if data is not None else (
        default_scaling_for(cfg.limit_side_len, cfg.interval) if cfg.limit_side_len else None))
    if given is not None:
        source = ("default_scaling" if cfg.default_scaling else
                  f"built-in default for limit_side_len {cfg.limit_side_len} (square, 4:3, 3:4, 16:9, 9:16)")
        for h, w in given:
            if h * w > MAX_IMAGE_PIXELS:  # each bucket model is validated on an input of this size
                raise UsageError(f"{source} pair {h}x{w} is over the limit of {MAX_IMAGE_PIXELS:,} pixels")
        pairs = [(h, w) for h, w in given if in_range(h, cfg.height_range) and in_range(w, cfg.width_range)]
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
        stats[axis] = size_stats(values)
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
