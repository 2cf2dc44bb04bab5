"""File input and output that a hostile or unlucky file system cannot turn into a crash or a lie.

Output is atomic: written to ``.NAME.<pid>.<random>.tmp`` beside the target, then renamed over it, so a
crash or a failed validation never leaves a half-written model, report or results file behind. The
result keeps the mode an existing target had (new files: 0666 under the umask, as ``open`` makes
them), temporary files a killed run left behind (their pid is gone) are removed by the next run
that writes there, and a read-only or full file system is a ``BridgeError`` naming the file.

Input: ONNX files (empty or graph-less files refused), and ``.npz`` archives read member by member:
only the keys asked for, each member's declared sizes checked against the memory limit
(``bridge.limits``) before it is decompressed, pickled objects refused.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import re
import struct
import tempfile
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import numpy as np
import onnx

from bridge.errors import BadInputFileError, BridgeError, SourceNotFoundError, UsageError
from bridge.limits import check_allocation, nbytes_of

_PROTOBUF_LIMIT = 2**31 - 1  # a single ModelProto cannot serialise past 2 GiB
_TMP = re.compile(r"^\.(?P<name>.+)\.(?P<pid>\d+)\.[^.]+\.tmp$")


class OutputWriteError(BridgeError):
    """The file system refused an output (full disk, I/O error): names the file (exit code 3)."""


def _write_error(target: Path, exc: OSError) -> BridgeError:
    reason = exc.strerror or str(exc)
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS, errno.EISDIR, errno.ENOTDIR):
        return UsageError(f"cannot write {target}: {reason}")
    return OutputWriteError(f"cannot write {target}: {reason}")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def remove_stale_temps(target: Path) -> list[Path]:
    """Delete ``.NAME.<pid>.*.tmp`` files beside ``target`` whose writing process is gone (killed runs)."""
    removed = []
    with contextlib.suppress(OSError):
        for entry in target.parent.iterdir():
            m = _TMP.match(entry.name)
            if m and m.group("name") == target.name and int(m.group("pid")) != os.getpid() \
                    and not _pid_alive(int(m.group("pid"))):
                with contextlib.suppress(OSError):
                    if entry.is_dir() and not entry.is_symlink():
                        import shutil

                        shutil.rmtree(entry)
                    else:
                        entry.unlink()
                    removed.append(entry)
    return removed


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _target_mode(target: Path) -> int:
    """The mode an existing target has, else what ``open()`` would give a new file (0666 & ~umask)."""
    try:
        st = target.stat()
    except OSError:
        return 0o666 & ~_umask()
    return st.st_mode & 0o7777


@contextlib.contextmanager
def atomic_path(target: Path) -> Iterator[Path]:
    """Yield a temp path in ``target``'s folder; on success rename it to ``target``, else delete it.

    OSErrors (read-only folder, full disk, ...) become UsageError / OutputWriteError naming ``target``.
    """
    target = Path(target)
    if target.is_dir():
        raise UsageError(f"cannot write {target}: it is a folder")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create output folder {target.parent}: {exc.strerror}") from exc
    remove_stale_temps(target)
    mode = _target_mode(target)
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.{os.getpid()}.", suffix=".tmp", dir=target.parent)
    except OSError as exc:
        raise _write_error(target, exc) from exc
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        try:
            yield tmp
            if tmp.exists():
                os.chmod(tmp, mode)
            os.replace(tmp, target)
        except OSError as exc:
            raise _write_error(target, exc) from exc
    finally:
        tmp.unlink(missing_ok=True)


def atomic_write_text(target: Path, text: str) -> None:
    with atomic_path(target) as tmp:
        tmp.write_text(text, encoding="utf-8")


def save_model(model: onnx.ModelProto, target: Path, external_data: bool | None = None) -> None:
    """Save an ONNX model atomically. ``external_data`` (None: only when the model is over protobuf's
    2 GiB limit) writes every tensor of >= 1 KiB to ``<target name>.data`` beside it (ONNX external
    data, loaded back by ``onnx.load``), the data file first, then the model; ``model`` is left as it was."""
    target = Path(target)
    if external_data is None:
        external_data = model.ByteSize() > _PROTOBUF_LIMIT
    if not external_data:
        data = model.SerializeToString()
        with atomic_path(target) as tmp:
            tmp.write_bytes(data)
        return
    data_target = target.with_name(target.name + ".data")
    with atomic_path(target) as model_tmp:
        with atomic_path(data_target) as data_tmp:
            moved = _tensors_to_external(model, data_tmp, data_target.name)
        try:
            model_tmp.write_bytes(model.SerializeToString())
        finally:
            _tensors_back(moved, data_target)


_EXTERNAL_MIN_BYTES = 1024


def _graph_tensors(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    """Initializers of ``graph`` and of every subgraph, and tensors held by attributes (Constant values)."""
    yield from graph.initializer
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.TENSOR:
                yield attr.t
            for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else
                        attr.graphs if attr.type == onnx.AttributeProto.GRAPHS else []):
                yield from _graph_tensors(sub)


def _tensors_to_external(model: onnx.ModelProto, data_path: Path, location: str) -> list[tuple[onnx.TensorProto, int, int]]:
    """Move the raw data of large tensors into ``data_path`` one tensor at a time (no second copy of the
    whole model in memory); returns (tensor, offset, length) to undo it."""
    moved = []
    with open(data_path, "wb") as f:
        for tensor in _graph_tensors(model.graph):
            if tensor.data_location == onnx.TensorProto.EXTERNAL or not tensor.HasField("raw_data"):
                continue
            raw = tensor.raw_data
            if len(raw) < _EXTERNAL_MIN_BYTES:
                continue
            offset, length = f.tell(), len(raw)
            f.write(raw)
            del raw
            onnx.external_data_helper.set_external_data(tensor, location, offset, length)  # needs raw_data still
            tensor.ClearField("raw_data")
            tensor.data_location = onnx.TensorProto.EXTERNAL
            moved.append((tensor, offset, length))
    return moved


def _tensors_back(moved: list[tuple[onnx.TensorProto, int, int]], data_path: Path) -> None:
    """Undo ``_tensors_to_external``: raw data read back from the data file (page cache), inline again."""
    with open(data_path, "rb") as f:
        for tensor, offset, length in moved:
            f.seek(offset)
            del tensor.external_data[:]
            tensor.ClearField("data_location")  # DEFAULT (inline)
            tensor.raw_data = f.read(length)


def refuse_overwriting_inputs(output: Path | str, inputs: Iterable[Path | str | None], option: str = "-o") -> None:
    """UsageError when ``output`` is one of ``inputs`` (same file, through any path or link).

    Writing a model over its own source destroys the source when the run fails half way, and a
    report over the feeds loses them; every command checks its outputs with this before writing.
    """
    out = Path(output)
    for item in inputs:
        if item is None:
            continue
        src = Path(item)
        same = False
        with contextlib.suppress(OSError):
            same = out.exists() and src.exists() and os.path.samefile(out, src)
        if same or out.resolve() == src.resolve():
            raise UsageError(f"{option} {out} is also an input ({src}); write the result to another file")


def load_model(path: Path | str) -> onnx.ModelProto:
    """Load an ONNX file (with external data beside it), mapping failures to user-facing errors."""
    path = Path(path)
    if not path.is_file():
        raise SourceNotFoundError(f"no such ONNX file: {path}")
    if path.stat().st_size == 0:
        raise BadInputFileError(f"{path} is empty (0 bytes), not an ONNX model")
    try:
        model = onnx.load(str(path))
    except RecursionError:
        raise BadInputFileError(f"{path} is not a readable ONNX model: nested too deeply") from None
    except Exception as exc:  # protobuf DecodeError, missing external data, ...
        raise BadInputFileError(f"{path} is not a readable ONNX model: {exc}") from exc
    if not model.HasField("graph"):
        raise BadInputFileError(f"{path} parses as protobuf but holds no ONNX graph; is it an ONNX model?")
    _check_data_types(model.graph, path)
    return model


_KNOWN_TYPES = frozenset(onnx.TensorProto.DataType.values())
_T = onnx.TensorProto
_PACKED_BITS: dict[int, int] = {_T.UINT4: 4, _T.INT4: 4, _T.FLOAT4E2M1: 4}
for _name, _bits in (("UINT2", 2), ("INT2", 2), ("FLOAT6E2M3", 6), ("FLOAT6E3M2", 6)):  # newer onnx only
    if hasattr(_T, _name):
        _PACKED_BITS[getattr(_T, _name)] = _bits


def _check_raw_size(init: onnx.TensorProto, path: Path) -> None:
    """``raw_data`` must hold exactly dims x element size bytes (a changed data_type or dims would make
    every later reader fail or read past the tensor)."""
    if not init.HasField("raw_data") or init.data_location == onnx.TensorProto.EXTERNAL:
        return
    count = math.prod(int(d) for d in init.dims)
    if init.data_type in _PACKED_BITS:
        expected = (count * _PACKED_BITS[init.data_type] + 7) // 8
    else:
        try:
            expected = count * onnx.helper.tensor_dtype_to_np_dtype(init.data_type).itemsize
        except (KeyError, TypeError, ValueError):
            return
    if any(d < 0 for d in init.dims) or len(init.raw_data) != expected:
        raise BadInputFileError(
            f"{path}: initializer '{init.name}' declares {onnx.TensorProto.DataType.Name(init.data_type)}"
            f"{list(init.dims)} ({expected:,} bytes) but holds {len(init.raw_data):,} bytes"
        )


def _check_data_types(graph: onnx.GraphProto, path: Path, depth: int = 0) -> None:
    """Element types must be ones ONNX defines (``data_type=999`` crashes every reader after this one)."""
    def bad(what: str, name: str, code: int) -> BadInputFileError:
        return BadInputFileError(f"{path}: {what} '{name}' has element type {code}, which ONNX does not define "
                                 f"for data (known: 1-{max(_KNOWN_TYPES)})")

    for init in graph.initializer:  # a stored tensor needs a real type (0 = UNDEFINED)
        if init.data_type not in _KNOWN_TYPES or init.data_type == onnx.TensorProto.UNDEFINED:
            raise bad("initializer", init.name, init.data_type)
        _check_raw_size(init, path)
    for vi in (*graph.input, *graph.output, *graph.value_info):
        tt = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
        if tt is not None and tt.elem_type not in _KNOWN_TYPES:
            raise bad("value", vi.name, tt.elem_type)
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t") and (attr.t.data_type not in _KNOWN_TYPES or not attr.t.data_type):
                raise bad(f"attribute {attr.name} of node", node.name, attr.t.data_type)
            if attr.name == "to" and attr.type == onnx.AttributeProto.INT and attr.i not in _KNOWN_TYPES:
                raise bad(f"Cast target of {node.op_type} node", node.name, attr.i)
            for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                _check_data_types(sub, path, depth + 1)


# ---------------------------------------------------------------------------------------------- .npz input

_NPY_MAGIC = b"\x93NUMPY"
# what zipfile / zlib / numpy's header parser raise on corrupt archives (unsupported zip versions included)
_ZIP_ERRORS = (zipfile.BadZipFile, OSError, ValueError, EOFError, zlib.error, RuntimeError, NotImplementedError,
               struct.error, KeyError, IndexError, OverflowError, SyntaxError)


def npz_keys(path: Path, what: str) -> list[str]:
    """The array names in an ``.npz`` (read from the zip directory: nothing is decompressed)."""
    with _open_zip(path, what) as zf:
        return [n[:-4] for n in zf.namelist() if n.endswith(".npy")]


@contextlib.contextmanager
def _open_zip(path: Path, what: str) -> Iterator[zipfile.ZipFile]:
    path = Path(path)
    if not path.is_file():
        raise SourceNotFoundError(f"{what} {path}: no such file")
    with open(path, "rb") as fh:
        head = fh.read(6)
    if head == _NPY_MAGIC:
        raise UsageError(f"{what} {path} is a single .npy array; bridge needs an .npz keyed by input name "
                         "(numpy.savez(FILE.npz, NAME=array, ...))")
    try:
        zf = zipfile.ZipFile(path)
    except _ZIP_ERRORS as exc:
        raise BadInputFileError(f"{what} {path} is not a readable .npz (zip) file: {exc}") from exc
    with zf:
        yield zf


def _read_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, label: str, limit: int | None) -> np.ndarray:
    check_allocation(info.file_size, f"{label} (decompressed size)", limit)
    with zf.open(info) as fp:
        version = np.lib.format.read_magic(fp)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(fp)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(fp)
        else:
            raise BadInputFileError(f"{label}: unsupported .npy format version {version}")
        if dtype.hasobject:
            raise BadInputFileError(f"{label}: holds Python objects (pickles), which bridge never loads")
        nbytes = nbytes_of(shape, dtype.itemsize)
        check_allocation(nbytes, f"{label} {dtype.name}{list(shape)}", limit)
        if nbytes > info.file_size:
            raise BadInputFileError(f"{label}: declares {dtype.name}{list(shape)} ({nbytes:,} bytes) but the "
                                    f"member holds only {info.file_size:,} bytes")
        data = fp.read(nbytes)
        if len(data) != nbytes:
            raise BadInputFileError(f"{label}: truncated ({len(data):,} of {nbytes:,} bytes)")
    arr = np.frombuffer(data, dtype=dtype)
    return arr.reshape(shape[::-1]).transpose() if fortran else arr.reshape(shape)


def read_npz(path: Path | str, wanted: Callable[[str], bool] | None = None, *, what: str = "file",
             limit: int | None = None) -> dict[str, np.ndarray]:
    """Arrays of an ``.npz`` whose key ``wanted(key)`` accepts (all when None), read one member at a time.

    Each member's declared decompressed size and array size are checked against the memory limit
    before reading (a zip bomb is refused, not decompressed); keys not wanted are never read.
    """
    path = Path(path)
    arrays: dict[str, np.ndarray] = {}
    total = 0
    with _open_zip(path, what) as zf:
        for info in zf.infolist():
            if not info.filename.endswith(".npy"):
                continue
            key = info.filename[:-4]
            if wanted is not None and not wanted(key):
                continue
            label = f"{what} {path} member '{key}'"
            try:
                arrays[key] = _read_member(zf, info, label, limit)
            except BridgeError:
                raise
            except _ZIP_ERRORS as exc:
                raise BadInputFileError(f"{label} is unreadable: {exc}") from exc
            total += arrays[key].nbytes
            check_allocation(total, f"{what} {path} (all arrays read)", limit)
    return arrays
