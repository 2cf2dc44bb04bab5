"""One model of a batch migration, converted and validated in its own process: task dict -> outcome dict.

``run_isolated`` is what an executor runs (in a thread of this process for the local executor, on a
Dask worker for ``dask://``). It starts a fresh interpreter (``python -P -c ... worker.main``: the working
directory is not importable there), so a
segfault, an abort, an out-of-memory kill or a hang of the framework takes down only that child: the
child's exit signal, a timeout (the child's whole process group is killed) or the memory limit becomes
the model's failure reason and the batch goes on.

A fresh interpreter rather than ``multiprocessing``: Dask runs tasks in daemonic worker processes, and
``multiprocessing`` refuses to start children from those; ``subprocess`` has no such rule, and a new
interpreter is what the "spawn" context would give anyway (no forked torch/TF threads).

The child (``main``) limits its address space (``RLIMIT_AS`` = ``max_memory``), asks the kernel to kill
it when its supervisor dies (``PR_SET_PDEATHSIG``, so ``kill -9`` of ``bridge migrate`` leaves no
orphan converting on), and calls the convert function. That function is named by reference
("module:qualname", or a file path for modules off ``sys.path``) and imported inside the child: this
is the one place bridge.migrate reaches ``bridge.api`` (by default), and it does so lazily because the
import order puts migrate below api. Outputs go straight to ``<out>/models/<name>/``; every file there
is written atomically (temp + rename) or created after removing a link at its path (the log), what an
earlier run of the model wrote there is removed before it starts (``outdir.clear_model_folder``: only
that, a user's file stays), the files it writes are recorded once it ends (``outdir.record_written``),
and the result only counts once the supervisor has read the child's atomically written ``outcome.json``.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import json
import os
import resource
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bridge.migrate.outdir import clear_model_folder, record_written
from bridge.runtimes.isolated import SAFE_PATH

OUTCOME = "outcome.json"
LOG = "log.txt"
_LOG_TAIL = 2000  # characters of the child's log quoted in a crash reason
_SIGNAL_NOTES = {
    signal.SIGABRT: "the process aborted (a framework assertion or abort())",
    signal.SIGSEGV: "segmentation fault in native code",
    signal.SIGKILL: "killed from outside (the kernel's out-of-memory killer, or a user)",
    signal.SIGBUS: "bus error in native code",
    signal.SIGFPE: "floating-point exception in native code",
    signal.SIGILL: "illegal instruction (a wheel built for another CPU?)",
}

# The child's program (not ``-m bridge.migrate.worker``: the package imports this module first, and runpy
# warns about running a module that is already imported), started with ``SAFE_PATH`` (``-P``): the working
# directory is not importable in it, PYTHONPATH is.
_CHILD = "import sys; from bridge.migrate.worker import main; sys.exit(main(sys.argv[1:]))"
# Live children of this process, so an interrupted run can end them (see kill_children).
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


def callable_ref(fn: Callable[..., Any]) -> dict[str, str | None]:
    """How a child process finds ``fn`` again: its module and qualified name (+ file as a fallback)."""
    module = sys.modules.get(fn.__module__)
    return {"module": fn.__module__, "qualname": fn.__qualname__, "file": getattr(module, "__file__", None)}


def _load_callable(ref: dict[str, str | None]) -> Callable[..., Any]:
    mod_name, qualname, file = ref["module"], ref["qualname"], ref.get("file")
    assert mod_name and qualname
    try:
        module = importlib.import_module(mod_name)
    except ImportError:
        if not file:
            raise
        spec = importlib.util.spec_from_file_location(mod_name, file)
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[mod_name] = module
        spec.loader.exec_module(module)
    obj: Any = module
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj  # type: ignore[no-any-return]


def model_dir(out_dir: str | Path, name: str) -> Path:
    return Path(out_dir) / "models" / name


# --------------------------------------------------------------------------------------------- supervisor


def run_isolated(task: dict[str, Any], on_start: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run one model in a child interpreter with its time and memory limits; always returns an outcome."""
    entry = task["entry"]
    name = entry["name"]
    # a model's folder; a dataset shard's (bridge.migrate.shards): its own, inside the model's
    folder = Path(task["folder"]) if task.get("folder") else model_dir(task["out_dir"], name)
    # a redone model never mixes with an earlier attempt's files: those are removed (only those: a file a user
    # put here stays), and the record kept from here on tells a run killed half way from the user's files
    from bridge.io import atomic_write_text, create_nofollow

    before = clear_model_folder(folder)
    task_file = folder / ".task.json"
    atomic_write_text(task_file, json.dumps({**task, "supervisor_pid": os.getpid()}))
    if on_start is not None:
        on_start(task.get("label") or name)
    timeout = entry.get("timeout")
    started = time.perf_counter()
    env = {**os.environ, "PYTHONFAULTHANDLER": "1", "PYTHONUNBUFFERED": "1"}
    with os.fdopen(create_nofollow(folder / LOG), "wb") as log:
        proc = subprocess.Popen([sys.executable, *SAFE_PATH, "-c", _CHILD, str(task_file)], stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
        _CHILDREN[proc.pid] = proc
        timed_out = False
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc)
            proc.wait()
        finally:
            _CHILDREN.pop(proc.pid, None)
            if proc.returncode is None:  # interrupted while waiting: take the child down with us
                _kill_group(proc)
    elapsed = time.perf_counter() - started
    task_file.unlink(missing_ok=True)
    outcome_file = folder / OUTCOME
    if not timed_out and proc.returncode == 0 and outcome_file.is_file():
        outcome: dict[str, Any] = json.loads(outcome_file.read_text(encoding="utf-8"))
        outcome_file.unlink()
    else:
        outcome = _failure(entry, proc.returncode, timed_out, folder / LOG)
    outcome["written"], outcome["kept"] = record_written(folder, before)
    outcome["elapsed_s"] = elapsed
    outcome["host"] = os.uname().nodename
    return outcome


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def kill_children() -> None:
    """Kill every child this process still supervises (an interrupted local run)."""
    for proc in list(_CHILDREN.values()):
        _kill_group(proc)


def _failure(entry: dict[str, Any], returncode: int | None, timed_out: bool, log: Path) -> dict[str, Any]:
    tail = log.read_text(encoding="utf-8", errors="replace")[-_LOG_TAIL:].strip() if log.is_file() else ""
    if timed_out:
        kind, reason = "timeout", f"timed out after {entry.get('timeout'):g} s (worker killed)"
    elif returncode is not None and returncode < 0:
        sig = signal.Signals(-returncode)
        kind = "memory" if sig == signal.SIGKILL and entry.get("max_memory") else "crash"
        reason = f"worker killed by {sig.name} ({_SIGNAL_NOTES.get(sig, signal.strsignal(sig) or '')})"
        if "MemoryError" in tail or "std::bad_alloc" in tail:
            kind = "memory"
    else:
        kind = "crash"
        reason = f"worker exited with status {returncode} without a result"
        if "MemoryError" in tail or "std::bad_alloc" in tail:
            kind, reason = "memory", f"out of memory (max_memory {_mib(entry.get('max_memory'))}); {reason}"
    last = [ln for ln in tail.splitlines() if ln.strip()][-1:]
    if last and kind != "timeout":
        reason += f"; last log line: {last[0].strip()[:300]}"
    return {"name": entry["name"], "status": "failed", "kind": kind, "reason": reason, "conversion": None,
            "peak_memory_mb": None, "exit": returncode}


def _mib(n: int | None) -> str:
    return f"{n / 2**20:.0f} MiB" if n else "unlimited"


# ------------------------------------------------------------------------------------------------- child


def _die_with_parent(parent: int) -> None:
    """PR_SET_PDEATHSIG (Linux): SIGKILL this process when the supervisor that started it dies."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the supervisor died before prctl took effect
        os._exit(1)


def _limit_memory(limit: int | None) -> None:
    if limit:
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        soft = limit if hard == resource.RLIM_INFINITY else min(limit, hard)
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _peak_mb() -> float:
    """Peak resident memory of this process and its finished children (ru_maxrss is KiB on Linux)."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(own, kids) / 1024


def unread_defaults(entry: dict[str, Any]) -> list[str]:
    """The options this entry took from ``defaults:`` that its source's adapter does not read (an
    ``exporter`` default meets an MXNet entry): not applied to it, rather than refused for it."""
    from bridge.conversion.options import unread_options

    given = [n for n in entry.get("inherited", ()) if entry["convert"].get(n) != _option_defaults().get(n)]
    return unread_options(given, entry["source"], entry["convert"].get("framework")) if given else []


def _option_defaults() -> dict[str, Any]:
    from bridge.conversion.options import convert_options

    return {o.name: o.default for o in convert_options()}


def convert_kwargs(entry: dict[str, Any], folder: Path) -> tuple[Any, Path, dict[str, Any]]:
    """The public ``bridge.convert`` arguments for one resolved manifest entry: every convert option as the
    manifest resolved it, the report and the target's artefacts in the model's folder."""
    kwargs: dict[str, Any] = {**entry["convert"], "report": folder / "conversion.json", "artefact_dir": folder}
    for name in unread_defaults(entry):
        kwargs[name] = _option_defaults()[name]
    if entry.get("options"):
        kwargs["options"] = dict(entry["options"])
    return entry["source"], folder / "model.onnx", kwargs


def _relative(value: Any, root: str) -> Any:
    """Output paths inside a conversion report, made relative to the migration's --out folder."""
    if isinstance(value, str) and value.startswith(root + os.sep):
        return value[len(root) + 1:]
    if isinstance(value, dict):
        return {k: _relative(v, root) for k, v in value.items()}
    if isinstance(value, list):
        return [_relative(v, root) for v in value]
    return value


def _convert_one(task: dict[str, Any]) -> dict[str, Any]:
    from bridge.errors import BridgeError, ResourceLimitError, ValidationMismatch
    from bridge.limits import memory_limit

    entry = task["entry"]
    root = str(Path(task["out_dir"]))
    folder = model_dir(root, entry["name"])
    convert = _load_callable(task["convert"])
    source, output, kwargs = convert_kwargs(entry, folder)
    if task.get("dataset_deferred"):  # the dataset runs in shards after this (bridge.migrate.shards)
        from bridge.migrate.shards import without_dataset

        kwargs = without_dataset(kwargs)
    outcome: dict[str, Any] = {"name": entry["name"], "status": "failed", "kind": None, "reason": None,
                               "conversion": None}
    result: Any = None
    limit = entry.get("max_memory")
    try:
        with memory_limit(limit) if limit else contextlib.nullcontext():  # sizes files declare, checked up front
            result = convert(source, output, **kwargs)
        outcome.update(status="passed")
    except ValidationMismatch as exc:
        result = exc.result
        outcome.update(kind="mismatch", reason=str(exc))
    except ResourceLimitError as exc:
        outcome.update(kind="memory", reason=f"{type(exc).__name__}: {exc}")
    except BridgeError as exc:
        outcome.update(kind="usage" if exc.exit_code == 2 else "conversion", reason=f"{type(exc).__name__}: {exc}")
    except MemoryError:
        outcome.update(kind="memory", reason=f"out of memory: the worker reached its max_memory "
                                             f"({_mib(entry.get('max_memory'))})")
    except Exception as exc:  # a bug in bridge or a framework: the batch goes on, the reason names it
        traceback.print_exc()
        outcome.update(kind="internal", reason=f"internal error {type(exc).__name__}: {exc}")
    if result is not None and hasattr(result, "to_dict"):
        report = result.to_dict()
        dropped = unread_defaults(entry)
        if dropped:  # said where the model's report is read, not only in the worker's log
            report.setdefault("warnings", []).append(
                f"defaults: {', '.join(dropped)} not applied: the {report.get('framework')} adapter does not "
                "read them")
        outcome["conversion"] = _relative(report, root)
        from bridge.io import atomic_write_text
        from bridge.report import to_markdown

        atomic_write_text(folder / "conversion.md", to_markdown(report))
    outcome["peak_memory_mb"] = _peak_mb()
    return outcome


def _shard_one(task: dict[str, Any]) -> dict[str, Any]:
    """A dataset shard (``bridge.migrate.shards.run_shard``), its failures as a model's are."""
    from bridge.errors import BridgeError
    from bridge.migrate.shards import run_shard

    shard = task["shard"]
    where = f"dataset shard (images {shard['start']}-{shard['stop'] - 1})"
    outcome: dict[str, Any] = {"name": task["entry"]["name"], "status": "failed", "kind": None, "reason": None,
                               "conversion": None}
    try:
        outcome = run_shard(task, *convert_kwargs(task["entry"], model_dir(task["out_dir"], task["entry"]["name"])))
    except BridgeError as exc:
        outcome.update(kind="usage" if exc.exit_code == 2 else "conversion", reason=f"{where}: {type(exc).__name__}: {exc}")
    except MemoryError:
        outcome.update(kind="memory", reason=f"{where}: out of memory (max_memory {_mib(task['entry'].get('max_memory'))})")
    except Exception as exc:  # a bug in bridge or a framework: the batch goes on, the reason names it
        traceback.print_exc()
        outcome.update(kind="internal", reason=f"{where}: internal error {type(exc).__name__}: {exc}")
    outcome["peak_memory_mb"] = _peak_mb()
    return outcome


def main(argv: list[str] | None = None) -> int:
    """Child entry point: ``main([TASK.json])`` writes ``outcome.json`` beside the task file."""
    task_file = Path((argv or sys.argv[1:])[0])
    task = json.loads(task_file.read_text(encoding="utf-8"))
    _die_with_parent(int(task["supervisor_pid"]))
    _limit_memory(task["entry"].get("max_memory"))
    outcome = _shard_one(task) if task.get("kind") == "shard" else _convert_one(task)
    from bridge.io import atomic_write_text

    atomic_write_text(task_file.with_name(OUTCOME), json.dumps(outcome, default=str))
    sys.stdout.flush()
    return 0


