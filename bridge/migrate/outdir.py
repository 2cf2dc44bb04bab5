"""The ``--out`` folder of a batch migration, guarded: bridge only ever writes, replaces or removes what it
wrote itself there, and one run at a time uses it.

* ``--out`` must be a writable folder (not a file, not under ``/proc``, not read-only): a UsageError
  naming it, before any model starts.
* ``lock(out)``: an exclusive ``flock`` on ``<out>/.bridge-migrate.lock`` for the whole run; a second
  run on the same folder exits 2 naming the holder (pid, host, start time). The kernel drops the lock
  when its holder dies, so a ``kill -9`` never leaves a stale lock.
* No file under ``--out`` is written through a link: the lock and ``state.sqlite`` (opened in place) are
  refused when a symlink or a second hard link sits at their path (``refuse_link``), everything else is
  written to a temp file and renamed over its path (``bridge.io.atomic_path``: the rename replaces a
  planted link, never its target) or created after the link is removed (``create_nofollow``).
* ``check_model_folders``: a model folder must be one a migration wrote (it holds ``MARKER``), or be
  absent or empty; a folder holding anything else (a source model that lives there, another tool's files)
  and any symlink on the way (``models`` or ``models/<name>``: files would land outside ``--out``) are
  refused, as is a model whose source, weights or feeds lie inside its own model folder.
* ``MARKER`` is the folder's record of what bridge wrote there (``FolderRecord``): before a model runs
  again only the files it lists are removed (``clear_model_folder``); a file a user put in the folder
  since stays, and the report names it. A run killed half way has recorded the files that were there
  before it started, so its leftovers are still told apart from the user's.
* ``missing_outputs``: on ``--resume`` a recorded pass counts only while its files are still on disk.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import stat
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from bridge.errors import UsageError

MARKER = ".bridge-migrate"  # in every model folder a migration wrote: the record of the files it wrote there
SHARDS = ".dataset"  # a model folder's dataset shards (bridge.migrate.shards keeps them): never a user's file
LOCK = ".bridge-migrate.lock"
RECORD_FORMAT = "bridge.migrate-folder/1"


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
        fd, probe = tempfile.mkstemp(prefix=".bridge-write-test-", dir=resolved)  # O_EXCL: never through a link
        os.close(fd)
        os.unlink(probe)
    except UsageError:
        raise
    except (OSError, RuntimeError) as exc:
        raise UsageError(f"--out {out}: cannot write there ({getattr(exc, 'strerror', None) or exc})") from None
    return resolved


@contextlib.contextmanager
def lock(out_dir: Path) -> Iterator[None]:
    """Hold ``<out>/.bridge-migrate.lock`` for the block; UsageError when another run holds it."""
    from bridge.io import refuse_link

    path = out_dir / LOCK
    refuse_link(path, f"--out {out_dir}: its lock file")
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # a link planted between the check and the open
            refuse_link(path, f"--out {out_dir}: its lock file")
        raise UsageError(f"--out {out_dir}: cannot create its lock file ({exc.strerror})") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode) or os.fstat(fd).st_nlink > 1:
            refuse_link(path, f"--out {out_dir}: its lock file")
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


# ------------------------------------------------------------------------- the record of a model folder
# MARKER holds JSON: {"format": RECORD_FORMAT, "complete": bool, "written": [paths], "before": {path: stamp}},
# paths relative to the model folder. "before" lists the files that were in the folder when bridge started
# writing there (a user's, left alone), "written" what bridge wrote once the model's run ended ("complete").

Stamp = tuple[int, int, int]  # inode, size, mtime (ns): a file replaced or rewritten gets a new stamp


def folder_files(folder: Path) -> dict[str, Stamp]:
    """Every file (and link) under ``folder`` but the record itself -> its stamp; links are not followed."""
    found: dict[str, Stamp] = {}
    for root, dirs, files in os.walk(folder):  # followlinks=False: a link to a folder is one entry, not walked
        if root == str(folder) and SHARDS in dirs and not os.path.islink(os.path.join(root, SHARDS)):
            dirs.remove(SHARDS)  # the shards' own folder, cleared by bridge.migrate.shards, not by this record
        for name in files + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            path = os.path.join(root, name)
            rel = os.path.relpath(path, folder)
            if rel == MARKER:
                continue
            with contextlib.suppress(OSError):
                st = os.lstat(path)
                found[rel] = (st.st_ino, st.st_size, st.st_mtime_ns)
    return found


def _read_record(folder: Path) -> dict[str, Any]:
    """The folder's record; {} for none, or the empty marker of a bridge from before records."""
    try:  # not through a link, never blocking on a FIFO planted there
        fd = os.open(folder / MARKER, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return {}
            text = fh.read(10_000_000).decode("utf-8")
        record = json.loads(text) if text.strip() else {}
    except (OSError, ValueError, RecursionError):
        return {}
    return record if isinstance(record, dict) and record.get("format") == RECORD_FORMAT else {}


def _write_record(folder: Path, record: dict[str, Any]) -> None:
    from bridge.io import atomic_write_text  # here: the worker child imports this module before numpy

    atomic_write_text(folder / MARKER, json.dumps({"format": RECORD_FORMAT, **record}))


def _inside(folder: Path, rel: str) -> Path | None:
    """``folder/rel`` when ``rel`` is a plain relative path whose folders are real folders under ``folder``
    (a record is a file on disk: one naming ``../x`` or reaching through a link must not remove anything)."""
    parts = Path(rel).parts
    if not parts or Path(rel).is_absolute() or any(p in ("..", ".", "") for p in parts):
        return None
    here = folder
    for part in parts[:-1]:
        here = here / part
        if here.is_symlink() or not here.is_dir():
            return None
    return folder / rel


def bridge_files(folder: Path) -> list[str]:
    """The files under ``folder`` that bridge wrote, by its record: those it listed when the run ended, or,
    for a run that never ended (killed), everything not there unchanged since before it started. A folder
    without a record (or with an older bridge's empty marker) has none: nothing there is removed."""
    record = _read_record(folder)
    now = folder_files(folder)
    if record.get("complete") and isinstance(record.get("written"), list):
        return sorted(str(p) for p in record["written"] if isinstance(p, str) and p in now)
    before = record.get("before")
    if isinstance(before, dict):
        return sorted(rel for rel, st in now.items() if tuple(before.get(rel) or ()) != st)
    return []


def clear_model_folder(folder: Path) -> dict[str, Stamp]:
    """Remove what bridge wrote in ``folder`` before a model runs there again, and start the folder's record
    (nothing written yet, the files found there kept). Returns those files: they are not bridge's."""
    folder.mkdir(parents=True, exist_ok=True)
    emptied: set[Path] = set()
    for rel in bridge_files(folder):
        path = _inside(folder, rel)
        if path is None:
            continue
        with contextlib.suppress(FileNotFoundError):
            if path.is_dir() and not path.is_symlink():
                continue  # records list files; a folder goes only once it is empty
            os.unlink(path)  # a link is removed itself, never what it points to
            emptied.add(path.parent)
    for parent in sorted(emptied, key=lambda p: -len(p.parts)):  # the folders those files leave empty
        while parent != folder and parent.is_dir() and not parent.is_symlink() and not any(parent.iterdir()):
            parent.rmdir()
            parent = parent.parent
    kept = folder_files(folder)
    _write_record(folder, {"complete": False, "written": [], "before": kept})
    return kept


def record_written(folder: Path, before: dict[str, Stamp]) -> tuple[list[str], list[str]]:
    """Close the folder's record once the model's run ended: every file new or changed since ``before`` is
    bridge's. Returns (written, kept): bridge's files and the others found in the folder."""
    now = folder_files(folder)
    written = sorted(rel for rel, st in now.items() if before.get(rel) != st)
    kept = sorted(rel for rel in now if rel not in written)
    _write_record(folder, {"complete": True, "written": written, "before": {k: now[k] for k in kept}})
    return written, kept


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
