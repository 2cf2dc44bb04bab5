"""Read MXNet ``.params`` files (NDArray list files) into numpy arrays, without MXNet.

Layout, as in MXNet src/ndarray/ndarray.cc (NDArray::Save / NDArray::Load, list form):
    uint64 0x112 (kMXAPINDArrayListMagic), uint64 reserved,
    uint64 count, count x NDArray, uint64 count, count x (uint64 len, bytes name)
each NDArray:
    uint32 magic: 0xF993FAC9 (V2, storage type) or 0xF993FACA (V3, numpy shape semantics), or
                  0xF993FAC8 (V1, int64 shape, no storage type), or anything else = the ndim of a
                  pre-V1 array whose shape is ndim x uint32 (LegacyTShapeLoad)
    [V2/V3] int32 storage type (0 dense, 1 row_sparse, 2 csr) [+ storage shape when sparse]
    shape: int32 ndim + ndim x int64 (V1-V3); ndim 0 (V1/V2) or -1 (V3) = empty array, stop here
    int32 dev_type, int32 dev_id, int32 type flag [+ sparse aux types/shapes], raw little-endian data
Names carry ``arg:`` / ``aux:`` prefixes in checkpoints (``mod.save_checkpoint``).
"""

from __future__ import annotations

import io
import logging
import stat
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bridge.errors import BadInputFileError
from bridge.limits import check_allocation, nbytes_of

log = logging.getLogger(__name__)

LIST_MAGIC = 0x112
V1_MAGIC = 0xF993FAC8
V2_MAGIC = 0xF993FAC9
V3_MAGIC = 0xF993FACA

# mshadow type flags (as in mshadow/base.h, MXNet 1.9 / 2.x)
_DTYPES: dict[int, np.dtype] = {
    0: np.dtype("<f4"), 1: np.dtype("<f8"), 2: np.dtype("<f2"), 3: np.dtype("u1"), 4: np.dtype("<i4"),
    5: np.dtype("i1"), 6: np.dtype("<i8"), 7: np.dtype("?"), 8: np.dtype("<i2"), 9: np.dtype("<u2"),
    10: np.dtype("<u4"), 11: np.dtype("<u8"), 12: np.dtype("<u2"),  # 12 = bfloat16, widened below
}
_BFLOAT16 = 12
_STYPES = {0: "dense", 1: "row_sparse", 2: "csr"}
_SPARSE_AUX = {1: 1, 2: 2}  # number of aux arrays per sparse storage type


@dataclass
class _Array:
    value: np.ndarray | None  # None for sparse (not supported) arrays
    stype: int
    offset: int


class _Reader:
    """Reads a file object front to back; sizes are checked against the file's size before reading."""

    def __init__(self, f: io.BufferedIOBase, size: int, source: str) -> None:
        self.f = f
        self.size = size
        self.pos = 0
        self.source = source

    def _check(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > self.size:
            raise BadInputFileError(
                f"{self.source}: truncated or corrupt at byte offset {self.pos}: needs {n} bytes for {what}, "
                f"but the file has {self.size - self.pos} left (size {self.size})"
            )

    def take(self, n: int, what: str) -> bytes:
        self._check(n, what)
        b = self.f.read(n)
        if len(b) != n:  # the file shrank while being read
            raise BadInputFileError(f"{self.source}: could read only {len(b)} of {n} bytes for {what} at byte offset {self.pos}")
        self.pos += n
        return b

    def take_array(self, dtype: np.dtype, shape: tuple[int, ...], what: str) -> np.ndarray:
        """The next ``shape`` x ``dtype`` bytes read straight into a new array (no intermediate copy)."""
        nbytes = nbytes_of(shape, dtype.itemsize)
        self._check(nbytes, what)
        check_allocation(nbytes, f"{self.source}: {what}")
        arr = np.empty(shape, dtype)
        got = self.f.readinto(arr.reshape(-1).view(np.uint8).data)
        if got != nbytes:
            raise BadInputFileError(f"{self.source}: could read only {got} of {nbytes} bytes for {what} at byte offset {self.pos}")
        self.pos += nbytes
        return arr

    def u32(self, what: str) -> int:
        return int(struct.unpack("<I", self.take(4, what))[0])

    def i32(self, what: str) -> int:
        return int(struct.unpack("<i", self.take(4, what))[0])

    def u64(self, what: str) -> int:
        return int(struct.unpack("<Q", self.take(8, what))[0])

    def shape(self, what: str, legacy_ndim: int | None = None) -> tuple[int, ...] | None:
        """int32 ndim + int64 dims; None for an unknown shape (ndim -1)."""
        start = self.pos
        if legacy_ndim is not None:
            if legacy_ndim > 32:
                raise BadInputFileError(f"{self.source}: byte offset {start - 4}: bad NDArray magic/ndim {legacy_ndim:#x}")
            return tuple(struct.unpack(f"<{legacy_ndim}I", self.take(4 * legacy_ndim, what)))
        ndim = self.i32(what)
        if ndim == -1:
            return None
        if not 0 <= ndim <= 32:
            raise BadInputFileError(f"{self.source}: corrupt {what} at byte offset {start}: ndim {ndim}")
        dims = struct.unpack(f"<{ndim}q", self.take(8 * ndim, what))
        if any(d < 0 for d in dims):
            raise BadInputFileError(f"{self.source}: corrupt {what} at byte offset {start}: dims {dims}")
        return tuple(int(d) for d in dims)


def _dtype(flag: int, r: _Reader, at: int) -> np.dtype:
    if flag not in _DTYPES:
        raise BadInputFileError(f"{r.source}: unknown dtype flag {flag} at byte offset {at}")
    return _DTYPES[flag]


def _read_blob(r: _Reader, dtype: np.dtype, shape: tuple[int, ...], what: str) -> np.ndarray:
    # Python ints: a product of int64 dims must not wrap (2**62 x 4 is not 0 bytes); sizes over what the
    # file holds are refused, naming the byte offset, before anything is allocated
    return r.take_array(dtype, shape, f"{what} ({dtype.name}{list(shape)})" if str(list(shape)) not in what else what)


def _read_array(r: _Reader, index: int) -> _Array:
    start = r.pos
    what = f"array #{index}"
    magic = r.u32(f"{what} magic")
    stype = 0
    if magic in (V2_MAGIC, V3_MAGIC):
        stype = r.i32(f"{what} storage type")
        if stype not in _STYPES:
            raise BadInputFileError(f"{r.source}: {what} at byte offset {start}: unknown storage type {stype}")
        storage_shape = r.shape(f"{what} storage shape") if stype else None
        shape = r.shape(f"{what} shape")
        if shape is None or (magic == V2_MAGIC and len(shape) == 0):
            return _Array(np.zeros((0,), np.float32), stype, start)
    elif magic == V1_MAGIC:
        shape = r.shape(f"{what} shape")
        storage_shape = None
        if shape is None or len(shape) == 0:
            return _Array(np.zeros((0,), np.float32), 0, start)
    else:
        shape = r.shape(f"{what} shape", legacy_ndim=magic)
        storage_shape = None
        if not shape:
            return _Array(np.zeros((0,), np.float32), 0, start)
    assert shape is not None
    r.i32(f"{what} device type")
    r.i32(f"{what} device id")
    flag_at = r.pos
    flag = r.i32(f"{what} dtype")
    dtype = _dtype(flag, r, flag_at)
    if stype:
        # sparse: read through it so the error can name the array, but do not convert it
        aux = []
        for k in range(_SPARSE_AUX[stype]):
            aux_at = r.pos
            aux_dtype = _dtype(r.i32(f"{what} aux type {k}"), r, aux_at)
            aux.append((aux_dtype, r.shape(f"{what} aux shape {k}") or ()))
        _read_blob(r, dtype, storage_shape or (), f"{what} sparse values")
        for k, (aux_dtype, aux_shape) in enumerate(aux):
            _read_blob(r, aux_dtype, aux_shape, f"{what} sparse aux data {k}")
        return _Array(None, stype, start)
    value = _read_blob(r, dtype, shape, f"{what} data ({dtype.name}{list(shape)})")
    if flag == _BFLOAT16:  # widen bfloat16 bit patterns to float32 (exact)
        value = (value.astype(np.uint32) << 16).view(np.float32)
    return _Array(value, 0, start)


def parse_ndarray_list(data: bytes, source: str = "<params>") -> dict[str, np.ndarray]:
    """Parse an NDArray list file's bytes; names as stored (``arg:x`` / ``aux:y`` / plain), or ``'0'``... if unnamed."""
    return _parse(_Reader(io.BytesIO(data), len(data), source))


def _parse(r: _Reader) -> dict[str, np.ndarray]:
    source = r.source
    header = r.u64("file magic")
    if header != LIST_MAGIC:
        raise BadInputFileError(
            f"{source}: not an MXNet NDArray/.params file (magic {header:#x} at byte offset 0, expected 0x112)"
        )
    r.u64("reserved header field")
    n = r.u64("array count")
    if n > r.size:
        raise BadInputFileError(f"{source}: corrupt array count {n} at byte offset 16")
    arrays = [_read_array(r, i) for i in range(n)]
    names_at = r.pos
    k = r.u64("name count")
    if k not in (0, n):
        raise BadInputFileError(f"{source}: {n} arrays but {k} names (byte offset {names_at})")
    names = []
    for i in range(k):
        length = r.u64(f"length of name #{i}")
        raw = r.take(length, f"name #{i}")
        try:
            names.append(raw.decode("utf-8"))
        except UnicodeDecodeError:
            raise BadInputFileError(f"{source}: name #{i} at byte offset {r.pos - length} is not UTF-8") from None
    if r.pos != r.size:
        log.warning("%s: %d trailing bytes after the NDArray list", source, r.size - r.pos)
    if not names:
        names = [str(i) for i in range(n)]
    sparse = [(nm, a) for nm, a in zip(names, arrays, strict=True) if a.value is None]
    if sparse:
        listed = ", ".join(f"'{nm}' ({_STYPES[a.stype]}, byte offset {a.offset})" for nm, a in sparse)
        raise BadInputFileError(
            f"{source}: sparse storage is not supported, only dense arrays: {listed}. "
            "Convert them to dense in MXNet (arr.tostype('default')) and save again."
        )
    return {nm: a.value for nm, a in zip(names, arrays, strict=True) if a.value is not None}


def load_params(path: str | Path) -> dict[str, np.ndarray]:
    p = Path(path)
    try:
        st = p.stat()
    except OSError as exc:
        raise BadInputFileError(f"{p}: cannot read: {exc.strerror}") from exc
    if not stat.S_ISREG(st.st_mode):
        raise BadInputFileError(f"{p}: not a regular file (a FIFO, device or folder), so not a .params file")
    check_allocation(st.st_size, f"{p} (file size)")
    # read array by array into their own buffers: the file's bytes never sit in memory beside the arrays
    try:
        with open(p, "rb") as f:
            return _parse(_Reader(f, st.st_size, str(p)))
    except OSError as exc:
        raise BadInputFileError(f"{p}: cannot read: {exc.strerror}") from exc


def split_arg_aux(params: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Strip ``arg:`` / ``aux:`` prefixes; unprefixed names (``mx.nd.save`` dicts) count as args."""
    args: dict[str, np.ndarray] = {}
    aux: dict[str, np.ndarray] = {}
    for key, value in params.items():
        if key.startswith("aux:"):
            aux[key[4:]] = value
        elif key.startswith("arg:"):
            args[key[4:]] = value
        else:
            args[key] = value
    return args, aux


def unused_params(params: dict[str, np.ndarray], variables: set[str]) -> list[str]:
    """Names in a ``.params`` file that no variable of the symbol reads (``arg:``/``aux:`` stripped):
    a wrong file, a renamed layer or a typo, said rather than silently ignored."""
    args, aux = split_arg_aux(params)
    return sorted(n for n in (*args, *aux) if n not in variables)
