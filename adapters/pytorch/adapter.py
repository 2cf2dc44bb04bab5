"""PyTorch -> ONNX through torch.onnx: the dynamo (torch.export) exporter first, TorchScript as fallback.

The result says which exporter ran and, for a fallback, why the first one failed. Warnings raised
while exporting (TracerWarning, UserWarning from model code, ...) are collected for the report
instead of being printed and lost. Dynamic axes are exported as unnamed dynamic dims and named by
the ONNX stage (NameDynamicAxesPass), so every framework's symbols are handled in one place.
"""

from __future__ import annotations

import inspect
import io
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import onnx

from adapters.base import ExportResult
from adapters.pytorch.loading import (
    EXPORTED_PROGRAM_SUFFIXES,
    TORCHSCRIPT_SUFFIXES,
    LoadedTorch,
    load,
    looks_like_factory,
)
from adapters.pytorch.runner import TorchReferenceRunner, flatten_outputs
from bridge.chatter import captured_warnings, quiet, root_cause
from bridge.config import ExportSpec, InputSpec, Source
from bridge.errors import AdapterUnavailableError, ExportError, UsageError
from bridge.runtimes.base import Runtime

logger = logging.getLogger(__name__)

DYNAMO = "torch.onnx (dynamo / torch.export)"
TORCHSCRIPT = "torch.onnx (TorchScript, legacy)"


def _require_torch() -> None:
    try:
        import torch  # noqa: F401
    except ImportError:
        raise AdapterUnavailableError("PyTorch", "converting PyTorch models", "pip install 'bridge[torch]'") from None


class PyTorchAdapter:
    framework = "torch"

    def claims(self, source: Source) -> bool:
        if source.obj is not None:
            return type(source.obj).__module__.split(".")[0] == "torch" or any(
                c.__module__.startswith("torch.") for c in type(source.obj).__mro__
            )
        loc = source.location or ""
        return Path(loc).suffix in TORCHSCRIPT_SUFFIXES + EXPORTED_PROGRAM_SUFFIXES or looks_like_factory(loc)

    def export(self, source: Source, spec: ExportSpec) -> ExportResult:
        _require_torch()
        loaded = load(source)
        inputs = _resolve_inputs(loaded, spec)
        example = _example_tensors(inputs)
        output_names = _output_names(loaded.module, example)
        if spec.output_names:
            if len(spec.output_names) != len(output_names):
                raise UsageError(f"--output-names gives {len(spec.output_names)} names; the model returns "
                                 f"{len(output_names)} tensors ({', '.join(output_names)})")
            output_names = list(spec.output_names)
        start = time.perf_counter()
        notes: list[str] = []
        with captured_warnings() as caught:
            try:
                model = _export_dynamo(loaded, example, inputs, output_names, spec)
                exporter = DYNAMO
            except Exception as exc:
                reason = root_cause(exc)
                logger.info("dynamo export failed (%s); falling back to the TorchScript exporter", reason)
                notes.append(f"dynamo exporter failed ({reason}); used the TorchScript exporter instead")
                try:
                    model = _export_torchscript(loaded, example, inputs, output_names, spec)
                except Exception as exc2:
                    raise ExportError(
                        f"both PyTorch exporters failed.\n  dynamo: {reason}\n  TorchScript: {type(exc2).__name__}: {exc2}"
                    ) from exc2
                exporter = TORCHSCRIPT
        return ExportResult(
            model=model, exporter=exporter, inputs=inputs, output_names=tuple(output_names),
            warnings=caught, notes=notes, seconds=time.perf_counter() - start,
        )

    def reference_runner(self, source: Source, export: ExportResult) -> Runtime:
        _require_torch()
        return TorchReferenceRunner(load(source).module, export.inputs, export.output_names)


def forward_input_names(loaded: LoadedTorch) -> list[str]:
    """Names of the model's tensor inputs, in call order."""
    if loaded.exported_program is not None:
        from torch.export.graph_signature import InputKind

        return [s.arg.name for s in loaded.exported_program.graph_signature.input_specs
                if s.kind == InputKind.USER_INPUT]
    module = loaded.module
    schema = getattr(getattr(module, "forward", None), "schema", None)
    if schema is not None:  # ScriptModule: first argument is self
        return [a.name for a in schema.arguments[1:]]
    params = inspect.signature(module.forward).parameters.values()
    return [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def _resolve_inputs(loaded: LoadedTorch, spec: ExportSpec) -> tuple[InputSpec, ...]:
    names = forward_input_names(loaded)
    given = {s.name: s for s in spec.inputs}
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise UsageError(f"--input {unknown[0]}: the model's forward() takes {names}")
    if loaded.exported_program is not None:
        args = loaded.exported_program.example_inputs[0]
        samples = {n: InputSpec(n, tuple(a.shape), str(a.dtype).replace("torch.", "")) for n, a in zip(names, args, strict=False)}
        return tuple(given.get(n, samples[n]) for n in names if n in samples)
    missing = [n for n in names if n not in given or given[n].shape is None]
    if missing:
        raise UsageError(
            "give a sample shape for every input of forward(): "
            + " ".join(f"--input {n}:SHAPE" for n in missing)
        )
    return tuple(given[n] for n in names)


def _example_tensors(inputs: Sequence[InputSpec]) -> tuple[Any, ...]:
    import numpy as np
    import torch

    rng = np.random.default_rng(0)
    tensors = []
    for s in inputs:
        assert s.shape is not None
        if np.dtype(s.dtype).kind == "f":
            arr = rng.standard_normal(s.shape).astype(s.dtype)
        else:
            arr = rng.integers(0, 10, size=s.shape).astype(s.dtype)
        tensors.append(torch.from_numpy(arr))
    return tuple(tensors)


def _output_names(module: Any, example: tuple[Any, ...]) -> list[str]:
    import torch

    with torch.no_grad():
        out = module(*example)
    names = list(flatten_outputs(out))
    if not names:
        raise ExportError("the model returned no tensors")
    return names


def _dynamo_dynamic_shapes(inputs: Sequence[InputSpec], spec: ExportSpec) -> dict[str, Any] | None:
    if not spec.dynamic:
        return None
    from torch.export import Dim

    shapes: dict[str, Any] = {s.name: None for s in inputs}
    for axis in spec.dynamic:
        given = spec.input(axis.input)
        rank = len(given.shape or ()) if given is not None else 0
        entry = shapes.get(axis.input) or {}
        entry[axis.axis % rank if rank else axis.axis] = Dim.DYNAMIC
        shapes[axis.input] = entry
    return shapes


def _export_dynamo(loaded: LoadedTorch, example: tuple[Any, ...], inputs: Sequence[InputSpec],
                   output_names: Sequence[str], spec: ExportSpec) -> onnx.ModelProto:
    import torch

    target = loaded.exported_program if loaded.exported_program is not None else loaded.module
    with quiet(["torch"], "torch.onnx", stderr=True):  # progress prints, graph dumps, torchvision notices
        program = torch.onnx.export(
            target, example, dynamo=True, input_names=[s.name for s in inputs], output_names=list(output_names),
            opset_version=max(spec.opset, 18),  # the dynamo exporter emits >= 18; the ONNX stage converts down
            dynamic_shapes=None if loaded.exported_program is not None else _dynamo_dynamic_shapes(inputs, spec),
            optimize=True, verify=False, report=False,
        )
    assert program is not None
    return program.model_proto


def _export_torchscript(loaded: LoadedTorch, example: tuple[Any, ...], inputs: Sequence[InputSpec],
                        output_names: Sequence[str], spec: ExportSpec) -> onnx.ModelProto:
    import torch

    buffer = io.BytesIO()
    dynamic_axes: dict[str, dict[int, str]] = {}
    for axis in spec.dynamic:
        dynamic_axes.setdefault(axis.input, {})[axis.axis] = axis.label
    with quiet(["torch"], "torch.onnx", stderr=True):  # progress prints, graph dumps, torchvision notices
        torch.onnx.export(
            loaded.module, example, buffer,  # type: ignore[arg-type]  # the TorchScript exporter takes file objects
            dynamo=False, input_names=[s.name for s in inputs],
            output_names=list(output_names), opset_version=min(max(spec.opset, 7), 20),
            dynamic_axes=dynamic_axes or None, do_constant_folding=True,
        )
    return onnx.load_from_string(buffer.getvalue())
