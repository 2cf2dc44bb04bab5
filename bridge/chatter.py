"""Keep frameworks' console chatter out of bridge's output, and keep what matters for the report.

Exporters and converters (torch.onnx, tf2onnx, onnx-tf) print progress to stdout, log through
their own loggers, raise deprecation warnings about themselves, and wrap the useful error in a
generic one. Adapters and targets share these three tools instead of each writing its own:
``quiet`` (loggers raised to ERROR, stdout/stderr to the debug log), ``captured_warnings`` (the
warnings about the user's model, for the report) and ``root_cause`` (the innermost error's first line).
"""

from __future__ import annotations

import contextlib
import io
import logging
import re
import sys
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path

logger = logging.getLogger(__name__)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_DEPRECATIONS = (DeprecationWarning, FutureWarning, PendingDeprecationWarning)
_BRIDGE_ROOT = Path(__file__).resolve().parents[1]  # bridge/ and adapters/ live here


@contextlib.contextmanager
def quiet(logger_prefixes: Sequence[str], label: str, *, stderr: bool = False) -> Iterator[None]:
    """Raise every logger under ``logger_prefixes`` to ERROR and capture stdout (and stderr if asked)
    for the duration; what was printed goes to bridge's debug log under ``label`` (``bridge -vv``).

    Existing child loggers are raised too: frameworks (torch._logging, tf2onnx) give many an explicit level.
    """
    def wanted(name: str) -> bool:
        return any(name == p or name.startswith(p + ".") for p in logger_prefixes)

    quieted = [logging.getLogger(n) for n in list(logging.root.manager.loggerDict) if wanted(n)]
    quieted += [logging.getLogger(p) for p in logger_prefixes]
    levels = [lg.level for lg in quieted]
    for lg in quieted:
        lg.setLevel(logging.ERROR)
    sink = io.StringIO()
    try:
        with contextlib.redirect_stdout(sink), (contextlib.redirect_stderr(sink) if stderr else contextlib.nullcontext()):
            yield
    finally:
        for lg, level in zip(quieted, levels, strict=True):
            lg.setLevel(level)
        if sink.getvalue():
            logger.debug("%s said:\n%s", label, sink.getvalue())


def is_library_file(filename: str) -> bool:
    """True for site-packages, the interpreter's own library, and bridge's code (not the user's model)."""
    path = str(Path(filename).resolve())
    roots = {str(Path(p).resolve()) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    roots |= {str(_BRIDGE_ROOT / "bridge"), str(_BRIDGE_ROOT / "adapters")}
    return "site-packages" in path or any(path.startswith(r) for r in roots)


@contextlib.contextmanager
def captured_warnings() -> Iterator[list[str]]:
    """Collect warnings raised inside the block as 'Category: message (file:line)', once each.

    Deprecation warnings raised by library code (a framework about itself, or bridge calling a
    deprecated exporter on purpose) are dropped; the same warning from the user's code is kept.
    """
    collected: list[str] = []
    with warnings.catch_warnings(record=True) as records:
        warnings.simplefilter("always")
        yield collected
    seen: set[str] = set()
    for r in records:
        if issubclass(r.category, _DEPRECATIONS) and is_library_file(str(r.filename)):
            continue
        message = str(r.message).strip()
        text = f"{r.category.__name__}: {message.splitlines()[0] if message else ''} ({Path(r.filename).name}:{r.lineno})"
        if text not in seen:
            seen.add(text)
            collected.append(text)


_LOCATION = re.compile(r" \((?P<where>[^()]*:\d+)\)$")


def group_warnings(collected: Sequence[str]) -> list[str]:
    """One line per distinct 'Category: message' with a count and the first place it came from
    (a traced model repeats one TracerWarning from many lines); the full list goes to the report."""
    groups: dict[str, list[str]] = {}
    for text in collected:
        m = _LOCATION.search(text)
        key = text[: m.start()] if m else text
        groups.setdefault(key, []).append(m.group("where") if m else "")
    lines = []
    for key, places in groups.items():
        where = next((p for p in places if p), "")
        if len(places) == 1:
            lines.append(f"{key} ({where})" if where else key)
        else:
            lines.append(f"{key} (x{len(places)}, first at {where})" if where else f"{key} (x{len(places)})")
    return lines


def root_cause(exc: BaseException, limit: int = 300) -> str:
    """'Type: first line' of the innermost cause (torch.onnx and onnx-tf wrap the useful one), ANSI-free."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    lines = [ln.strip() for ln in _ANSI.sub("", str(exc)).splitlines() if ln.strip()]
    name = type(exc).__name__
    if len(lines) > 1 and lines[0].endswith(":"):
        # a header over a traceback (TensorFlow's "in user code:"): the cause is its last line
        body = [ln for ln in lines[1:] if not ln.startswith(("File ", "^", "~"))]
        if body:
            last = body[-1].removeprefix(f"{name}: ")
            return f"{name}: {last[:limit]} ({lines[0].rstrip(':')})"
    return f"{name}: {lines[0][:limit] if lines else ''}"


# C0 controls but tab and newline, DEL, C1 controls (incl. the 8-bit CSI), and bidi overrides: a model or
# node name holding these could move the cursor, recolour or clear the terminal, or reorder what is shown
_UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(text: object) -> str:
    """``text`` with every terminal control character shown as an escape (``\\x1b``) instead of obeyed."""
    s = str(text)
    return _UNPRINTABLE.sub(lambda m: repr(m.group())[1:-1], s) if _UNPRINTABLE.search(s) else s
