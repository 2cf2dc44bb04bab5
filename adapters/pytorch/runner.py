"""The PyTorch reference runner: the source model itself behind bridge's Runtime protocol."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from adapters.base import source_failures
from bridge.config import InputSpec
from bridge.errors import ExportError
from bridge.runtimes.base import TensorMeta


def flatten_outputs(out: Any, prefix: str = "") -> dict[str, Any]:
    """Name a forward() result's tensors: a lone tensor is 'output', sequences 'output_i', dicts use keys."""
    import torch

    if isinstance(out, torch.Tensor):
        return {prefix or "output": out}
    items: list[tuple[str, Any]]
    if isinstance(out, Mapping):
        items = [(str(k), v) for k, v in out.items()]
    elif isinstance(out, (list, tuple)):
        items = [(f"output_{i}" if not prefix else str(i), v) for i, v in enumerate(out)]
    elif out is None:
        return {}
    else:
        raise ExportError(f"forward() returned a {type(out).__name__}; bridge exports tensors, tuples, lists and dicts")
    flat: dict[str, Any] = {}
    for key, value in items:
        flat.update(flatten_outputs(value, f"{prefix}_{key}" if prefix else key))
    return flat


class TorchReferenceRunner:
    """Runs the torch module on numpy feeds (no grad, eval mode) and names outputs like the export did."""

    name = "torch"

    def __init__(self, module: Any, inputs: Sequence[InputSpec], output_names: Sequence[str]) -> None:
        self.module = module
        self.inputs = tuple(inputs)
        self.output_names = tuple(output_names)

    def activate(self) -> None:
        # ExportedProgram.module() is already an inference graph and refuses eval()
        with contextlib.suppress(NotImplementedError):
            self.module.eval()

    def input_metadata(self) -> Sequence[TensorMeta]:
        return [TensorMeta(s.name, s.shape, s.dtype) for s in self.inputs]

    def infer(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        import torch

        args = [torch.from_numpy(np.array(feeds[s.name], order="C")) for s in self.inputs]  # writable copies
        with torch.no_grad(), source_failures("torch", f"running {type(self.module).__name__}.forward on the "
                                              "validation inputs", _torch_location):
            out = self.module(*args)
        flat = flatten_outputs(out)
        values = list(flat.values())
        if len(values) != len(self.output_names):
            raise ExportError(f"the model returned {len(values)} tensors, the export has {len(self.output_names)}")
        return {n: v.detach().cpu().numpy() for n, v in zip(self.output_names, values, strict=True)}

    def deactivate(self) -> None:
        pass


def _torch_location(message: str) -> str | None:
    """The innermost frame of the model's own code in the exception being handled (file:line in fn)."""
    import sys
    import traceback

    exc = sys.exc_info()[1]
    if exc is None:
        return None
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "/torch/" not in f.filename]
    if not frames:
        return None
    f = frames[-1]
    return f"{f.name} ({f.filename.rsplit('/', 1)[-1]}:{f.lineno})"
