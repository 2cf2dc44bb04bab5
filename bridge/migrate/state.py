"""Resume state of a batch migration: per-model outcomes recorded durably as each model finishes.

A small SQLite file (``<out>/state.sqlite``) kept by the client (never by workers): one row per
model with the fingerprint of its entry and files, the outcome and the run that produced it. Every
row is committed on its own with ``synchronous=FULL``, so a ``kill -9`` of the whole run loses at
most the models still running; ``--resume`` then redoes only models with no row, or whose
fingerprint changed since (a new source file, a changed manifest entry).

The state file and SQLite's companions (``-wal``, ``-shm``, ``-journal``) are opened in place, so a symlink
or a second hard link at any of those paths is refused (exit 2 naming it): SQLite would write into the
file it leads to, e.g. another program's database.

A state file that is not a readable SQLite database of this schema (truncated, overwritten) is never
an internal error: ``open_checked`` refuses it under ``--resume`` (exit 2: there is nothing to resume
from) and, without ``--resume``, moves it aside (``state.sqlite.corrupt-<time>``) and starts fresh.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sqlite3
import time
from pathlib import Path
from typing import Any

from bridge.errors import UsageError

log = logging.getLogger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS outcomes (
    name TEXT PRIMARY KEY,
    fingerprint TEXT NOT NULL,
    run_id TEXT NOT NULL,
    finished REAL NOT NULL,
    outcome TEXT NOT NULL
)
"""


class StateStore:
    """Outcomes by model name; ``with StateStore(path) as s: s.record(...)``."""

    def __init__(self, path: Path) -> None:
        from bridge.io import refuse_link

        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        for suffix in ("", "-wal", "-shm", "-journal"):  # SQLite opens each in place: none may lead elsewhere
            refuse_link(Path(f"{self.path}{suffix}"), "the resume state")
        self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")  # fsync on every commit: durable across kill -9 / power loss
        self._db.execute(_SCHEMA)

    @classmethod
    def open_checked(cls, path: Path, *, resume: bool) -> StateStore:
        """Open ``path``; a corrupt file is a UsageError under ``resume``, else set aside for a fresh start."""
        try:
            store = cls(path)
            store.load()
            return store
        except (sqlite3.DatabaseError, ValueError) as exc:
            if resume:
                raise UsageError(f"{path} is corrupt ({exc}); nothing can be resumed from it: run again without "
                                 "--resume to start fresh (the corrupt file is then kept beside it)") from None
            aside = path.with_name(f"{path.name}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}")
            for suffix in ("", "-wal", "-shm"):
                with contextlib.suppress(OSError):
                    Path(f"{path}{suffix}").rename(f"{aside}{suffix}")
            log.warning("%s was corrupt (%s); moved to %s, starting fresh", path, exc, aside)
            return cls(path)

    def __enter__(self) -> StateStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._db.close()

    def forget(self, names: list[str]) -> None:
        """Drop the outcomes of these models (a run without --resume redoes them)."""
        self._db.executemany("DELETE FROM outcomes WHERE name = ?", [(n,) for n in names])

    def load(self) -> dict[str, tuple[str, str, dict[str, Any]]]:
        """name -> (fingerprint, run_id, outcome) of every recorded model."""
        rows = self._db.execute("SELECT name, fingerprint, run_id, outcome FROM outcomes").fetchall()
        return {name: (fp, run, json.loads(outcome)) for name, fp, run, outcome in rows}

    def record(self, name: str, fingerprint: str, run_id: str, outcome: dict[str, Any]) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO outcomes (name, fingerprint, run_id, finished, outcome) VALUES (?, ?, ?, ?, ?)",
            (name, fingerprint, run_id, time.time(), json.dumps(outcome, default=str)),
        )
