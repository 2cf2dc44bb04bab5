"""The user's images, read one batch at a time: a folder (jpg/png, recursively, sorted), an image-list file,
or an ``.npz`` of ready inputs.

Nothing is read ahead: ``Dataset.batches`` decodes the images of one batch (Pillow), makes them inputs with
the declared ``Preprocessing`` and yields them with their frames, so memory stays that of one batch
whatever the dataset's size. An ``.npz`` is streamed member by member from the zip (``np.load`` would
read each array whole): its arrays are the inputs by name, axis 0 the images, used as they are.
A short last batch is padded with copies of its last image (a model with a fixed batch size still runs
it, and a framework reference does not rebind for a new shape); the copies' results are dropped.
"""

from __future__ import annotations

import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np

from bridge.errors import BadInputFileError, UsageError
from bridge.validation.dataset.preprocess import Frame, InputFrame, Preprocessing, prepare

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")


@dataclass(frozen=True)
class DatasetSpec:
    """What to validate on: ``path`` (folder, list file or .npz), ``labels`` (COCO json or a folder of VOC
    xml), the first ``limit`` images, ``batch_size`` images per inference (a model's fixed batch wins),
    ``classes`` (how model class ids name the labels' categories: ``index``, ``id`` or names in class
    order), ``agreement_score`` (the source's detections at or above it are the ground truth of agreement)
    ``worst`` (images with the largest disagreement shown in the report, per candidate) and ``start``
    (the first image: a shard of the dataset runs images ``start`` .. ``limit`` - 1)."""

    path: Path
    labels: Path | None = None
    limit: int | None = None
    batch_size: int = 8
    classes: str = "index"
    agreement_score: float = 0.5
    worst: int = 6
    start: int = 0  # the first image (a shard of the dataset: images start .. limit - 1)

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))
        if self.labels is not None:
            object.__setattr__(self, "labels", Path(self.labels))
        if self.limit is not None and self.limit < 1:
            raise UsageError(f"--dataset-limit {self.limit}: must be at least 1")
        if self.start < 0 or (self.limit is not None and self.start >= self.limit):
            raise UsageError(f"dataset shard from image {self.start}: outside the dataset's first {self.limit} images")
        if self.batch_size < 1:
            raise UsageError(f"--dataset-batch {self.batch_size}: must be at least 1")
        if not 0.0 <= self.agreement_score <= 1.0:
            raise UsageError(f"--agreement-score {self.agreement_score}: must be in [0, 1]")
        if not self.path.exists():
            raise UsageError(f"--dataset {self.path}: no such file or folder")
        if self.labels is not None and not self.labels.exists():
            raise UsageError(f"--labels {self.labels}: no such file or folder")

    def to_dict(self) -> dict[str, Any]:
        return {"path": str(self.path), "labels": None if self.labels is None else str(self.labels),
                "limit": self.limit, "batch_size": self.batch_size, "classes": self.classes,
                "agreement_score": self.agreement_score, **({"start": self.start} if self.start else {})}


@dataclass
class Batch:
    """One batch: dataset indices and names of its real images, the feeds (padded to ``size`` images), and
    each real image's frame (None for ready inputs)."""

    indices: list[int]
    names: list[str]
    feeds: dict[str, np.ndarray]
    frames: list[Frame | None]
    size: int
    paths: list[Path | None] = field(default_factory=list)


class Dataset:
    """The images of a ``DatasetSpec`` in order (``names``: relative paths, or ``#i`` for an .npz)."""

    def __init__(self, spec: DatasetSpec) -> None:
        self.spec = spec
        self.npz: Path | None = None
        self.paths: list[Path] = []
        self.names: list[str] = []
        self._npz_shapes: dict[str, tuple[tuple[int, ...], np.dtype[Any]]] = {}
        path = spec.path
        if path.is_dir():
            found = sorted((p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES),
                           key=lambda p: p.relative_to(path).as_posix())
            if not found:
                raise UsageError(f"--dataset {path}: no .jpg or .png image in the folder (searched recursively)")
            self.paths, self.names = found, [p.relative_to(path).as_posix() for p in found]
        elif path.suffix.lower() == ".npz":
            self.npz = path
            self._npz_shapes = _npz_members(path)
            counts = {name: shape[0] if shape else 0 for name, (shape, _dt) in self._npz_shapes.items()}
            if not counts or len(set(counts.values())) != 1 or not next(iter(counts.values())):
                raise UsageError(f"--dataset {path}: the arrays must share one leading (image) axis, got "
                                 + ", ".join(f"{k} {list(s)}" for k, (s, _d) in self._npz_shapes.items()))
            self.names = [f"#{i}" for i in range(next(iter(counts.values())))]
        elif path.suffix.lower() in IMAGE_SUFFIXES:
            self.paths, self.names = [path], [path.name]
        else:
            self.paths, self.names = _read_list(path)
        if spec.limit is not None:
            self.paths, self.names = self.paths[: spec.limit], self.names[: spec.limit]

    def __len__(self) -> int:
        return len(self.names)

    @property
    def ready_inputs(self) -> list[str]:
        """The input names an .npz dataset holds (empty for images)."""
        return list(self._npz_shapes)

    def describe(self) -> str:
        kind = "ready inputs (.npz)" if self.npz else "images"
        part = f" (images {self.spec.start}..{len(self) - 1})" if self.spec.start else ""
        return f"{len(self) - self.spec.start} {kind} from {self.spec.path}{part}"

    def batches(self, pre: Preprocessing, target: InputFrame | None, batch: int, start: int = 0,
                stop: int | None = None) -> Iterator[Batch]:
        """Batches of ``batch`` images from ``start`` to ``stop`` (default: the end), decoded and prepared one
        batch at a time; ``target`` is the image input (None for an .npz)."""
        stop = len(self) if stop is None else min(stop, len(self))
        if self.npz is not None:
            yield from self._npz_batches(batch, start, stop)
            return
        assert target is not None
        for first in range(start, stop, batch):
            idx = list(range(first, min(first + batch, stop)))
            prepared = [prepare(load_image(self.paths[i], target.channels), pre, target) for i in idx]
            arrays = [p.array for p in prepared]
            arrays += [arrays[-1]] * (batch - len(arrays))
            yield Batch(idx, [self.names[i] for i in idx], {target.name: np.stack(arrays)},
                        [p.frame for p in prepared], batch, [self.paths[i] for i in idx])

    def _npz_batches(self, batch: int, start: int, stop: int) -> Iterator[Batch]:
        assert self.npz is not None
        with zipfile.ZipFile(self.npz) as archive:
            readers = {name: _MemberReader(archive, name, *self._npz_shapes[name]) for name in self._npz_shapes}
            for reader in readers.values():
                reader.skip(start)
            for first in range(start, stop, batch):
                n = min(batch, stop - first)
                feeds = {name: r.read(n) for name, r in readers.items()}
                if n < batch:
                    feeds = {k: np.concatenate([v, np.repeat(v[-1:], batch - n, axis=0)]) for k, v in feeds.items()}
                yield Batch(list(range(first, first + n)), [self.names[i] for i in range(first, first + n)], feeds,
                            [None] * n, batch, [None] * n)


def load_image(path: Path, channels: int = 3) -> np.ndarray:
    """The image as H x W x 3 uint8 RGB (or H x W x 1 for a 1-channel input); EXIF rotation not applied
    (the pixels as stored, as most training pipelines read them)."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as img:
            img = img.convert("L" if channels == 1 else "RGB")
            array = np.asarray(img)
    except (OSError, UnidentifiedImageError) as exc:
        raise BadInputFileError(f"--dataset: cannot read image {path}: {exc}") from None
    return array[..., None] if array.ndim == 2 else array


def _read_list(path: Path) -> tuple[list[Path], list[str]]:
    """An image-list file: one path per line (relative to the file's folder), ``#`` comments, blank lines."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"--dataset {path}: not a folder, .npz or readable image-list file ({exc})") from None
    paths, names = [], []
    for number, line in enumerate(lines, 1):
        text = line.split("#", 1)[0].strip() if not line.lstrip().startswith("#") else ""
        if not text:
            continue
        p = Path(text) if Path(text).is_absolute() else path.parent / text
        if not p.is_file():
            raise UsageError(f"--dataset {path}, line {number}: {text}: no such image")
        paths.append(p)
        names.append(text)
    if not paths:
        raise UsageError(f"--dataset {path}: the list names no image (one path per line)")
    return paths, names


def _npz_members(path: Path) -> dict[str, tuple[tuple[int, ...], np.dtype[Any]]]:
    """name -> (shape, dtype) of every array of an .npz, read from the headers only."""
    found = {}
    try:
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                if not info.filename.endswith(".npy"):
                    continue
                with archive.open(info) as fh:
                    shape, _fortran, dtype = _header(fh)
                found[info.filename[:-4]] = (shape, dtype)
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise BadInputFileError(f"--dataset {path}: not a readable .npz ({exc})") from None
    return found


def _header(fh: IO[bytes]) -> tuple[tuple[int, ...], bool, np.dtype[Any]]:
    version = np.lib.format.read_magic(fh)
    reader = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    shape, fortran, dtype = reader(fh)
    if fortran and len(shape) > 1:
        raise ValueError("Fortran-ordered arrays cannot be streamed by image")
    if dtype.hasobject:
        raise ValueError("object arrays are not inputs")
    return tuple(shape), fortran, dtype


class _MemberReader:
    """Reads an .npz member's array a few leading-axis rows at a time (the zip stream decompresses as it goes)."""

    def __init__(self, archive: zipfile.ZipFile, name: str, shape: tuple[int, ...], dtype: np.dtype[Any]) -> None:
        self.fh = archive.open(name + ".npy")
        _header(self.fh)
        self.row_shape, self.dtype = shape[1:], dtype
        self.row_bytes = int(np.prod(self.row_shape, dtype=np.int64)) * dtype.itemsize

    def skip(self, rows: int) -> None:
        remaining = rows * self.row_bytes
        while remaining:
            chunk = self.fh.read(min(remaining, 1 << 24))
            if not chunk:
                raise BadInputFileError("--dataset: the .npz ends early")
            remaining -= len(chunk)

    def read(self, rows: int) -> np.ndarray:
        data = self.fh.read(rows * self.row_bytes)
        if len(data) != rows * self.row_bytes:
            raise BadInputFileError("--dataset: the .npz ends early")
        return np.frombuffer(data, self.dtype).reshape(rows, *self.row_shape).copy()


def image_sizes(dataset: Dataset, indices: Sequence[int]) -> list[tuple[int, int]]:
    """(width, height) of the given images, read from their headers only."""
    from PIL import Image

    sizes = []
    for i in indices:
        with Image.open(dataset.paths[i]) as img:
            sizes.append(img.size)
    return sizes


__all__ = ["IMAGE_SUFFIXES", "Batch", "Dataset", "DatasetSpec", "image_sizes", "load_image"]
