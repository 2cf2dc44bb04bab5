"""The source framework's side of a per-layer comparison: which tensors it can return, and their values.

Used by ``bridge debug`` (localisation) and by validation's upstream tie proof (``bridge.conversion.pinning``):
it sits in the conversion layer, above the adapters it reads and below debug.

A ``SourceTaps`` names its tensors the way the converted model does, so both sides meet by name:

* MXNet: ``get_internals()`` outputs; the MXNet adapter names every ONNX tensor after MXNet's own
  ``<node>_output`` (``adapters/mxnet/registry.py``), and the node's op and attributes come from the
  symbol JSON (read without MXNet).
* ONNX sources: the source file's own intermediate tensors, run in onnxruntime (names survive the
  ONNX stage unless a pass rewrites their producer).
* PyTorch: module outputs through forward hooks, matched to ONNX tensors by the scopes torch.onnx's
  exporter records on every node (``pkg.torch.onnx.name_scopes``): a module's ONNX tensor is the one
  value leaving the nodes of its scope (modules with several, or called more than once, are skipped).
* Other frameworks (TensorFlow): only the final outputs for now (``FinalOutputsTaps``): the
  localisation then falls back to the ONNX stage's pass-by-pass comparison.

A pass that moves a Transpose across a named tensor records the new tensor as an alias of the source's
(``transpose(name, perm)``, ``bridge.provenance.TENSOR_ALIASES_META``); ``AliasedTaps`` serves it. Those
records are the model's word: only the ones ``bridge.validation.layout_aliases.check_claimed_aliases`` measured to
hold are handed to ``AliasedTaps``.
"""

from __future__ import annotations

import ast
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import onnx

from bridge.config import Source
from bridge.registry import LazyRegistry
from bridge.runtimes.base import Runtime
from bridge.validation.graph import OnnxTaps


@dataclass(frozen=True)
class SourceNode:
    """The source framework's node behind a tensor: its name, op and attributes as the source spells them."""

    name: str
    op: str
    attributes: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "op": self.op, "attributes": self.attributes}


class SourceTaps(Protocol):
    framework: str
    granularity: str  # what is compared: "every layer", "final outputs only", ...

    def names(self) -> set[str]: ...

    def run(self, feeds: Mapping[str, np.ndarray], names: Sequence[str]) -> dict[str, np.ndarray]: ...

    def describe(self, tensor: str) -> SourceNode | None: ...


class MXNetTaps:
    """Every internal output of an MXNet symbol, fetched in groups through the MXNet reference runtime."""

    framework = "mxnet"
    granularity = "every MXNet layer output (get_internals)"

    def __init__(self, symbol: Path, params: Path | None, inputs: Sequence[Any], output_map: Mapping[str, str]) -> None:
        from adapters.mxnet.symbol import read_symbol_json

        self.symbol, self.params, self.inputs = symbol, params, tuple(inputs)
        self.output_map = dict(output_map)  # ONNX graph output -> MXNet internal output
        self.graph = read_symbol_json(symbol)
        self._nodes = {n.name: n for n in self.graph.nodes}
        self._names: set[str] | None = None

    def _internal(self, name: str) -> str:
        return self.output_map.get(name, name)

    def names(self) -> set[str]:
        if self._names is None:
            from adapters.mxnet.reference import MXNetReferenceRuntime

            internals = set(MXNetReferenceRuntime(self.symbol, self.params, self.inputs, []).internal_output_names())
            internals |= {n[:-1] for n in internals if n.endswith("_output0")}  # box_nms & co: visible output 0
            self._names = {n for n in internals if n.endswith(tuple(f"_output{i}" for i in ("", *range(8))))}
            self._names |= {k for k, v in self.output_map.items() if v in internals}
        return self._names

    def run(self, feeds: Mapping[str, np.ndarray], names: Sequence[str]) -> dict[str, np.ndarray]:
        from adapters.mxnet.reference import MXNetReferenceRuntime

        runtime = MXNetReferenceRuntime(self.symbol, self.params, self.inputs, {n: self._internal(n) for n in names})
        runtime.activate()
        try:
            takes = runtime.takes()  # internals upstream of only some inputs take only those
            return runtime.infer({k: v for k, v in feeds.items() if k in takes})
        finally:
            runtime.deactivate()

    def describe(self, tensor: str) -> SourceNode | None:
        base = self._internal(tensor).rsplit("_output", 1)[0]
        node = self._nodes.get(base)
        if node is None:
            return None
        return SourceNode(node.name, node.op, dict(node.raw_attrs))


class OnnxSourceTaps:
    """An ONNX source file's own intermediate tensors, run in onnxruntime."""

    framework = "onnx"
    granularity = "every tensor of the source ONNX file"

    def __init__(self, path: Path) -> None:
        from bridge.io import load_model

        self.taps = OnnxTaps(load_model(path))

    def names(self) -> set[str]:
        return set(self.taps.index.order)

    def run(self, feeds: Mapping[str, np.ndarray], names: Sequence[str]) -> dict[str, np.ndarray]:
        return self.taps.run(feeds, names)

    def describe(self, tensor: str) -> SourceNode | None:
        facts = self.taps.index.node_of(tensor)
        return None if facts is None else SourceNode(facts.name, facts.op, facts.attributes)


class FinalOutputsTaps:
    """The reference runner's final outputs only (frameworks without per-layer taps yet)."""

    granularity = "final outputs only (per-layer taps are not implemented for this framework)"

    def __init__(self, framework: str, runner: Runtime, outputs: Sequence[str]) -> None:
        self.framework, self.runner, self.outputs = framework, runner, list(outputs)

    def names(self) -> set[str]:
        return set(self.outputs)

    def run(self, feeds: Mapping[str, np.ndarray], names: Sequence[str]) -> dict[str, np.ndarray]:
        self.runner.activate()
        try:
            values = self.runner.infer(feeds)
        finally:
            self.runner.deactivate()
        return {n: values[n] for n in names if n in values}

    def describe(self, tensor: str) -> SourceNode | None:
        return None


NAME_SCOPES_KEY = "pkg.torch.onnx.name_scopes"  # torch.onnx (dynamo) node metadata: ['', 'backbone', 'backbone.1', op]


def torch_module_tensors(model: onnx.ModelProto) -> dict[str, str]:
    """ONNX tensor -> the PyTorch module (qualified name) whose single output it is, from the exporter's scopes.

    A tensor leaving several nested scopes (``backbone`` and ``backbone.7``) goes to the innermost module.
    """
    scopes: dict[int, list[str]] = {}
    for k, node in enumerate(model.graph.node):
        raw = next((p.value for p in node.metadata_props if p.key == NAME_SCOPES_KEY), None)
        if raw is None:
            continue
        try:
            parts = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            continue
        if isinstance(parts, list) and len(parts) > 2:
            scopes[k] = [str(p) for p in parts[1:-1] if p]
    consumers: dict[str, list[int]] = {}
    for k, node in enumerate(model.graph.node):
        for i in node.input:
            consumers.setdefault(i, []).append(k)
    graph_outputs = {o.name for o in model.graph.output}
    members: dict[str, set[int]] = {}
    for k, mods in scopes.items():
        for m in mods:
            members.setdefault(m, set()).add(k)
    found: dict[str, str] = {}
    for module, nodes in members.items():
        leaving = {o for k in nodes for o in model.graph.node[k].output if o and
                   (o in graph_outputs or any(c not in nodes for c in consumers.get(o, [])))}
        if len(leaving) == 1:
            tensor = leaving.pop()
            if tensor not in found or module.count(".") > found[tensor].count(".") or len(module) > len(found[tensor]):
                found[tensor] = module
    return found


class TorchTaps:
    """PyTorch module outputs (forward hooks on the reference runner's module) and the final outputs."""

    framework = "torch"
    granularity = "every PyTorch module with one output (forward hooks, matched by the exporter's name scopes)"

    def __init__(self, runner: Any, modules: Mapping[str, str]) -> None:
        self.runner = runner
        self.modules = dict(modules)  # ONNX tensor -> module qualified name

    def names(self) -> set[str]:
        return set(self.modules) | set(getattr(self.runner, "output_names", ()))

    def _submodule(self, path: str) -> Any:
        try:
            return self.runner.module.get_submodule(path)
        except (AttributeError, TypeError):
            return None

    def run(self, feeds: Mapping[str, np.ndarray], names: Sequence[str]) -> dict[str, np.ndarray]:
        import torch

        captured: dict[str, np.ndarray] = {}
        calls: Counter[str] = Counter()
        handles = []
        for tensor in names:
            module = self._submodule(self.modules[tensor]) if tensor in self.modules else None
            if module is None:
                continue

            def hook(_m: Any, _args: Any, output: Any, tensor: str = tensor) -> None:
                calls[tensor] += 1
                if isinstance(output, torch.Tensor):
                    captured[tensor] = output.detach().cpu().numpy()
            handles.append(module.register_forward_hook(hook))
        self.runner.activate()
        try:
            outputs = self.runner.infer(feeds)
        finally:
            for h in handles:
                h.remove()
            self.runner.deactivate()
        values = {t: v for t, v in captured.items() if calls[t] == 1}  # a module called twice is ambiguous
        values.update({n: outputs[n] for n in names if n in outputs})
        return values

    def describe(self, tensor: str) -> SourceNode | None:
        path = self.modules.get(tensor)
        module = self._submodule(path) if path else None
        if module is None or path is None:
            return None
        extra = module.extra_repr() if hasattr(module, "extra_repr") else ""
        return SourceNode(path, type(module).__name__, {"repr": extra} if extra else {})


class AliasedTaps:
    """``taps`` plus the converted model's layout aliases (``bridge.provenance.TENSOR_ALIASES_META``): a tensor a
    pass computes as ``transpose(source tensor, perm)`` is served as exactly that. ``aliases`` are taken as given:
    pass those ``check_claimed_aliases`` kept (the model may be the file under test)."""

    def __init__(self, taps: SourceTaps, aliases: Mapping[str, Mapping[str, Any]]) -> None:
        self.taps = taps
        self.framework, self.granularity = taps.framework, taps.granularity
        known = taps.names()
        self.aliases = {k: (str(v["of"]), [int(p) for p in v["perm"]]) for k, v in aliases.items()
                        if v.get("of") in known and k not in known}

    def names(self) -> set[str]:
        return self.taps.names() | set(self.aliases)

    def run(self, feeds: Mapping[str, np.ndarray], names: Sequence[str]) -> dict[str, np.ndarray]:
        wanted = list(dict.fromkeys(self.aliases[n][0] if n in self.aliases else n for n in names))
        got = self.taps.run(feeds, wanted)
        out: dict[str, np.ndarray] = {}
        for n in names:
            of, perm = self.aliases.get(n, (n, None))
            if of in got:
                out[n] = got[of] if perm is None else np.ascontiguousarray(np.transpose(got[of], perm))
        return out

    def describe(self, tensor: str) -> SourceNode | None:
        return self.taps.describe(self.aliases[tensor][0] if tensor in self.aliases else tensor)


def _mxnet_taps(source: Source, export: Any, runner: Runtime) -> SourceTaps | None:
    if not source.location:
        return None
    from adapters.mxnet.adapter import OUTPUT_MAP_KEY, MXNetAdapter, source_outputs_only

    mapping = {n: n for n in export.output_names}
    for prop in export.model.metadata_props:
        if prop.key == OUTPUT_MAP_KEY:  # only entries naming the source's own outputs (the model may be under test)
            mapping.update(source_outputs_only(source, json.loads(prop.value)))
    return MXNetTaps(Path(source.location), MXNetAdapter().resolve_params(source), export.inputs, mapping)


def _onnx_taps(source: Source, export: Any, runner: Runtime) -> SourceTaps | None:
    return OnnxSourceTaps(Path(source.location)) if source.location else None


def _torch_taps(source: Source, export: Any, runner: Runtime) -> SourceTaps | None:
    modules = torch_module_tensors(export.model) if hasattr(runner, "module") else {}
    return TorchTaps(runner, modules) if modules else None


# framework -> "module:function(source, export, runner) -> SourceTaps | None": per-layer taps; a framework
# without an entry (or whose function returns None) is compared on its final outputs
TAPS = LazyRegistry({
    "mxnet": "bridge.conversion.sources:_mxnet_taps",
    "onnx": "bridge.conversion.sources:_onnx_taps",
    "torch": "bridge.conversion.sources:_torch_taps",
}, "no per-layer taps for '{name}'; known: {known}")


def source_taps(framework: str, source: Source, export: Any, runner: Runtime,
                aliases: Mapping[str, Mapping[str, Any]] | None = None) -> SourceTaps:
    """The richest taps available for ``framework`` (final outputs when it has none per layer); ``aliases``:
    the converted model's layout aliases, served too (``AliasedTaps``)."""
    taps = TAPS.load(framework)(source, export, runner) if framework in TAPS.names() else None
    if taps is not None:
        return AliasedTaps(taps, aliases) if aliases else taps
    outputs = [o.name for o in export.model.graph.output] if isinstance(export.model, onnx.ModelProto) else []
    return FinalOutputsTaps(framework, runner, outputs)
