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
  Tensors computed inline in ``forward`` (a decode, a score threshold) belong to no module: they come from
  torch.onnx's own export of the source (``TorchGraphTaps``), run in onnxruntime - in ``convert`` the export the
  conversion started from, in ``validate`` the source exported again (traced on the validation inputs), offered
  only where the candidate's node of that name is the export's (same op, same inputs).
* TensorFlow (SavedModel, Keras, frozen GraphDef): the tensors of the graph tf2onnx converts (the adapter's own
  freezing, then tf2onnx's grappler pass: ``adapters.tensorflow.adapter.tf2onnx_graph`` / ``tf2onnx_optimized``),
  run in a TF session; tf2onnx names an ONNX tensor after the TF tensor it converts (``.../decode/mul:0``).
* Other frameworks (TFLite, ...): only the final outputs (``FinalOutputsTaps``): the localisation then falls back
  to the ONNX stage's pass-by-pass comparison.

A pass that moves a Transpose across a named tensor records the new tensor as an alias of the source's
(``transpose(name, perm)``, ``bridge.provenance.TENSOR_ALIASES_META``); ``AliasedTaps`` serves it. Those
records are the model's word: only the ones ``bridge.validation.layout_aliases.check_claimed_aliases`` measured to
hold are handed to ``AliasedTaps``.
"""

from __future__ import annotations

import ast
import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
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


class TorchGraphTaps:
    """Every tensor of torch.onnx's own export of the source (``export``), run in onnxruntime: what PyTorch's exporter
    made of ``forward``, inline code included. ``offered``: the tensors served (see ``torch_graph_taps``)."""

    framework = "torch"
    granularity = ("every tensor of torch.onnx's own export of the source (run in onnxruntime; a candidate's tensor "
                   "only where its node is the export's)")

    def __init__(self, exported: onnx.ModelProto, offered: set[str]) -> None:
        self.taps = OnnxTaps(exported)
        self.offered = offered & self.taps.available()

    def names(self) -> set[str]:
        return set(self.offered)

    def run(self, feeds: Mapping[str, np.ndarray], names: Sequence[str]) -> dict[str, np.ndarray]:
        return self.taps.run(feeds, [n for n in names if n in self.offered])

    def describe(self, tensor: str) -> SourceNode | None:
        facts = self.taps.index.node_of(tensor)
        return None if facts is None else SourceNode(facts.name, facts.op, facts.attributes)


class CombinedTaps:
    """``first``'s tensors, then ``second``'s for the names ``first`` does not return (module hooks before the
    export's graph: a module output computed by PyTorch itself is the better witness)."""

    def __init__(self, first: SourceTaps, second: SourceTaps) -> None:
        self.first, self.second = first, second
        self.framework = first.framework
        self.granularity = f"{first.granularity}; {second.granularity}"

    def names(self) -> set[str]:
        return self.first.names() | self.second.names()

    def run(self, feeds: Mapping[str, np.ndarray], names: Sequence[str]) -> dict[str, np.ndarray]:
        mine = self.first.names()
        values = self.first.run(feeds, [n for n in names if n in mine])
        rest = [n for n in names if n not in values and n in self.second.names()]
        if rest:
            values.update(self.second.run(feeds, rest))
        return values

    def describe(self, tensor: str) -> SourceNode | None:
        return self.first.describe(tensor) if tensor in self.first.names() else self.second.describe(tensor)


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


FLOAT_TF_DTYPES = frozenset({"float16", "bfloat16", "float32", "float64"})
_NOT_TAPPED_OPS = frozenset({"Const", "Placeholder", "PlaceholderWithDefault", "VarHandleOp", "ReadVariableOp"})
# TF ops tf2onnx converts by transposing to channels-first (besides any op with a channels-last ``data_format``)
_CHANNELS_LAST_OPS = frozenset({"ResizeBilinear", "ResizeNearestNeighbor", "ResizeBicubic", "ResizeArea",
                                "CropAndResize", "ExtractImagePatches", "SpaceToBatchND", "BatchToSpaceND"})


class TFTaps:
    """The tensors of the TensorFlow graph tf2onnx converts, fetched in a ``tf.compat.v1`` session.

    The graph is the adapter's own (``tf2onnx_graph``: the signature / Keras call frozen and made inlinable, or the
    GraphDef) after tf2onnx's grappler pass (``tf2onnx_optimized``), so a tensor keeps the name tf2onnx gives its
    ONNX counterpart. Tapped: float outputs of ops other than constants and placeholders, outside TF1 control-flow
    frames (a ``while`` body's tensors cannot be fetched; a TF2 body is a function, not in the graph at all). Around a
    channels-last op (``data_format`` ``NHWC``/``NDHWC``, image resizing, ...) tf2onnx computes the rank >= 4 tensors
    channels-first under the same names (its transposes move through every op but a reshape), so those tensors are
    left out (``_channels_last_region``): the same name in another layout would blame a correct conversion (with
    C == H == W even the shape is the same). The final outputs come from the reference runner.
    """

    framework = "tensorflow"
    granularity = "every float tensor of the graph tf2onnx converts (frozen, grappler-optimised)"

    def __init__(self, graph_def: Any, feeds: Mapping[str, str], fixed: Mapping[str, Any], renames: Mapping[str, str],
                 runner: Runtime, outputs: Sequence[str]) -> None:
        self.graph_def = graph_def
        self.feeds = dict(feeds)  # ONNX input name -> graph tensor
        self.fixed = dict(fixed)  # graph tensor -> () -> value (captured constants fed as tf2onnx saw them)
        self.renames = dict(renames)  # graph tensor -> ONNX name, where tf2onnx renames it (inputs, outputs)
        self.runner, self.outputs = runner, list(outputs)
        self._graph: Any = None
        self._session: Any = None
        self._tensors: dict[str, str] | None = None  # ONNX name -> graph tensor

    def _load(self) -> Any:
        if self._graph is None:
            import tensorflow as tf

            graph = tf.Graph()
            with graph.as_default():
                tf.compat.v1.import_graph_def(self.graph_def, name="")
            self._graph = graph
        return self._graph

    def _tapped(self) -> dict[str, str]:
        if self._tensors is None:
            graph = self._load()
            ops = graph.get_operations()
            relaid = _channels_last_region(ops)
            framed: set[str] = set()  # ops inside a TF1 while frame (Enter ... Exit)
            for op in ops:  # get_operations() is in topological order for an imported GraphDef
                if op.type == "Enter" or (op.type != "Exit" and any(t.op.name in framed for t in op.inputs)):
                    framed.add(op.name)
            tensors: dict[str, str] = {}
            for op in ops:
                if op.type in _NOT_TAPPED_OPS or op.name in framed:
                    continue
                for t in op.outputs:
                    if t.dtype.name not in FLOAT_TF_DTYPES or t.name in self.renames or t.name in relaid \
                            or not graph.is_fetchable(t):
                        continue
                    tensors[t.name] = t.name
            self._tensors = tensors
        return self._tensors

    def names(self) -> set[str]:
        return set(self._tapped()) | set(self.outputs)

    def run(self, feeds: Mapping[str, np.ndarray], names: Sequence[str]) -> dict[str, np.ndarray]:
        import tensorflow as tf

        tapped = self._tapped()
        inner = [n for n in dict.fromkeys(names) if n in tapped]
        values: dict[str, np.ndarray] = {}
        if inner:
            graph = self._load()
            if self._session is None:
                self._session = tf.compat.v1.Session(graph=graph)
            feed_dict = {graph.get_tensor_by_name(t): np.asarray(feeds[n]) for n, t in self.feeds.items() if n in feeds}
            feed_dict.update({graph.get_tensor_by_name(t): value() for t, value in self.fixed.items()})
            got = self._session.run([graph.get_tensor_by_name(tapped[n]) for n in inner], feed_dict)
            values.update({n: np.asarray(v) for n, v in zip(inner, got, strict=True)})
        finals = [n for n in names if n in self.outputs]
        if finals:
            self.runner.activate()
            try:
                out = self.runner.infer(feeds)
            finally:
                self.runner.deactivate()
            values.update({n: out[n] for n in finals if n in out})
        return values

    def describe(self, tensor: str) -> SourceNode | None:
        name = self._tapped().get(tensor)
        if name is None:
            return None
        op = self._load().get_tensor_by_name(name).op
        attrs = {k: v for k, v in ((k, _attr(op.node_def.attr[k])) for k in sorted(op.node_def.attr)) if v is not None}
        return SourceNode(op.name, op.type, attrs)


def _channels_last_region(ops: Sequence[Any]) -> set[str]:
    """The tensors tf2onnx may hold channels-first under their TF name: those of rank >= 4 (or unknown rank) connected
    to a channels-last op's rank >= 4 inputs and outputs through ops that keep such tensors on both sides (every op
    but a reshape, which tf2onnx's transposes do not cross: they are undone before it)."""
    parent: dict[str, str] = {}

    def find(t: str) -> str:
        while parent.setdefault(t, t) != t:
            parent[t] = parent[parent[t]]
            t = parent[t]
        return t

    def wide(t: Any) -> bool:
        return t.shape.rank is None or t.shape.rank >= 4

    seeds: list[str] = []
    for op in ops:
        if op.type in _NOT_TAPPED_OPS or op.type in ("Reshape", "Squeeze", "ExpandDims"):
            continue
        tensors = [t.name for t in (*op.inputs, *op.outputs) if wide(t) and t.op.type not in _NOT_TAPPED_OPS]
        for t in tensors[1:]:
            parent[find(t)] = find(tensors[0])
        if tensors and (op.type in _CHANNELS_LAST_OPS or _channels_last(op)):
            seeds.append(tensors[0])
    roots = {find(t) for t in seeds}
    return {t for t in list(parent) if find(t) in roots}


def _channels_last(op: Any) -> bool:
    attr = op.node_def.attr.get("data_format")
    return attr is not None and attr.s.startswith(b"N") and attr.s.endswith(b"C") and len(attr.s) > 2


def _attr(value: Any) -> Any:
    """A scalar or list attribute of a TF node as plain Python (tensors, types, functions: None)."""
    kind = value.WhichOneof("value")
    if kind in ("i", "f", "b"):
        return getattr(value, kind)
    if kind == "s":
        return value.s.decode("utf-8", "replace")
    if kind == "list" and (value.list.i or value.list.f):
        return list(value.list.i) or list(value.list.f)
    return None


def _mxnet_taps(source: Source, export: Any, runner: Runtime, trace_feeds: Any = None) -> SourceTaps | None:
    if not source.location:
        return None
    from adapters.mxnet.adapter import OUTPUT_MAP_KEY, MXNetAdapter, source_outputs_only

    mapping = {n: n for n in export.output_names}
    for prop in export.model.metadata_props:
        if prop.key == OUTPUT_MAP_KEY:  # only entries naming the source's own outputs (the model may be under test)
            mapping.update(source_outputs_only(source, json.loads(prop.value)))
    return MXNetTaps(Path(source.location), MXNetAdapter().resolve_params(source), export.inputs, mapping)


def _onnx_taps(source: Source, export: Any, runner: Runtime, trace_feeds: Any = None) -> SourceTaps | None:
    return OnnxSourceTaps(Path(source.location)) if source.location else None


def _torch_taps(source: Source, export: Any, runner: Runtime,
                trace_feeds: Mapping[str, np.ndarray] | None = None) -> SourceTaps | None:
    modules = torch_module_tensors(export.model) if hasattr(runner, "module") else {}
    graph = torch_graph_taps(source, export, trace_feeds)
    hooks: SourceTaps = TorchTaps(runner, modules) if modules else \
        FinalOutputsTaps("torch", runner, list(getattr(runner, "output_names", ())))
    if graph is None:
        return hooks if modules else None
    return CombinedTaps(hooks, graph)


_TORCH_GRAPHS: dict[str, onnx.ModelProto] = {}  # one re-export per reference process (the last), any candidate
_TORCHSCRIPT_NAME = re.compile(r"^/.*_output_\d+$")  # torch.onnx's TorchScript exporter: /scope/Op_3_output_0


def torch_graph_taps(source: Source, export: Any, trace_feeds: Mapping[str, np.ndarray] | None
                     ) -> TorchGraphTaps | None:
    """torch.onnx's own export of the source and the tensors of it offered as the source's.

    ``export`` made by the PyTorch adapter (``convert``, ``debug``) is that export: every intermediate tensor. A
    stand-in (``validate``: ``export.model`` is the candidate) has the source exported again, with ``--exporter`` or
    else the exporter whose names the candidate carries, traced on ``trace_feeds`` (the validation inputs, as
    ``convert`` traces by default); a tensor is offered only where the candidate's node of that name has the export's
    op and inputs, so a candidate traced on other inputs (another branch taken) or rewritten there offers nothing
    there. A failed re-export offers nothing (logged): the final outputs are still PyTorch's own.

    Without ``trace_feeds`` nothing is offered: onnxruntime computes these tensors, not PyTorch, so they witness what
    the exporter made, not PyTorch's rounding. The tie proof (``bridge.conversion.pinning.pin_failures``), which pins
    the source's own values to explain a near-tie, asks without; the selection-inputs proof and ``debug``, which
    look for what the conversion changed, ask with."""
    from adapters.pytorch.adapter import DYNAMO, TORCHSCRIPT

    model = getattr(export, "model", None)
    if not isinstance(model, onnx.ModelProto) or trace_feeds is None:
        return None
    if export.exporter in (DYNAMO, TORCHSCRIPT):
        outputs = {o.name for o in model.graph.output}
        return TorchGraphTaps(model, {t for n in model.graph.node for t in n.output if t and t not in outputs})
    if source.obj is not None or not source.location:
        return None  # a live object may have changed since the candidate was made
    found = _reexport(source, export, trace_feeds)
    if found is None:
        return None
    exported, offered = found
    return TorchGraphTaps(exported, offered)


def _reexport(source: Source, export: Any, trace_feeds: Mapping[str, np.ndarray]
              ) -> tuple[onnx.ModelProto, set[str]] | None:
    import hashlib
    import logging

    from adapters.pytorch.adapter import PyTorchAdapter
    from bridge.config import ExportSpec, InputSpec

    candidate: onnx.ModelProto = export.model
    produced = [t for n in candidate.graph.node for t in n.output if t]
    exporter = str(source.options.get("exporter") or "auto")
    if exporter == "auto":  # the exporter whose names the candidate carries (checked node by node below)
        scripted = sum(bool(_TORCHSCRIPT_NAME.match(t)) for t in produced)
        exporter = "torchscript" if scripted * 2 > len(produced) else "dynamo"
    inputs = tuple(InputSpec(s.name, tuple(np.shape(trace_feeds[s.name])), str(np.asarray(trace_feeds[s.name]).dtype))
                   for s in export.inputs if s.name in trace_feeds)
    if len(inputs) != len(export.inputs):
        return None
    digest = hashlib.sha256()
    for s in inputs:
        digest.update(np.ascontiguousarray(trace_feeds[s.name]).tobytes())
    key = json.dumps([source.describe(), sorted((k, str(v)) for k, v in source.options.items()), exporter,
                      [[s.name, list(s.shape or ()), s.dtype] for s in inputs], list(export.output_names),
                      _mtime(source.location), str(source.weights), _mtime(str(source.weights or "")),
                      digest.hexdigest()])
    if key not in _TORCH_GRAPHS:
        options = {**source.options, "exporter": exporter}
        spec = ExportSpec(inputs=inputs, output_names=tuple(export.output_names), opset_asked=False,
                          examples=lambda _specs: {k: np.asarray(v) for k, v in trace_feeds.items()})
        try:
            exported = PyTorchAdapter().export(replace(source, options=options), spec).model
        except Exception as exc:  # evidence only: without it the tensors are not offered
            logging.getLogger(__name__).info("the source could not be exported again for its tensors: %s", exc)
            return None
        _TORCH_GRAPHS.clear()
        _TORCH_GRAPHS[key] = exported
    exported = _TORCH_GRAPHS[key]
    return exported, _same_nodes(exported, candidate)  # judged for this candidate, never cached with the export


def _mtime(location: str | None) -> float | None:
    """When the file behind a source (a path, or ``file.py:factory``) last changed: a changed file is exported again."""
    if not location:
        return None
    path = Path(location.rsplit(":", 1)[0]) if ":" in location and not Path(location).exists() else Path(location)
    try:
        return path.stat().st_mtime
    except OSError:
        return None


def _same_nodes(exported: onnx.ModelProto, candidate: onnx.ModelProto) -> set[str]:
    """The intermediate tensors both models produce by a node of the same domain, op and inputs (by name)."""
    def producers(model: onnx.ModelProto) -> dict[str, tuple[str, str, tuple[str, ...]]]:
        return {t: (n.domain or "", n.op_type, tuple(n.input)) for n in model.graph.node for t in n.output if t}

    mine, theirs = producers(exported), producers(candidate)
    outputs = {o.name for o in exported.graph.output}
    return {t for t, facts in mine.items() if t not in outputs and theirs.get(t) == facts}


_TF_GRAPHS: dict[tuple[int, str], tuple[Any, Any]] = {}  # (id(LoadedTF), shapes) -> (the LoadedTF, the graph)


def _tf_taps(source: Source, export: Any, runner: Runtime, trace_feeds: Any = None) -> SourceTaps | None:
    loaded = getattr(runner, "loaded", None)
    if loaded is None or loaded.kind not in ("saved_model", "keras", "graph_def"):
        return None  # TFLite: the interpreter exposes no converted graph
    from adapters.tensorflow.adapter import tf2onnx_graph, tf2onnx_optimized

    onnx_inputs = {i.name: i for i in export.model.graph.input} if isinstance(export.model, onnx.ModelProto) else {}
    shapes: dict[str, list[int | None]] = {}
    for spec in export.inputs:
        dims = onnx_inputs[spec.name].type.tensor_type.shape.dim if spec.name in onnx_inputs else None
        shapes[spec.name] = [d.dim_value if d.HasField("dim_value") else None for d in dims] if dims is not None \
            else list(spec.shape or ())
    key = (id(loaded), json.dumps(shapes, sort_keys=True))
    if key not in _TF_GRAPHS:
        graph = tf2onnx_graph(loaded, export.inputs, shapes)
        _TF_GRAPHS.clear()  # one source per reference process
        _TF_GRAPHS[key] = (loaded, (graph, tf2onnx_optimized(graph)))
    graph, optimized = _TF_GRAPHS[key][1]
    given = {s.name for s in export.inputs}
    feeds = {graph.renames.get(t, t): t for t in graph.input_names if graph.renames.get(t, t) in given}
    fixed = {t: graph.captured[t] for t in graph.input_names if t in graph.captured and t not in feeds.values()}
    return TFTaps(optimized, feeds, fixed, graph.renames, runner, export.output_names)


# framework -> "module:function(source, export, runner, trace_feeds) -> SourceTaps | None": per-layer taps;
# a framework without an entry (or whose function returns None) is compared on its final outputs.
# ``trace_feeds``: the validation inputs, for a framework that must trace the source again to name its tensors
TAPS = LazyRegistry({
    "mxnet": "bridge.conversion.sources:_mxnet_taps",
    "onnx": "bridge.conversion.sources:_onnx_taps",
    "torch": "bridge.conversion.sources:_torch_taps",
    "tensorflow": "bridge.conversion.sources:_tf_taps",
}, "no per-layer taps for '{name}'; known: {known}")


def source_taps(framework: str, source: Source, export: Any, runner: Runtime,
                aliases: Mapping[str, Mapping[str, Any]] | None = None,
                trace_feeds: Mapping[str, np.ndarray] | None = None) -> SourceTaps:
    """The richest taps available for ``framework`` (final outputs when it has none per layer); ``aliases``:
    the converted model's layout aliases, served too (``AliasedTaps``); ``trace_feeds``: the validation inputs -
    given, a PyTorch source also offers its export's tensors (``torch_graph_taps``: traced on them when it must be
    exported again); None: only tensors the framework itself computes."""
    taps = TAPS.load(framework)(source, export, runner, trace_feeds) if framework in TAPS.names() else None
    if taps is not None:
        return AliasedTaps(taps, aliases) if aliases else taps
    outputs = [o.name for o in export.model.graph.output] if isinstance(export.model, onnx.ModelProto) else []
    return FinalOutputsTaps(framework, runner, outputs)
