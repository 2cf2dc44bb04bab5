"""A batch migration: manifest entries -> one isolated conversion per model -> resume state + reports.

``run`` validates the manifest, reuses recorded outcomes on ``resume`` (same fingerprint only),
submits the rest to the executor, records each outcome durably as it arrives (state.sqlite, kept
here on the client), tells the monitor and the caller's callback, and writes report.json / .md /
.html at the end. The convert function is passed in by the caller (``bridge.api.migrate`` passes
``bridge.api.convert``): this package sits below ``bridge.api`` in the import order.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from bridge.migrate import outdir
from bridge.migrate.executors import make_executor
from bridge.migrate.manifest import ResolvedEntry, load_manifest, select
from bridge.migrate.progress import Monitor, NullMonitor
from bridge.migrate.report import write_reports
from bridge.migrate.results import BatchResult, ModelResult
from bridge.migrate.state import StateStore
from bridge.migrate.worker import callable_ref, model_dir

log = logging.getLogger(__name__)
STATE_FILE = "state.sqlite"
# The convert function the workers call when the caller passes none: bridge.convert, named by reference
# and imported only inside each worker child (this package sits below bridge.api; see worker.py).
DEFAULT_CONVERT: dict[str, str | None] = {"module": "bridge.conversion.delivery", "qualname": "convert", "file": None}
_TICK_S = 0.5

ManifestLike = str | Path | Mapping[str, Any] | Sequence[Mapping[str, Any]] | Sequence[ResolvedEntry]


def _entries(manifest: ManifestLike, base_dir: str | Path | None) -> tuple[list[ResolvedEntry], str]:
    if isinstance(manifest, Sequence) and not isinstance(manifest, str) and manifest \
            and all(isinstance(e, ResolvedEntry) for e in manifest):
        return list(manifest), "<entries>"  # type: ignore[arg-type]
    label = str(manifest) if isinstance(manifest, (str, Path)) else "<entries>"
    return load_manifest(manifest, base_dir), label  # type: ignore[arg-type]


def _files(out_dir: Path, name: str, outcome: dict[str, Any], key: str) -> list[str]:
    """The model folder's files bridge wrote (``key`` "written") or found there and kept ("kept"), relative to
    ``out_dir``: as the supervisor recorded them, else (an executor that failed before) by the folder's record."""
    folder = model_dir(out_dir, name)
    listed = outcome.get(key)
    if not isinstance(listed, list):
        listed = outdir.bridge_files(folder) if key == "written" else []
    hidden = key == "written"  # bridge's own dot files (its record, a task file) are not outputs; a user's are named
    return sorted(str((folder / rel).relative_to(out_dir)) for rel in listed
                  if not (hidden and Path(rel).name.startswith(".")))


def run(
    manifest: ManifestLike,
    *,
    convert: Callable[..., Any] | None = None,
    out: str | Path = "migration",
    jobs: int = 1,
    resume: bool = False,
    only: Sequence[str] | None = None,
    executor: str | Any = "local",
    on_result: Callable[[ModelResult], None] | None = None,
    monitor: Monitor | None = None,
    base_dir: str | Path | None = None,
) -> BatchResult:
    """Migrate every enabled model of ``manifest`` (see ``bridge.api.migrate`` for the parameters).

    ``convert`` is the per-model function (``bridge.convert``'s signature) the worker children import by
    reference and call; ``None`` means ``bridge.convert``. ``base_dir``: where relative paths of
    entries given as dicts start (default: the current folder; a manifest file's own folder)."""
    entries, label = _entries(manifest, base_dir)
    entries = select(entries, only)
    out_dir = outdir.prepare(out)
    with outdir.lock(out_dir):
        outdir.check_model_folders(out_dir, entries)
        return _run_locked(entries, label, out_dir, convert=convert, jobs=jobs, resume=resume, executor=executor,
                           on_result=on_result, monitor=monitor)


def _run_locked(entries: list[ResolvedEntry], label: str, out_dir: Path, *, convert: Callable[..., Any] | None,
                jobs: int, resume: bool, executor: str | Any, on_result: Callable[[ModelResult], None] | None,
                monitor: Monitor | None) -> BatchResult:
    monitor = monitor or NullMonitor()
    run_id = uuid.uuid4().hex[:12]
    started = time.perf_counter()
    results: dict[str, ModelResult] = {}
    reused: list[str] = []

    with StateStore.open_checked(out_dir / STATE_FILE, resume=resume) as state:
        if not resume:  # only the models of this run: --only leaves the others' outcomes alone
            state.forget([e.name for e in entries])
        recorded = state.load()
        todo: list[tuple[ResolvedEntry, str]] = []
        for entry in entries:
            if entry.disabled:
                results[entry.name] = ModelResult.disabled(entry.to_dict())
                continue
            fingerprint = entry.fingerprint()
            previous = recorded.get(entry.name)
            if resume and previous is not None and previous[0] == fingerprint \
                    and not outdir.missing_outputs(out_dir, previous[2]):  # the files, not only the record
                results[entry.name] = ModelResult.from_dict(previous[2])
                reused.append(entry.name)
            else:
                todo.append((entry, fingerprint))

        pool = make_executor(executor, jobs) if todo else None
        exec_name = pool.name if pool is not None else str(executor)
        monitor.start(len(todo), len(reused), exec_name)
        done: queue.Queue[tuple[ResolvedEntry, str, Any]] = queue.Queue()
        try:
            ref = callable_ref(convert) if convert is not None else DEFAULT_CONVERT
            for entry, fingerprint in todo:
                task = {"entry": entry.to_dict(), "out_dir": str(out_dir), "convert": ref, "run_id": run_id}
                assert pool is not None
                future = pool.submit_task(task)
                future.add_done_callback(_notify(done, entry, fingerprint))
            pending = len(todo)
            while pending:
                try:
                    entry, fingerprint, future = done.get(timeout=_TICK_S)
                except queue.Empty:
                    if pool is not None:
                        running = pool.running()
                        monitor.tick(running, max(pending - len(running), 0))
                    continue
                pending -= 1
                result = _collect(entry, future, out_dir)
                state.record(entry.name, fingerprint, run_id, result.to_dict())
                results[entry.name] = result
                monitor.finished(result)
                if on_result is not None:
                    on_result(result)
        finally:
            monitor.stop()
            if pool is not None:
                pool.shutdown()

    batch = BatchResult(
        models=[results[e.name] for e in entries], out_dir=str(out_dir),
        run={"manifest": label, "executor": exec_name, "jobs": jobs, "wall_s": time.perf_counter() - started,
             "reused": reused, "run_id": run_id},
    )
    write_reports(batch, out_dir)
    return batch


def _notify(done: queue.Queue[tuple[ResolvedEntry, str, Any]], entry: ResolvedEntry,
            fingerprint: str) -> Callable[[Any], None]:
    """A done-callback (run in an executor thread) that hands the finished future to the main loop."""
    return lambda future: done.put((entry, fingerprint, future))


def _collect(entry: ResolvedEntry, future: Any, out_dir: Path) -> ModelResult:
    """The model's result from its future; an executor failure (a lost Dask worker, ...) fails that model."""
    try:
        outcome = future.result()
    except Exception as exc:
        outcome = {"name": entry.name, "status": "failed", "kind": "internal",
                   "reason": f"executor error {type(exc).__name__}: {exc}", "conversion": None}
        with contextlib.suppress(Exception):
            log.debug("executor error for %s", entry.name, exc_info=exc)
    return ModelResult.from_outcome(entry.to_dict(), outcome, _files(out_dir, entry.name, outcome, "written"),
                                    kept=_files(out_dir, entry.name, outcome, "kept"))
