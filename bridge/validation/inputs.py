"""Validation inputs: seeded data generated from a model's signature, or real data from ``--feeds``.

Dynamic dims are filled with a size that differs from the export sample, so validation proves the
model really works at other sizes: the batch axis (0) gets sample + 1; other axes get sample plus
the largest power of two dividing it (64 -> 128, 96 -> 128, 100 -> 104), which keeps the sample's
divisibility so stride-s networks still tile.

Values: standard normal floats, small non-negative integers, random bools - except for masks (0/1
padding masks: ``bridge.validation.masks``) and inputs whose consumer accepts only some values
(Gather indices, Reshape shapes, Resize scales, Reduce axes, ...),
which get values valid for that consumer (``bridge.validation.constraints``). Every size is checked
against the memory limit before anything is allocated. Strings, sequences and dtypes numpy cannot
hold are refused with a request for ``--feeds``. Feeds are checked against the model's signature
(names, rank, concrete dims, dtype kind) before any framework sees them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import onnx

from bridge.config import InputSpec, InputValues
from bridge.errors import BadInputFileError, UsageError
from bridge.io import npz_keys, read_npz
from bridge.limits import check_allocation, nbytes_of
from bridge.runtimes.base import TensorMeta
from bridge.validation.constraints import valid_values
from bridge.validation.masks import mask_inputs, padding_mask

if TYPE_CHECKING:
    from bridge.validation.results import RunResults

log = logging.getLogger(__name__)

# numpy dtype names onnxruntime exchanges as numpy arrays (its Python API has no bfloat16/float8 arrays)
GENERATED_DTYPES = ("float16", "float32", "float64", "int8", "int16", "int32", "int64",
                    "uint8", "uint16", "uint32", "uint64", "bool")
_FEEDS_HINT = "give its values with --feeds FILE.npz (numpy.savez(FILE, NAME=array, ...))"


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


def input_dtype(meta: TensorMeta) -> np.dtype:
    """The numpy dtype bridge generates for ``meta``; UsageError asking for --feeds when there is none."""
    kind = meta.dtype
    if kind.startswith(("seq(", "map(", "optional(", "sequence", "map", "optional")):
        raise UsageError(f"input '{meta.name}' is a {kind}, not a tensor; bridge generates tensors only: {_FEEDS_HINT}")
    if kind in ("object", "str", "string", "tensor(string)") or kind.startswith("<U"):
        raise UsageError(f"input '{meta.name}' holds strings; bridge cannot invent meaningful text: {_FEEDS_HINT}")
    if kind not in GENERATED_DTYPES:
        raise UsageError(f"input '{meta.name}' has dtype {kind}, which bridge cannot generate data for "
                         f"(it generates {', '.join(GENERATED_DTYPES)}): {_FEEDS_HINT}")
    return np.dtype(kind)


def image_like(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Image-like float64 values in [0, 1]: a per-image, per-channel gradient, a few flat rectangles
    and fine texture (a detector predicts background everywhere on white noise). The two innermost
    axes are the picture (NCHW and NHWC alike: for NHWC the channels blur into columns, which is
    still a smooth picture); lower ranks get a smooth ramp with texture."""
    if len(shape) < 2 or 0 in shape:
        base = np.linspace(0.0, 1.0, num=int(np.prod(shape)) or 1)[: int(np.prod(shape))].reshape(shape)
        return np.clip(base * rng.uniform(0.3, 1.0) + 0.05 * rng.random(shape), 0.0, 1.0)
    h, w = shape[-2], shape[-1]
    lead = shape[:-2]
    ramp = np.linspace(0.0, 1.0, w)[None, :] * np.ones((h, 1))
    img = rng.uniform(0.2, 1.0, size=(*lead, 1, 1)) * ramp + rng.uniform(0.0, 0.3, size=(*lead, 1, 1))
    flat = img.reshape(-1, h, w)
    for plane in flat:
        for _ in range(3):
            rh, rw = max(1, h // 4), max(1, w // 4)
            y, x = int(rng.integers(0, h - rh + 1)), int(rng.integers(0, w - rw + 1))
            plane[y:y + rh, x:x + rw] = rng.random()
    img = flat.reshape(shape)
    return np.clip(img + 0.05 * rng.random(shape), 0.0, 1.0)


def _generic(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype,
             values: InputValues | None = None) -> np.ndarray:
    if values is not None and (values.kind == "image" or values.range is not None):
        if dtype.kind == "f":
            unit = image_like(rng, shape) if values.kind == "image" else rng.random(shape)
            lo, hi = values.range or (0.0, 1.0)
            return (lo + unit * (hi - lo)).astype(dtype)
        if dtype.kind in "iu" and values.kind == "image":
            lo, hi = values.range or (0.0, 255.0)
            return np.rint(lo + image_like(rng, shape) * (hi - lo)).astype(dtype)
        if dtype.kind in "iu":
            lo, hi = values.range  # type: ignore[misc]
            return rng.integers(int(np.ceil(lo)), int(np.floor(hi)) + 1, size=shape, dtype=np.int64).astype(dtype)
    if dtype.kind == "f":
        return rng.standard_normal(shape, dtype=np.float32 if dtype.itemsize <= 4 else np.float64).astype(dtype)
    if dtype.kind in "iu":
        return rng.integers(0, 10, size=shape, dtype=np.int64).astype(dtype)
    return rng.integers(0, 2, size=shape).astype(bool)


def graphs_of(model: onnx.ModelProto | Sequence[onnx.ModelProto] | None) -> list[onnx.ModelProto]:
    return [] if model is None else [model] if isinstance(model, onnx.ModelProto) else list(model)


def true_inputs(metas: Sequence[TensorMeta], models: Sequence[onnx.ModelProto]) -> list[TensorMeta]:
    """``metas`` without the inputs that hold an initializer in any of ``models``: such an input is a default
    (a weight listed as an input, as older exporters wrote them), not an input; validation runs on its
    stored value and never invents one (the same random weight on both sides would hide a lost weight)."""
    defaults = {t.name for m in models for t in m.graph.initializer}
    kept = [m for m in metas if m.name not in defaults]
    if len(kept) < len(metas):
        log.info("inputs %s hold initializers: validated with their stored values",
                 sorted(m.name for m in metas if m.name in defaults))
    return kept


def make_inputs(
    metas: Sequence[TensorMeta],
    specs: Sequence[InputSpec] = (),
    *,
    seed: int = 0,
    vary_dynamic: bool = True,
    shapes: Mapping[str, tuple[int, ...]] | None = None,
    model: onnx.ModelProto | Sequence[onnx.ModelProto] | None = None,
    values: InputValues | None = None,
) -> dict[str, np.ndarray]:
    """One array per input: standard normal floats, small non-negative ints, random bools; ``values``
    (``--input-kind image``, ``--input-range LO,HI``) asks for image-like or uniform values instead.

    With ``model`` (the ONNX graph the inputs feed), inputs read as indices, axes, shapes, scales or
    counts get values their consumer accepts; when none can be derived, UsageError naming the input
    and the consumer asks for ``--feeds``. Inputs that hold an initializer there get no array (``true_inputs``).
    """
    rng = np.random.default_rng(seed)
    # the source's graph first (what the reference runs), then the converted one (passes may drop consumers)
    models = graphs_of(model)
    metas = true_inputs(metas, models)
    by_name = {s.name: s for s in specs}
    concrete: dict[str, tuple[int, ...]] = {}
    dtypes: dict[str, np.dtype] = {}
    for meta in metas:
        shape = (shapes or {}).get(meta.name) or resolve_shape(meta, by_name.get(meta.name), vary_dynamic)
        dtype = input_dtype(meta)
        if any(d < 0 for d in shape):
            raise UsageError(f"input '{meta.name}' has a negative dim {list(shape)}; give its shape with --input")
        check_allocation(nbytes_of(shape, dtype.itemsize),
                         f"generated input '{meta.name}' ({dtype.name}{list(shape)})")
        concrete[meta.name] = tuple(int(d) for d in shape)
        dtypes[meta.name] = dtype
    special: dict[str, np.ndarray] = {}
    failed: dict[str, str] = {}
    for graph in models:
        found, reasons, failures = valid_values(graph, concrete, dtypes, rng, skip=set(special))
        special.update(found)
        for name, why in failures.items():
            failed.setdefault(name, why)
        for name, why in reasons.items():
            log.info("input '%s': values chosen valid for %s", name, why)
    unresolved = [name for name in concrete if name in failed and name not in special]
    if unresolved:
        name = unresolved[0]
        raise UsageError(f"input '{name}' feeds {failed[name]}, so bridge cannot generate valid values for it; "
                         f"{_FEEDS_HINT}")
    masks = mask_inputs(models, [n for n in concrete if n not in special and dtypes[n].kind in "iubf"],
                        integer={n for n in concrete if dtypes[n].kind in "iub"})
    feeds: dict[str, np.ndarray] = {}
    for meta in metas:
        name = meta.name
        if name in masks:
            log.info("input '%s': a 0/1 padding mask (%s)", name, masks[name])
            feeds[name] = padding_mask(rng, concrete[name], dtypes[name])
            continue
        feeds[name] = special[name] if name in special else _generic(rng, concrete[name], dtypes[name], values)
    return feeds


def _compatible(meta: TensorMeta, arr: np.ndarray, path: Path) -> np.ndarray:
    """``arr`` as the dtype ``meta`` declares, when that loses nothing; UsageError naming input and file."""
    where = f"--feeds {path}: input '{meta.name}'"
    if meta.shape is not None:
        if arr.ndim != len(meta.shape):
            raise UsageError(f"{where} has rank {arr.ndim} (shape {list(arr.shape)}); the model expects rank "
                             f"{len(meta.shape)} ({list(meta.shape)})")
        wrong = [(i, d, a) for i, (d, a) in enumerate(zip(meta.shape, arr.shape, strict=True))
                 if isinstance(d, int) and d != a]
        if wrong:
            i, d, a = wrong[0]
            raise UsageError(f"{where} has shape {list(arr.shape)}; the model fixes axis {i} to {d}, not {a}")
    if meta.dtype in ("object", "string", "str"):
        if arr.dtype.kind not in "US":
            raise UsageError(f"{where} is {arr.dtype.name}; the model expects strings")
        return arr.astype(object)
    try:
        want = np.dtype(meta.dtype)
    except TypeError:
        return arr
    if arr.dtype == want:
        return arr
    ok = (want.kind == "f" and arr.dtype.kind in "fiub") or (want.kind in "iu" and arr.dtype.kind in "iub") \
        or (want.kind == "b" and arr.dtype.kind == "b")
    if ok and want.kind in "iu" and arr.size:
        info = np.iinfo(want)
        ok = bool(arr.min() >= info.min and arr.max() <= info.max)
    if not ok:
        raise UsageError(f"{where} is {arr.dtype.name}; the model expects {want.name} and converting would change "
                         "the values (save the array as that dtype)")
    return arr.astype(want)


def load_feeds(path: Path | str, metas: Sequence[TensorMeta]) -> dict[str, np.ndarray]:
    """Validation inputs from an .npz: keys are input names (or ``input/NAME`` as in a RunResults file).

    Real data matters for models whose outputs are empty on noise (a detector predicts background
    everywhere on random pixels, and an empty-vs-empty detection comparison proves nothing).
    Only the arrays of the model's inputs are read (others are named in a warning, never decompressed);
    each is checked against the input's rank, concrete dims and dtype.
    """
    path = Path(path)
    keys = npz_keys(path, "--feeds")
    names = {m.name for m in metas}
    by_input = {k.removeprefix("input/"): k for k in keys if not k.startswith("output/")}
    missing = [m.name for m in metas if m.name not in by_input]
    if missing:
        raise UsageError(f"--feeds {path} has no array for input '{missing[0]}' (it has: {', '.join(sorted(by_input))})")
    unknown = sorted(n for n in by_input if n not in names)
    if unknown:  # extra arrays (labels, a typo beside the right name) are not read, but said
        log.warning("--feeds %s: arrays %s are not inputs of the model and are not read (its inputs: %s)",
                    path, unknown, sorted(names))
    wanted = {by_input[m.name] for m in metas}
    arrays = read_npz(path, wanted.__contains__, what="--feeds")
    feeds: dict[str, np.ndarray] = {}
    for meta in metas:
        arr = arrays.get(by_input[meta.name])
        if arr is None:
            raise BadInputFileError(f"--feeds {path}: the array for input '{meta.name}' could not be read")
        feeds[meta.name] = _compatible(meta, arr, path)
    return feeds


def check_saved_inputs(inputs: Mapping[str, np.ndarray], metas: Sequence[TensorMeta], where: str) -> None:
    """A saved reference's inputs (``--reference R.npz``) must be the ones the model takes: each input there,
    of the dtype the model declares (not converted: the reference's outputs were computed from these exact
    values, so a cast would compare the model on other inputs than the reference saw), with its rank and
    fixed dims. UsageError naming the file, the input and both dtypes or shapes."""
    for meta in metas:
        arr = inputs.get(meta.name)
        if arr is None:
            raise UsageError(f"{where} holds no input '{meta.name}' (it holds {sorted(inputs) or 'none'}); the "
                             "reference was saved for another model")
        if meta.dtype not in ("unknown", "object") and arr.dtype.name != meta.dtype:
            raise UsageError(f"{where}: input '{meta.name}' is {arr.dtype.name}, the model declares {meta.dtype}; "
                             f"the reference was saved for a model with other input types (save it again from this "
                             f"model's source, or store '{meta.name}' as {meta.dtype} with the outputs it gives)")
        if meta.shape is not None:
            fixed = [(i, d) for i, d in enumerate(meta.shape) if isinstance(d, int)]
            if arr.ndim != len(meta.shape) or any(arr.shape[i] != d for i, d in fixed):
                raise UsageError(f"{where}: input '{meta.name}' has shape {list(arr.shape)}, the model declares "
                                 f"{[d if d is not None else '?' for d in meta.shape]}")


def check_reference_fits(saved: RunResults, model: onnx.ModelProto, path: Path) -> None:
    """``check_saved_inputs`` for every size a saved reference holds, against ``model``'s graph inputs."""
    inits = {i.name for i in model.graph.initializer}
    metas = [TensorMeta.from_value_info(vi) for vi in model.graph.input if vi.name not in inits]
    check_saved_inputs(saved.inputs, metas, f"--reference {path}")
    for i, other in enumerate(saved.other_sizes, start=2):
        # the file's runs at other sizes vary the dynamic axes, the fixed ones and the dtypes stay
        check_saved_inputs(other.inputs, metas, f"--reference {path} (size{i})")
