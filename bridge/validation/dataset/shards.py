"""A dataset run in shards: consecutive ranges of images run apart (``DatasetSpec.start`` .. ``limit``), each
saved as its mergeable state, merged in dataset order into the result of one run over every image.

``shard_ranges`` cuts a dataset into ranges of ``size`` images, rounded up to whole batches (so every image
meets the same batch as in one run: a runtime's output may depend on its batch). A shard's run is
``validate_on_dataset`` with its range; ``save_shard`` writes its ``DatasetResult`` (the run's description and
each runtime's ``RuntimeState``) to an .npz atomically, under a key saying what it is the shard of, and
``load_shard`` reads it back. ``merge_shards`` appends the states in order (``RuntimeState.merge``) and computes
the figures and verdict once: the same numbers as one run (a test holds sharded equal to unsharded, exactly;
times are sums of the shards').
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Sequence
from dataclasses import replace
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np

from bridge.validation.dataset.preprocess import Preprocessing
from bridge.validation.dataset.run import AccuracyBudget, DatasetResult
from bridge.validation.dataset.sources import Dataset, DatasetSpec
from bridge.validation.dataset.state import RuntimeState


def shard_ranges(total: int, size: int, batch: int) -> list[tuple[int, int]]:
    """[start, stop) ranges of at most ``size`` images (a whole number of batches each) covering ``total``."""
    step = max(batch, -(-max(size, 1) // batch) * batch)
    return [(start, min(start + step, total)) for start in range(0, total, step)]


def save_shard(result: DatasetResult, path: Path, key: str) -> None:
    """``result`` (a shard's run, not cancelled) as an .npz at ``path``, written to a temporary file and renamed."""
    meta = {"key": key, "spec": {**result.spec.to_dict(), "start": result.spec.start, "worst": result.spec.worst},
            "preprocessing": result.preprocessing.to_dict(), "kind": result.kind, "budget": result.budget.to_dict(),
            "images": result.images, "input": result.input, "labels": result.labels, "run_notes": result.run_notes,
            "seconds": result.seconds, "metric_seconds": result.metric_seconds, "normalised": result.normalised,
            "class_names": {str(k): v for k, v in result.class_names.items()},
            "detection_group": result.detection_group, "states": list(result.states)}
    arrays: dict[str, np.ndarray] = {"meta": np.asarray(json.dumps(meta))}
    for k, (name, state) in enumerate(result.states.items()):
        arrays.update(state.to_arrays(f"s{k}."))
        arrays[f"s{k}.name"] = np.asarray(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".npz")
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_shard(path: Path) -> tuple[str, DatasetResult]:
    """A saved shard: its key and its result (states, no figures yet)."""
    with np.load(path, allow_pickle=False) as data:
        arrays = {name: data[name] for name in data.files}
    meta = json.loads(str(arrays["meta"]))
    spec = meta["spec"]
    result = DatasetResult(
        DatasetSpec(Path(spec["path"]), Path(spec["labels"]) if spec["labels"] else None, spec["limit"],
                    spec["batch_size"], spec["classes"], spec["agreement_score"], spec["worst"], spec["start"]),
        Preprocessing(**meta["preprocessing"]), meta["kind"], AccuracyBudget(**meta["budget"]), images=meta["images"],
        input=meta["input"], labels=meta["labels"], seconds=meta["seconds"], metric_seconds=meta["metric_seconds"],
        class_names={int(k): v for k, v in meta["class_names"].items()}, detection_group=meta["detection_group"],
        run_notes=list(meta["run_notes"]), normalised=meta["normalised"])
    for k, name in enumerate(meta["states"]):
        result.states[name] = RuntimeState.from_arrays(arrays, f"s{k}.")
    return str(meta["key"]), result


def merge_shards(parts: Sequence[DatasetResult], spec: DatasetSpec | None = None) -> DatasetResult:
    """The shards of one dataset, in dataset order, as the result of one run over them all (figures, notes,
    the budget's verdict); ``spec``: that run's (default: the shards' range). A shard that was cancelled
    makes the merged run cancelled."""
    if not parts:
        raise ValueError("no shards to merge")
    first, last = parts[0], parts[-1]
    for before, after in pairwise(parts):
        if after.spec.start != (before.spec.limit if before.spec.limit is not None else -1):
            raise ValueError(f"shards out of order: one ends at image {before.spec.limit}, the next starts at "
                             f"{after.spec.start}")
    spec = spec or replace(last.spec, start=first.spec.start)
    tail = first.input.split(" -> ", 1)[1] if " -> " in first.input else ""
    described = Dataset(spec).describe()
    merged = DatasetResult(spec, first.preprocessing, first.kind, first.budget, images=sum(p.images for p in parts),
                           input=f"{described} -> {tail}" if tail else described, labels=first.labels,
                           seconds=sum(p.seconds for p in parts), metric_seconds=sum(p.metric_seconds for p in parts),
                           class_names=dict(first.class_names), detection_group=first.detection_group,
                           normalised=first.normalised)
    merged.run_notes = list(dict.fromkeys(n for p in parts for n in p.run_notes))
    decided = {p.normalised for p in parts if p.normalised is not None}
    if len(decided) > 1:
        merged.run_notes.append("the shards disagreed on whether the detector's boxes are normalised to [0, 1] "
                                "(decided on each shard's first detection)")
    for p in parts:
        if p.cancelled is not None and merged.cancelled is None:
            merged.cancelled = {**p.cancelled, "shard": [p.spec.start, p.spec.limit]}
        for name, state in p.states.items():
            if name not in merged.states:
                merged.states[name] = RuntimeState(state.runtime, state.role)
            merged.states[name].merge(state, spec.worst)
    merged.finish()
    return merged


def shard_key(parts: dict[str, Any]) -> str:
    """A stable key for what a shard is a shard of (the caller's description of the model and run)."""
    import hashlib

    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:24]


__all__ = ["load_shard", "merge_shards", "save_shard", "shard_key", "shard_ranges"]
