"""The one protocol every target runtime and every adapter's reference runner implements.

Validation only ever talks to this protocol, so a reference produced by PyTorch, MXNet or a
saved RunResults file and a candidate running in onnxruntime or TensorFlow are interchangeable.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

Dim = int | str | None  # concrete size, symbolic name, or unknown


@dataclass(frozen=True)
class TensorMeta:
    """Name, shape (ints, symbolic names or None) and numpy dtype name of one tensor."""

    name: str
    shape: tuple[Dim, ...] | None
    dtype: str

    @property
    def symbolic_dims(self) -> list[tuple[int, Dim]]:
        return [(i, d) for i, d in enumerate(self.shape or ()) if not isinstance(d, int)]


@runtime_checkable
class Runtime(Protocol):
    """activate() loads, infer() runs, deactivate() frees. infer returns outputs by name."""

    name: str

    def activate(self) -> None: ...

    def infer(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]: ...

    def deactivate(self) -> None: ...

    def input_metadata(self) -> Sequence[TensorMeta]: ...


@contextmanager
def activated(runtime: Runtime) -> Iterator[Runtime]:
    """``with activated(rt): rt.infer(...)`` - deactivate even when inference raises."""
    runtime.activate()
    try:
        yield runtime
    finally:
        runtime.deactivate()
