"""The MXNet adapter: ``prefix-symbol.json`` + ``prefix-EPOCH.params`` -> ONNX, with MXNet optional.

Conversion reads both files with numpy only (symbol.py, params.py) and never imports MXNet; MXNet
is needed only for the reference runner used in validation.

Source options: ``outputs`` = comma-separated node or output names to cut the graph at (e.g. the
mxnet-ssd cut points ``multibox_loc_pred,multibox_cls_pred,multibox_anchors``). ``--output-names``
renames the model's outputs (the reference runner maps each back to its MXNet tensor).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from adapters.base import ExportResult, SourceDecodeProbe, rename_outputs
from adapters.mxnet.convert import NO_PARAMS_FILE, convert_graph, resolve_heads
from adapters.mxnet.decode_probe import decode_nodes, run_source_probe
from adapters.mxnet.nondeterministic import mark_nondeterministic_outputs
from adapters.mxnet.params import load_params, unused_params
from adapters.mxnet.reference import MXNetReferenceRuntime, import_mxnet
from adapters.mxnet.symbol import MXNode, SymbolGraph, looks_like_symbol_json, read_symbol_json
from bridge.config import ExportSpec, InputSpec, Source
from bridge.errors import BridgeError, SourceNotFoundError, UsageError, ValidationMismatch
from bridge.runtimes.base import Runtime

log = logging.getLogger(__name__)
OUTPUT_MAP_KEY = "bridge.mxnet.outputs"  # metadata_props: ONNX output name -> MXNet internal output name
_EPOCH = re.compile(r"^(?P<prefix>.+)-(?P<epoch>\d+)\.params$")


def find_params(symbol_json: Path) -> Path | None:
    """``prefix-EPOCH.params`` beside ``prefix-symbol.json`` (highest epoch). For other JSON names,
    the only prefix in the folder with EPOCH params. None when there is none; UsageError if ambiguous."""
    folder = symbol_json.parent
    found: dict[str, list[tuple[int, Path]]] = {}
    for p in folder.glob("*.params"):
        m = _EPOCH.match(p.name)
        if m:
            found.setdefault(m.group("prefix"), []).append((int(m.group("epoch")), p))
    if symbol_json.name.endswith("-symbol.json"):
        candidates = found.get(symbol_json.name[: -len("-symbol.json")], [])
    elif len(found) > 1:
        raise UsageError(f"several .params prefixes beside {symbol_json} ({', '.join(sorted(found))}); "
                         "pass --weights/--params PREFIX-EPOCH.params")
    else:
        candidates = next(iter(found.values()), [])
    if not candidates:
        return None
    return max(candidates)[1]


# MXNet ops that read a batch index out of a float tensor without checking it against the batch
# (src/operator/contrib/roi_align.cc, src/operator/roi_pooling.cc): a wrong index is a native crash
UNCHECKED_INDEX_OPS = frozenset({"_contrib_ROIAlign", "ROIPooling"})


# MXNet ops that run an NMS -> (the attribute holding its IoU threshold, MXNet's default for it); defaults as
# MXNet 1.9.1 declares them (src/operator/contrib/multibox_detection-inl.h, bounding_box-inl.h, proposal-inl.h,
# multi_proposal-inl.h; /work/shared/notes/mxnet-ssd.md)
NMS_IOU_ATTRS: dict[str, tuple[str, float]] = {
    **dict.fromkeys(("MultiBoxDetection", "_contrib_MultiBoxDetection"), ("nms_threshold", 0.5)),
    **dict.fromkeys(("box_nms", "_contrib_box_nms", "box_non_maximum_suppression",
                     "_contrib_box_non_maximum_suppression"), ("overlap_thresh", 0.5)),
    **dict.fromkeys(("Proposal", "_contrib_Proposal", "MultiProposal", "_contrib_MultiProposal"), ("threshold", 0.7)),
}


def _all_nodes(graph: SymbolGraph) -> list[MXNode]:
    return [n for node in graph.nodes for n in (node, *(m for sub in node.subgraphs for m in _all_nodes(sub)))]


@dataclasses.dataclass(frozen=True)
class SourceOutputs:
    """The outputs of an MXNet source, as (node index, output index) of its symbol: the symbol's heads, and the
    cut points its ``outputs`` option names (``convert_graph``'s ``resolve_heads``). Only these may stand for an
    output of a model under test: MXNet's reference can return any internal tensor by name, so a name the file
    chose must not pick which one it is compared with."""

    graph: SymbolGraph
    refs: frozenset[tuple[int, int]]

    @classmethod
    def of(cls, source: Source) -> SourceOutputs:
        graph = read_symbol_json(_symbol_path(source))
        cuts = str(source.options.get("outputs") or "")
        return cls(graph, frozenset(graph.heads) | frozenset(resolve_heads(graph, cuts) if cuts.strip() else ()))

    def ref(self, internal: str) -> tuple[int, int] | None:
        """(node index, output index) of an MXNet internal output name as the reference runner reads it
        (``conv0_output``, ``split_output1``, ``nms_output0``, a variable's own name, ``name#k``: the k-th node of
        that name in file order); None when it names no node of the symbol."""
        name, sep, nth = internal.rpartition("#")
        if not (sep and nth.isdigit()):
            name, nth = internal, "0"
        m = re.fullmatch(r"(.+)_output(\d*)", name)
        if m is not None:
            same = [n for n in self.graph.nodes if not n.is_variable and n.name == m.group(1)]
            if int(nth) < len(same):
                return same[int(nth)].index, int(m.group(2) or 0)
        variable = next((n for n in self.graph.nodes if n.is_variable and n.name == name), None)
        return None if variable is None or nth != "0" else (variable.index, 0)

    def holds(self, internal: str) -> bool:
        """Whether ``internal`` is one of the source's outputs. A name MXNet spells otherwise than
        ``<node>_output<i>`` (an op's own output names, ``rnn_state``) counts when its node is one of them."""
        ref = self.ref(internal)
        if ref is not None:
            return ref in self.refs
        base = internal.rpartition("#")[0] or internal
        return any(base.startswith(f"{self.graph.nodes[k].name}_") for k, _ in self.refs)

    def names(self) -> list[str]:
        """The outputs as MXNet names them (``<node>_output``, ``<node>_output<i>``), for messages."""
        return [n.name if n.is_variable else f"{n.name}_output{i or ''}"
                for n, i in ((self.graph.nodes[k], i) for k, i in sorted(self.refs))]


def source_outputs_only(source: Source, claimed: Mapping[str, str]) -> dict[str, str]:
    """The entries of a model's output map (``OUTPUT_MAP_KEY``: ONNX output -> the MXNet tensor the reference
    returns for it) that name an output of the source itself (``SourceOutputs``: a head of its symbol, or a cut
    point its ``outputs`` option names). The map is read from the model under test, so it must not pick which of
    the source's tensors that model is compared with: an entry naming any other internal tensor (a model computing
    an early layer, its output mapped onto that layer) is dropped, said in the log; the reference then reads
    that output under its own name, which must itself be an output of the source (``reference_outputs``)."""
    outputs = SourceOutputs.of(source)
    kept = {k: str(v) for k, v in claimed.items() if outputs.holds(str(v))}
    for k, v in claimed.items():
        if k not in kept:
            log.warning("the model's metadata maps output %r to MXNet's %r, which is not an output of the source "
                        "symbol %s: not used (the file under test does not decide what it is compared with)", k, v,
                        outputs.graph.source)
    return kept


def reference_outputs(source: Source, export: ExportResult) -> dict[str, str]:
    """The MXNet tensor the reference returns for each output of ``export``'s model (``OUTPUT_MAP_KEY``'s entries
    that ``source_outputs_only`` keeps; every other output under its own name). Each must be an output of the
    source (``SourceOutputs``): the model may be the file under test, and its output names must not choose which
    of MXNet's internal tensors it is compared with - a model of an early layer, its output named after that
    layer's tensor (``relu1_output``), is not a model of the source. Such an output is a ValidationMismatch (a
    wrong model of this source, exit code 1) naming it, and the ``--outputs`` that validates a model of the source
    cut there."""
    mapping = {name: name for name in export.output_names}
    for prop in export.model.metadata_props:
        if prop.key == OUTPUT_MAP_KEY:
            mapping.update(source_outputs_only(source, json.loads(prop.value)))
    outputs = SourceOutputs.of(source)
    foreign = {k: v for k, v in mapping.items() if not outputs.holds(v)}
    if not foreign:
        return mapping
    said = []
    for name, internal in foreign.items():
        what = f"output '{name}' of the model is not an output of the source symbol {outputs.graph.source} (its " \
               f"outputs: {', '.join(outputs.names())})"
        ref = outputs.ref(internal)
        if ref is None:
            said.append(f"{what}: no tensor of the symbol is named {internal}")
            continue
        cut = outputs.graph.nodes[ref[0]].name if ref[1] == 0 else internal.rpartition("#")[0] or internal
        said.append(f"{what}: it is MXNet's internal tensor {internal} (layer {outputs.graph.nodes[ref[0]].name}), "
                    "so the model computes a part of the source; to validate a model of the source cut there, pass "
                    f"--outputs {cut} (Python: outputs='{cut}')")
    raise ValidationMismatch("; ".join(said))


def _symbol_path(source: Source) -> Path:
    if source.location is None:
        raise UsageError("the MXNet adapter converts files: give the path of PREFIX-symbol.json")
    p = Path(source.location)
    if not p.is_file():
        raise SourceNotFoundError(f"{p}: no such file")
    return p


class MXNetAdapter:
    """Converts MXNet symbol + params files without importing MXNet."""

    framework = "mxnet"
    honours = ("weights", "outputs", "output_names")  # the source-specific convert options it reads
    # --dataset preprocessing when the user gives none (bridge.validation.dataset; stated in the report)
    dataset_preprocessing = MappingProxyType({"channel_order": "RGB", "mean": (123.0, 117.0, 104.0),
                                              "why": "mxnet-ssd's: RGB, mean 123,117,104, no std"})

    def locate(self, source: Source) -> Source | None:
        """The symbol/params pair an MXNet user means by a checkpoint's other names (as ``mx.model.load_checkpoint``
        takes them): its prefix (``model`` for ``model-symbol.json``), its folder (one ``*-symbol.json`` in it) or
        one ``PREFIX-EPOCH.params`` (that epoch's weights); None for anything else. A folder of several symbols is a
        UsageError naming them (which one is meant cannot be guessed)."""
        if source.location is None or source.obj is not None:
            return None
        p = Path(source.location)
        if p.is_dir():
            symbols = sorted(p.glob("*-symbol.json"))
            if len(symbols) > 1:
                raise UsageError(f"{p}: a folder of {len(symbols)} MXNet symbols; give one of them: "
                                 + ", ".join(str(s) for s in symbols))
            return dataclasses.replace(source, location=str(symbols[0])) if symbols else None
        m = _EPOCH.match(p.name)
        if m and p.is_file():  # PREFIX-EPOCH.params: its symbol, with these weights
            symbol = p.with_name(f"{m.group('prefix')}-symbol.json")
            if symbol.is_file():
                return dataclasses.replace(source, location=str(symbol), weights=source.weights or p)
            raise UsageError(f"{p} holds MXNet weights; give the symbol file they belong to ({symbol.name} is not "
                             "beside it) and these weights with --params")
        if not p.exists() and p.with_name(f"{p.name}-symbol.json").is_file():  # a checkpoint prefix
            return dataclasses.replace(source, location=str(p.with_name(f"{p.name}-symbol.json")))
        return None

    def claims(self, source: Source) -> bool:
        if source.location is None or source.obj is not None:
            return False
        loc = source.location
        if loc.endswith("-symbol.json"):
            return True
        if not loc.endswith(".json"):
            return False
        p = Path(loc)
        try:
            if p.stat().st_size > 512 * 1024 * 1024:
                return False
            text = p.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return False
        return '"nodes"' in text and '"heads"' in text and looks_like_symbol_json(text)

    def resolve_params(self, source: Source, graph: SymbolGraph | None = None) -> Path | None:
        path = _symbol_path(source)
        if source.weights is not None:
            if not Path(source.weights).is_file():
                raise SourceNotFoundError(f"--weights/--params {source.weights}: no such file (the MXNet "
                                          f"parameters of {path.name}, PREFIX-EPOCH.params)")
            return Path(source.weights)
        return find_params(path)

    def export(self, source: Source, spec: ExportSpec) -> ExportResult:
        t0 = time.perf_counter()
        path = _symbol_path(source)
        graph = read_symbol_json(path)
        params_path = self.resolve_params(source, graph)
        notes = []
        if params_path is None:
            prefix = path.name[: -len("-symbol.json")] if path.name.endswith("-symbol.json") else "PREFIX"
            params_desc = (f"{NO_PARAMS_FILE} beside {path} (looked for {prefix}-EPOCH.params, e.g. "
                           f"{prefix}-0000.params, in {path.parent}{'/' if str(path.parent) != '/' else ''})")
            params = {}
            notes.append("no .params file beside the symbol: converted without parameters")
        else:
            params_desc = str(params_path)
            params = load_params(params_path)
            notes.append(f"parameters read from {params_path}")
        unused = unused_params(params, {n.name for n in graph.nodes if n.is_variable})
        # the arrays are released as their initializers are built (the weights are held once, not twice)
        converted = convert_graph(graph, params, spec, source.options.get("outputs"), params_desc, consume=True)
        if unused:
            shown = ", ".join(unused[:10]) + (f", ... ({len(unused) - 10} more)" if len(unused) > 10 else "")
            converted.warnings.append(f"{params_desc}: {len(unused)} parameter(s) the symbol does not use: {shown} "
                                      "(wrong file or epoch?)")
        model = converted.model
        asked = [n.strip() for n in (source.options.get("outputs") or "").split(",") if n.strip()]
        renamed = [f"{a} -> {b}" for a, b in zip(asked, converted.output_names, strict=False) if a != b]
        if renamed and not spec.output_names:  # the cut points keep MXNet's tensor names (<node>_output), which the reference runner reads
            notes.append(f"--outputs: the model's outputs carry MXNet's names of those tensors ({', '.join(renamed)}: "
                         "MXNet names a node's outputs <node>_output, <node>_output1, ...)")
        mapping = {name: name for name in converted.output_names}
        for node in model.graph.node:  # aliases added for outputs that are inputs/initializers/duplicates
            if node.op_type == "Identity" and node.output[0] in mapping and node.input[0] != node.output[0]:
                mapping[node.output[0]] = node.input[0] if node.name == node.output[0] else node.output[0]
        mapping.update(converted.source_outputs)  # outputs of nodes renamed apart (MXNet names them alike)
        output_names = converted.output_names
        if spec.output_names:  # the reference runner still reads each renamed output under its MXNet name
            renames = rename_outputs(model, spec.output_names)
            mapping = {renames.get(k, k): v for k, v in mapping.items()}
            output_names = tuple(spec.output_names)
        entry = model.metadata_props.add()
        entry.key, entry.value = OUTPUT_MAP_KEY, json.dumps(mapping)
        random_outputs = mark_nondeterministic_outputs(model)
        if random_outputs:
            notes.append(f"outputs {random_outputs} come from random ops: validation compares their shape and dtype only")
        if converted.contrib_nodes:
            notes.append(f"{converted.contrib_nodes} layer(s) ONNX has no op for exported as bridge.contrib nodes, "
                         "for the ONNX stage's lowering passes")
        return ExportResult(
            model=model,
            exporter="bridge mxnet symbol reader",
            inputs=converted.inputs,
            output_names=output_names,
            warnings=list(converted.warnings),
            notes=notes,
            seconds=time.perf_counter() - t0,
        )

    def reference_isolation(self, source: Source, export: ExportResult) -> str | None:
        """Why MXNet must run this source in a child process even with isolation off (``--no-isolate``), or None:
        its ROI layers index the batch with a value read from the rois tensor, unchecked, and an index past the
        batch reads out of bounds (a segfault or an abort that would take the caller down)."""
        try:
            graph = read_symbol_json(_symbol_path(source))
        except (BridgeError, OSError):
            return None
        ops = sorted({n.op for n in _all_nodes(graph)} & UNCHECKED_INDEX_OPS)
        if not ops:
            return None
        return (f"MXNet's {', '.join(ops)} reads the batch index of each roi unchecked (an index past the batch "
                "crashes the process)")

    def nms_iou_thresholds(self, source: Source, run: Callable[..., Any] | None = None) -> dict[str, float] | None:
        """The IoU threshold of every NMS the symbol file states, by node name (validation's tie rules take it
        from here, not from the candidate: ``bridge.validation.detection.layouts.with_source_nms``); an absent
        attribute is MXNet's default (``NMS_IOU_ATTRS``). A MultiBoxDetection whose nms_threshold lies outside
        (0, 1] runs no NMS and states none. None when the source is not a file. Read here from the JSON (no MXNet
        import): ``run`` (where the reference runs) is not needed."""
        if source.location is None or source.obj is not None:
            return None
        found: dict[str, float] = {}
        for node in _all_nodes(read_symbol_json(_symbol_path(source))):
            attr = NMS_IOU_ATTRS.get(node.op)
            if attr is None:
                continue
            value = node.attrs.optional_float(attr[0], attr[1])
            if value is None or (attr[0] == "nms_threshold" and not 0.0 < float(value) <= 1.0):
                continue
            found[node.name] = float(value)
        return found

    def decode_probes(self, source: Source, inputs: Sequence[InputSpec], feeds: Mapping[str, np.ndarray],
                      run: Callable[[Callable[[], SourceDecodeProbe]], SourceDecodeProbe]) -> list[SourceDecodeProbe]:
        """Every MultiBoxDetection node of the symbol run by MXNet on synthetic inputs over all its anchors
        (``adapters.mxnet.decode_probe``). ``run`` runs each job where the reference runs (its child process, MXNet
        already imported there; this process only when the reference runs here): MXNet is not imported here by
        this method. [] when the symbol has none or the source is not a file."""
        if source.location is None or source.obj is not None:
            return []
        symbol = _symbol_path(source)
        cuts = [c.strip() for c in str(source.options.get("outputs") or "").split(",") if c.strip()]
        nodes = decode_nodes(symbol, cuts)
        if not nodes:
            return []
        params = self.resolve_params(source)
        return [run(partial(run_source_probe, str(symbol), str(params) if params else None, tuple(inputs),
                            dict(feeds), node)) for node in nodes]

    def reference_runner(self, source: Source, export: ExportResult) -> Runtime:
        outputs = reference_outputs(source, export)  # before MXNet: decided from the symbol file alone
        import_mxnet()  # fail early with AdapterUnavailableError when MXNet is absent
        return MXNetReferenceRuntime(_symbol_path(source), self.resolve_params(source), export.inputs, outputs)
