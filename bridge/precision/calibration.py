"""Calibration inputs: the first N images of ``--calibration`` (or ``--dataset``), made inputs by the dataset
run's own preprocessing (``bridge.validation.dataset``), so the quantizer sees exactly what the judge feeds.

``Calibration`` keeps the prepared batches (N images of the model's input: 128 x 3 x 256 x 256 float32 is
100 MB) and hands them out again for every quantizer and fallback round; ``samples`` gives a few of them
for the per-layer cost measure.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from bridge.runtimes.base import TensorMeta
from bridge.validation.dataset import DatasetSpec, Preprocessing

CALIBRATION_BATCH = 8  # images per calibration batch (a model with a fixed batch size takes its own)


@dataclass
class Calibration:
    """Prepared calibration inputs: ``batches`` of feeds (input name -> array), ``images`` in all."""

    source: str
    images: int
    batches: list[dict[str, np.ndarray]]

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        return iter(self.batches)

    def single_images(self) -> Iterator[dict[str, np.ndarray]]:
        """One image at a time (batch 1), for quantizers whose models take one image per call."""
        for batch in self.batches:
            rows = next(iter(batch.values())).shape[0]
            for r in range(rows):
                yield {k: v[r:r + 1] for k, v in batch.items()}

    def samples(self, count: int) -> list[dict[str, np.ndarray]]:
        """The first ``count`` images, in batches."""
        taken, out = 0, []
        for batch in self.batches:
            if taken >= count:
                break
            rows = next(iter(batch.values())).shape[0]
            keep = min(rows, count - taken)
            out.append({k: v[:keep] if v.ndim and v.shape[0] == rows else v for k, v in batch.items()})
            taken += keep
        return out

    def describe(self) -> str:
        return f"{self.images} images from {self.source}"


def load_calibration(path: Path, spec: DatasetSpec, limit: int, preprocessing: Preprocessing,
                     inputs: Sequence[TensorMeta], sample_shapes: Mapping[str, Sequence[int]] | None = None
                     ) -> Calibration:
    """The first ``limit`` images of ``path`` (a folder, list or .npz, as ``--dataset`` takes) as inputs,
    prepared with ``preprocessing`` (the dataset run's)."""
    from bridge.validation.dataset.run import image_input
    from bridge.validation.dataset.sources import Dataset

    data = Dataset(replace(spec, path=Path(path), labels=None, limit=limit))
    target = image_input(data, inputs, preprocessing, sample_shapes)
    size = target.batch if target is not None and target.batch else CALIBRATION_BATCH
    batches: list[dict[str, Any]] = []
    for batch in data.batches(preprocessing, target, size):
        real = len(batch.indices)
        fixed = target is not None and target.batch is not None
        batches.append({k: v if fixed else v[:real] for k, v in batch.feeds.items()})
    return Calibration(str(path), len(data), batches)


__all__ = ["CALIBRATION_BATCH", "Calibration", "load_calibration"]
