"""Any Runtime, run in a child process with a time limit and a memory limit.

A framework reference (MXNet, PyTorch, TensorFlow) or a candidate runtime can die on a hostile or
broken model in native code: MXNet segfaults on ``num_group=0``, onnxruntime on a ConvTranspose with
``group=0``, a pad of 1e9 allocates until the OOM killer comes. In-process that takes bridge (and a
batch migration) down with no message. ``IsolatedRuntime`` keeps the Runtime protocol and moves the
work into a child: the child builds the runtime from a picklable *factory* (so the parent never
imports the framework), then serves ``activate`` / ``input_metadata`` / ``infer`` / ``deactivate``
over a pipe. A child that dies by a signal, exceeds ``timeout`` or runs out of its address-space limit
(``max_memory``, ``RLIMIT_AS``) becomes a ``RuntimeCrashedError`` naming the stage and the cause;
exceptions raised in the child come back as the same ``BridgeError`` type (anything else becomes a
``RuntimeCrashedError`` with the original type and message).

Children start from a fork server (multiprocessing's ``forkserver``): a small clean process that has
imported no framework, so forking is safe even after the parent ran PyTorch or TensorFlow threads.
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.connection
import pickle
import resource
import signal
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from bridge.errors import BridgeError, RuntimeCrashedError
from bridge.runtimes.base import Runtime, TensorMeta

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 600.0

_context: Any = None


def _mp_context() -> Any:
    global _context
    if _context is None:
        ctx = multiprocessing.get_context("forkserver")
        # the server imports only what every child needs; frameworks are imported by the children that use them
        ctx.set_forkserver_preload(["numpy", "onnx", "bridge.runtimes.isolated"])
        _context = ctx
    return _context


class IsolatedRuntime:
    """The Runtime protocol over a child process that runs ``factory()``'s runtime."""

    def __init__(self, factory: Callable[[], Runtime], *, name: str, stage: str,
                 timeout: float | None = DEFAULT_TIMEOUT_S, max_memory: int | None = None) -> None:
        self.factory = factory
        self.name = name
        self.stage = stage  # e.g. "the mxnet reference", "the onnxruntime candidate"
        self.timeout = timeout
        self.max_memory = max_memory
        self._process: Any = None
        self._conn: multiprocessing.connection.Connection | None = None

    # -- protocol ------------------------------------------------------------------------------------
    def activate(self) -> None:
        ctx = _mp_context()
        parent, child = ctx.Pipe()
        self._process = ctx.Process(target=_serve, args=(child, self.factory, self.max_memory),
                                    name=f"bridge-{self.name}", daemon=True)
        self._process.start()
        child.close()
        self._conn = parent
        self.name = self._call("activate", None) or self.name

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
        if self._process is None:
            return
        try:
            if self._process.is_alive() and self._conn is not None:
                self._conn.send(("deactivate", None))
                if self._conn.poll(30):
                    self._conn.recv()
        except (OSError, EOFError):
            pass
        finally:
            self._stop()

    # -- plumbing ------------------------------------------------------------------------------------
    def _call(self, command: str, argument: Any) -> Any:
        if self._conn is None or self._process is None:
            self.activate()
        assert self._conn is not None and self._process is not None
        try:
            self._conn.send((command, argument))
            if not self._conn.poll(self.timeout):
                self._stop()
                raise RuntimeCrashedError(f"{self.stage} did not answer within {self.timeout:g} s ({command}); "
                                          "it was stopped (raise the time limit with --timeout if the model is "
                                          "just slow)")
            status, value = self._conn.recv()
        except (EOFError, OSError, BrokenPipeError):
            self._process.join(5)
            code = self._process.exitcode
            self._stop()
            raise RuntimeCrashedError(f"{self.stage} crashed during {command}: {_describe_exit(code, self.max_memory)}; "
                                      "the model or the framework is broken on this input, bridge itself is "
                                      "unaffected") from None
        if status == "error":
            self._stop()
            raise _rebuild(value, self.stage)
        return value

    def _stop(self) -> None:
        if self._process is not None and self._process.is_alive():
            self._process.kill()
            self._process.join(5)
        if self._conn is not None:
            self._conn.close()
        self._process, self._conn = None, None


def isolate(factory: Callable[[], Runtime], *, name: str, stage: str, enabled: bool = True,
            timeout: float | None = DEFAULT_TIMEOUT_S, max_memory: int | None = None) -> Runtime:
    """``factory``'s runtime in a child process, or in-process (with the reason logged) when isolation is
    off or the factory cannot be sent to a child (e.g. it holds a live framework object)."""
    if enabled:
        try:
            pickle.dumps(factory)
        except Exception as exc:  # live objects (an nn.Module passed to the Python API) stay in-process
            logger.info("%s runs in-process: it cannot be sent to a child process (%s)", stage, exc)
        else:
            return IsolatedRuntime(factory, name=name, stage=stage, timeout=timeout, max_memory=max_memory)
    return factory()


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


def _serve(conn: multiprocessing.connection.Connection, factory: Callable[[], Runtime], max_memory: int | None) -> None:
    """The child: build the runtime, then answer commands until deactivate (or the parent goes away)."""
    if max_memory:
        _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        limit = max_memory if hard == resource.RLIM_INFINITY else min(max_memory, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    runtime: Runtime | None = None
    while True:
        try:
            command, argument = conn.recv()
        except (EOFError, OSError):
            return
        try:
            if command == "activate":
                runtime = factory()
                runtime.activate()
                reply: Any = runtime.name
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
