"""PyTorch -> ONNX through torch.onnx: the dynamo (torch.export) exporter first, TorchScript as fallback.

``--exporter auto`` (default) captures the model with ``torch.export`` (non-strict) once; data-dependent
control flow (torchvision's detectors: ``if boxes.numel() == 0`` after score thresholding) makes it go
straight to TorchScript instead of letting the dynamo exporter retry other capture strategies that
fail the same way (that doubled conversion time). ``dynamo`` / ``torchscript`` use one exporter only.
The result says which exporter ran and why. When the dynamo export itself fails (T5's attention in torch
2.13) and the export runs in a child process, the TorchScript fallback runs in a fresh child
(``adapters.base.ExportRetry``): what the dynamo attempt loaded would otherwise sit beside the trace at
the export's peak. Both trace the model on the user's representative
inputs (``ExportSpec.examples``: ``--feeds`` or ``--input-kind/--input-range``), the ones validation
uses, so a branch fixed by tracing (one detection in a traced mask head) shows in validation.

A TorchScript trace bakes Python-level loops over a tensor's axis (``unbind``, iterating a batch)
into ``Split`` nodes with a fixed count; when that axis was asked to be dynamic the conversion stops
with an ExportError naming the node, instead of a model that fails at any other size.

Warnings raised while exporting (TracerWarning, UserWarning from model code, ...) are collected for
the report, grouped one line per distinct message with a count. Dynamic axes are exported as
unnamed dynamic dims and named by the ONNX stage (NameDynamicAxesPass), so every framework's
symbols are handled in one place.
"""

from __future__ import annotations

import ast
import inspect
import io
import logging
import time
from collections.abc import Collection, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

import onnx

from adapters.base import FRESH_RETRY, ExportResult, ExportRetry, check_output_names
from adapters.pytorch.loading import (
    EXPORTED_PROGRAM_SUFFIXES,
    TORCHSCRIPT_SUFFIXES,
    LoadedTorch,
    load,
    looks_like_factory,
)
from adapters.pytorch.runner import TorchReferenceRunner, flatten_outputs
from bridge import provenance
from bridge.chatter import captured_warnings, group_warnings, quiet, root_cause
from bridge.config import DynamicAxis, ExportSpec, InputSpec, Option, Source
from bridge.errors import AdapterUnavailableError, ExportError, UsageError
from bridge.frameworks import framework_found
from bridge.runtimes.base import Runtime

logger = logging.getLogger(__name__)

DYNAMO = "torch.onnx (dynamo / torch.export)"
TORCHSCRIPT = "torch.onnx (TorchScript, legacy)"
EXPORTERS = ("auto", "dynamo", "torchscript")  # --exporter: this adapter's own option (Source.options["exporter"])
# Source.options key of auto's fallback run again in a fresh process (ExportRetry): why dynamo failed
FALLBACK_REASON = "exporter_fallback_reason"


def _require_torch() -> None:
    try:
        import torch  # noqa: F401
    except ImportError:
        raise AdapterUnavailableError("PyTorch", "converting PyTorch models", "pip install 'bridge[torch]'") from None


class PyTorchAdapter:
    framework = "torch"
    honours = ("weights", "output_names")  # the source-specific convert options it reads (no --outputs cut)
    # --dataset preprocessing when the user gives none (bridge.validation.dataset; stated in the report)
    dataset_preprocessing = MappingProxyType({"channel_order": "RGB", "scale": "1/255",
                                              "why": "torchvision's detectors: RGB in [0, 1], normalised inside the model"})
    # the recipe runs export() in a child process (file sources, isolation on): the framework never enters
    # bridge's own process, which holds only the ONNX model while validation children run
    export_in_child = True
    # ... and that child goes on to run the validation reference (torch imported once per conversion): the
    # reference builds the model again there, as a fresh process would (a factory runs seeded, FACTORY_SEED;
    # files are read again), and torch.onnx leaves no state that changes how a module runs. Off: the kept child
    # carries the exporter's modules (+42-75 MB at the peak, bench/results/2026-11-28-convert-time.md), which
    # breaks the <= 1.3x-of-the-plain-exporter memory bound on small models for ~2 s saved per conversion
    reference_in_export_child = False
    options = (Option("exporter", str, "auto", "PyTorch exporter: auto (dynamo unless torch.export finds "
                      "data-dependent control flow, then TorchScript) | dynamo | torchscript",
                      choices=lambda: EXPORTERS),)

    def claims(self, source: Source) -> bool:
        if source.obj is not None:
            return type(source.obj).__module__.split(".")[0] == "torch" or any(
                c.__module__.startswith("torch.") for c in type(source.obj).__mro__
            )
        loc = source.location or ""
        return Path(loc).suffix in TORCHSCRIPT_SUFFIXES + EXPORTED_PROGRAM_SUFFIXES or looks_like_factory(loc)

    def require_framework(self) -> None:
        """AdapterUnavailableError when PyTorch is not installed, checked before an export child starts."""
        if not framework_found("torch"):
            _require_torch()

    def export(self, source: Source, spec: ExportSpec) -> ExportResult:
        _require_torch()
        loaded = load(source)
        inputs = _resolve_inputs(loaded, spec)
        example, example_source = _example_tensors(inputs, spec)
        inputs = tuple(InputSpec(s.name, tuple(t.shape), str(t.dtype).removeprefix("torch."), s.dtype_given)
                       for s, t in zip(inputs, example, strict=True))
        output_names = _output_names(loaded.module, example)
        if spec.output_names:
            check_output_names(spec.output_names, output_names)
            output_names = list(spec.output_names)
        start = time.perf_counter()
        with captured_warnings() as caught:
            asked = str(source.options.get("exporter") or "auto")
            fallback = source.options.get(FALLBACK_REASON)  # auto's fallback, run in a fresh process
            if fallback:
                model, exporter, notes = _torchscript_fallback(loaded, example, inputs, output_names, spec,
                                                               str(fallback))
            else:
                model, exporter, notes = _export(loaded, example, inputs, output_names, spec, asked)
        if exporter == TORCHSCRIPT:
            # after auto's fallback, dynamo has already failed: the advice must not send the user back to it
            check_traced_dynamic_axes(model, inputs, spec.dynamic, dynamo_failed=asked == "auto" or bool(fallback))
        stamp_provenance(model, exporter)
        return ExportResult(
            model=model, exporter=exporter, inputs=inputs, output_names=tuple(output_names),
            warnings=group_warnings(caught), notes=notes, seconds=time.perf_counter() - start,
            example_source=example_source, warning_details=list(caught),
        )

    def reference_runner(self, source: Source, export: ExportResult) -> Runtime:
        _require_torch()
        return TorchReferenceRunner(load(source).module, export.inputs, export.output_names)


def forward_input_names(loaded: LoadedTorch, named: Collection[str] = ()) -> list[str]:
    """Names of the model's tensor inputs, in call order.

    A forward() argument with a default (``attn_mask=None``, ``is_causal=False``) is an input only when
    the user names it (``named``, from ``--input``): the exporters trace the default otherwise. Inputs are
    passed positionally, so a named optional argument after an unnamed one is a usage error.
    """
    if loaded.exported_program is not None:
        from torch.export.graph_signature import InputKind

        return [s.arg.name for s in loaded.exported_program.graph_signature.input_specs
                if s.kind == InputKind.USER_INPUT]
    module = loaded.module
    schema = getattr(getattr(module, "forward", None), "schema", None)
    if schema is not None:  # ScriptModule: first argument is self
        params = [(a.name, a.default_value is not None) for a in schema.arguments[1:]]
    else:
        params = [(p.name, p.default is not p.empty) for p in inspect.signature(module.forward).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    names: list[str] = []
    skipped: list[str] = []
    for name, optional in params:
        if optional and name not in named:
            skipped.append(name)
            continue
        if optional and skipped:
            raise UsageError(f"--input {name}: forward() takes its inputs positionally; name the optional "
                             f"argument(s) before it too ({', '.join(f'--input {s}:SHAPE' for s in skipped)})")
        names.append(name)
    return names


def _resolve_inputs(loaded: LoadedTorch, spec: ExportSpec) -> tuple[InputSpec, ...]:
    given = {s.name: s for s in spec.inputs}
    names = forward_input_names(loaded, given)
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise UsageError(f"--input {unknown[0]}: the model's forward() takes {names}")
    if loaded.exported_program is not None:
        args = loaded.exported_program.example_inputs[0]
        samples = {n: InputSpec(n, tuple(a.shape), str(a.dtype).replace("torch.", "")) for n, a in zip(names, args, strict=False)}
        return tuple(given.get(n, samples[n]) for n in names if n in samples)
    missing = [n for n in names if n not in given or given[n].shape is None]
    if missing and spec.examples is not None:  # --feeds gives the sample shapes
        try:
            arrays = spec.examples([given.get(n, InputSpec(n)) for n in names])
            return tuple(InputSpec(n, tuple(arrays[n].shape), arrays[n].dtype.name) for n in names)
        except UsageError:
            pass
    if missing:
        raise UsageError(
            "give a sample shape for every input of forward(): "
            + " ".join(f"--input {n}:SHAPE" for n in missing)
        )
    return tuple(given[n] for n in names)


def _example_tensors(inputs: Sequence[InputSpec], spec: ExportSpec) -> tuple[tuple[Any, ...], str]:
    """The tensors the model is traced on and where they came from: ``spec.examples`` (the inputs
    validation uses) when given, else seeded standard normal / small integers."""
    import numpy as np
    import torch

    if spec.examples is not None:
        arrays = spec.examples(inputs)
        where = getattr(spec.examples, "description", "the inputs validation uses")
        return tuple(torch.from_numpy(np.array(arrays[s.name], order="C")) for s in inputs), where  # a writable copy
    rng = np.random.default_rng(0)
    tensors = []
    for s in inputs:
        assert s.shape is not None
        if np.dtype(s.dtype).kind == "f":
            arr = rng.standard_normal(s.shape).astype(s.dtype)
        else:
            arr = rng.integers(0, 10, size=s.shape).astype(s.dtype)
        tensors.append(torch.from_numpy(arr))
    return tuple(tensors), "seeded standard normal noise"


def _export(loaded: LoadedTorch, example: tuple[Any, ...], inputs: Sequence[InputSpec], output_names: Sequence[str],
            spec: ExportSpec, which: str = "auto") -> tuple[onnx.ModelProto, str, list[str]]:
    """Run the exporter ``which`` (``--exporter``); returns the model, the exporter used and why (notes)."""
    if which not in EXPORTERS:
        raise UsageError(f"--exporter '{which}': choose one of {', '.join(EXPORTERS)}")
    if which == "torchscript":
        if loaded.exported_program is not None:
            raise UsageError("--exporter torchscript: a .pt2 ExportedProgram can only go through the dynamo exporter")
        return (_export_torchscript(loaded, example, inputs, output_names, spec), TORCHSCRIPT,
                ["exporter: TorchScript (--exporter torchscript)"])
    if which == "dynamo":
        try:
            return (_export_dynamo(loaded, example, inputs, output_names, spec), DYNAMO,
                    ["exporter: dynamo (--exporter dynamo)"])
        except Exception as exc:
            fixed = " (which traces loops over a dynamic axis at a fixed size: drop --dynamic then)" if spec.dynamic else ""
            raise ExportError(f"the dynamo exporter failed ({root_cause(exc)}); try --exporter torchscript{fixed}") from exc
    # auto: one torch.export capture decides whether dynamo can work at all
    program = loaded.exported_program
    why = None
    if program is None:
        try:
            program = _capture(loaded, example, inputs, spec)
        except Exception as exc:
            reason = root_cause(exc)
            if not _data_dependent(exc):
                program = None  # let the dynamo exporter try its other capture strategies
                logger.info("torch.export (non-strict) failed (%s); the dynamo exporter tries its other strategies", reason)
            else:
                logger.info("data-dependent control flow (%s); using the TorchScript exporter", reason)
                why = f"dynamo exporter failed at capture: torch.export found data-dependent control flow ({reason})"
    if why is not None:  # torch.export stopped early: little was loaded, TorchScript runs here
        return _torchscript_fallback(loaded, example, inputs, output_names, spec, why)
    try:
        model = _export_dynamo(loaded, example, inputs, output_names, spec, program=program)
        return model, DYNAMO, ["exporter: dynamo (auto: torch.export captured the model)"]
    except Exception as exc:
        reason = root_cause(exc)
        logger.info("dynamo export failed (%s); falling back to the TorchScript exporter", reason)
        why = f"dynamo exporter failed ({reason})"
    # What the dynamo attempt loaded (the exporter's op library, torch.export's caches) is no garbage: in this
    # process it would sit beside the TorchScript trace at the export's peak (+75 MB on a small T5 encoder,
    # bench/zoo_memory.py). Exporting in a child, the recipe runs the fallback in a fresh one instead.
    if FRESH_RETRY.get():
        raise ExportRetry(f"{why}; the TorchScript exporter runs in a fresh process",
                          {"exporter": "torchscript", FALLBACK_REASON: why})
    program = None
    return _torchscript_fallback(loaded, example, inputs, output_names, spec, why)


def _torchscript_fallback(loaded: LoadedTorch, example: tuple[Any, ...], inputs: Sequence[InputSpec],
                          output_names: Sequence[str], spec: ExportSpec, why: str) -> tuple[onnx.ModelProto, str, list[str]]:
    try:
        model = _export_torchscript(loaded, example, inputs, output_names, spec)
    except Exception as exc2:
        raise ExportError(f"both PyTorch exporters failed.\n  dynamo: {why}\n  TorchScript: {root_cause(exc2)}") from exc2
    return model, TORCHSCRIPT, [f"{why}; used the TorchScript exporter instead (auto)"]


def _capture(loaded: LoadedTorch, example: tuple[Any, ...], inputs: Sequence[InputSpec], spec: ExportSpec) -> Any:
    import torch

    with quiet(["torch"], "torch.export", stderr=True):
        return torch.export.export(loaded.module, example, dynamic_shapes=_dynamo_dynamic_shapes(inputs, spec),
                                   strict=False)


def _data_dependent(exc: BaseException) -> bool:
    """torch.export stopped on control flow that depends on tensor values (no other capture strategy helps)."""
    seen: BaseException | None = exc
    while seen is not None:
        name = type(seen).__name__
        if name in ("GuardOnDataDependentSymNode", "PendingUnbackedSymbolNotFound") or \
                "data-dependent" in str(seen) or "data dependent" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def check_traced_dynamic_axes(model: onnx.ModelProto, inputs: Sequence[InputSpec], dynamic: Sequence[DynamicAxis],
                              dynamo_failed: bool = False) -> None:
    """ExportError when the traced graph splits a dynamic axis into a fixed number of pieces (``unbind``,
    a Python loop over the batch): the model would fail at every other size of that axis.

    The advice ends where it cannot loop: dynamo is suggested only when it has not run (``dynamo_failed``:
    auto already tried it); the way out that always works is a fixed size for that axis."""
    if not dynamic:
        return
    labels = {a.label: a for a in dynamic}
    try:
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)  # follows computed Reshape shapes
    except Exception:  # inference is a help here, not a requirement
        inferred = model
    dims: dict[str, list[str | int]] = {}
    for vi in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]:
        t = vi.type.tensor_type
        if t.HasField("shape"):
            dims[vi.name] = [d.dim_param or d.dim_value for d in t.shape.dim]
    for node in inferred.graph.node:
        if node.op_type not in ("Split", "SplitToSequence") or not node.input:
            continue
        shape = dims.get(node.input[0])
        axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
        if shape is None or not -len(shape) <= axis < len(shape):
            continue
        dim = shape[axis]
        if not isinstance(dim, str) or dim not in labels or (node.op_type == "SplitToSequence" and len(node.input) < 2):
            continue
        axis_spec = labels[dim]
        given = next((s for s in inputs if s.name == axis_spec.input), None)
        size = given.shape[axis_spec.axis] if given is not None and given.shape is not None else "its sample size"
        pieces = len(node.output) if node.op_type == "Split" else "a fixed number of"
        raise ExportError(
            f"the traced graph fixes axis {axis_spec.axis} of '{axis_spec.input}' to {size}: node {node.op_type} "
            f"'{node.name}' splits that axis ('{dim}') into {pieces} pieces (a Python loop or unbind over it, "
            f"recorded by tracing); "
            + ("" if dynamo_failed else "trace with dynamo (--exporter dynamo), or ")
            + f"export at a fixed size: remove --dynamic {axis_spec.input}:{axis_spec.axis}={axis_spec.label} "
              f"(for a batch: export batch 1 and run the images one by one, e.g. with "
              f"examples/batch_loop/run_batches.py, which pads per-image detections and stacks them)")


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
                   output_names: Sequence[str], spec: ExportSpec, program: Any = None) -> onnx.ModelProto:
    import torch

    if program is None:
        program = loaded.exported_program
    target = program if program is not None else loaded.module
    with quiet(["torch"], "torch.onnx", stderr=True):  # progress prints, graph dumps, torchvision notices
        program = torch.onnx.export(
            target, example, dynamo=True, input_names=[s.name for s in inputs], output_names=list(output_names),
            opset_version=max(spec.opset, 18),  # the dynamo exporter emits >= 18; the ONNX stage converts down
            dynamic_shapes=None if program is not None else _dynamo_dynamic_shapes(inputs, spec),
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


def stamp_provenance(model: onnx.ModelProto, exporter: str) -> None:
    """Each node's PyTorch origin from what torch.onnx (dynamo) records on it: the module scopes and the
    fx node (``c/conv2d``) and the aten op (``aten.conv2d.default``). Nodes without those records (the
    TorchScript exporter) are stamped by the pass runner with their own name and op."""
    for node in model.graph.node:
        meta = {p.key: p.value for p in node.metadata_props}
        try:
            scopes = ast.literal_eval(meta.get("pkg.torch.onnx.name_scopes", "None"))
            classes = ast.literal_eval(meta.get("pkg.torch.onnx.class_hierarchy", "None"))
        except (ValueError, SyntaxError):
            continue
        if not isinstance(scopes, list) or not scopes:
            continue
        op = str(classes[-1]) if isinstance(classes, list) and classes else node.op_type
        provenance.write(node, provenance.Provenance("torch", "/".join(str(s) for s in scopes if s), op,
                                                     provenance.made_by(provenance.EXPORTER, exporter)))
