"""Atomic file output: write to a temporary file beside the target, then rename over it.

A crash or a failed validation never leaves a half-written model, report or results file behind.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import onnx

from bridge.errors import BadInputFileError, SourceNotFoundError, UsageError

_PROTOBUF_LIMIT = 2**31 - 1  # a single ModelProto cannot serialise past 2 GiB


@contextlib.contextmanager
def atomic_path(target: Path) -> Iterator[Path]:
    """Yield a temp path in ``target``'s folder; on success rename it to ``target``, else delete it."""
    target = Path(target)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create output folder {target.parent}: {exc.strerror}") from exc
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def atomic_write_text(target: Path, text: str) -> None:
    with atomic_path(target) as tmp:
        tmp.write_text(text, encoding="utf-8")


def save_model(model: onnx.ModelProto, target: Path) -> None:
    """Save an ONNX model atomically; models over 2 GiB are refused with a clear message."""
    size = model.ByteSize()
    if size > _PROTOBUF_LIMIT:
        raise UsageError(
            f"the model is {size / 2**30:.1f} GiB, over protobuf's 2 GiB limit for one file; "
            "external-data output is not supported yet"
        )
    data = model.SerializeToString()
    with atomic_path(Path(target)) as tmp:
        tmp.write_bytes(data)


def load_model(path: Path | str) -> onnx.ModelProto:
    """Load an ONNX file (with external data beside it), mapping failures to user-facing errors."""
    path = Path(path)
    if not path.is_file():
        raise SourceNotFoundError(f"no such ONNX file: {path}")
    try:
        return onnx.load(str(path))
    except Exception as exc:  # protobuf DecodeError, missing external data, ...
        raise BadInputFileError(f"{path} is not a readable ONNX model: {exc}") from exc
