"""Read an MXNet symbol JSON file (``prefix-symbol.json``) into a plain Python graph, without MXNet.

Covers every generation of the format:
- pre-0.9 files keep op parameters under ``param`` and user attributes under ``attr``; they also omit
  auxiliary-state variables (BatchNorm moving stats), which MXNet re-creates on load as
  ``<node>_moving_mean`` / ``<node>_moving_var`` (as in MXNet src/nnvm/legacy_json_util.cc,
  UpgradeJSON_000800_000900) - we do the same;
- 0.9 - 1.x files use ``attrs`` (``attr`` in some), inputs as ``[node, index, version]`` triples and a
  top-level ``attrs.mxnet_version``; ``arg_nodes`` / ``node_row_ptr`` / ``heads`` are kept as given.
Hidden training keys (``lr_mult``, ``ctx_group``, ...) are separated from op parameters as MXNet's
UpgradeJSON_FixParsing does.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adapters.mxnet.attrs import Attrs
from bridge.errors import BadInputFileError
from bridge.limits import check_allocation

log = logging.getLogger(__name__)

# as in MXNet include/mxnet/base.h / c_api_common.h kHiddenKeys
_HIDDEN_KEYS = ("ctx_group", "lr_mult", "wd_mult", "force_mirroring", "mirror_stage", "profiler_scope")
# ops whose auxiliary states were not stored before MXNet 0.9 (name suffixes MXNet uses on upgrade)
_LEGACY_AUX = {"BatchNorm": ("gamma", "beta", "moving_mean", "moving_var")}


@dataclass
class MXNode:
    """One node of the symbol graph; ``op == 'null'`` marks a variable (input or parameter)."""

    index: int
    op: str
    name: str
    inputs: list[tuple[int, int]]
    raw_attrs: dict[str, str] = field(default_factory=dict)
    hidden: dict[str, str] = field(default_factory=dict)
    # the bodies of control-flow ops (_foreach, _while_loop, _cond), each a graph of its own
    subgraphs: list[SymbolGraph] = field(default_factory=list)

    @property
    def is_variable(self) -> bool:
        return self.op == "null"

    @property
    def attrs(self) -> Attrs:
        return Attrs(self.name, self.raw_attrs)


@dataclass
class SymbolGraph:
    nodes: list[MXNode]
    heads: list[tuple[int, int]]
    arg_nodes: list[int]
    node_row_ptr: list[int] | None
    mxnet_version: int | None
    source: str = "<json>"

    def find(self, name: str) -> MXNode | None:
        return next((n for n in self.nodes if n.name == name), None)


def _is_hidden(key: str) -> bool:
    k = key.strip("_")
    return any(k == h or k.endswith("_" + h) for h in _HIDDEN_KEYS)


def _entry(value: Any, where: str, src: str) -> tuple[int, int]:
    if isinstance(value, list) and len(value) in (2, 3) and all(isinstance(v, int) for v in value):
        return int(value[0]), int(value[1])
    raise BadInputFileError(f"{src}: {where}: expected [node, index(, version)], got {value!r}")


def _str_dict(value: Any, where: str, src: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BadInputFileError(f"{src}: {where}: attributes must be an object, got {type(value).__name__}")
    return {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in value.items()}


def looks_like_symbol_json(text: str) -> bool:
    """Cheap content test used by ``claims``: a JSON object with 'nodes' and 'heads'.

    A document nested too deeply to parse still counts when it names both keys, so that the
    reader, not detection, explains what is wrong with it."""
    try:
        doc = json.loads(text)
    except ValueError:
        return False
    except RecursionError:
        return '"nodes"' in text and '"heads"' in text
    return isinstance(doc, dict) and "nodes" in doc and "heads" in doc


def parse_symbol_json(text: str, source: str = "<json>") -> SymbolGraph:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise BadInputFileError(
            f"{source}: not valid JSON at line {e.lineno}, column {e.colno} (offset {e.pos}): {e.msg}"
        ) from None
    except RecursionError:
        raise BadInputFileError(f"{source}: JSON nested too deeply to be an MXNet symbol file") from None
    if not isinstance(doc, dict) or "nodes" not in doc or "heads" not in doc:
        raise BadInputFileError(f"{source}: not an MXNet symbol file (needs top-level 'nodes' and 'heads')")
    version: int | None = None
    top = doc.get("attrs") or {}
    if isinstance(top, dict) and "mxnet_version" in top:
        mv = top["mxnet_version"]
        try:
            version = int(mv[1] if isinstance(mv, list) else mv)
        except (TypeError, ValueError, IndexError):
            log.warning("%s: unreadable mxnet_version %r", source, mv)
    return _parse_doc(doc, source, version)


def _parse_doc(doc: Any, source: str, version: int | None) -> SymbolGraph:
    """One graph (the file's, or a control-flow op's subgraph, which carries no version of its own)."""
    if not isinstance(doc, dict) or "nodes" not in doc or "heads" not in doc:
        raise BadInputFileError(f"{source}: not an MXNet symbol graph (needs 'nodes' and 'heads')")
    raw_nodes = doc["nodes"]
    if not isinstance(raw_nodes, list):
        raise BadInputFileError(f"{source}: 'nodes' must be a list")

    nodes: list[MXNode] = []
    for i, rn in enumerate(raw_nodes):
        where = f"node #{i}"
        if not isinstance(rn, dict) or "op" not in rn or "name" not in rn:
            raise BadInputFileError(f"{source}: {where}: needs 'op' and 'name'")
        if not isinstance(rn["op"], str) or not isinstance(rn["name"], str):
            raise BadInputFileError(f"{source}: {where}: 'op' and 'name' must be strings")
        if not isinstance(rn.get("inputs", []), list):
            raise BadInputFileError(f"{source}: {where} ('{rn['name']}'): 'inputs' must be a list")
        merged: dict[str, str] = {}
        # oldest first so newer keys win: 'param' (op params, < 0.9), 'attr', 'attrs'
        for key in ("param", "attr", "attrs"):
            merged.update(_str_dict(rn.get(key), f"{where} ('{rn['name']}') {key}", source))
        params = {k: v for k, v in merged.items() if not _is_hidden(k)}
        hidden = {k: v for k, v in merged.items() if _is_hidden(k)}
        inputs = [_entry(e, f"{where} ('{rn['name']}') input", source) for e in rn.get("inputs", [])]
        for src_id, _ in inputs:
            if not 0 <= src_id < i:
                raise BadInputFileError(
                    f"{source}: {where} ('{rn['name']}') reads node #{src_id}, which is not an earlier node"
                )
        subgraphs = rn.get("subgraphs", [])
        if not isinstance(subgraphs, list):
            raise BadInputFileError(f"{source}: {where} ('{rn['name']}'): 'subgraphs' must be a list")
        subs = [_parse_doc(sg, f"{source} (subgraph {k} of '{rn['name']}')", version) for k, sg in enumerate(subgraphs)]
        nodes.append(MXNode(i, str(rn["op"]), str(rn["name"]), inputs, params, hidden, subs))

    if not isinstance(doc["heads"], list):
        raise BadInputFileError(f"{source}: 'heads' must be a list")
    heads = [_entry(h, "heads", source) for h in doc["heads"]]
    for h, _ in heads:
        if not 0 <= h < len(nodes):
            raise BadInputFileError(f"{source}: head refers to node #{h}, but there are {len(nodes)} nodes")
    graph = SymbolGraph(
        nodes=nodes,
        heads=heads,
        arg_nodes=_int_list(doc.get("arg_nodes", []), "arg_nodes", source),
        node_row_ptr=_int_list(doc["node_row_ptr"], "node_row_ptr", source) if "node_row_ptr" in doc else None,
        mxnet_version=version,
        source=source,
    )
    _check_entries(graph)
    for node in graph.nodes:
        _check_structural_attrs(node, source)
        _check_declared_size(node, source)
    if version is None or version < 900:
        _add_legacy_aux(graph)
    return graph


def _int_list(value: Any, key: str, src: str) -> list[int]:
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise BadInputFileError(f"{src}: '{key}' must be a list of integers")
    return [int(v) for v in value]


def _check_entries(graph: SymbolGraph) -> None:
    """Inputs and heads must read outputs that exist: a variable has one output (index 0); with
    ``node_row_ptr`` (MXNet >= 0.9) node i has ``node_row_ptr[i+1] - node_row_ptr[i]`` outputs."""
    ptr = graph.node_row_ptr
    counts = ([ptr[i + 1] - ptr[i] for i in range(len(graph.nodes))]
              if ptr is not None and len(ptr) == len(graph.nodes) + 1 else None)
    readers = [(f"node #{n.index} ('{n.name}')", e) for n in graph.nodes for e in n.inputs]
    readers += [("heads", h) for h in graph.heads]
    for who, (src, k) in readers:
        node = graph.nodes[src]
        n_out = 1 if node.is_variable else counts[src] if counts is not None else None
        if k < 0 or (n_out is not None and k >= n_out):
            raise BadInputFileError(f"{graph.source}: {who} reads output {k} of node #{src} ('{node.name}', "
                                    f"{node.op}), which has {n_out} output(s)")


# attributes that size a layer: a positive integer (num_*), or tuples of them (kernel may be empty
# only for global pooling; stride/dilate empty = MXNet's default of 1s); pad/adj are >= 0
_POSITIVE_INTS = ("num_filter", "num_hidden", "num_group", "num_outputs", "num_args", "input_dim", "output_dim",
                  "state_size", "num_layers")
_POSITIVE_TUPLES = ("kernel", "stride", "dilate")
_NONNEG_TUPLES = ("pad", "adj")
_INT = re.compile(r"^[+-]?\d+L?$")


def _bad_attr(node: MXNode, src: str, key: str, value: str, what: str) -> BadInputFileError:
    return BadInputFileError(f"{src}: node '{node.name}' ({node.op}): attribute {key}='{value}' is not {what}")


def _tuple_items(value: str) -> list[str]:
    t = value.strip()
    if t[:1] in "([" and t[-1:] in ")]":
        t = t[1:-1]
    return [p.strip() for p in t.split(",") if p.strip()]


def _check_structural_attrs(node: MXNode, src: str) -> None:
    """Sizes of a layer must be sizes: ``num_filter='inf'``, ``kernel=()`` or ``stride=(0,)`` are refused
    here with the node's name, before any translator does arithmetic with them."""
    if node.is_variable:
        return
    attrs = node.raw_attrs
    for key in _POSITIVE_INTS:
        v = attrs.get(key)
        if v is not None and v.strip() not in ("None", "") and (not _INT.match(v.strip()) or int(v.strip().rstrip("L")) <= 0):
            raise _bad_attr(node, src, key, v, "a positive integer")
    global_pool = attrs.get("global_pool", "False").strip().lower() in ("true", "1")
    needs_kernel = node.op in ("Convolution", "Deconvolution") or (node.op == "Pooling" and not global_pool)
    if needs_kernel and attrs.get("kernel", "None").strip() in ("None", ""):
        raise _bad_attr(node, src, "kernel", attrs.get("kernel", ""), "given (the op requires a kernel size)")
    for key in (*_POSITIVE_TUPLES, *_NONNEG_TUPLES):
        v = attrs.get(key)
        if v is None or v.strip() in ("None", ""):
            continue
        items = _tuple_items(v)
        low = 1 if key in _POSITIVE_TUPLES else 0
        if any(p != "None" and (not _INT.match(p) or int(p.rstrip("L")) < low) for p in items):
            raise _bad_attr(node, src, key, v, f"a tuple of integers >= {low}")
        if key == "kernel" and not items and needs_kernel:
            raise _bad_attr(node, src, key, v, "a non-empty kernel size")


def _number(node: MXNode, src: str, key: str, default: float) -> float:
    v = node.raw_attrs.get(key)
    if v is None or v.strip() in ("None", ""):
        return default
    try:
        x = float(v.strip().rstrip("Ll"))
    except ValueError:
        raise _bad_attr(node, src, key, v, "a number") from None
    if not math.isfinite(x):
        raise _bad_attr(node, src, key, v, "a finite number")
    return x


def _check_declared_size(node: MXNode, src: str) -> None:
    """Ops whose attributes alone size a constant (``_arange``): the length is checked against the
    memory limit before a translator materialises it (a 1e12-long arange is a one-line file)."""
    if node.op not in ("_arange", "arange", "_npi_arange"):
        return
    start = _number(node, src, "start", 0.0)
    has_stop = node.raw_attrs.get("stop", "None").strip() not in ("None", "")
    stop = _number(node, src, "stop", start)
    step = _number(node, src, "step", 1.0)
    repeat = _number(node, src, "repeat", 1.0)
    if step == 0:
        raise _bad_attr(node, src, "step", node.raw_attrs.get("step", "0"), "a non-zero step")
    if repeat < 1 or repeat != int(repeat):
        raise _bad_attr(node, src, "repeat", node.raw_attrs.get("repeat", ""), "an integer >= 1")
    if not has_stop:
        start, stop = 0.0, start
    length = max(math.ceil((stop - start) / step), 0) * int(repeat)
    # the translator computes in float64 before casting (8 bytes an element)
    check_allocation(length * 8, f"{src}: node '{node.name}' ({node.op}, {length:,} elements)")


def _add_legacy_aux(graph: SymbolGraph) -> None:
    """Re-create the aux variables pre-0.9 files left implicit (appended, so indices stay valid)."""
    for node in list(graph.nodes):
        names = _LEGACY_AUX.get(node.op)
        if names is None or len(node.inputs) >= len(names) + 1:
            continue
        for arg in names[len(node.inputs) - 1:]:
            var = MXNode(len(graph.nodes), "null", f"{node.name}_{arg}", [])
            graph.nodes.append(var)
            node.inputs.append((var.index, 0))
            log.info("legacy symbol: added implicit variable %s", var.name)


def read_symbol_json(path: str | Path) -> SymbolGraph:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise BadInputFileError(f"{p}: not UTF-8 text (byte offset {e.start}); is this a symbol JSON?") from None
    return parse_symbol_json(text, str(p))


def consumers_of(graph: SymbolGraph) -> dict[int, list[tuple[int, int]]]:
    """node index -> [(consumer index, input position), ...] in graph order."""
    consumers: dict[int, list[tuple[int, int]]] = {}
    for n in graph.nodes:
        for pos, (src, _) in enumerate(n.inputs):
            consumers.setdefault(src, []).append((n.index, pos))
    return consumers


def move_before_consumers(graph: SymbolGraph, moves: dict[int, tuple[int, tuple[int, int]]],
                          remake: Callable[[MXNode, int, tuple[int, int]], MXNode]) -> SymbolGraph:
    """``graph`` with each moved node (index -> (its first consumer, a new input entry)) placed just before that
    consumer, so the new input exists when it is translated; ``remake(node, new_index, new_input)`` builds the
    moved node. Every other node keeps its op, name and inputs (renumbered); names do not change, so output
    names and the MXNet reference still line up. Used by the backward shape resolutions (infer_range, RNN states)."""
    if not moves:
        return graph
    order: list[int] = []
    for i in range(len(graph.nodes)):
        if i in moves:
            continue
        order += [m for m, (c, _) in moves.items() if c == i]
        order.append(i)
    new = {old: k for k, old in enumerate(order)}
    nodes = []
    for old in order:
        n = graph.nodes[old]
        if old in moves:
            src, out = moves[old][1]
            nodes.append(remake(n, new[old], (new[src], out)))
        else:
            nodes.append(MXNode(new[old], n.op, n.name, [(new[s], k) for s, k in n.inputs], dict(n.raw_attrs),
                                dict(n.hidden)))
    return dataclasses.replace(graph, nodes=nodes, heads=[(new[h], k) for h, k in graph.heads],
                               arg_nodes=[new[a] for a in graph.arg_nodes], node_row_ptr=None)
