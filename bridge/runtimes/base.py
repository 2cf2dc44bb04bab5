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
import onnx

from bridge.errors import UsageError

Dim = int | str | None  # concrete size, symbolic name, or unknown


@dataclass(frozen=True)
class TensorMeta:
    """Name, shape (ints, symbolic names or None) and numpy dtype name of one tensor."""

    name: str
    shape: tuple[Dim, ...] | None
    dtype: str

    @classmethod
    def from_value_info(cls, vi: onnx.ValueInfoProto, *, unknown_dtype: str = "unknown") -> TensorMeta:
        """A graph input/output as declared in the model: ints, symbolic names, None for unknown dims."""
        tt = vi.type.tensor_type
        shape = None
        if tt.HasField("shape"):
            shape = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim)
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type).name if tt.elem_type else unknown_dtype
        return cls(vi.name, shape, dtype)

    @property
    def symbolic_dims(self) -> list[tuple[int, Dim]]:
        return [(i, d) for i, d in enumerate(self.shape or ()) if not isinstance(d, int)]


@runtime_checkable
class Runtime(Protocol):
    """activate() loads, infer() runs, deactivate() frees. infer returns outputs by name.

    A runtime that sizes its own thread pool (rather than from OMP_NUM_THREADS and the like) may also offer
    ``set_threads(n)``, called before ``activate`` (``bridge bench --threads``); it is optional."""

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


def signature_feeds(feeds: Mapping[str, np.ndarray], to_key: Mapping[str, str], inputs: Sequence[str],
                    what: str) -> dict[str, np.ndarray]:
    """``feeds`` (by ONNX name) keyed by a signature's own input names (``to_key``: ONNX name -> key), for
    runtimes whose artefact renames inputs (a SavedModel, a .tflite); a UsageError names a feed that is not
    an input of ``what`` and the inputs left without a feed."""
    keyed = {}
    for name, value in feeds.items():
        key = to_key.get(name, name)
        if key not in inputs:
            raise UsageError(f"feed '{name}' is not an input of the {what} (inputs: {', '.join(inputs)})")
        keyed[key] = value
    missing = sorted(set(inputs) - set(keyed))
    if missing:
        raise UsageError(f"no feed for {what.split(' signature')[0]} input(s) {missing}")
    return keyed
