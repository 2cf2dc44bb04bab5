"""A batch migration: manifest entries -> one isolated conversion per model -> resume state + reports.

``run`` validates the manifest, reuses recorded outcomes on ``resume`` (same fingerprint only),
submits the rest to the executor, records each outcome durably as it arrives (state.sqlite, kept
here on the client), tells the monitor and the caller's callback, and writes report.json / .md /
.html at the end. The convert function is passed in by the caller (``bridge.api.migrate`` passes
``bridge.api.convert``): this package sits below ``bridge.api`` in the import order.

A model whose ``dataset:`` is larger than its ``shard_size`` runs in parts on the same executor
(``bridge.migrate.shards``): its conversion, then one task per shard of its dataset, then the merge here; it is
recorded (and counted as finished) once merged.
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

from bridge.migrate import outdir, shards
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
        done: queue.Queue[tuple[ResolvedEntry, str, Any, Any]] = queue.Queue()
        sharded: dict[str, _Sharded] = {}
        ref = callable_ref(convert) if convert is not None else DEFAULT_CONVERT

        def submit(entry: ResolvedEntry, fingerprint: str, task: dict[str, Any], part: Any) -> None:
            assert pool is not None
            pool.submit_task(task).add_done_callback(_notify(done, entry, fingerprint, part))

        def start_shards(entry: ResolvedEntry, fingerprint: str, outcome: dict[str, Any]) -> None:
            job = sharded[entry.name]
            job.outcome = outcome
            digest = shards.written_digest(outcome, out_dir)
            for start, stop in job.ranges:
                key = shards.shard_key(fingerprint, digest, start, stop)
                if shards.saved_shard(shards.shard_path(out_dir, entry.name, start, stop), key):
                    job.reused += 1  # saved by an earlier, interrupted run
                    continue
                job.waiting += 1
                submit(entry, fingerprint, shards.shard_task(entry.to_dict(), out_dir, run_id, start, stop, key),
                       ("shard", start, stop))

        def finish(entry: ResolvedEntry, fingerprint: str, outcome: dict[str, Any]) -> None:
            result = ModelResult.from_outcome(entry.to_dict(), outcome, _files(out_dir, entry.name, outcome, "written"),
                                              kept=_files(out_dir, entry.name, outcome, "kept"))
            state.record(entry.name, fingerprint, run_id, result.to_dict())
            results[entry.name] = result
            monitor.finished(result)
            if on_result is not None:
                on_result(result)

        try:
            for entry, fingerprint in todo:
                task: dict[str, Any] = {"entry": entry.to_dict(), "out_dir": str(out_dir), "convert": ref,
                                        "run_id": run_id}
                ranges = shards.plan(task["entry"])
                if ranges is None:
                    submit(entry, fingerprint, task, None)
                    continue
                sharded[entry.name] = _Sharded(ranges)
                converted = shards.recorded_convert(out_dir, entry.name, fingerprint) if resume else None
                if converted is None:
                    shards.clear(out_dir, entry.name)  # a fresh conversion: no shard of an earlier one counts
                    submit(entry, fingerprint, {**task, "dataset_deferred": True}, "convert")
                else:  # converted by an interrupted run: only its missing shards run
                    start_shards(entry, fingerprint, converted)
            pending = len(todo)
            for entry, fingerprint in todo:  # a resumed model whose shards were all saved: merge now
                job = sharded.get(entry.name)
                if job is not None and job.outcome is not None and not job.waiting:
                    finish(entry, fingerprint, job.merged(entry, out_dir))
                    pending -= 1
            while pending:
                try:
                    entry, fingerprint, part, future = done.get(timeout=_TICK_S)
                except queue.Empty:
                    if pool is not None:
                        running = pool.running()
                        monitor.tick(running, max(pending - len(running), 0))
                    continue
                outcome = _outcome(entry, future)
                job = sharded.get(entry.name)
                if part is None or job is None:
                    finish(entry, fingerprint, outcome)
                elif part == "convert":
                    if outcome.get("status") != "passed":
                        finish(entry, fingerprint, outcome)  # no dataset run for a model that did not convert
                    else:
                        shards.record_convert(out_dir, entry.name, fingerprint, outcome)
                        start_shards(entry, fingerprint, outcome)
                        if job.waiting:
                            continue
                        finish(entry, fingerprint, job.merged(entry, out_dir))
                else:
                    job.waiting -= 1
                    job.add(outcome)
                    if job.waiting:
                        continue
                    finish(entry, fingerprint, job.merged(entry, out_dir))
                pending -= 1
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


class _Sharded:
    """A model whose dataset runs in shards (``bridge.migrate.shards``): its ranges, its conversion's outcome,
    the shards still running, and the first shard that failed."""

    def __init__(self, ranges: list[tuple[int, int]]) -> None:
        self.ranges = ranges
        self.outcome: dict[str, Any] | None = None
        self.waiting = 0
        self.reused = 0
        self.failure: dict[str, Any] | None = None
        self.elapsed = 0.0
        self.peak = 0.0

    def add(self, shard: dict[str, Any]) -> None:
        self.elapsed += float(shard.get("elapsed_s") or 0.0)
        self.peak = max(self.peak, float(shard.get("peak_memory_mb") or 0.0))
        if shard.get("status") != "passed" and self.failure is None:
            self.failure = shard

    def merged(self, entry: ResolvedEntry, out_dir: Path) -> dict[str, Any]:
        """The model's outcome: its conversion's with the shards' merged dataset run, or the failed shard's."""
        assert self.outcome is not None
        outcome = dict(self.outcome)
        if self.failure is not None:
            outcome.update(status="failed", kind=self.failure.get("kind") or "crash", reason=self.failure.get("reason"))
        else:
            try:
                outcome = shards.merge_into(outcome, entry.to_dict(), out_dir, self.ranges)
            except Exception as exc:  # a bug merging: the model fails with it, the batch goes on
                log.debug("merging the dataset shards of %s", entry.name, exc_info=exc)
                outcome.update(status="failed", kind="internal",
                               reason=f"merging the dataset shards: {type(exc).__name__}: {exc}")
        outcome["elapsed_s"] = float(outcome.get("elapsed_s") or 0.0) + self.elapsed
        outcome["peak_memory_mb"] = max(float(outcome.get("peak_memory_mb") or 0.0), self.peak) or None
        return outcome


def _notify(done: queue.Queue[tuple[ResolvedEntry, str, Any, Any]], entry: ResolvedEntry, fingerprint: str,
            part: Any) -> Callable[[Any], None]:
    """A done-callback (run in an executor thread) that hands the finished future to the main loop."""
    return lambda future: done.put((entry, fingerprint, part, future))


def _outcome(entry: ResolvedEntry, future: Any) -> dict[str, Any]:
    """The outcome a future holds; an executor failure (a lost Dask worker, ...) fails that model."""
    try:
        return dict(future.result())
    except Exception as exc:
        with contextlib.suppress(Exception):
            log.debug("executor error for %s", entry.name, exc_info=exc)
        return {"name": entry.name, "status": "failed", "kind": "internal",
                "reason": f"executor error {type(exc).__name__}: {exc}", "conversion": None}
