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

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adapters.mxnet.attrs import Attrs
from bridge.errors import BadInputFileError

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
    """Cheap content test used by ``claims``: a JSON object with 'nodes' and 'heads'."""
    try:
        doc = json.loads(text)
    except ValueError:
        return False
    return isinstance(doc, dict) and "nodes" in doc and "heads" in doc


def parse_symbol_json(text: str, source: str = "<json>") -> SymbolGraph:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise BadInputFileError(
            f"{source}: not valid JSON at line {e.lineno}, column {e.colno} (offset {e.pos}): {e.msg}"
        ) from None
    if not isinstance(doc, dict) or "nodes" not in doc or "heads" not in doc:
        raise BadInputFileError(f"{source}: not an MXNet symbol file (needs top-level 'nodes' and 'heads')")
    raw_nodes = doc["nodes"]
    if not isinstance(raw_nodes, list):
        raise BadInputFileError(f"{source}: 'nodes' must be a list")

    version: int | None = None
    top = doc.get("attrs") or {}
    if isinstance(top, dict) and "mxnet_version" in top:
        mv = top["mxnet_version"]
        try:
            version = int(mv[1] if isinstance(mv, list) else mv)
        except (TypeError, ValueError, IndexError):
            log.warning("%s: unreadable mxnet_version %r", source, mv)

    nodes: list[MXNode] = []
    for i, rn in enumerate(raw_nodes):
        where = f"node #{i}"
        if not isinstance(rn, dict) or "op" not in rn or "name" not in rn:
            raise BadInputFileError(f"{source}: {where}: needs 'op' and 'name'")
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
        nodes.append(MXNode(i, str(rn["op"]), str(rn["name"]), inputs, params, hidden))

    heads = [_entry(h, "heads", source) for h in doc["heads"]]
    for h, _ in heads:
        if not 0 <= h < len(nodes):
            raise BadInputFileError(f"{source}: head refers to node #{h}, but there are {len(nodes)} nodes")
    graph = SymbolGraph(
        nodes=nodes,
        heads=heads,
        arg_nodes=[int(a) for a in doc.get("arg_nodes", [])],
        node_row_ptr=[int(a) for a in doc["node_row_ptr"]] if "node_row_ptr" in doc else None,
        mxnet_version=version,
        source=source,
    )
    if version is None or version < 900:
        _add_legacy_aux(graph)
    return graph


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

