"""What ``bridge bench`` runs next to each runtime, inside its child process.

Timing through the pipe would measure pickling the inputs and outputs, not the runtime, so the loops run
where the runtime lives (``IsolatedRuntime.call``): the inputs of a batch size are sent once
(``stage``, which also times the first run at that size: graph compilation, kernel selection, shape
specialisation), then each round asks for N timed calls (``timed``) and gets their seconds back.
``limited`` wraps a runtime factory so the child sees ``--threads`` before any framework is imported:
the thread-count variables the common CPU runtimes read, the child pinned to that many CPUs, and the
runtime's own ``set_threads(n)`` when it has one (an optional part of the Runtime protocol).
Every function is module-level so it pickles by name; each takes the runtime first.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from bridge.bench.timing import peak_rss_bytes, time_calls
from bridge.errors import AdapterUnavailableError
from bridge.runtimes.base import Runtime
from bridge.runtimes.isolated import in_isolated_child

# the variables OpenMP, MKL, OpenBLAS, MXNet, TensorFlow and PyTorch size their CPU thread pools from
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MXNET_CPU_WORKER_NTHREADS",
                    "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS")

# inputs staged per (runtime, batch size); lives in the child (or in-process, keyed by the runtime's id)
_STAGED: dict[tuple[int, int], Mapping[str, np.ndarray]] = {}


def limited(threads: int | None, name: str, factory: Callable[[], Runtime]) -> Runtime:
    """``factory()``'s runtime, built with ``threads`` CPU threads when running in a child process (the
    parent's environment is never changed); a missing framework becomes AdapterUnavailableError."""
    if threads and in_isolated_child():
        for var in THREAD_VARIABLES:
            os.environ[var] = str(threads)
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # idle pools sleep instead of stealing the cores
        if hasattr(os, "sched_setaffinity"):
            cpus = sorted(os.sched_getaffinity(0))
            os.sched_setaffinity(0, cpus[:threads])
    try:
        runtime = factory()
    except ImportError as exc:  # a runtime module importing its framework at the top
        raise AdapterUnavailableError(name, f"benchmarking in {name}", f"the package that provides "
                                      f"'{exc.name or exc}'") from exc
    configure = getattr(runtime, "set_threads", None)  # optional: runtimes that size their own pools
    if threads and callable(configure):
        configure(threads)
    return runtime


def stage(runtime: Runtime, argument: tuple[int, Mapping[str, np.ndarray]]) -> dict[str, Any]:
    """Keep ``feeds`` for batch size ``batch`` and run them once: the first run's seconds and output shapes."""
    batch, feeds = argument
    _STAGED[(id(runtime), batch)] = feeds
    start = time.perf_counter()
    outputs = runtime.infer(feeds)
    first = time.perf_counter() - start
    return {"first_run_s": first, "outputs": {k: list(np.shape(v)) for k, v in outputs.items()}}


def warm(runtime: Runtime, argument: tuple[int, int]) -> None:
    """``calls`` untimed runs on the staged inputs of ``batch``."""
    batch, calls = argument
    feeds = _STAGED[(id(runtime), batch)]
    for _ in range(calls):
        runtime.infer(feeds)


def timed(runtime: Runtime, argument: tuple[int, int | None, float | None]) -> list[float]:
    """Seconds per call of ``calls`` runs (or of as many as fit in ``seconds``) on the staged inputs."""
    batch, calls, seconds = argument
    feeds = _STAGED[(id(runtime), batch)]
    return time_calls(lambda: runtime.infer(feeds), calls=calls, seconds=seconds)


def peak_memory(runtime: Runtime, argument: Any = None) -> int:
    """Peak resident memory of the process the runtime lives in, in bytes."""
    return peak_rss_bytes()


def release(runtime: Runtime, argument: Any = None) -> None:
    """Forget every staged input of ``runtime``."""
    for key in [k for k in _STAGED if k[0] == id(runtime)]:
        del _STAGED[key]
