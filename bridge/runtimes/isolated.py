"""Any Runtime (or any one function call), run in a child process with a time limit and a memory limit.

A framework reference (MXNet, PyTorch, TensorFlow) or a candidate runtime can die on a hostile or
broken model in native code: MXNet segfaults on ``num_group=0``, onnxruntime on a ConvTranspose with
``group=0``, a pad of 1e9 allocates until the OOM killer comes, a Loop with a huge trip count spins. In-
process that takes bridge (and a batch migration) down with no message. ``IsolatedRuntime`` keeps the
Runtime protocol and moves the work into a child: the child builds the runtime from a picklable
*factory* (so the parent never imports the framework), then serves ``activate`` / ``input_metadata`` /
``infer`` / ``deactivate`` over a pipe. ``call_isolated`` runs one picklable function the same way (a
whole ``debug`` or ``shapes fix`` under the same limits). A child that dies by a signal, exceeds
``timeout`` or runs out of its address-space limit (``max_memory``, ``RLIMIT_AS``) becomes a
``RuntimeCrashedError`` naming the stage and the cause; exceptions raised in the child come back as the
same ``BridgeError`` type (anything else becomes a ``RuntimeCrashedError`` with the original type and
message).

Children are fresh interpreters (``python -c`` running ``_child_main``), not ``multiprocessing``
processes: multiprocessing's spawn and forkserver start methods re-import the caller's ``__main__``,
which runs a flat user script's top level a second time, fails for code read from stdin and refuses to
start inside a daemonic (Dask) worker. A fresh interpreter imports only bridge and what the factory
names. It gets the parent's explicit ``sys.path`` entries but never the working directory (``-P``,
``child_sys_path``: a ``json.py`` in the folder bridge runs from is not imported), its stdout goes to the
parent's stderr (a framework's prints never mix into bridge's own output), and it dies with its parent: ``PR_SET_PDEATHSIG`` on Linux plus a
watchdog thread that exits when the parent pid changes, so ``kill -9`` of bridge leaves nothing running.

A child that ran one call can be kept (``call_isolated(..., keep=worker)``) and then serve a later
``IsolatedRuntime`` (``isolate(..., worker=worker)``): the framework export child becomes the framework
reference, so the framework (torch: ~2 s to import on a quiet machine, more under load) is imported once
per conversion instead of twice. The kept child frees what the call left (a cycle collection and glibc's
``malloc_trim``) before it waits; the process that reruns a factory there must give it the state a fresh
interpreter would (the PyTorch adapter restores the random generators' state, see
``adapters.pytorch.loading``). A kept child nobody takes is stopped by ``KeptWorker.close``.

The child first answers a handshake; a child that cannot start (bridge not importable there, a
factory that cannot be rebuilt in a fresh interpreter) is ``WorkerStartError``, bridge's own failure,
never reported as the model crashing.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import multiprocessing.connection
import os
import pickle
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

from bridge.errors import BridgeError, BridgeInternalError, RuntimeCrashedError, UsageError
from bridge.runtimes.base import Runtime, TensorMeta

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 600.0
MAX_TIMEOUT_S = 7 * 24 * 3600.0  # a week: past that a limit is a typo (1e308), and poll() overflows
STARTUP_TIMEOUT_S = 300.0  # a fresh interpreter importing numpy, onnx and bridge on a loaded machine
_PATH_ENV = "BRIDGE_WORKER_SYS_PATH"
# The child's program: the parent's sys.path first, then the worker loop (``-c``: nothing of the
# parent's __main__ is imported, and the worker module is not run as __main__ a second time).
_CHILD = ("import json, os, sys; p = json.loads(os.environ.pop('" + _PATH_ENV + "', '[]')); "
          "sys.path[:0] = [e for e in p if e not in sys.path]; "
          "from bridge.runtimes.isolated import _child_main; _child_main(int(sys.argv[1]), int(sys.argv[2]), "
          "sys.argv[3] == '1')")
_R = TypeVar("_R")


# ``python -c`` puts the working directory first on sys.path: a json.py or queue.py there would be imported in
# place of the standard library's. ``-P`` (safe_path, Python 3.11) leaves it out and keeps PYTHONPATH (``-I``
# would drop PYTHONPATH, which worktrees and users' environments rely on).
SAFE_PATH = ("-P",)


def child_sys_path() -> list[str]:
    """This process's sys.path for a child: every explicit entry (relative ones made absolute here, where they
    mean what they meant to this process), never the working directory's implicit ``''``."""
    return [os.path.abspath(p) for p in sys.path if isinstance(p, str) and p]


class WorkerStartError(BridgeInternalError):
    """bridge could not start its own child process (not the model's fault)."""


def check_timeout(value: float | None, option: str = "--timeout") -> float | None:
    """``value`` as a usable time limit in seconds (None = no limit); UsageError for nan, <= 0 or absurd."""
    if value is None:
        return None
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise UsageError(f"{option} {value!r}: expected a number of seconds") from None
    if math.isnan(seconds) or seconds <= 0:
        raise UsageError(f"{option} {value}: must be a positive number of seconds")
    if seconds > MAX_TIMEOUT_S:
        raise UsageError(f"{option} {value}: at most {MAX_TIMEOUT_S:g} s (a week); leave it out for the default")
    return seconds


class _Child:
    """One worker interpreter and the connection to it."""

    def __init__(self, payload: bytes, *, name: str, stage: str, max_memory: int | None) -> None:
        self.stage = stage
        self.max_memory = max_memory
        ours, theirs = socket.socketpair()
        # the child's temporary files (TensorFlow's autograph modules, exporters' scratch) go into a folder
        # this process removes in stop(): a child is always ended by kill, so its own atexit cleanup never runs
        self.tmpdir = tempfile.mkdtemp(prefix="bridge-child-")
        env = {**os.environ, _PATH_ENV: json.dumps(child_sys_path()), "TMPDIR": self.tmpdir}
        main_thread = threading.current_thread() is threading.main_thread()
        try:
            self.process = subprocess.Popen(
                # the stage last: unused by the child, it names the process in ps and top ("the torch reference")
                [sys.executable, *SAFE_PATH, "-c", _CHILD, str(theirs.fileno()), str(os.getpid()),
                 "1" if main_thread else "0", stage],
                stdin=subprocess.DEVNULL, stdout=_stderr_fd(), pass_fds=(theirs.fileno(),), env=env,
                close_fds=True)
        except OSError as exc:
            ours.close()
            shutil.rmtree(self.tmpdir, ignore_errors=True)
            raise WorkerStartError(f"bridge could not start a child process for {stage}: {exc}") from exc
        finally:
            theirs.close()
        self.conn = multiprocessing.connection.Connection(ours.detach())
        status, value = self.request(("start", (payload, max_memory)), STARTUP_TIMEOUT_S, "start", startup=True)
        if status != "ok":
            self.stop()
            raise WorkerStartError(f"bridge could not start its child process for {stage}: {value}; this is "
                                   "bridge's own failure, not the model's")

    def request(self, message: Any, timeout: float | None, command: str, *, startup: bool = False) -> tuple[str, Any]:
        try:
            if message is not None:  # None: only wait for the next message (relayed progress)
                self.conn.send(message)
            if not self.conn.poll(timeout):
                self.stop()
                if startup:
                    raise WorkerStartError(f"bridge's child process for {self.stage} did not start within "
                                           f"{timeout:g} s (is the machine overloaded?)")
                raise RuntimeCrashedError(f"{self.stage} did not answer within {timeout:g} s ({command}); "
                                          "it was stopped (raise the time limit with --timeout if the model is "
                                          "just slow)")
            reply: tuple[str, Any] = self.conn.recv()
            return reply
        except (EOFError, OSError):
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(5)
            code = self.process.poll()
            self.stop()
            if startup:
                raise WorkerStartError(f"bridge's child process for {self.stage} exited while starting "
                                       f"({_describe_exit(code, None)}; see the lines above); this is bridge's own "
                                       "failure, not the model's") from None
            raise RuntimeCrashedError(f"{self.stage} crashed during {command}: {_describe_exit(code, self.max_memory)}; "
                                      "the model or the framework is broken on this input, bridge itself is "
                                      "unaffected") from None

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(5)
        with contextlib.suppress(OSError):
            self.conn.close()
        shutil.rmtree(self.tmpdir, ignore_errors=True)


def _stderr_fd() -> int | None:
    """Where a child's stdout goes: this process's stderr (None = inherit, e.g. in a notebook kernel)."""
    try:
        return sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return None


class KeptWorker:
    """A slot for one child process kept alive after ``call_isolated(..., keep=...)``, for the next
    ``IsolatedRuntime`` given it (``worker=``) to run in instead of a fresh interpreter; used once.
    ``close()`` (or leaving the ``with`` block) stops a child nobody took."""

    def __init__(self) -> None:
        self._child: _Child | None = None
        self.reused = 0  # how many runtimes ran in a kept child (tests and benchmarks read it)

    def put(self, child: _Child) -> None:
        self.close()
        self._child = child

    def take(self) -> _Child | None:
        child, self._child = self._child, None
        return child if child is not None and child.alive() else None

    @property
    def holds(self) -> bool:
        return self._child is not None

    def close(self) -> None:
        child, self._child = self._child, None
        if child is not None:
            with contextlib.suppress(OSError, EOFError):
                child.conn.send(("deactivate", None))
            child.stop()

    def __enter__(self) -> KeptWorker:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


class IsolatedRuntime:
    """The Runtime protocol over a child process that runs ``factory()``'s runtime (in the child ``worker``
    holds, when it holds one that still lives, else in a fresh one)."""

    def __init__(self, factory: Callable[[], Runtime], *, name: str, stage: str,
                 timeout: float | None = DEFAULT_TIMEOUT_S, max_memory: int | None = None,
                 worker: KeptWorker | None = None) -> None:
        self.factory = factory
        self.name = name
        self.stage = stage  # e.g. "the mxnet reference", "the onnxruntime candidate"
        self.timeout = check_timeout(timeout)
        self.max_memory = max_memory
        self.worker = worker
        self._child: _Child | None = None

    # -- protocol ------------------------------------------------------------------------------------
    def activate(self) -> None:
        self._child = self._reused() or _Child(pickle.dumps(self.factory), name=self.name, stage=self.stage,
                                               max_memory=self.max_memory)
        self.name = self._call("activate", None) or self.name

    def _reused(self) -> _Child | None:
        """The worker's kept child, now serving ``factory`` (None: no child kept, or it could not switch)."""
        child = self.worker.take() if self.worker is not None else None
        if child is None:
            return None
        child.stage, child.max_memory = self.stage, self.max_memory
        try:
            status, value = child.request(("become", pickle.dumps(self.factory)), STARTUP_TIMEOUT_S, "start")
        except (BridgeError, BridgeInternalError) as exc:
            logger.info("%s: the kept child could not take it (%s); starting a fresh one", self.stage, exc)
            child.stop()
            return None
        if status != "ok":
            logger.info("%s: the kept child could not take it (%s); starting a fresh one", self.stage, value)
            child.stop()
            return None
        assert self.worker is not None
        self.worker.reused += 1
        return child

    def input_metadata(self) -> Sequence[TensorMeta]:
        result: Sequence[TensorMeta] = self._call("metadata", None)
        return result

    def infer(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        result: dict[str, np.ndarray] = self._call("infer", dict(feeds))
        return result

    def call(self, fn: Callable[[Runtime, Any], Any], argument: Any = None) -> Any:
        """``fn(runtime, argument)`` run in the child, next to the runtime (``fn`` must be picklable, e.g. a
        module-level function): work that must not pay for the pipe per inference, such as timing loops."""
        return self._call("call", (fn, argument))

    def deactivate(self) -> None:
        child, self._child = self._child, None
        if child is None:
            return
        try:
            if child.alive():
                child.conn.send(("deactivate", None))
                if child.conn.poll(30):
                    child.conn.recv()
        except (OSError, EOFError):
            pass
        finally:
            child.stop()

    # -- plumbing ------------------------------------------------------------------------------------
    def _call(self, command: str, argument: Any) -> Any:
        if self._child is None:
            self.activate()
        child = self._child
        assert child is not None
        try:
            status, value = child.request((command, argument), self.timeout, command)
        except BaseException:
            self._child = None
            raise
        if status == "error":
            child.stop()
            self._child = None
            raise _rebuild(value, self.stage)
        return value


def isolate(factory: Callable[[], Runtime], *, name: str, stage: str, enabled: bool = True,
            timeout: float | None = DEFAULT_TIMEOUT_S, max_memory: int | None = None,
            worker: KeptWorker | None = None) -> Runtime:
    """``factory``'s runtime in a child process, or in-process (with the reason logged) when isolation is
    off or the factory cannot be sent to a child (it holds a live framework object, or is defined in the
    caller's ``__main__``, which a fresh interpreter does not have). In-process, each step still runs
    under ``timeout`` (``in_process_deadline``). ``worker``: run in the child it keeps, if any."""
    if enabled:
        reason = _why_not_portable(factory)
        if reason is None:
            return IsolatedRuntime(factory, name=name, stage=stage, timeout=timeout, max_memory=max_memory,
                                   worker=worker)
        logger.info("%s runs in-process: it cannot be sent to a child process (%s)", stage, reason)
    timeout = check_timeout(timeout)
    if timeout is None:
        return factory()
    with in_process_deadline(timeout, stage):
        runtime = factory()
    return _Deadlined(runtime, timeout, stage)


class _Deadlined:
    """A Runtime run in this process whose every step runs under a time limit."""

    def __init__(self, runtime: Runtime, timeout: float, stage: str) -> None:
        self.runtime, self.timeout, self.stage = runtime, timeout, stage
        self.name = runtime.name

    def activate(self) -> None:
        with in_process_deadline(self.timeout, self.stage):
            self.runtime.activate()
        self.name = self.runtime.name

    def input_metadata(self) -> Sequence[TensorMeta]:
        with in_process_deadline(self.timeout, self.stage):
            return self.runtime.input_metadata()

    def infer(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        with in_process_deadline(self.timeout, self.stage):
            return self.runtime.infer(feeds)

    def deactivate(self) -> None:
        self.runtime.deactivate()


def call_isolated(fn: Callable[..., _R], *, stage: str, enabled: bool = True,
                  timeout: float | None = DEFAULT_TIMEOUT_S, max_memory: int | None = None,
                  progress: Callable[[str], None] | None = None, keep: KeptWorker | None = None) -> _R:
    """``fn()`` run in a child process under ``max_memory``; its result and its BridgeErrors come back, a
    crash becomes ``RuntimeCrashedError`` naming ``stage``. With ``progress``, ``fn`` is called as
    ``fn(progress=...)`` and its messages are relayed here as they come; ``timeout`` is the longest
    silence allowed (no message and no result), so long work that reports progress is not cut short.
    In-process when ``enabled`` is false or ``fn`` cannot travel, still under ``timeout``. ``keep``: after a
    successful call the child is not stopped but put in ``keep`` (see ``KeptWorker``)."""
    timeout = check_timeout(timeout)
    reason = _why_not_portable(fn) if enabled else "isolation is off"
    if reason is not None:
        logger.info("%s runs in-process (%s)", stage, reason)
        with in_process_deadline(timeout, stage):
            return fn(progress=progress) if progress is not None else fn()
    child = _Child(pickle.dumps(fn), name=stage, stage=stage, max_memory=max_memory)
    kept = False
    try:
        status, value = child.request(("run_keep" if keep is not None else "run", progress is not None), timeout,
                                      "run")
        while status == "progress":
            if progress is not None:
                progress(value)
            status, value = child.request(None, timeout, "run")
        if keep is not None and status == "ok":
            keep.put(child)
            kept = True
    finally:
        if not kept:
            child.stop()
    if status == "error":
        raise _rebuild(value, stage)
    result: _R = value
    return result


def _running_as_cli() -> bool:
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    return getattr(spec, "name", "") in ("bridge.__main__", "bridge") or os.path.basename(sys.argv[0]) == "bridge"


@contextlib.contextmanager
def in_process_deadline(timeout: float | None, stage: str) -> Any:
    """A time limit for work that runs in this process (``--no-isolate``, live objects). Native code (a
    spinning onnxruntime Loop) cannot be interrupted, so past ``timeout`` a watchdog thread says so on
    stderr and the ``bridge`` command exits with status 3; under the Python API it interrupts the main
    thread instead (SIGINT: ``KeyboardInterrupt`` once Python code runs again) and never ends the caller's
    process. One watchdog thread serves every block, so a block costs microseconds (timing loops)."""
    timeout = check_timeout(timeout)
    if timeout is None:
        yield
        return
    token = _WATCHDOG.arm(time.monotonic() + timeout, f"{stage} did not finish within {timeout:g} s")
    try:
        yield
    finally:
        _WATCHDOG.disarm(token)


class _Watchdog:
    """One daemon thread that fires the earliest armed deadline (see ``in_process_deadline``)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._armed: dict[int, tuple[float, str]] = {}
        self._next = 0
        self._wake_at = math.inf  # when the watchdog thread looks again (inf: only when notified)
        self._thread: threading.Thread | None = None

    def arm(self, deadline: float, what: str) -> int:
        with self._cond:
            self._next += 1
            self._armed[self._next] = (deadline, what)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="bridge-deadline", daemon=True)
                self._thread.start()
            if deadline < self._wake_at:  # wake the watchdog only when it must look sooner than it will
                self._wake_at = deadline
                self._cond.notify()
            return self._next

    def disarm(self, token: int) -> None:
        with self._cond:
            self._armed.pop(token, None)

    def _run(self) -> None:
        with self._cond:
            while True:
                if not self._armed:
                    self._wake_at = math.inf
                    self._cond.wait()
                    continue
                token, (deadline, what) = min(self._armed.items(), key=lambda item: item[1][0])
                wait = deadline - time.monotonic()
                if wait > 0:
                    self._wake_at = deadline
                    self._cond.wait(wait)
                    continue
                self._armed.pop(token)
                _expire(what)


def _expire(what: str) -> None:
    sys.stderr.write(f"bridge: {what} in this process (isolation is off); raise --timeout if the model is just "
                     "slow\n")
    sys.stderr.flush()
    if _running_as_cli():
        os._exit(BridgeError.exit_code)
    signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)  # wakes a blocked main thread


_WATCHDOG = _Watchdog()


class _MainFinder(pickle.Pickler):
    """Pickles into nothing, noting any function or class that lives in ``__main__``."""

    def __init__(self) -> None:
        import io

        super().__init__(io.BytesIO())
        self.found: str | None = None

    def reducer_override(self, obj: Any) -> Any:
        if self.found is None and getattr(obj, "__module__", None) == "__main__":
            self.found = getattr(obj, "__qualname__", None) or type(obj).__qualname__
        return NotImplemented


def _why_not_portable(fn: Any) -> str | None:
    """Why ``fn`` cannot be rebuilt in a fresh interpreter, or None when it can."""
    finder = _MainFinder()
    try:
        finder.dump(fn)
    except Exception as exc:  # live objects (an nn.Module passed to the Python API)
        return f"{finder.found} is defined in __main__" if finder.found else str(exc) or type(exc).__name__
    return f"{finder.found} is defined in __main__" if finder.found else None


def _describe_exit(code: int | None, max_memory: int | None) -> str:
    if code is None:
        return "it stopped answering"
    if code < 0:
        try:
            sig = signal.Signals(-code).name
        except ValueError:
            sig = f"signal {-code}"
        hint = {"SIGSEGV": "a segmentation fault in native code", "SIGFPE": "a floating-point exception "
                "(e.g. division by zero) in native code", "SIGABRT": "an abort in native code",
                "SIGKILL": "killed (out of memory?)", "SIGBUS": "a bus error in native code"}.get(sig, "")
        return f"killed by {sig}" + (f" ({hint})" if hint else "")
    memory = f"; memory limit {max_memory / 2**30:.2f} GiB" if max_memory else ""
    return f"exit status {code}{memory}"


def _portable(exc: BaseException) -> dict[str, Any]:
    """An exception as plain data (custom ``__init__`` signatures do not survive pickling)."""
    return {"module": type(exc).__module__, "qualname": type(exc).__qualname__, "message": str(exc),
            "bridge": isinstance(exc, BridgeError), "attrs": {k: v for k, v in vars(exc).items() if _picklable(v)},
            "memory": isinstance(exc, MemoryError)}


def _picklable(value: Any) -> bool:
    try:
        pickle.dumps(value)
    except Exception:
        return False
    return True


def _rebuild(data: dict[str, Any], stage: str) -> BaseException:
    if data["bridge"]:
        try:
            module = __import__(data["module"], fromlist=[data["qualname"]])
            cls = getattr(module, data["qualname"])
            exc = cls.__new__(cls)
            Exception.__init__(exc, data["message"])
            exc.__dict__.update(data["attrs"])
            return exc  # type: ignore[no-any-return]
        except Exception:  # the type cannot be rebuilt here: keep its words
            pass
    what = "ran out of memory" if data["memory"] else f"raised {data['qualname']}"
    return RuntimeCrashedError(f"{stage} {what}: {data['message']}")


def _die_with_parent(parent: int, main_thread: bool) -> None:
    """End this child when the parent that started it dies, even by ``kill -9``."""
    if main_thread:  # PDEATHSIG follows the creating *thread*: only safe when that is the main thread
        with contextlib.suppress(Exception):
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG (Linux)

    def watch() -> None:  # everywhere else (and as a second line): poll the parent pid
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    if os.getppid() != parent:  # the parent died before any of this took effect
        os._exit(1)
    threading.Thread(target=watch, name="bridge-parent-watch", daemon=True).start()


def _tidy() -> None:
    """Give back what a finished call left: the cycle collector, then glibc's free lists to the system
    (``malloc_trim``; freed memory otherwise stays in the process's resident size)."""
    import gc

    gc.collect()
    with contextlib.suppress(Exception):  # not glibc: nothing to trim
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _limit_memory(max_memory: int | None) -> None:
    if max_memory:
        _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        limit = max_memory if hard == resource.RLIM_INFINITY else min(max_memory, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


_IN_CHILD = False  # set in the isolated children (fresh interpreters running _child_main)


def in_isolated_child() -> bool:
    """True in a child process started by this module (work there may change its own environment)."""
    return _IN_CHILD


def _child_main(fd: int, parent: int, main_thread: bool) -> None:
    """The child: rebuild the factory (or function), then answer commands until deactivate (or the parent
    goes away)."""
    global _IN_CHILD
    _IN_CHILD = True
    _die_with_parent(parent, main_thread)
    conn = multiprocessing.connection.Connection(fd)
    try:
        command, (payload, max_memory) = conn.recv()
        assert command == "start"
        target = pickle.loads(payload)
    except (EOFError, OSError):
        return
    except BaseException as exc:
        conn.send(("startup", f"{type(exc).__name__}: {exc}"))
        return
    _limit_memory(max_memory)
    conn.send(("ok", None))
    _serve(conn, target)


def _serve(conn: multiprocessing.connection.Connection, target: Callable[..., Any]) -> None:
    runtime: Runtime | None = None
    while True:
        try:
            command, argument = conn.recv()
        except (EOFError, OSError):
            return
        try:
            if command in ("run", "run_keep"):  # call_isolated: one call of the target, then the child ends
                # (run) or waits to be given a factory to serve (run_keep: a KeptWorker holds it)
                if argument:  # relay progress messages to the parent as they come
                    reply: Any = target(progress=lambda message: conn.send(("progress", str(message))))
                else:
                    reply = target()
                conn.send(("ok", reply))
                if command == "run":
                    return
                del reply  # the call's result is sent: what it left is freed before waiting
                _tidy()
                continue
            if command == "become":  # a kept child takes a new factory to serve
                target = pickle.loads(argument)
                reply = None
            elif command == "activate":
                runtime = target()
                runtime.activate()
                reply = runtime.name
            elif command == "metadata":
                assert runtime is not None
                reply = list(runtime.input_metadata())
            elif command == "infer":
                assert runtime is not None
                reply = runtime.infer(argument)
            elif command == "call":
                assert runtime is not None
                fn, value = argument
                reply = fn(runtime, value)
            else:  # deactivate
                if runtime is not None:
                    runtime.deactivate()
                conn.send(("ok", None))
                return
            conn.send(("ok", reply))
        except BaseException as exc:  # everything goes back to the parent, which decides
            conn.send(("error", _portable(exc)))
