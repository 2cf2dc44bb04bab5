"""Memory limits: sizes declared by files or options are checked here *before* anything is allocated.

A ``.params`` header, an ``.npz`` member, an ONNX input dim or an MXNet ``_arange`` attribute can
declare any size; trusting it turns a 2 MB file into a 2 GB allocation (or an OOM kill). Readers call
``check_allocation(nbytes, what)`` with the size they are about to allocate; over the limit it raises
``ResourceLimitError`` (exit 3) naming what declared the size, the size and the limit.

The limit is ``--max-memory`` when the caller set one (``memory_limit(...)`` around the work), else
``BRIDGE_MAX_MEMORY`` from the environment, else ``DEFAULT_MAX_MEMORY_FRACTION`` of the machine's RAM.
A leaf module: it imports only ``bridge.errors``.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import os
import re
from collections.abc import Iterable, Iterator
from typing import Any

from bridge.errors import ResourceLimitError, UsageError

DEFAULT_MAX_MEMORY_FRACTION = 0.5  # of physical RAM: room for the source framework and a runtime side by side
FALLBACK_MAX_MEMORY = 8 * 2**30  # when the RAM size cannot be read (non-POSIX)
ENV_VAR = "BRIDGE_MAX_MEMORY"

_UNITS = {"": 1, "b": 1, "k": 2**10, "kb": 10**3, "kib": 2**10, "m": 2**20, "mb": 10**6, "mib": 2**20,
          "g": 2**30, "gb": 10**9, "gib": 2**30, "t": 2**40, "tb": 10**12, "tib": 2**40}
_current: contextvars.ContextVar[int | None] = contextvars.ContextVar("bridge_max_memory", default=None)


def parse_size(text: str, option: str = "--max-memory") -> int:
    """``'4G'``, ``'512MiB'``, ``'1e9'``, ``'0.25ram'`` (a fraction of RAM) -> bytes; UsageError otherwise."""
    t = text.strip().lower().replace("_", "")
    m = re.fullmatch(r"([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*(ram|[kmgt]?i?b?)", t)
    if not m:
        raise UsageError(f"{option} '{text}': expected a size such as 4G, 512M, 1e9 or 0.5ram")
    value = float(m.group(1))
    unit = m.group(2)
    nbytes = value * physical_memory() if unit == "ram" else value * _UNITS[unit]
    if not math.isfinite(nbytes) or nbytes < 1:
        raise UsageError(f"{option} '{text}': must be a positive size")
    return int(nbytes)


def physical_memory() -> int:
    """Bytes of RAM on this machine (``FALLBACK_MAX_MEMORY`` x 2 when it cannot be read)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 2 * FALLBACK_MAX_MEMORY


def default_max_memory() -> int:
    """``BRIDGE_MAX_MEMORY`` when set, else ``DEFAULT_MAX_MEMORY_FRACTION`` of RAM."""
    env = os.environ.get(ENV_VAR)
    if env:
        return parse_size(env, ENV_VAR)
    return int(physical_memory() * DEFAULT_MAX_MEMORY_FRACTION)


def max_memory() -> int:
    """The limit in force: the innermost ``memory_limit`` block, else the default."""
    current = _current.get()
    return current if current is not None else default_max_memory()


@contextlib.contextmanager
def memory_limit(nbytes: int | str | None) -> Iterator[int]:
    """Run a block under ``nbytes`` (None = the default); what ``--max-memory`` sets for one command.

    The limit is also exported as ``BRIDGE_MAX_MEMORY`` for the block, so child processes started in it
    (isolated references and runtimes) check against the same limit."""
    value = default_max_memory() if nbytes is None else parse_size(nbytes) if isinstance(nbytes, str) else int(nbytes)
    if value <= 0:
        raise UsageError(f"--max-memory {nbytes}: must be a positive size")
    token = _current.set(value)
    # child processes (isolated references and runtimes) read the limit from the environment
    previous = os.environ.get(ENV_VAR)
    os.environ[ENV_VAR] = str(value)
    try:
        yield value
    finally:
        _current.reset(token)
        if previous is None:
            os.environ.pop(ENV_VAR, None)
        else:
            os.environ[ENV_VAR] = previous


def format_bytes(n: float) -> str:
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.3g} {unit} ({int(n):,} bytes)"
    return f"{int(n):,} bytes"


def nbytes_of(shape: Iterable[int], itemsize: int) -> int:
    """Exact byte size of an array of ``shape`` (Python ints: never wraps like an int64 product)."""
    return math.prod(int(d) for d in shape) * int(itemsize)


def check_allocation(nbytes: int, what: str, limit: int | None = None) -> None:
    """Refuse (ResourceLimitError, exit 3) to allocate ``nbytes`` for ``what`` when over ``limit``."""
    lim = max_memory() if limit is None else limit
    if nbytes > lim:
        raise ResourceLimitError(
            f"{what} declares {format_bytes(nbytes)}, over the memory limit of {format_bytes(lim)}; "
            f"raise it with --max-memory (or {ENV_VAR}) if this size is real"
        )


def _const(node: Any, index: int) -> Any:
    """The constant value (numpy) of ``node``'s input ``index``, or None when it is not a constant."""
    inputs = getattr(node, "inputs", ())
    value = inputs[index] if index < len(inputs) else None
    tensor = getattr(value, "const_value", None)
    if tensor is None:
        return None
    try:
        return tensor.numpy()
    except Exception:  # a tensor whose data cannot be read is not ours to judge
        return None


def _static_dims(value: Any) -> list[int] | None:
    shape = getattr(value, "shape", None)
    if shape is None:
        return None
    dims = list(shape)
    return dims if all(isinstance(d, int) and d >= 0 for d in dims) else None


def fold_output_elements(node: Any) -> int | None:
    """How many elements constant-folding ``node`` (an onnx_ir node) would allocate for its largest output,
    judged *before* evaluating it: from a recorded static output shape, or from the constant inputs of the
    ops that take a size as data (ConstantOfShape, Expand, Tile, Range). None when nothing tells.

    A 500-byte ONNX file can hold ``ConstantOfShape([100000, 100000, 1000])``; the folder would allocate
    it before looking at the result's size. Duck-typed on onnx_ir's Node/Value so this module stays a leaf."""
    sizes: list[int] = []
    for out in getattr(node, "outputs", ()):
        dims = _static_dims(out)
        if dims is not None:
            sizes.append(math.prod(dims))
    op = getattr(node, "op_type", "")
    with contextlib.suppress(TypeError, ValueError, OverflowError):
        if op == "ConstantOfShape" and (shape := _const(node, 0)) is not None:
            sizes.append(math.prod(int(d) for d in shape.reshape(-1)))
        elif op == "Expand" and (shape := _const(node, 1)) is not None:
            given = _static_dims(node.inputs[0]) or []
            target = [int(d) for d in shape.reshape(-1)]
            rank = max(len(given), len(target))
            given, target = [1] * (rank - len(given)) + given, [1] * (rank - len(target)) + target
            sizes.append(math.prod(max(a, b) for a, b in zip(given, target, strict=True)))
        elif op == "Tile" and (repeats := _const(node, 1)) is not None:
            tiled = _static_dims(node.inputs[0])
            if tiled is not None:
                sizes.append(math.prod(tiled) * math.prod(abs(int(r)) for r in repeats.reshape(-1)))
        elif op == "Range" and all(_const(node, i) is not None for i in range(3)):
            start, limit, delta = (float(_const(node, i).reshape(-1)[0]) for i in range(3))
            if delta != 0 and math.isfinite(start) and math.isfinite(limit):
                sizes.append(max(0, math.ceil((limit - start) / delta)))
    return max(sizes) if sizes else None


def fold_fits(node: Any, itemsize: int = 8) -> bool:
    """False when folding ``node`` would allocate more than a quarter of the memory limit (the folder then
    leaves the node to the runtime, where isolation and ``--max-memory`` bound it)."""
    elements = fold_output_elements(node)
    return elements is None or elements * itemsize <= max_memory() // 4
