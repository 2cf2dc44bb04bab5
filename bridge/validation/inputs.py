"""Seeded input data generated from a model's signature.

Dynamic dims are filled with a size that differs from the export sample, so validation proves the
model really works at other sizes: the batch axis (0) gets sample + 1; other axes get sample plus
the largest power of two dividing it (64 -> 128, 96 -> 128, 100 -> 104), which keeps the sample's
divisibility so stride-s networks still tile.
"""

from __future__ import annotations

import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from bridge.config import InputSpec
from bridge.errors import BadInputFileError, SourceNotFoundError, UsageError
from bridge.runtimes.base import TensorMeta


def other_size(axis: int, sample: int) -> int:
    """A size for a dynamic axis that differs from the export sample (see module docstring)."""
    if axis == 0:
        return sample + 1
    return sample + (sample & -sample)


def resolve_shape(meta: TensorMeta, spec: InputSpec | None, vary_dynamic: bool) -> tuple[int, ...]:
    """Concrete shape for one input: concrete model dims stay; symbolic ones come from the sample spec."""
    if meta.shape is None:
        if spec is None or spec.shape is None:
            raise UsageError(f"input '{meta.name}' has no known shape; give one with --input {meta.name}:SHAPE")
        return spec.shape
    dims: list[int] = []
    for axis, dim in enumerate(meta.shape):
        if isinstance(dim, int):
            dims.append(dim)
            continue
        sample = spec.shape[axis] if spec is not None and spec.shape is not None and axis < len(spec.shape) else None
        if sample is None:
            raise UsageError(
                f"input '{meta.name}' axis {axis} is symbolic ('{dim}') and no sample size is known; "
                f"give one with --input {meta.name}:SHAPE"
            )
        dims.append(other_size(axis, sample) if vary_dynamic else sample)
    return tuple(dims)


def make_inputs(
    metas: Sequence[TensorMeta],
    specs: Sequence[InputSpec] = (),
    *,
    seed: int = 0,
    vary_dynamic: bool = True,
    shapes: Mapping[str, tuple[int, ...]] | None = None,
) -> dict[str, np.ndarray]:
    """One array per input: standard normal for floats, small non-negative ints, random bools."""
    rng = np.random.default_rng(seed)
    by_name = {s.name: s for s in specs}
    feeds: dict[str, np.ndarray] = {}
    for meta in metas:
        shape = (shapes or {}).get(meta.name) or resolve_shape(meta, by_name.get(meta.name), vary_dynamic)
        dtype = np.dtype(meta.dtype)
        if dtype.kind == "f":
            feeds[meta.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind in "iu":
            feeds[meta.name] = rng.integers(0, 10, size=shape).astype(dtype)
        elif dtype.kind == "b":
            feeds[meta.name] = rng.integers(0, 2, size=shape).astype(bool)
        else:
            raise UsageError(f"input '{meta.name}' has dtype {meta.dtype}; bridge cannot generate data for it")
    return feeds


def load_feeds(path: Path | str, metas: Sequence[TensorMeta]) -> dict[str, np.ndarray]:
    """Validation inputs from an .npz: keys are input names (or ``input/NAME`` as in a RunResults file).

    Real data matters for models whose outputs are empty on noise (a detector predicts background
    everywhere on random pixels, and an empty-vs-empty detection comparison proves nothing).
    """
    path = Path(path)
    if not path.is_file():
        raise SourceNotFoundError(f"--feeds {path}: no such file")
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k.removeprefix("input/"): data[k] for k in data.files if not k.startswith("output/")}
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise BadInputFileError(f"--feeds {path} is not a readable .npz: {exc}") from exc
    feeds: dict[str, np.ndarray] = {}
    for meta in metas:
        if meta.name not in arrays:
            raise UsageError(f"--feeds {path} has no array for input '{meta.name}' (it has: {', '.join(sorted(arrays))})")
        feeds[meta.name] = arrays[meta.name].astype(np.dtype(meta.dtype), copy=False)
    return feeds
