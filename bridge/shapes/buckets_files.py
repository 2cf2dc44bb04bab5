"""The files of a bucket folder: the per-batch models (batch pinned, height/width symbolic, buckets in
metadata), how to un-pad each output, and ``buckets.json`` read back (``read_manifest``,
``bucket_report``). ``bridge.shapes.buckets`` writes the folder; ``BucketedSession`` reads it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import onnx

from bridge.config import InputSpec, Tolerance
from bridge.errors import BadInputFileError, SourceNotFoundError, UsageError, ValidationMismatch
from bridge.shapes.buckets_plan import AXES, Bucket, BucketReport, Layout, bucket_shape, waste_report
from bridge.shapes.common import Progress, dims, graph_inputs, quiet, write_checked
from bridge.shapes.datasets import load_samples
from bridge.shapes.fix import complete_specs, fix_proto, validate_same

logger = logging.getLogger(__name__)


MANIFEST = "buckets.json"


FORMAT = "bridge.buckets/1"


METADATA_KEY = "bridge.buckets"  # ONNX metadata_props key of a per-batch model


def other_specs(proto: onnx.ModelProto, layout: Layout, batch: int | None) -> list[InputSpec]:
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
        shape = bucket_shape(layout, p["batch"] if layout.batch is not None else None,
                              p["height"] if layout.height is not None else None,
                              p["width"] if layout.width is not None else None)
        specs = [InputSpec(layout.input, shape), *other_specs(proto, layout, p["batch"] if layout.batch is not None else None)]
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


def write_per_batch(proto: onnx.ModelProto, layout: Layout, file: Path, batch: int | None,
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
            "min_shape": list(bucket_shape(layout, b, *small)), "max_shape": list(bucket_shape(layout, b, *large))}
    onnx.helper.set_model_props(pinned, {**{p.key: p.value for p in pinned.metadata_props},
                                         METADATA_KEY: json.dumps(meta)})
    summary = "validation disabled"
    if validate:
        results = []
        for h, w in dict.fromkeys([small, large]):
            shape = bucket_shape(layout, b, h, w)
            specs = [InputSpec(layout.input, shape), *other_specs(proto, layout, batch)]
            comps = validate_same(proto, pinned, complete_specs(proto, specs), tolerance, seed, timeout=timeout)
            failing = [c for c in comps if not c.passed]
            if failing:
                raise ValidationMismatch(f"{file.name} differs from the original at {list(shape)}: "
                                         + "; ".join(c.summary() for c in failing) + f"; {file} was not written")
            results += [f"at {list(shape)}: {c.summary()}" for c in comps]
        summary = "; ".join(results)
    warnings = write_checked(pinned, file, require_static=False)
    return summary, warnings


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
    report = waste_report(m.buckets, samples, m.layout, limit_side_len=m.settings.get("limit_side_len"),
                          batch_from_boxes=bool(m.settings.get("batch_from_boxes")),
                          spatial_exact=m.model_layout == "per-batch")
    if report.samples and len(report.unfit) == report.samples:  # a waste figure over no sample would read as 0%
        sizes = sorted({"x".join(str(d) for d in (b.batch, b.height, b.width) if d is not None) for b in m.buckets})
        shown = ", ".join(sizes[:6]) + (f", ... ({len(sizes) - 6} more)" if len(sizes) > 6 else "")
        raise UsageError(f"none of the {report.samples} sample(s) of {source} fits a bucket of {out_dir} (e.g. "
                         f"{report.unfit[0]}; the buckets are {shown}): there is no padding waste to report. Build "
                         f"buckets for this data: bridge shapes buckets MODEL --data {source} -o NEW_DIR")
    return report
