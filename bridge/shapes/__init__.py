"""Shape tools: make a model static at given shapes, make named axes dynamic, and build shape buckets.

``fix_shapes`` / ``make_dynamic`` / ``buckets`` are the library entry points of ``bridge shapes fix``,
``bridge shapes dynamic`` and ``bridge shapes buckets``; each returns a result with ``to_dict()``.
``BucketedSession`` runs variable-size inputs on the bucket models ``buckets`` writes (either layout);
``ScalingConfig`` holds the settings of ``buckets`` (from YAML and/or options).
"""

from __future__ import annotations

from bridge.shapes.bucketed import BucketedSession, NoBucketFitsError, RunInfo
from bridge.shapes.buckets import BucketReport, BucketsResult, bucket_report, buckets, candidates
from bridge.shapes.dynamic import BakedShapeError, DynamicResult, make_dynamic
from bridge.shapes.fix import FixResult, fix_shapes
from bridge.shapes.scaling import ScalingConfig

__all__ = [
    "BakedShapeError",
    "BucketReport",
    "BucketedSession",
    "BucketsResult",
    "DynamicResult",
    "FixResult",
    "NoBucketFitsError",
    "RunInfo",
    "ScalingConfig",
    "bucket_report",
    "buckets",
    "candidates",
    "fix_shapes",
    "make_dynamic",
]
