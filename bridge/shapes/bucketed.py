"""BucketedSession: run variable-size inputs on the static bucket models ``bridge shapes buckets`` wrote.

Each input goes to the smallest bucket (by padded volume) that holds it. The input is padded at the
end of every bucketed axis (bottom/right for images, extra samples for batch) with ``pad_value``;
the padding is reported per run. Outputs are un-padded where that is defined: buckets.json lists, per
output axis, which bucketed input axis it follows and at what ratio (a stride-2 feature map follows
height at 1/2), and such an axis is cut back to ``ceil(actual * ratio)``. Outputs with no rule are
returned as the bucket produced them (``RunInfo.padded_outputs`` names them).

Batches larger than the largest batch bucket are split into chunks and the outputs concatenated
along their batch axis (only when every output has one).

Both layouts of ``bridge shapes buckets`` are served. ``static``: one model per (batch, height, width),
the input padded to its bucket. ``per-batch``: one model per batch with height/width dynamic; the
input is routed by the same bucket list (so inputs beyond the largest bucket are refused, as a
runtime profile's max would) and padded on the batch only, height and width run at their real size
(``pad_spatial=True`` pads them to the bucket too, e.g. to reuse a runtime's per-shape plans).

Whether the un-padded result equals a run at the exact size depends on the model: it does when
padding is neutral - padded positions stay zero until a layer that zero-pads anyway (pointwise ops
and bias-free 1x1 convolutions keep zeros zero; a k x k convolution spreads real values into the
padding, so later layers see them), and batch padding is neutral for per-sample models. A global
pooling over padded pixels, for example, is not neutral.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bridge.errors import BridgeError, UsageError
from bridge.shapes.buckets_files import Manifest, read_manifest
from bridge.shapes.buckets_plan import Bucket, smallest_fitting

logger = logging.getLogger(__name__)


class NoBucketFitsError(BridgeError):
    """The input is larger than every bucket on some axis."""


@dataclass
class RunInfo:
    """What one ``run`` did: the bucket(s), the padding added per axis, and which outputs were cut back."""

    bucket: str
    bucket_shape: list[int]
    input_shape: list[int]
    padding: dict[str, int]
    padded_fraction: float
    unpadded_outputs: list[str] = field(default_factory=list)
    padded_outputs: list[str] = field(default_factory=list)
    chunks: int = 1

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class BucketedSession:
    """Route, pad, run and un-pad over a folder written by ``bridge shapes buckets``."""

    def __init__(self, out_dir: str | Path, *, pad_value: float = 0.0, intra_op_threads: int | None = None,
                 pad_spatial: bool | None = None) -> None:
        self.manifest: Manifest = read_manifest(out_dir)
        self.folder = self.manifest.path.parent
        self.pad_value = pad_value
        per_batch = self.manifest.model_layout == "per-batch"
        if pad_spatial is False and not per_batch:
            raise UsageError(f"{self.folder}: static bucket models need height/width padded to the bucket "
                             "(pad_spatial=False is for the per-batch layout)")
        self.pad_spatial = (not per_batch) if pad_spatial is None else pad_spatial
        self._threads = intra_op_threads
        self._sessions: dict[str, Any] = {}
        self.last_run: RunInfo | None = None
        missing = [b.file for b in self.manifest.buckets if not (self.folder / b.file).is_file()]
        if missing:
            raise UsageError(f"{self.folder}: bucket model(s) missing: {', '.join(missing)}")

    @property
    def layout(self) -> str:
        """``static`` or ``per-batch`` (from buckets.json)."""
        return self.manifest.model_layout

    @property
    def buckets(self) -> list[Bucket]:
        return list(self.manifest.buckets)

    @property
    def input_name(self) -> str:
        return self.manifest.layout.input

    def _need(self, shape: tuple[int, ...]) -> tuple[int | None, int | None, int | None]:
        lay = self.manifest.layout
        if len(shape) != len(lay.shape):
            raise UsageError(f"input '{lay.input}' has rank {len(shape)}, the buckets expect {len(lay.shape)}")
        for i, d in enumerate(lay.shape):
            if d > 0 and shape[i] != d:
                raise UsageError(f"input '{lay.input}' axis {i} is {shape[i]}, the buckets fix it to {d}")
        return tuple(shape[a] if a is not None else None for a in (lay.batch, lay.height, lay.width))  # type: ignore[return-value]

    def select(self, shape: tuple[int, ...] | list[int]) -> Bucket:
        """The smallest bucket that holds an input of ``shape``; NoBucketFitsError if none does."""
        b, h, w = self._need(tuple(shape))
        bucket = smallest_fitting(self.manifest.buckets, b, h, w)
        if bucket is None:
            biggest = max(self.manifest.buckets, key=lambda x: x.volume)
            raise NoBucketFitsError(f"input of shape {list(shape)} fits no bucket (largest: {biggest.file} "
                                    f"{list(biggest.shape)}); resize it or rebuild the buckets with larger sizes")
        return bucket

    def _session(self, bucket: Bucket) -> Any:
        sess = self._sessions.get(bucket.file)
        if sess is None:
            import onnxruntime as ort

            opts = ort.SessionOptions()
            opts.log_severity_level = 3
            if self._threads:
                opts.intra_op_num_threads = self._threads
            # one thread pool per bucket: idle pools must not spin-wait against the one that is running
            opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
            sess = ort.InferenceSession(str(self.folder / bucket.file), opts, providers=["CPUExecutionProvider"])
            self._sessions[bucket.file] = sess
        return sess

    def run(self, feeds: np.ndarray | Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Outputs by name for one input (an array for the bucketed input, or a feeds dict)."""
        outputs, info = self.run_with_info(feeds)
        self.last_run = info
        return outputs

    def run_with_info(self, feeds: np.ndarray | Mapping[str, np.ndarray]) -> tuple[dict[str, np.ndarray], RunInfo]:
        lay = self.manifest.layout
        given = {lay.input: feeds} if isinstance(feeds, np.ndarray) else dict(feeds)
        if lay.input not in given:
            raise UsageError(f"feeds need the bucketed input '{lay.input}'")
        x = np.asarray(given[lay.input])
        batch_caps = [b.batch for b in self.manifest.buckets if b.batch is not None]
        if lay.batch is not None and batch_caps and x.shape[lay.batch] > max(batch_caps):
            return self._chunked(given, x, max(batch_caps))
        return self._run_one(given, x)

    def _run_one(self, given: Mapping[str, np.ndarray], x: np.ndarray) -> tuple[dict[str, np.ndarray], RunInfo]:
        lay = self.manifest.layout
        bucket = self.select(x.shape)
        target = list(bucket.shape)
        if not self.pad_spatial:
            for axis in (lay.height, lay.width):
                if axis is not None:
                    target[axis] = x.shape[axis]
        padded = np.full(target, self.pad_value, dtype=x.dtype)
        padded[tuple(slice(0, n) for n in x.shape)] = x
        feeds = {lay.input: padded}
        for name, value in given.items():
            if name == lay.input:
                continue
            value = np.asarray(value)
            if lay.batch is not None and bucket.batch is not None and value.ndim and value.shape[0] == x.shape[lay.batch]:
                extra = np.full((bucket.batch - value.shape[0], *value.shape[1:]), self.pad_value, dtype=value.dtype)
                value = np.concatenate([value, extra])
            feeds[name] = value
        sess = self._session(bucket)
        names = [o.name for o in sess.get_outputs()]
        raw = dict(zip(names, sess.run(names, feeds), strict=True))
        actual = {"batch": x.shape[lay.batch] if lay.batch is not None else None,
                  "height": x.shape[lay.height] if lay.height is not None else None,
                  "width": x.shape[lay.width] if lay.width is not None else None}
        padding: dict[str, int] = {}
        for ax, cap in (("batch", bucket.batch), ("height", bucket.height), ("width", bucket.width)):
            have = actual[ax]
            if cap is not None and have is not None:
                padding[ax] = cap - have if (ax == "batch" or self.pad_spatial) else 0
        out, cut, kept = {}, [], []
        for name, value in raw.items():
            rules = self.manifest.unpad.get(name)
            if not rules:
                out[name] = value
                if any(padding.values()):
                    kept.append(name)
                continue
            index: list[slice] = [slice(None)] * value.ndim
            for rule in rules:
                n = actual.get(rule["follows"])
                if n is None or rule["axis"] >= value.ndim:
                    continue
                num, den = rule["ratio"]
                index[rule["axis"]] = slice(0, min(value.shape[rule["axis"]], math.ceil(n * num / den)))
            out[name] = value[tuple(index)]
            cut.append(name)
        info = RunInfo(bucket.file, target, list(x.shape), padding,
                       1.0 - x.size / padded.size if padded.size else 0.0, cut, kept)
        return out, info

    def _chunked(self, given: Mapping[str, np.ndarray], x: np.ndarray,
                 cap: int) -> tuple[dict[str, np.ndarray], RunInfo]:
        lay = self.manifest.layout
        assert lay.batch is not None
        batch_axes = {name: next((r["axis"] for r in rules if r["follows"] == "batch"), None)
                      for name, rules in self.manifest.unpad.items()}
        n = x.shape[lay.batch]
        parts: dict[str, list[np.ndarray]] = {}
        infos = []
        for start in range(0, n, cap):
            sl = slice(start, min(start + cap, n))
            chunk = {k: (np.asarray(v)[sl] if np.asarray(v).ndim and np.asarray(v).shape[0] == n else v)
                     for k, v in given.items()}
            out, info = self._run_one(chunk, x[(slice(None),) * lay.batch + (sl,)])
            infos.append(info)
            for k, v in out.items():
                parts.setdefault(k, []).append(v)
        missing = [k for k in parts if batch_axes.get(k) is None]
        if missing:
            raise UsageError(f"batch {n} is over the largest bucket ({cap}) and outputs {missing} have no batch axis "
                             "to join chunks along")
        outputs = {k: np.concatenate(v, axis=batch_axes[k]) for k, v in parts.items()}  # type: ignore[arg-type]
        pad = sum(i.padding.get("batch", 0) for i in infos)
        total = sum(math.prod(i.bucket_shape) for i in infos)
        info = RunInfo(infos[-1].bucket, infos[-1].bucket_shape, list(x.shape),
                       {"batch": pad, **{k: v for k, v in infos[0].padding.items() if k != "batch"}},
                       1.0 - x.size / total if total else 0.0, infos[0].unpadded_outputs, infos[0].padded_outputs,
                       len(infos))
        return outputs, info
