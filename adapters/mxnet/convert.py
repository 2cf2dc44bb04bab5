"""Translate a parsed MXNet symbol graph plus its parameters into an ONNX model.

Steps: pick the heads (the symbol's own, or named internal outputs to cut at), keep only the nodes
they need, refuse with one UnsupportedOpError listing *every* op without a translator, turn
variables into graph inputs (from the ExportSpec) or initializers (``arg:``/``aux:`` params), run the
translators in file order (MXNet writes nodes topologically), then run ONNX shape inference and the
checker. Output names are MXNet's internal output names (``<node>_output``; see registry.py).
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import helper

# importing the translator modules registers them
from adapters.mxnet import (  # noqa: F401
    contrib,
    ops_attention,
    ops_boxes,
    ops_control,
    ops_creation,
    ops_elemwise,
    ops_indexing,
    ops_legacy,
    ops_linalg,
    ops_math,
    ops_nn,
    ops_norm,
    ops_quantized,
    ops_random,
    ops_reduce,
    ops_scatter,
    ops_sequence,
    ops_spatial,
    ops_special,
    ops_tensor,
)
from adapters.mxnet.context import CONTRIB_DOMAIN, ConversionContext, np_to_onnx, shape_like
from adapters.mxnet.infer_range import resolve_infer_range
from adapters.mxnet.infer_states import resolve_rnn_states
from adapters.mxnet.params import split_arg_aux
from adapters.mxnet.registry import INFERENCE_INPUTS, NOT_TRANSLATED, TRANSLATORS
from adapters.mxnet.symbol import MXNode, SymbolGraph
from bridge import provenance
from bridge.config import ExportSpec, InputSpec
from bridge.errors import BadInputFileError, BridgeError, BridgeInternalError, UnsupportedOpError, UsageError

log = logging.getLogger(__name__)

MIN_OPSET = 13


@dataclass
class Converted:
    model: onnx.ModelProto
    inputs: tuple[InputSpec, ...]
    output_names: tuple[str, ...]
    warnings: list[str] = field(default_factory=list)
    contrib_nodes: int = 0
    # ONNX outputs of renamed nodes -> MXNet internal output (``name#k``: the k-th output of that name)
    source_outputs: dict[str, str] = field(default_factory=dict)


def unique_node_names(graph: SymbolGraph) -> tuple[SymbolGraph, dict[int, str]]:
    """The graph with every op node named uniquely, and the MXNet names of the nodes renamed.

    MXNet writes one name per Gluon block call, so a block called twice gives two nodes of the same
    name. The first keeps its name; later ones get ``<name>_<k>`` (the smallest k no node uses), so
    their ONNX nodes and output tensors are distinct. Variables keep their names (a name shared by
    variables is one parameter)."""
    taken = {n.name for n in graph.nodes}
    seen: set[str] = set()
    original: dict[int, str] = {}
    nodes = list(graph.nodes)
    for n in graph.nodes:
        if n.is_variable:
            continue
        if n.name not in seen:
            seen.add(n.name)
            continue
        k = 1
        while f"{n.name}_{k}" in taken:
            k += 1
        new = f"{n.name}_{k}"
        taken.add(new)
        original[n.index] = n.name
        nodes[n.index] = dataclasses.replace(n, name=new)
    if not original:
        return graph, original
    return dataclasses.replace(graph, nodes=nodes), original


def _mxnet_output_ref(graph: SymbolGraph, original: Mapping[int, str], head: tuple[int, int], onnx_name: str) -> str:
    """How the reference runner finds the MXNet output a renamed node's ONNX output stands for:
    ``<mxnet output name>#<k>``, the k-th (from 0) internal output of that name in file order."""
    i = head[0]
    new, old = graph.nodes[i].name, original[i]
    name = old + onnx_name[len(new):] if onnx_name.startswith(new) else f"{old}_output"
    k = sum(1 for n in graph.nodes[:i] if not n.is_variable and original.get(n.index, n.name) == old)
    return f"{name}#{k}"


def resolve_heads(graph: SymbolGraph, outputs: str | None) -> list[tuple[int, int]]:
    """The symbol's heads, or the named outputs (``node``, ``node_output``, ``node_output<i>``)."""
    if not outputs:
        return list(graph.heads)
    heads = []
    by_name = {n.name: n for n in graph.nodes}
    for raw in outputs.split(","):
        name = raw.strip()
        if not name:
            continue
        if name in by_name:
            heads.append((by_name[name].index, 0))
            continue
        m = re.fullmatch(r"(.+)_output(\d*)", name)
        if m and m.group(1) in by_name:
            heads.append((by_name[m.group(1)].index, int(m.group(2) or 0)))
            continue
        known = [n.name for n in graph.nodes if not n.is_variable]
        near = [k for k in known if name.lower() in k.lower()][:8] or known[-8:]
        raise UsageError(f"output '{name}' is not a node of {graph.source}; nodes with similar names: {near}")
    return heads


def inference_inputs(node: MXNode) -> list[tuple[int, int]]:
    """The inputs ``node`` reads at inference: a loss head's label (``INFERENCE_INPUTS``) is left out."""
    used = INFERENCE_INPUTS.get(node.op)
    return list(node.inputs if used is None else node.inputs[:used])


def needed_nodes(graph: SymbolGraph, heads: list[tuple[int, int]]) -> set[int]:
    seen: set[int] = set()
    stack = [h for h, _ in heads]
    while stack:
        i = stack.pop()
        if i in seen:
            continue
        seen.add(i)
        stack.extend(src for src, _ in inference_inputs(graph.nodes[i]))
    return seen


def _check_input_dtypes(inputs: Sequence[InputSpec], params: Mapping[str, Any], source: Any) -> None:
    """A float input asked for in another float dtype than the parameters': MXNet computes a layer in the
    dtype of its parameters (a float16 network is cast and saved as one), so the converted graph would mix
    both and fail at its first layer; say so before converting."""
    floats = sorted({str(a.dtype) for a in params.values()
                     if getattr(a, "dtype", None) is not None and np.issubdtype(a.dtype, np.floating)})
    for s in inputs:
        if not (s.dtype_given and floats and np.issubdtype(np.dtype(s.dtype), np.floating)) or s.dtype in floats:
            continue
        shape = ",".join(map(str, s.shape)) if s.shape else "SHAPE"
        raise UsageError(f"--input {s.name}:{shape}:{s.dtype}: the parameters of {source} are {', '.join(floats)} and "
                         f"MXNet computes each layer in its parameters' dtype; give {s.name} as {floats[0]} (--input "
                         f"{s.name}:{shape}), or cast the network to {s.dtype} in MXNet (net.cast('{s.dtype}')) and "
                         "save it again")


def convert_graph(
    graph: SymbolGraph,
    params: Mapping[str, np.ndarray],
    spec: ExportSpec,
    outputs: str | None = None,
    params_desc: str = "the .params file",
    *,
    consume: bool = False,
) -> Converted:
    """``consume``: empty ``params`` (a dict the caller no longer needs) and let each array go as soon as
    its initializer is built, so the weights are held once (as TensorProtos), not twice (numpy + protos)."""
    if spec.opset < MIN_OPSET:
        raise UsageError(f"--opset {spec.opset}: the MXNet adapter emits opset >= {MIN_OPSET}; convert down afterwards")
    graph = resolve_infer_range(graph)  # MXNet sizes these aranges from their consumer; see infer_range.py
    graph = resolve_rnn_states(graph)  # and RNN begin states' batch from the RNN's data; see infer_states.py
    heads = resolve_heads(graph, outputs)
    graph, original = unique_node_names(graph)
    needed = needed_nodes(graph, heads)

    unsupported: dict[str, list[str]] = {}
    for i in sorted(needed):
        node = graph.nodes[i]
        if not node.is_variable and node.op not in TRANSLATORS:
            unsupported.setdefault(node.op, []).append(node.name)
    if unsupported:
        raise UnsupportedOpError(unsupported, framework="mxnet", reasons=NOT_TRANSLATED)

    args, aux = split_arg_aux(dict(params))
    values = {**args, **aux}
    del args, aux
    if consume and isinstance(params, dict):
        params.clear()
    ctx = ConversionContext(spec.opset)
    dynamic = {(d.input, d.axis): d.label for d in spec.dynamic}
    graph_vars = {graph.nodes[i].name for i in needed if graph.nodes[i].is_variable}
    all_vars = {n.name for n in graph.nodes if n.is_variable}
    stray = [s.name for s in spec.inputs if s.name not in all_vars]
    if stray:
        candidates = sorted(v for v in graph_vars if v not in values)
        raise UsageError(f"--input {', '.join(stray)}: no such input in {graph.source}; its inputs are {candidates}")
    # a variable of the symbol the inference outputs never read (a loss head's label, a training-only branch):
    # shapes given for it, as MXNet's own exporter asks for every variable, are accepted and left out
    for name in sorted({s.name for s in spec.inputs} - graph_vars):
        ctx.warn(f"--input {name}: the symbol's variable '{name}' is not read by the converted outputs (a loss "
                 "head's label, or a branch they do not need); left out of the model")
    spec = dataclasses.replace(spec, inputs=tuple(s for s in spec.inputs if s.name in graph_vars))

    _check_input_dtypes(spec.inputs, values, graph.source)

    entries: dict[tuple[int, int], str] = {}
    used_inputs: list[InputSpec] = []
    missing: dict[str, str] = {}
    # variables named alike each get an initializer; the array goes with the last of them
    uses = Counter(graph.nodes[i].name for i in needed if graph.nodes[i].is_variable)
    for i in sorted(needed):
        node = graph.nodes[i]
        if not node.is_variable:
            continue
        s = spec.input(node.name)
        if s is not None:
            if s.shape is None:
                raise UsageError(f"input '{node.name}' needs a shape: pass --input {node.name}:{_shape_hint(node.name)}")
            dims = [dynamic.get((node.name, ax), d) for ax, d in enumerate(s.shape)]
            ctx.add_input(node.name, np_to_onnx(s.dtype), tuple(dims))
            used_inputs.append(s)
        elif node.name in values:
            uses[node.name] -= 1
            ctx.add_initializer(node.name, values[node.name] if uses[node.name] else values.pop(node.name))
        else:
            missing[node.name] = node.name
        entries[(i, 0)] = node.name

    for i in sorted(needed):
        node = graph.nodes[i]
        if node.is_variable:
            continue
        absent = [(src, k) for src, k in inference_inputs(node) if (src, k) not in entries]
        if absent:  # the file reads an output its producer does not have (the reader checks what it can)
            src, k = absent[0]
            raise BadInputFileError(f"{graph.source}: node '{node.name}' ({node.op}) reads output {k} of node "
                                    f"'{graph.nodes[src].name}' ({graph.nodes[src].op}), which has no such output")
        inputs = [entries[(src, k)] for src, k in inference_inputs(node)]
        fn = TRANSLATORS[node.op]
        ctx.origin = provenance.Provenance("mxnet", original.get(i, node.name), node.op, provenance.made_by(
            provenance.TRANSLATOR, f"{fn.__module__}:{getattr(fn, '__qualname__', fn.__name__)}"))
        try:
            produced = fn(ctx, node, inputs)
        except BridgeError as e:
            # the translator needed the type of a variable nobody gave (a shape or a parameter): name
            # the variable and the option, not the node that happened to need it
            lacking = [x for x in inputs if x in missing] or _upstream(graph, i, missing)
            if lacking:
                raise _missing_error(lacking, list(missing), params_desc, f"node '{node.name}' ({node.op}): {e}") from e
            raise
        except Exception as e:
            raise BridgeInternalError(f"MXNet translator for {node.op} failed on node '{node.name}': {e!r}") from e
        for k, name in enumerate(produced):
            entries[(i, k)] = name

    consumed = {x for n in ctx.nodes for x in n.input}
    heads_names = [entries.get(h) for h in heads]
    if None in heads_names:
        bad = [graph.nodes[h[0]].name for h, nm in zip(heads, heads_names, strict=True) if nm is None]
        raise UsageError(f"outputs {bad}: the node has fewer visible outputs than requested")
    really_missing = [m for m in missing if m in consumed or m in heads_names]
    if really_missing:
        raise _missing_error(really_missing, list(missing), params_desc)

    out_infos = []
    out_names: list[str] = []
    for h, head_name in zip(heads, heads_names, strict=True):
        assert head_name is not None
        name = head_name
        if name in ctx.initializers or any(v.name == name for v in ctx.inputs) or name in out_names:
            head = graph.nodes[h[0]]
            ctx.origin = provenance.Provenance("mxnet", original.get(h[0], head.name), head.op, provenance.made_by(
                provenance.TRANSLATOR, f"{__name__}:graph output alias"))
            alias = ctx.fresh(f"{head.name}_output")
            ctx.emit("Identity", [name], [alias], name=alias)
            name = alias
        out_names.append(name)
        out_infos.append(onnx.helper.make_value_info(name, ctx.type(name).to_proto()))

    value_info = [helper.make_value_info(n, t.to_proto()) for n, t in ctx.declared.items() if n not in out_names]
    # Weights stay out of the model while onnx infers shapes and checks it (each of those serializes the
    # whole model: with the weights that is several copies of them); they stand in as typed graph inputs
    # and are attached once at the end. Shape-like initializers (integers, tiny) stay: inference reads them.
    weights = [t.name for t in ctx.initializers.values() if not shape_like(t)]
    stand_ins = [helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                 for t in (ctx.initializers[n] for n in weights)]
    g = helper.make_graph(ctx.nodes, _graph_name(graph), [*ctx.inputs, *stand_ins], out_infos,
                          initializer=[t for t in ctx.initializers.values() if shape_like(t)], value_info=value_info)
    opsets = [helper.make_opsetid("", spec.opset)]
    if ctx.uses_contrib:
        opsets.append(helper.make_opsetid(CONTRIB_DOMAIN, contrib.CONTRIB_VERSION))
    model = helper.make_model(g, opset_imports=opsets, producer_name="bridge",
                              doc_string=f"converted from MXNet symbol {graph.source}")
    model.ir_version = helper.find_min_ir_version_for(opsets[:1], ignore_unknown=True)
    model = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=False, data_prop=True)
    try:
        onnx.checker.check_model(model, full_check=not ctx.uses_contrib)
    except onnx.checker.ValidationError as e:
        raise BridgeInternalError(f"the ONNX model converted from {graph.source} fails onnx.checker: {e}") from e
    if weights:
        kept = [vi for vi in model.graph.input if vi.name not in set(weights)]
        del model.graph.input[:]
        model.graph.input.extend(kept)
        for name in weights:  # appending copies: each standalone proto goes as soon as it is in the model
            model.graph.initializer.append(ctx.initializers.pop(name))
    n_contrib = sum(1 for n in model.graph.node if n.domain == CONTRIB_DOMAIN)
    source_outputs = {name: _mxnet_output_ref(graph, original, h, head_name)
                      for h, head_name, name in zip(heads, heads_names, out_names, strict=True)
                      if h[0] in original and head_name is not None}
    return Converted(model, tuple(used_inputs), tuple(out_names), ctx.warnings, n_contrib, source_outputs)


# how the adapter's description of the parameters begins when no .params file was found
NO_PARAMS_FILE = "no .params file"
_PARAM_NAME = re.compile(r"_(weight|bias|gamma|beta|moving_mean|moving_var|running_mean|running_var)$")


def _upstream(graph: SymbolGraph, index: int, missing: Mapping[str, str]) -> list[str]:
    """The variables in ``missing`` that node ``index`` depends on (first in file order)."""
    seen: set[int] = set()
    stack = [src for src, _ in graph.nodes[index].inputs]
    while stack:
        j = stack.pop()
        if j not in seen:
            seen.add(j)
            stack.extend(src for src, _ in graph.nodes[j].inputs)
    return [graph.nodes[j].name for j in sorted(seen) if graph.nodes[j].is_variable and graph.nodes[j].name in missing]


def _missing_error(names: Sequence[str], missing: Sequence[str], params_desc: str, where: str = "") -> UsageError:
    """Variables nobody gave (``names``, of all ``missing`` ones): parameters (named like one) point at
    the .params file and ``--weights/--params``, listing every missing parameter (first: without them
    the inputs cannot be checked); else the inputs need ``--input NAME:SHAPE`` (``where`` says why)."""
    if any(_PARAM_NAME.search(m) for m in names):
        params_like = [m for m in missing if _PARAM_NAME.search(m)]
        shown = ", ".join(params_like[:8]) + (f", ... ({len(params_like) - 8} more)" if len(params_like) > 8 else "")
        if params_desc.startswith(NO_PARAMS_FILE):
            return UsageError(f"{len(params_like)} parameter(s) are missing ({shown}): {params_desc}; "
                              "pass --weights/--params PREFIX-EPOCH.params")
        return UsageError(f"{len(params_like)} parameter(s) are missing ({shown}): {params_desc} does not hold "
                          "them (wrong prefix or epoch? pass --weights/--params PREFIX-EPOCH.params)")
    first = names[0]
    return UsageError(
        f"input '{first}' needs a shape: pass --input {first}:{_shape_hint(first)}"
        + (f" (other inputs without a shape: {list(names[1:])})" if len(names) > 1 else "")
        + (f" ({where})" if where else ""))


def _shape_hint(name: str) -> str:
    return "1,3,H,W" if name == "data" else "D0,D1,..."


def _graph_name(graph: SymbolGraph) -> str:
    stem = re.sub(r"-symbol\.json$|\.json$", "", graph.source.rsplit("/", 1)[-1])
    return f"mxnet_{stem}" if stem else "mxnet_symbol"
