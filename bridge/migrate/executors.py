"""Where batch-migration work runs: a ``concurrent.futures``-style executor chosen by a spec string.

``local`` is a thread pool of N supervisors in this process, each supervising one child interpreter
per model (``worker.run_isolated``); ``dask://HOST:PORT`` submits the same function to a Dask
distributed scheduler, whose workers (with the same bridge install, and ``--out`` on a filesystem
they share with the client) start the child processes. Anything with ``submit(fn, *args)`` returning
futures with ``add_done_callback`` and ``result()`` works (a ``distributed.Client`` included).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, cast

from bridge.errors import AdapterUnavailableError, UsageError


class FutureLike(Protocol):
    def result(self, timeout: float | None = None) -> Any: ...

    def add_done_callback(self, fn: Callable[[Any], Any]) -> Any: ...


class BatchExecutor(Protocol):
    """What ``bridge.migrate.run`` needs: submit a task, see what runs where, shut down."""

    name: str

    def submit_task(self, task: dict[str, Any]) -> FutureLike: ...

    def running(self) -> dict[str, str]:
        """worker label -> name of the model it runs now (best effort)."""
        ...

    def shutdown(self) -> None: ...


class LocalExecutor:
    """N threads in this process, each supervising one model's child process at a time."""

    def __init__(self, jobs: int) -> None:
        if jobs < 1:
            raise UsageError(f"-j {jobs}: need at least one worker")
        self.name = f"local (-j {jobs})"
        self._pool = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="worker")
        self._running: dict[str, str] = {}
        self._lock = threading.Lock()

    def submit_task(self, task: dict[str, Any]) -> FutureLike:
        from bridge.migrate.worker import run_isolated

        def job() -> dict[str, Any]:
            slot = threading.current_thread().name.replace("worker_", "worker ")
            try:
                return run_isolated(task, on_start=lambda name: self._set(slot, name))
            finally:
                self._set(slot, None)

        return self._pool.submit(job)

    def _set(self, slot: str, name: str | None) -> None:
        with self._lock:
            if name is None:
                self._running.pop(slot, None)
            else:
                self._running[slot] = name

    def running(self) -> dict[str, str]:
        with self._lock:
            return dict(sorted(self._running.items()))

    def shutdown(self) -> None:
        from bridge.migrate.worker import kill_children

        self._pool.shutdown(wait=False, cancel_futures=True)
        kill_children()


class DaskExecutor:
    """Tasks go to a Dask distributed scheduler; each runs ``run_isolated`` on a worker."""

    def __init__(self, address: str, client: Any = None) -> None:
        try:
            from distributed import Client
        except ImportError:
            raise AdapterUnavailableError("Dask distributed", "--executor dask://", "pip install 'bridge[distributed]'") from None
        self._own = client is None
        try:
            self.client = client if client is not None else Client(address, timeout="20s")
        except OSError as exc:
            raise UsageError(f"--executor dask://: cannot reach the Dask scheduler at {address}: {exc}") from None
        self.name = f"dask ({self.client.scheduler.address})"
        self._names: dict[str, str] = {}

    def submit_task(self, task: dict[str, Any]) -> FutureLike:
        from bridge.migrate.worker import run_isolated

        name = task.get("label") or task["entry"]["name"]
        part = f"-{task['shard']['start']}" if task.get("shard") else ""  # a dataset shard: its own key
        future = self.client.submit(run_isolated, task, pure=False,
                                    key=f"bridge-migrate-{task['entry']['name']}{part}-{task['run_id']}")
        self._names[str(future.key)] = name
        return future  # type: ignore[no-any-return]

    def running(self) -> dict[str, str]:
        try:
            processing = self.client.processing()
        except Exception:  # the scheduler went away: the futures will say so
            return {}
        return {worker.rsplit(":", 1)[-1]: self._names.get(str(keys[0]), str(keys[0]))
                for worker, keys in sorted(processing.items()) if keys}

    def shutdown(self) -> None:
        if self._own:
            self.client.close()


def check_address(given: str, url: str) -> str:
    """``url`` (tcp:// or tls://) when it names a host and a port 1-65535; UsageError naming ``given``."""
    from urllib.parse import urlsplit

    shown = given[:200]
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError as exc:  # "[::1" (unclosed IPv6), "localhost:notaport", a port over 65535
        raise UsageError(f"--executor {shown}: not a scheduler address ({exc}); use dask://HOST:PORT") from None
    if parts.scheme not in ("tcp", "tls") or not host or port is None or not 0 < port < 65536:
        raise UsageError(f"--executor {shown}: give the scheduler's host and port, e.g. dask://localhost:8786")
    return url


def make_executor(spec: str | Any, jobs: int = 1) -> BatchExecutor:
    """``local`` -> LocalExecutor(jobs); ``dask://HOST:PORT`` or ``tcp://...`` -> DaskExecutor; a
    ``distributed.Client`` -> DaskExecutor on it; a BatchExecutor is used as it is."""
    if hasattr(spec, "submit_task"):
        return cast(BatchExecutor, spec)
    if type(spec).__name__ == "Client" and hasattr(spec, "scheduler"):
        return DaskExecutor("", client=spec)
    if not isinstance(spec, str):
        raise UsageError(f"executor {spec!r}: use 'local', 'dask://HOST:PORT' or a distributed.Client")
    if spec == "local":
        return LocalExecutor(jobs)
    if spec.startswith("dask://"):
        rest = spec.removeprefix("dask://")
        return DaskExecutor(check_address(spec, rest if "://" in rest else f"tcp://{rest}"))
    if spec.startswith(("tcp://", "tls://")):
        return DaskExecutor(check_address(spec, spec))
    raise UsageError(f"--executor {spec}: use 'local' or 'dask://HOST:PORT'")
