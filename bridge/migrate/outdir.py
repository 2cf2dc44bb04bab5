"""The ``--out`` folder of a batch migration, guarded: bridge only ever writes, replaces or removes what it
wrote itself there, and one run at a time uses it.

* ``--out`` must be a writable folder (not a file, not under ``/proc``, not read-only): a UsageError
  naming it, before any model starts.
* ``lock(out)``: an exclusive ``flock`` on ``<out>/.bridge-migrate.lock`` for the whole run; a second
  run on the same folder exits 2 naming the holder (pid, host, start time). The kernel drops the lock
  when its holder dies, so a ``kill -9`` never leaves a stale lock.
* ``check_model_folders``: each worker clears ``<out>/models/<name>/`` before the model starts, so that
  folder must be one a migration wrote (it holds ``MARKER``), or be absent or empty; a folder holding
  anything else (a source model that lives there, another tool's files) and any symlink on the way
  (``models`` or ``models/<name>``: files would land outside ``--out``) are refused, as is a model
  whose source, weights or feeds lie inside its own model folder.
* ``missing_outputs``: on ``--resume`` a recorded pass counts only while its files are still on disk.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from bridge.errors import UsageError

MARKER = ".bridge-migrate"  # in every model folder a migration wrote
LOCK = ".bridge-migrate.lock"


def prepare(out: str | Path) -> Path:
    """``out`` as an existing writable folder (created if needed); UsageError naming it otherwise."""
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise UsageError(f"--out {out}: is a file, not a folder")
    try:
        resolved = path.resolve()
        if resolved.parts[:2] in (("/", "proc"), ("/", "sys"), ("/", "dev")):
            raise UsageError(f"--out {out}: under {'/'.join(resolved.parts[:2])[1:]}, not a place for results")
        resolved.mkdir(parents=True, exist_ok=True)
        probe = resolved / f".bridge-write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except UsageError:
        raise
    except (OSError, RuntimeError) as exc:
        raise UsageError(f"--out {out}: cannot write there ({getattr(exc, 'strerror', None) or exc})") from None
    return resolved


@contextlib.contextmanager
def lock(out_dir: Path) -> Iterator[None]:
    """Hold ``<out>/.bridge-migrate.lock`` for the block; UsageError when another run holds it."""
    path = out_dir / LOCK
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise UsageError(f"--out {out_dir}: cannot create its lock file ({exc.strerror})") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = _holder(path)
            raise UsageError(f"--out {out_dir} is in use by another bridge migrate ({holder}); wait for it to "
                             "finish or choose another --out") from None
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                 "started": time.strftime("%Y-%m-%d %H:%M:%S")}).encode())
        yield
    finally:
        os.close(fd)  # closing drops the flock


def _holder(path: Path) -> str:
    try:
        info = json.loads(path.read_text(encoding="utf-8")[:1000])
        return f"pid {int(info['pid'])} on {str(info['host'])[:100]}, started {str(info['started'])[:40]}"
    except (OSError, ValueError, KeyError, TypeError):
        return f"lock file {path}"


def check_model_folders(out_dir: Path, entries: Sequence[Any]) -> None:
    """UsageError for a model folder bridge would clear that it did not write, or that leads outside."""
    models = out_dir / "models"
    if models.is_symlink():
        raise UsageError(f"--out {out_dir}: models/ is a symlink; bridge writes only inside --out")
    for entry in entries:
        folder = models / entry.name
        if folder.is_symlink():
            raise UsageError(f"--out {out_dir}: models/{entry.name} is a symlink; bridge writes only inside --out")
        inside = [str(f) for f in _entry_paths(entry) if _is_within(f, folder)]
        if inside:
            raise UsageError(f"model '{entry.name}': {inside[0]} is inside its output folder {folder}, which is "
                             "cleared before the model runs; choose another --out")
        if folder.is_dir() and not (folder / MARKER).exists() and any(folder.iterdir()):
            raise UsageError(f"--out {out_dir}: models/{entry.name} holds files bridge did not write; it would be "
                             "cleared before the model runs, so choose another --out (or remove it yourself)")


def mark(out_dir: Path, name: str) -> None:
    """Note that ``<out>/models/<name>`` was written by a migration (so a later run may clear it)."""
    folder = out_dir / "models" / name
    if folder.is_dir() and not folder.is_symlink():
        (folder / MARKER).touch()


def missing_outputs(out_dir: Path, outcome: dict[str, Any]) -> list[str]:
    """The recorded output files of a model that are no longer on disk (relative to ``out_dir``)."""
    files = [*(outcome.get("outputs") or {}).values()]
    return [f for f in files if isinstance(f, str) and not (out_dir / f).exists()]


def _entry_paths(entry: Any) -> list[Path]:
    try:
        return [Path(p) for p in entry.files()]
    except Exception:  # a source that is not a path (module:factory)
        return [Path(p) for p in (getattr(entry, "source", None), getattr(entry, "weights", None)) if p]


def _is_within(path: Path, folder: Path) -> bool:
    try:
        path.resolve().relative_to(folder.resolve())
    except (ValueError, OSError, RuntimeError):
        return False
    return True
