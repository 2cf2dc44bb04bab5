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
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx

from bridge.config import DEFAULT_TOLERANCE, InputSpec, Tolerance
from bridge.errors import BridgeError, UsageError
from bridge.io import atomic_write_text, check_writable
from bridge.shapes.buckets_files import (
    FORMAT,
    MANIFEST,
    METADATA_KEY,
    Manifest,
    bucket_report,
    other_specs,
    read_manifest,
    unpad_rules,
    write_per_batch,
)
from bridge.shapes.buckets_plan import (
    Bucket,
    BucketReport,
    Layout,
    RangeReport,
    WasteRow,
    bucket_file_name,
    bucket_shape,
    candidate_range,
    candidates,
    choose_batch,
    choose_pairs,
    in_range,
    make_layout,
    parse_input_shape,
    smallest_fitting,
    waste_report,
)
from bridge.shapes.common import Progress, load, quiet
from bridge.shapes.datasets import Sample, limit_side, load_samples
from bridge.shapes.fix import fix_shapes
from bridge.shapes.scaling import (
    ScalingConfig,
)


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


def _config(config: ScalingConfig | str | Path | None, options: dict[str, Any]) -> ScalingConfig:
    base = config if isinstance(config, ScalingConfig) else (
        ScalingConfig.load(config) if config is not None else ScalingConfig())
    return base.override(options, "arguments")


def _stem(model: str | Path | onnx.ModelProto, name: str) -> str:
    return Path(name).stem if not isinstance(model, onnx.ModelProto) else "model"


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
    check_writable(out / MANIFEST, "-o")  # before the buckets are built and validated
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
        hw, scaling, ranges = choose_pairs(layout, samples, cfg, cfg.data, cands, stats, warnings)
        pairs = [(h, w) for h, w in hw]
    is_annotations = cfg.data is not None and Path(cfg.data).is_file()
    batch_values, batch_info, box_stats = choose_batch(layout, samples, cfg, is_annotations)
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
                       bucket_shape(layout, b, h, w), b, h, w) for b in batches for h, w in pairs]
    else:
        plan = [Bucket(bucket_file_name(stem, b, h, w), bucket_shape(layout, b, h, w), b, h, w)
                for b in batches for h, w in pairs]
    report = waste_report(plan, samples, layout, limit_side_len=cfg.limit_side_len, batch_from_boxes=batch_from_boxes,
                          spatial_exact=cfg.layout == "per-batch")
    if ranges.outside:
        min_batch = min((b for b in batches if b is not None), default=None)
        for s in samples:
            if s.height is None or s.width is None:
                continue
            h, w = limit_side(s.height, s.width, cfg.limit_side_len)
            if in_range(h, cfg.height_range) and in_range(w, cfg.width_range):
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
            summary, more = write_per_batch(proto, layout, out / file, b if b is not None else fixed_batch, hw_pairs,
                                             result.unpad, validate=cfg.validate, tolerance=tolerance, seed=seed,
                                             timeout=cfg.timeout)
            result.validation[file] = summary
            result.warnings += [f"{file}: {w}" for w in more]
    else:
        for k, bucket in enumerate(plan, 1):
            say(f"bucket {k}/{len(plan)}: {bucket.file} {list(bucket.shape)}")
            specs = [InputSpec(layout.input, bucket.shape), *other_specs(proto, layout, bucket.batch or fixed_batch)]
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


# the public names of the three modules, importable from here as before the split
__all__ = ["FORMAT", "MANIFEST", "METADATA_KEY", "Bucket", "BucketReport", "BucketsResult", "Layout", "Manifest",
           "RangeReport", "WasteRow", "bucket_report", "buckets", "candidate_range", "candidates", "make_layout",
           "parse_input_shape", "read_manifest", "smallest_fitting", "unpad_rules", "waste_report"]
