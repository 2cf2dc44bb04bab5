"""IsolatedRuntime: a runtime in a child process; crashes, hangs and runaway memory become BridgeErrors
naming the stage, and the parent (a batch migration, the Python API) goes on."""

from __future__ import annotations

import os
from functools import partial

import numpy as np
import pytest
from hostile_runtimes import Misbehaving, make

from bridge.errors import RuntimeCrashedError, UsageError
from bridge.runtimes.base import activated
from bridge.runtimes.isolated import IsolatedRuntime, isolate

X = {"x": np.array([1.0, 2.0], np.float32)}


def _isolated(how: str, **kwargs: object) -> IsolatedRuntime:
    return IsolatedRuntime(partial(make, how), name="misbehaving", stage="the test reference", **kwargs)  # type: ignore[arg-type]


def test_the_protocol_works_across_the_process_boundary() -> None:
    with activated(_isolated("ok")) as rt:
        assert [m.name for m in rt.input_metadata()] == ["x"]
        out = rt.infer(X)
    np.testing.assert_array_equal(out["y"], [2.0, 4.0])
    assert int(out["pid"][0]) != os.getpid()


@pytest.mark.parametrize(("how", "cause"), [("abort", "SIGABRT"), ("segfault", "SIGSEGV")])
def test_a_native_crash_is_an_error_naming_the_stage_and_signal(how: str, cause: str) -> None:
    with pytest.raises(RuntimeCrashedError, match=f"the test reference crashed during infer: killed by {cause}"), activated(_isolated(how)) as rt:
        rt.infer(X)
    with activated(_isolated("ok")) as rt:  # and the next model is unaffected
        assert rt.infer(X)["y"].tolist() == [2.0, 4.0]


def test_a_hang_past_the_time_limit_is_stopped() -> None:
    with pytest.raises(RuntimeCrashedError, match="did not answer within 2 s"), activated(_isolated("hang", timeout=2.0)) as rt:
        rt.infer(X)


def test_allocating_past_the_memory_limit_is_reported() -> None:
    with pytest.raises(RuntimeCrashedError, match=r"ran out of memory|memory limit"), activated(_isolated("allocate", max_memory=2 * 2**30)) as rt:
        rt.infer(X)


def test_bridge_errors_keep_their_type_and_others_name_theirs() -> None:
    with pytest.raises(UsageError, match="the child says: bad option"), activated(_isolated("usage")) as rt:
        rt.infer(X)
    with pytest.raises(RuntimeCrashedError, match="the test reference raised ZeroDivisionError: framework bug"), activated(_isolated("raise")) as rt:
        rt.infer(X)


def test_factories_that_cannot_travel_run_in_process() -> None:
    live = Misbehaving("ok")
    runtime = isolate(lambda: live, name="live", stage="a live object", timeout=None)
    assert runtime is live
    assert isinstance(isolate(partial(make, "ok"), name="m", stage="s"), IsolatedRuntime)
    assert isinstance(isolate(partial(make, "ok"), name="m", stage="s", enabled=False, timeout=None), Misbehaving)


_IN_PROCESS_DEADLINE = """
import sys
from functools import partial
import numpy as np
from hostile_runtimes import make
from bridge.runtimes.base import activated
from bridge.runtimes.isolated import isolate

runtime = isolate(partial(make, "hang"), name="m", stage="the hanging reference", enabled=False, timeout=1.0)
try:
    with activated(runtime) as rt:
        rt.infer({"x": np.array([1.0, 2.0], np.float32)})
except KeyboardInterrupt:
    sys.exit(42)
sys.exit(0)
"""


def test_in_process_runtimes_keep_the_time_limit() -> None:
    """--no-isolate (or a live object) still honours --timeout: under the API the caller's main thread is
    interrupted (the bridge command exits with status 3 instead). Run in an interpreter of its own: the SIGINT the
    watchdog sends is the caller's whole process's, and this test process holds every framework other tests loaded."""
    from support import run_in_own_interpreter

    proc = run_in_own_interpreter(_IN_PROCESS_DEADLINE)
    assert proc.returncode == 42, proc.stderr[-2000:]
    assert "the hanging reference did not finish within 1 s" in proc.stderr


@pytest.mark.parametrize("value", [float("nan"), float("inf"), 1e308, -1.0, 0.0])
def test_absurd_time_limits_are_usage_errors(value: float) -> None:
    with pytest.raises(UsageError, match="--timeout"):
        isolate(partial(make, "ok"), name="m", stage="s", timeout=value)


def test_a_childs_temporary_files_are_removed_with_it() -> None:
    """A child is ended by kill (its own atexit cleanup never runs): what it wrote under TMPDIR - TensorFlow's
    autograph modules, an exporter's scratch files - lives in a folder this process removes."""
    import tempfile
    from pathlib import Path

    from bridge.runtimes.isolated import call_isolated

    _fd, written = call_isolated(partial(tempfile.mkstemp, suffix=".scratch"), stage="the test child")
    path = Path(written)
    assert path.parent.name.startswith("bridge-child-")
    assert path.parent.parent == Path(tempfile.gettempdir())
    assert not path.exists() and not path.parent.exists()


# -- a kept child serves the next runtime (the framework export child becomes the framework reference) ------

def test_a_kept_child_serves_the_next_runtime_instead_of_a_fresh_interpreter() -> None:
    from bridge.runtimes.isolated import KeptWorker, call_isolated

    with KeptWorker() as worker:
        pid = call_isolated(os.getpid, stage="the test export", keep=worker)
        assert worker.holds and pid != os.getpid()
        runtime = IsolatedRuntime(partial(make, "ok"), name="misbehaving", stage="the test reference", worker=worker)
        with activated(runtime) as rt:
            assert int(rt.infer(X)["pid"][0]) == pid  # the same process: no second interpreter, no second import
        assert worker.reused == 1 and not worker.holds  # used once
        with activated(_isolated("ok")) as rt:  # a runtime without the worker starts its own child
            assert int(rt.infer(X)["pid"][0]) != pid


def test_a_kept_child_that_died_gives_way_to_a_fresh_one() -> None:
    import signal

    from bridge.runtimes.isolated import KeptWorker, call_isolated

    with KeptWorker() as worker:
        pid = call_isolated(os.getpid, stage="the test export", keep=worker)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)  # reaped by us (the parent): the kept child is gone
        runtime = IsolatedRuntime(partial(make, "ok"), name="misbehaving", stage="the test reference", worker=worker)
        with activated(runtime) as rt:
            assert int(rt.infer(X)["pid"][0]) not in (pid, os.getpid())
        assert worker.reused == 0


def test_a_kept_child_crashing_is_still_named_as_the_runtime_it_serves() -> None:
    from bridge.runtimes.isolated import KeptWorker, call_isolated

    with KeptWorker() as worker:
        call_isolated(os.getpid, stage="the test export", keep=worker)
        runtime = IsolatedRuntime(partial(make, "segfault"), name="misbehaving", stage="the test reference",
                                  worker=worker)
        with pytest.raises(RuntimeCrashedError, match="the test reference crashed during infer: killed by SIGSEGV"), \
                activated(runtime) as rt:
            rt.infer(X)


def test_a_failed_call_keeps_nothing_and_closing_ends_a_kept_child() -> None:
    from bridge.runtimes.isolated import KeptWorker, call_isolated

    worker = KeptWorker()
    with pytest.raises(RuntimeCrashedError):
        call_isolated(partial(divmod, 1, 0), stage="the test export", keep=worker)
    assert not worker.holds
    pid = call_isolated(os.getpid, stage="the test export", keep=worker)
    worker.close()
    assert not worker.holds
    with pytest.raises(ChildProcessError):  # stopped and reaped: no such child any more
        os.waitpid(pid, 0)
