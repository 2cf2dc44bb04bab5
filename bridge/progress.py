"""Progress that reaches the user's terminal, whatever a framework does with ``sys.stderr`` meanwhile.

Exporters print (torch.onnx, tf2onnx), so adapters capture their output (``bridge.chatter.quiet``
swaps ``sys.stderr`` for a buffer while the exporter runs). A progress line written to ``sys.stderr``
then lands in that buffer: a 40 s export looked hung. ``Progress`` fixes the stream when the display
starts, before any capture, and writes there; its heartbeat thread says every ``heartbeat`` seconds
that a long stage is still running.

Any layer can name the stage it is in without being handed a callback: ``stage("tracing")`` reaches
the display the command opened (and does nothing when none is open, as in a library call without
``progress=``); a long step can tell what it is doing from inside (an adapter between exporter steps).
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import IO

HEARTBEAT_S = 15.0
Show = Callable[[str], None]

_displays: list[Show] = []
_lock = threading.Lock()


def stage(msg: str) -> None:
    """Tell the progress display the command opened that the work is now at ``msg`` (no display: nothing)."""
    with _lock:
        show = _displays[-1] if _displays else None
    if show is not None:
        show(msg)


class Progress:
    """The current stage, when it started, and a heartbeat thread writing "``what``: still ``stage`` (N s)"
    to ``stream`` (the stderr of when the display was made: a later redirection does not swallow it).

    ``show(msg)`` starts a stage; ``on_stage`` / ``on_beat`` let a display (a terminal spinner) take the
    lines instead of the stream."""

    def __init__(self, what: str, *, heartbeat: float = HEARTBEAT_S, stream: IO[str] | None = None,
                 on_stage: Show | None = None, on_beat: Show | None = None) -> None:
        self.what, self.heartbeat = what, heartbeat
        self.stream = stream if stream is not None else sys.stderr
        self.on_stage, self.on_beat = on_stage, on_beat
        self.current, self.since = "", time.monotonic()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="bridge-progress", daemon=True)

    def show(self, msg: str) -> None:
        self.current, self.since = msg, time.monotonic()
        if self.on_stage is not None:
            self.on_stage(msg)

    def write(self, line: str) -> None:
        """One line on the user's stream (never through ``sys.stderr``, which a framework may have swapped)."""
        with contextlib.suppress(OSError, ValueError):  # a closed pipe must not kill the conversion
            self.stream.write(line + "\n")
            self.stream.flush()

    def _beat(self) -> None:
        while not self._done.wait(self.heartbeat):
            elapsed = time.monotonic() - self.since
            if elapsed < self.heartbeat or not self.current:
                continue
            line = f"{self.what}: still {self.current} ({elapsed:.0f} s)"
            (self.on_beat or self.write)(line)

    def __enter__(self) -> Show:
        self._thread.start()
        with _lock:
            _displays.append(self.show)
        return self.show

    def __exit__(self, *_exc: object) -> None:
        with _lock:
            _displays.remove(self.show)
        self._done.set()
        self._thread.join()


@contextlib.contextmanager
def progress(what: str, *, heartbeat: float = HEARTBEAT_S, stream: IO[str] | None = None,
             on_stage: Show | None = None, on_beat: Show | None = None) -> Iterator[Show]:
    """``with progress("converting x") as show:`` - a ``Progress`` display open for the block."""
    with Progress(what, heartbeat=heartbeat, stream=stream, on_stage=on_stage, on_beat=on_beat) as show:
        yield show
