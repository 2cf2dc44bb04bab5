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
import stat
import struct
import tempfile
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import onnx

from bridge.errors import BadInputFileError, BridgeError, BridgeInternalError, SourceNotFoundError, UsageError
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
    except (ProcessLookupError, OverflowError, ValueError):  # gone, or a planted name with an impossible pid
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


def refuse_link(path: Path, what: str) -> None:
    """UsageError when ``path`` (a file bridge opens and writes in place: a lock, a database) is a symlink,
    a second hard link or not a regular file: writing there would change a file elsewhere. Absent is fine."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise UsageError(f"{what} {path}: cannot be read ({exc.strerror})") from None
    if stat.S_ISLNK(st.st_mode):
        raise UsageError(f"{what} {path} is a symlink (to {os.readlink(path)}); bridge never writes through a "
                         "link: remove it")
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(f"{what} {path} is {describe_kind(st.st_mode)}, not a regular file: remove it")
    if st.st_nlink > 1:
        raise UsageError(f"{what} {path} has {st.st_nlink} hard links (another name for a file elsewhere); "
                         "bridge never writes into a linked file: remove it")


def create_nofollow(path: Path) -> int:
    """A file descriptor for writing ``path`` from empty, never through a link: a symlink (or hard link)
    planted at ``path`` is removed first (as renaming a new file over it would), then the file is created
    with O_EXCL | O_NOFOLLOW. For a file written while something else runs (a child's log)."""
    with contextlib.suppress(FileNotFoundError):
        st = os.lstat(path)
        if stat.S_ISDIR(st.st_mode):
            raise UsageError(f"cannot write {path}: it is a folder")
        os.unlink(path)
    try:
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    except OSError as exc:
        raise _write_error(Path(path), exc) from exc


def describe_kind(mode: int) -> str:
    """What a file system entry is, for a message: 'a folder', 'a FIFO (named pipe)', ..."""
    for test, words in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                        (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                        (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symlink"), (stat.S_ISREG, "a file")):
        if test(mode):
            return words
    return "not a regular file"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _target_mode(target: Path) -> int:
    """The mode an existing target has, else what ``open()`` would give a new file (0666 & ~umask); a link at
    ``target`` is replaced, so the mode of what it points to is not copied."""
    try:
        st = os.lstat(target)
    except OSError:
        return 0o666 & ~_umask()
    return 0o666 & ~_umask() if stat.S_ISLNK(st.st_mode) else st.st_mode & 0o7777


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
    2 GiB limit) writes the raw data of every initializer and attribute tensor (graphs, subgraphs,
    functions) of >= 1 KiB to ``<target name>.data`` beside it (ONNX external data, loaded back by
    ``onnx.load``); the data file is renamed into place first, then the model; ``model`` is left as it was.

    The bytes are streamed (``_Plan``): no serialisation of the whole model ever exists in memory, only
    one tensor's data at a time, so saving adds about the largest tensor to the process, not 2x the
    model (``SerializeToString`` encodes into a buffer and copies it into a bytes object; upb's
    ``ByteSize`` encodes too). Inline files are byte-for-byte what ``SerializeToString`` gives."""
    target = Path(target)
    inline = None if external_data else _Plan(model, None)  # planned once: its size decides when not asked
    if inline is not None and (external_data is False or inline.size <= _PROTOBUF_LIMIT):
        with atomic_path(target) as tmp, tmp.open("wb") as f:
            inline.write(f, None)
        return
    del inline
    data_target = target.with_name(target.name + ".data")
    plan = _Plan(model, data_target.name)
    # both streamed in one pass; the data file is renamed into place first, then the model
    with atomic_path(target) as model_tmp, atomic_path(data_target) as data_tmp, \
            data_tmp.open("wb") as data, model_tmp.open("wb") as f:
        plan.write(f, data)


_EXTERNAL_MIN_BYTES = 1024  # tensors smaller than this stay inline when writing external data
_STREAM_MIN_BYTES = 64 * 1024  # tensor data at least this large is written from the proto, not re-encoded


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _len_key(number: int) -> bytes:
    """The key of a length-delimited field (wire type 2: messages, bytes, strings)."""
    return _varint(number << 3 | 2)


def _raw_length(tensor: onnx.TensorProto) -> int:
    """``len(tensor.raw_data)`` without copying the data out of the proto (upb hands out copies): from
    the dims and element size, or the copy's length for element types whose size is not fixed here."""
    count = math.prod(int(d) for d in tensor.dims)
    if tensor.data_type in _PACKED_BITS:
        return (count * _PACKED_BITS[tensor.data_type] + 7) // 8
    try:
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type)
    except (KeyError, TypeError, ValueError):
        return len(tensor.raw_data)
    return count * dtype.itemsize if count >= 0 and not dtype.hasobject else len(tensor.raw_data)


def tensor_size(tensor: onnx.TensorProto) -> int:
    """About the bytes ``tensor`` takes serialised, without copying its data out of the proto (upb's
    ``ByteSize()`` encodes the whole tensor to measure it): exact for the data, the rest estimated."""
    if tensor.HasField("raw_data") and tensor.data_location != onnx.TensorProto.EXTERNAL:
        return _raw_length(tensor) + 16 + len(tensor.name) + 10 * len(tensor.dims)
    return int(tensor.ByteSize())  # typed fields (small here) or a reference to external data


@dataclass
class _Data:
    """One tensor's ``raw_data``, copied out of the proto only when it is written."""

    tensor: onnx.TensorProto
    length: int
    external: bool  # to the data file (its offset is already in the model) instead of inline


_Part = bytes | _Data
# messages that can hold tensor data somewhere below them: planned field by field; every other message
# (types, value infos, opset ids, ...) is small and encoded whole
_CONTAINERS = (onnx.ModelProto, onnx.GraphProto, onnx.FunctionProto, onnx.SparseTensorProto)
_HEAVY_ATTRS = frozenset({onnx.AttributeProto.TENSOR, onnx.AttributeProto.TENSORS, onnx.AttributeProto.GRAPH,
                          onnx.AttributeProto.GRAPHS, onnx.AttributeProto.SPARSE_TENSOR,
                          onnx.AttributeProto.SPARSE_TENSORS})


class _Plan:
    """The serialisation of a ModelProto as a list of parts: encoded bytes for everything small, and a
    reference to each large tensor's ``raw_data`` to copy out of the proto when its turn comes.

    Protobuf writes a message as key + length + its fields, so each message's length is worked out
    before anything is written (a tensor's data length from its dims, not from the data). Fields come in
    field-number order, as ``SerializeToString`` writes them, so the result is the same bytes. With
    ``location`` (external data) every initializer or attribute tensor with raw data of >= 1 KiB gets ``external_data`` entries
    (location, offset, length: as ``onnx.external_data_helper.set_external_data`` writes them) and
    ``data_location = EXTERNAL`` instead of its data, which goes to the data file at that offset."""

    def __init__(self, model: onnx.ModelProto, location: str | None) -> None:
        self.location = location
        self._inline_only = 0  # > 0 inside training_info, whose tensors onnx.load does not read back from a file
        self.data_size = 0  # bytes planned into the data file so far
        self.parts: list[_Part] = []
        self.size = self._message(model, self.parts)

    def write(self, f: BinaryIO, data: BinaryIO | None) -> None:
        for part in self.parts:
            if isinstance(part, bytes):
                f.write(part)
                continue
            raw = part.tensor.raw_data  # a copy of this one tensor's data, dropped after writing it
            if len(raw) != part.length:
                raise BridgeInternalError(
                    f"tensor '{part.tensor.name}' holds {len(raw):,} bytes of raw data, but its type "
                    f"{onnx.TensorProto.DataType.Name(part.tensor.data_type)}{list(part.tensor.dims)} needs "
                    f"{part.length:,}; nothing was written")
            (data if part.external and data is not None else f).write(raw)
            del raw

    def _message(self, msg: Any, parts: list[_Part]) -> int:
        """Append ``msg``'s fields to ``parts``; returns its encoded length."""
        size = 0
        for fd, value in msg.ListFields():
            if fd.type != fd.TYPE_MESSAGE:
                if isinstance(msg, onnx.TensorProto) and fd.name == "raw_data":
                    continue  # the tensor's own planner handles it
                one = type(msg)()
                if fd.is_repeated:
                    getattr(one, fd.name).extend(value)
                else:
                    setattr(one, fd.name, value)
                encoded = one.SerializeToString()
                parts.append(encoded)
                size += len(encoded)
                continue
            for item in value if fd.is_repeated else (value,):
                size += self._field_message(msg, fd.number, item, parts)
        return size

    def _field_message(self, parent: Any, number: int, item: Any, parts: list[_Part]) -> int:
        """One embedded message: key + length + fields, planned part by part when it can hold tensor data."""
        key = _len_key(number)
        sub: list[_Part] = []
        if isinstance(item, onnx.TensorProto):
            # what onnx.load reads back from a data file: initializers and attribute tensors (graphs,
            # subgraphs, functions); sparse tensors' values and indices stay inline
            movable = not self._inline_only and (
                (isinstance(parent, onnx.GraphProto) and number == 5)  # initializer
                or (isinstance(parent, onnx.AttributeProto) and number in (5, 10)))  # t, tensors
            length = self._tensor(item, sub, movable)
        elif isinstance(item, onnx.TrainingInfoProto):
            self._inline_only += 1
            try:
                length = self._message(item, sub)
            finally:
                self._inline_only -= 1
        elif isinstance(item, _CONTAINERS) or (
                isinstance(item, onnx.NodeProto) and any(a.type in _HEAVY_ATTRS for a in item.attribute)) or (
                isinstance(item, onnx.AttributeProto) and item.type in _HEAVY_ATTRS):
            length = self._message(item, sub)
        else:
            encoded = item.SerializeToString()
            sub, length = [encoded], len(encoded)
        head = key + _varint(length)
        parts.append(head)
        parts.extend(sub)
        return len(head) + length

    def _tensor(self, tensor: onnx.TensorProto, parts: list[_Part], movable: bool) -> int:
        if not tensor.HasField("raw_data") or tensor.data_location == onnx.TensorProto.EXTERNAL:
            encoded = tensor.SerializeToString()  # typed fields (strings, ...) or already external: small here
            parts.append(encoded)
            return len(encoded)
        length = _raw_length(tensor)
        external = movable and self.location is not None and length >= _EXTERNAL_MIN_BYTES
        if not external and length < _STREAM_MIN_BYTES:
            encoded = tensor.SerializeToString()
            parts.append(encoded)
            return len(encoded)
        # everything but the data, split around where raw_data (field 9) goes
        before, after = onnx.TensorProto(), onnx.TensorProto()
        for fd, value in tensor.ListFields():
            if fd.name == "raw_data":
                continue
            half = before if fd.number < 9 else after
            if fd.is_repeated:
                getattr(half, fd.name).extend(value)
            elif fd.type == fd.TYPE_MESSAGE:
                getattr(half, fd.name).CopyFrom(value)
            else:
                setattr(half, fd.name, value)
        if external:
            assert self.location is not None
            for name, text in (("location", self.location), ("offset", str(self.data_size)), ("length", str(length))):
                entry = after.external_data.add()
                entry.key, entry.value = name, text
            after.data_location = onnx.TensorProto.EXTERNAL
            self.data_size += length
            encoded = before.SerializeToString() + after.SerializeToString()
            parts.extend([encoded, _Data(tensor, length, external=True)])
            return len(encoded)
        head, tail = before.SerializeToString(), after.SerializeToString()
        key = _len_key(9) + _varint(length)
        parts.extend([head + key, _Data(tensor, length, external=False), tail])
        return len(head) + len(key) + length + len(tail)


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
    require_file(path, "ONNX model", missing=f"no such ONNX file: {path}")
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


# the typed field an element type's values are stored in when there is no raw_data, and values per element
_TYPED_FIELDS: dict[int, tuple[str, int]] = {
    _T.FLOAT: ("float_data", 1), _T.COMPLEX64: ("float_data", 2), _T.DOUBLE: ("double_data", 1),
    _T.COMPLEX128: ("double_data", 2), _T.INT64: ("int64_data", 1), _T.UINT32: ("uint64_data", 1),
    _T.UINT64: ("uint64_data", 1), _T.STRING: ("string_data", 1),
    **{t: ("int32_data", 1) for t in (_T.INT32, _T.INT16, _T.INT8, _T.UINT16, _T.UINT8, _T.BOOL, _T.FLOAT16,
                                       _T.BFLOAT16, _T.FLOAT8E4M3FN, _T.FLOAT8E4M3FNUZ, _T.FLOAT8E5M2,
                                       _T.FLOAT8E5M2FNUZ)},
}


def _check_tensor_size(tensor: onnx.TensorProto, path: Path, what: str) -> None:
    """A stored tensor must hold exactly what its dims declare: ``raw_data`` dims x element size bytes, or
    as many values in its typed field (a changed data_type or dims would make every later reader fail,
    read past the tensor, or overflow computing its size: onnxruntime's ``SafeIntOnOverflow``)."""
    if tensor.data_location == onnx.TensorProto.EXTERNAL:
        return
    name = onnx.TensorProto.DataType.Name(tensor.data_type) if tensor.data_type in _KNOWN_TYPES else str(tensor.data_type)
    if any(d < 0 for d in tensor.dims):
        field_name = "raw_data" if tensor.HasField("raw_data") else _TYPED_FIELDS.get(tensor.data_type, ("", 1))[0]
        held = len(getattr(tensor, field_name)) if field_name else 0
        raise BadInputFileError(f"{path}: {what} declares {name}{list(tensor.dims)} (a negative dimension) but "
                                f"holds {held:,} {'bytes' if field_name == 'raw_data' else 'values'}")
    count = math.prod(int(d) for d in tensor.dims)
    if tensor.HasField("raw_data"):
        if tensor.data_type in _PACKED_BITS:
            expected = (count * _PACKED_BITS[tensor.data_type] + 7) // 8
        else:
            try:
                expected = count * onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
            except (KeyError, TypeError, ValueError):
                return
        if len(tensor.raw_data) != expected:
            raise BadInputFileError(f"{path}: {what} declares {name}{list(tensor.dims)} ({expected:,} bytes) but "
                                    f"holds {len(tensor.raw_data):,} bytes")
        return
    typed = _TYPED_FIELDS.get(tensor.data_type)
    if typed is None:
        return
    field_name, per = typed
    held = len(getattr(tensor, field_name))
    if held != count * per:
        raise BadInputFileError(f"{path}: {what} declares {name}{list(tensor.dims)} ({count:,} values) but holds "
                                f"{held // per:,} in {field_name}")


def _check_data_types(graph: onnx.GraphProto, path: Path, depth: int = 0) -> None:
    """Element types must be ones ONNX defines (``data_type=999`` crashes every reader after this one)."""
    def bad(what: str, name: str, code: int) -> BadInputFileError:
        return BadInputFileError(f"{path}: {what} '{name}' has element type {code}, which ONNX does not define "
                                 f"for data (known: 1-{max(_KNOWN_TYPES)})")

    for init in graph.initializer:  # a stored tensor needs a real type (0 = UNDEFINED)
        if init.data_type not in _KNOWN_TYPES or init.data_type == onnx.TensorProto.UNDEFINED:
            raise bad("initializer", init.name, init.data_type)
        _check_tensor_size(init, path, f"initializer '{init.name}'")
    for vi in (*graph.input, *graph.output, *graph.value_info):
        tt = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
        if tt is not None and tt.elem_type not in _KNOWN_TYPES:
            raise bad("value", vi.name, tt.elem_type)
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t") and (attr.t.data_type not in _KNOWN_TYPES or not attr.t.data_type):
                raise bad(f"attribute {attr.name} of node", node.name, attr.t.data_type)
            if attr.HasField("t"):
                _check_tensor_size(attr.t, path, f"attribute '{attr.name}' of node '{node.name}' ({node.op_type})")
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


def require_file(path: Path | str, what: str, missing: str | None = None) -> None:
    """``path`` must be a regular file (a link to one is fine): SourceNotFoundError when nothing is there
    (``missing``: its message), UsageError saying what is there otherwise (a folder, a FIFO, a device:
    reading a FIFO would block until a writer comes, /dev/zero never ends)."""
    path = Path(path)
    try:
        st = path.stat()
    except FileNotFoundError:
        raise SourceNotFoundError(missing or f"{what} {path}: no such file") from None
    except OSError as exc:  # a dangling link, a loop, a name too long, permission
        raise SourceNotFoundError(f"{what} {path}: cannot be read ({exc.strerror or exc})") from None
    if not stat.S_ISREG(st.st_mode):
        hint = "; give the file inside it" if stat.S_ISDIR(st.st_mode) else ""
        raise UsageError(f"{what} {path} is {describe_kind(st.st_mode)}, not a regular file{hint}")


def check_writable(target: Path | str, option: str) -> None:
    """UsageError naming ``option`` when ``target`` cannot be written: checked before the work, so a
    read-only folder fails in a second, not after a model was converted and written. The nearest folder
    that exists on the way is tried for real (a temp file created and removed: mode bits do not tell for
    root, a read-only mount or /proc); folders still missing are not created here."""
    target = Path(target)
    if target.is_dir():
        raise UsageError(f"{option} {target}: it is a folder")
    folder = target.parent
    while not folder.exists() and folder != folder.parent:
        if folder.is_symlink():  # a dangling link on the way
            raise UsageError(f"{option} {target}: {folder} is a link to nothing")
        folder = folder.parent
    if not folder.is_dir():
        raise UsageError(f"{option} {target}: cannot write there, {folder} is {_kind_of(folder)}, not a folder")
    try:
        fd, probe = tempfile.mkstemp(prefix=".bridge-write-test-", dir=folder)
    except OSError as exc:
        raise UsageError(f"{option} {target}: cannot write in {folder} ({exc.strerror or exc})") from None
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(probe)


def _kind_of(path: Path) -> str:
    try:
        return describe_kind(path.stat().st_mode)
    except OSError:
        return "unreadable"


@contextlib.contextmanager
def _open_zip(path: Path, what: str) -> Iterator[zipfile.ZipFile]:
    path = Path(path)
    require_file(path, what)
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


@dataclass(frozen=True)
class Declared:
    """What another file says a member holds (a RunResults sidecar): checked before the member is read."""

    shape: tuple[int, ...] | None
    dtype: str | None
    by: str  # the file that declares it


def _read_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, label: str, limit: int | None,
                 declared: Declared | None = None) -> np.ndarray:
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
        if declared is not None and ((declared.shape is not None and tuple(declared.shape) != tuple(shape))
                                     or (declared.dtype is not None and np.dtype(declared.dtype) != dtype)):
            said = f"{declared.dtype or dtype.name}{list(declared.shape) if declared.shape is not None else list(shape)}"
            raise BadInputFileError(f"{label}: holds {dtype.name}{list(shape)} but {declared.by} declares {said}; "
                                    "not read")
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
             limit: int | None = None, declared: Mapping[str, Any] | None = None,
             declared_by: str = "") -> dict[str, np.ndarray]:
    """Arrays of an ``.npz`` whose key ``wanted(key)`` accepts (all when None), read one member at a time.

    Each member's declared decompressed size and array size are checked against the memory limit
    before reading (a zip bomb is refused, not decompressed); keys not wanted are never read.
    ``declared``: key -> an object with ``shape`` and ``dtype`` (None: not said) that another file,
    ``declared_by``, gives for the member; a member whose header says otherwise is refused unread.
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
            said = (declared or {}).get(key)
            expect = None if said is None else Declared(
                None if said.shape is None else tuple(said.shape), said.dtype, declared_by)
            try:
                arrays[key] = _read_member(zf, info, label, limit, expect)
            except BridgeError:
                raise
            except _ZIP_ERRORS as exc:
                raise BadInputFileError(f"{label} is unreadable: {exc}") from exc
            total += arrays[key].nbytes
            check_allocation(total, f"{what} {path} (all arrays read)", limit)
    return arrays
