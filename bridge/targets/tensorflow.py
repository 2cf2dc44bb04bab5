"""ONNX -> TensorFlow SavedModel through onnx-tf, with everything onnx-tf cannot take settled beforehand.

onnx-tf 1.10.0 is unmaintained: its handlers stop at opset 16, it rejects some Resize forms that
exporters emit by default, and it fails deep inside a TF trace when it meets anything else it does
not implement. So before onnx-tf sees a model, in this order:

1. functions are inlined (onnx-tf converts the main graph only);
2. the model is lowered to opset 16 with ``opsets.conversion`` (down-conversion, our adapters first);
3. ``CanonicalizeResizePass(target="onnx-tf")`` rewrites nearest-Resize forms onnx-tf rejects into
   exactly equivalent accepted ones (it needs the final opset and inferred shapes, hence after 2);
4. graph input/output names become valid TF signature keys (``input.1`` -> ``input_1``); the
   mapping is returned and stored in the SavedModel (``assets.extra/bridge_signature.json``);
5. every node, subgraphs included, is checked against onnx-tf's own handler registry at the
   model's opset (handler present, versioned handler for the schema's since-version) and against
   the forms its handlers refuse (Resize, Bernoulli). All failures are reported together as an
   ``OnnxTfUnsupportedError`` naming node and op - before any TF tracing starts.

Then onnx-tf builds the tf.Module (each handler's output given the static shape ONNX inferred for it, and
handlers that build the wrong graph corrected: ``onnx_tf_fixes``) and the SavedModel is written to a temp folder beside
``out_dir`` and renamed into place, so a failure never leaves half a SavedModel behind.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx
import onnx_ir as ir

from bridge.chatter import quiet, root_cause
from bridge.config import Option
from bridge.errors import BridgeError, ExportError, UnsupportedOpError, UsageError
from bridge.frameworks import SIGNATURE_MAP
from bridge.rewriting import default_opset
from bridge.runtimes import Runtime, get_runtime
from bridge.targets.base import TargetResult, onnx_output
from opsets.support import ONNX_TF

logger = logging.getLogger(__name__)

TARGET_NAME = "tensorflow (SavedModel)"
_NOT_IDENT = re.compile(r"[^A-Za-z0-9_]")


class OnnxTfUnsupportedError(UnsupportedOpError):
    """Nodes onnx-tf cannot convert even after lowering to its opset and canonicalising Resize."""

    def __init__(self, unsupported: Mapping[str, Iterable[str]], opset: int) -> None:
        super().__init__(unsupported)
        lines = str(self).split("\n", 1)[1]
        self.args = (f"{len(self.unsupported)} op type(s) cannot be converted to TensorFlow by onnx-tf "
                     f"(model lowered to opset {opset}):\n{lines}",)


@dataclass
class PreparedModel:
    """The model as onnx-tf will receive it, plus what was done to get there."""

    model: onnx.ModelProto
    opset_in: int
    opset_out: int
    input_names: dict[str, str] = field(default_factory=dict)  # ONNX name -> TF signature key
    output_names: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _to_ir(model: Any) -> ir.Model:
    if isinstance(model, ir.Model):
        return ir.from_proto(ir.to_proto(model))  # work on a copy
    if isinstance(model, onnx.ModelProto):
        return ir.from_proto(model)
    if isinstance(model, bytes):
        return ir.from_proto(onnx.load_from_string(model))
    if isinstance(model, (str, Path)):
        from bridge.io import load_model

        return ir.from_proto(load_model(model))
    raise TypeError(f"expected an ONNX model (ModelProto, onnx_ir.Model, bytes or path), not {type(model).__name__}")


def prepare_for_onnx_tf(model: Any, opset: int = ONNX_TF.max_opset) -> PreparedModel:
    """Steps 1-4 of the module docstring (no TF import): inline, lower, canonicalise Resize, rename I/O."""
    from onnx_ir.passes.common import InlinePass, ShapeInferencePass

    from bridge.passes.resize import CanonicalizeResizePass
    from opsets.conversion import convert_opset_with_report, model_opset

    work = _to_ir(model)
    opset_in = model_opset(work)
    notes: list[str] = []
    if work.functions:
        InlinePass()(work)
        notes.append("inlined model-local functions (onnx-tf converts the main graph only)")
    if opset_in > opset:
        work, applied = convert_opset_with_report(work, opset)
        notes.append(f"lowered opset {opset_in} -> {opset} for onnx-tf (its handlers stop at {ONNX_TF.max_opset})"
                     + (f"; bridge adapters used: {', '.join(applied)}" if applied else ""))
    with contextlib.suppress(Exception):  # shapes help the Resize check; a model inference rejects still converts
        ShapeInferencePass(strict_mode=False, data_prop=True)(work)
    resize = CanonicalizeResizePass(target=ONNX_TF.name)
    if resize(work).modified:
        notes.append("rewrote nearest-Resize forms onnx-tf rejects into exactly equivalent asymmetric/floor ones")
    if _tf_safe_node_names(work):
        notes.append("renamed nodes whose names TensorFlow refuses as name scopes")
    inputs, outputs = _signature_safe_names(work)
    renamed = {k: v for k, v in {**inputs, **outputs}.items() if k != v}
    if renamed:
        notes.append("TF signature keys differ from ONNX names: "
                     + ", ".join(f"{k} -> {v}" for k, v in renamed.items()))
    proto = ir.to_proto(work)
    return PreparedModel(proto, opset_in, model_opset(work), inputs, outputs, notes, list(resize.warnings))


def _signature_safe_names(model: ir.Model) -> tuple[dict[str, str], dict[str, str]]:
    """Rename graph inputs/outputs to identifiers (TF signature keys); returns ONNX -> new name maps."""
    graph = model.graph
    taken = {str(v.name) for node in graph for v in node.outputs if v.name}
    taken |= {str(v.name) for v in graph.inputs} | set(graph.initializers)
    maps: list[dict[str, str]] = [{}, {}]
    for i, values in enumerate((graph.inputs, graph.outputs)):
        for value in values:
            old = str(value.name)
            if old in maps[0]:  # an input passed straight through to an output
                maps[i][old] = maps[0][old]
                continue
            new = _NOT_IDENT.sub("_", old) or "t"
            if not new[0].isalpha():
                new = f"t_{new}"
            if new != old:
                base, n = new, 1
                while new in taken:
                    new, n = f"{base}_{n}", n + 1
                taken.add(new)
                value.name = new
            maps[i][old] = new
    return maps[0], maps[1]


_SCOPE_CHARS = re.compile(r"[^A-Za-z0-9_.\\/>-]")


def _tf_safe_node_names(model: ir.Model) -> bool:
    """onnx-tf opens a TF name scope per node name: make every name valid there and unique (it keys
    handler variables by node name). True when any name changed."""
    seen: set[str] = set()
    changed = False
    for graph in model.graphs():
        for index, node in enumerate(graph):
            name = _SCOPE_CHARS.sub("_", node.name or "") or f"{node.op_type}_{index}"
            base, n = name, 1
            while name in seen:
                name, n = f"{base}_{n}", n + 1
            seen.add(name)
            if name != node.name:
                node.name = name
                changed = True
    return changed


def _all_nodes(graph: onnx.GraphProto, prefix: str = "") -> Iterator[tuple[str, onnx.NodeProto]]:
    for index, node in enumerate(graph.node):
        label = prefix + (node.name or f"<unnamed {node.op_type} #{index}>")
        yield label, node
        for attr in node.attribute:
            subgraphs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
            for sub in subgraphs:
                yield from _all_nodes(sub, f"{label}/{attr.name}/")


def _attr(node: onnx.NodeProto, name: str, default: Any) -> Any:
    for a in node.attribute:
        if a.name == name:
            value = onnx.helper.get_attribute_value(a)
            return value.decode() if isinstance(value, bytes) else value
    return default


def _resize_problem(node: onnx.NodeProto, opset: int, ranks: Mapping[str, int]) -> str | None:
    """Why onnx-tf's Resize handler would refuse ``node`` (None when it accepts it)."""
    if opset < 11 or len(node.input) < 3:
        return None  # Resize-10: asymmetric by definition
    mode = _attr(node, "mode", "nearest")
    coord = _attr(node, "coordinate_transformation_mode", "half_pixel")
    nearest = _attr(node, "nearest_mode", "round_prefer_floor") if mode == "nearest" else None
    if not ONNX_TF.accepts_resize(mode, coord, nearest):
        return f"Resize ({mode}, {coord}" + (f", {nearest})" if nearest else ")")
    if mode == "cubic" and (_attr(node, "cubic_coeff_a", -0.75) != -0.5 or _attr(node, "exclude_outside", 0) != 1):
        return "Resize (cubic needs cubic_coeff_a=-0.5 and exclude_outside=1)"
    rank = ranks.get(node.input[0])
    if ONNX_TF.resize_rank is not None and rank is not None and rank != ONNX_TF.resize_rank:
        return f"Resize (rank-{rank} input; onnx-tf resizes rank {ONNX_TF.resize_rank} only)"
    return None


def unsupported_nodes(model: onnx.ModelProto, handlers: Mapping[str, Mapping[str, Any]]) -> dict[str, list[str]]:
    """``{op description: [node labels]}`` for every node onnx-tf's ``handlers`` cannot convert.

    ``handlers`` is onnx-tf's registry for the model's opsets (``{domain: {op: handler class}}``,
    with ``SINCE_VERSION`` set, as ``TensorflowBackend._get_handlers`` returns it).
    """
    opsets = {o.domain: o.version for o in model.opset_import}
    default = opsets.get("", opsets.get("ai.onnx", 1))
    g = model.graph
    ranks = {vi.name: len(vi.type.tensor_type.shape.dim) for vi in (*g.input, *g.value_info, *g.output)
             if vi.type.tensor_type.HasField("shape")}
    constants = {i.name for i in g.initializer}
    constants |= {o for _, n in _all_nodes(g) if n.op_type == "Constant" for o in n.output}
    found: dict[str, list[str]] = {}
    for label, node in _all_nodes(model.graph):
        domain = "" if node.domain == "ai.onnx" else node.domain
        problem = None
        handler = handlers.get(domain, {}).get(node.op_type)
        if handler is None:
            problem = f"{domain}::{node.op_type}" if domain else node.op_type
        elif not hasattr(handler, f"version_{handler.SINCE_VERSION}"):
            versions = sorted(handler.get_versions())
            problem = f"{node.op_type} (opset-{handler.SINCE_VERSION} form; onnx-tf implements versions {versions})"
        elif node.op_type == "Bernoulli" and not domain:
            problem = "Bernoulli (onnx-tf needs tensorflow-probability for it, which bridge does not install)"
        elif node.op_type == "Resize" and not domain:
            problem = _resize_problem(node, default, ranks)
        elif node.op_type in ("ScatterElements", "ScatterND") and _attr(node, "reduction", "none") != "none":
            problem = f"{node.op_type} (reduction={_attr(node, 'reduction', 'none')})"
        elif node.op_type in ("Squeeze", "Unsqueeze") and len(node.input) > 1 and node.input[1] \
                and node.input[1] not in constants:
            problem = f"{node.op_type} (axes computed at run time; onnx-tf needs them constant)"
        if problem:
            found.setdefault(problem, []).append(label)
    return found


def onnx_tf_handlers(model: onnx.ModelProto) -> dict[str, dict[str, Any]]:
    """onnx-tf's handler registry for ``model``'s opset imports (imports TF and onnx-tf)."""
    from bridge.targets.onnx_tf_compat import load_onnx_tf

    backend = load_onnx_tf()
    handlers: dict[str, dict[str, Any]] = backend.TensorflowBackend._get_handlers(list(model.opset_import))
    return handlers


def check_onnx_tf_support(model: onnx.ModelProto) -> None:
    """Raise OnnxTfUnsupportedError listing every node onnx-tf cannot convert (nothing when all can)."""
    found = unsupported_nodes(model, onnx_tf_handlers(model))
    if found:
        opset = default_opset(model, missing=0)
        raise OnnxTfUnsupportedError(found, opset)


def export_saved_model(onnx_model: Any, out_dir: str | Path, *, opset: int = ONNX_TF.max_opset) -> TargetResult:
    """Convert ``onnx_model`` (ModelProto, onnx_ir.Model, bytes or path) to a SavedModel at ``out_dir``.

    The signature ``serving_default`` takes and returns the tensors named in the result's
    ``input_names`` / ``output_names`` maps. Raises OnnxTfUnsupportedError before conversion for
    nodes onnx-tf cannot take, ExportError when onnx-tf itself fails.
    """
    from bridge.targets.onnx_tf_compat import ONNX_TF_VERSION, load_onnx_tf
    from bridge.targets.onnx_tf_fixes import onnx_static_shapes

    start = time.perf_counter()
    out = Path(out_dir)
    if out.exists() and not (out.is_dir() and (not any(out.iterdir()) or (out / "saved_model.pb").exists())):
        raise UsageError(f"{out} exists and is not a SavedModel folder; refusing to replace it")
    prepared = prepare_for_onnx_tf(onnx_model, opset)
    check_onnx_tf_support(prepared.model)
    backend = load_onnx_tf()
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create output folder {out.parent}: {exc.strerror}") from exc
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    try:
        saved = tmp / "model"
        with quiet(["tensorflow", "absl", "onnx-tf"], "TensorFlow"), onnx_static_shapes(prepared.model):
            try:
                rep = backend.prepare(prepared.model, device="CPU", strict=True, logging_level="ERROR")
                rep.export_graph(str(saved))
            except BridgeError:
                raise
            except Exception as exc:
                raise ExportError(f"onnx-tf failed to convert the model to TensorFlow: {root_cause(exc, limit=400)}") from exc
        (saved / SIGNATURE_MAP).parent.mkdir(parents=True, exist_ok=True)
        (saved / SIGNATURE_MAP).write_text(json.dumps(
            {"inputs": prepared.input_names, "outputs": prepared.output_names, "signature": "serving_default"},
            indent=2))
        _replace_dir(saved, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    seconds = time.perf_counter() - start
    logger.info("wrote SavedModel %s in %.1f s", out, seconds)
    return TargetResult(
        target=TARGET_NAME, path=out, converter=f"onnx-tf {ONNX_TF_VERSION}", opset_in=prepared.opset_in,
        opset_out=prepared.opset_out, input_names=prepared.input_names, output_names=prepared.output_names,
        notes=prepared.notes, warnings=prepared.warnings, seconds=seconds,
    )


def move_saved_model(src: str | Path, out_dir: str | Path) -> Path:
    """Move a SavedModel written elsewhere (e.g. into a temp folder for validation) to ``out_dir``,
    replacing a previous SavedModel there as a whole. For "write only after validation passes"."""
    src, out = Path(src), Path(out_dir)
    if out.exists() and not (out.is_dir() and (not any(out.iterdir()) or (out / "saved_model.pb").exists())):
        raise UsageError(f"{out} exists and is not a SavedModel folder; refusing to replace it")
    out.parent.mkdir(parents=True, exist_ok=True)
    if src.resolve().parent != out.resolve().parent:  # os.replace needs one filesystem: stage beside the target
        staged = out.with_name(f".{out.name}.{uuid.uuid4().hex[:8]}.tmp")
        shutil.copytree(src, staged)
        shutil.rmtree(src, ignore_errors=True)
        src = staged
    _replace_dir(src, out)
    return out


def _replace_dir(new: Path, target: Path) -> None:
    """Rename ``new`` to ``target``; an existing ``target`` is moved aside first and removed after."""
    old = None
    if target.exists():
        old = target.with_name(f".{target.name}.old-{uuid.uuid4().hex[:8]}")
        os.replace(target, old)
    try:
        os.replace(new, target)
    except OSError:
        if old is not None:
            os.replace(old, target)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


class TensorFlowTarget:
    """``--to tensorflow``: a SavedModel (via onnx-tf) next to the validated ONNX, run by the TF runtime."""

    name = "tensorflow"
    artefact = True  # writes something besides the validated .onnx
    runtimes = ("tensorflow",)
    default_runtimes = ("onnxruntime", "tensorflow")
    options = (Option("saved_model", Path | None, None, "SavedModel folder (default: <artefact-dir or the .onnx's "
                      "folder>/<output stem>_saved_model)"),)

    def place(self, output: Path, artefact_dir: Path | None, options: Mapping[str, Any]) -> tuple[Path, dict[str, Path]]:
        """``-o OUT_DIR`` (not .onnx) names the SavedModel, the validated ONNX goes beside it as OUT_DIR.onnx."""
        given = options.get("saved_model")
        if given is None and output.suffix.lower() != ".onnx":
            return output.with_name(output.name + ".onnx"), {"saved_model": output}
        folder = artefact_dir if artefact_dir is not None else output.parent
        return onnx_output(output), {"saved_model": Path(given) if given else folder / f"{output.stem}_saved_model"}

    def export(self, model: onnx.ModelProto, staging: Path) -> TargetResult:
        return export_saved_model(model, staging / "saved_model")

    def commit(self, staged: Path, destination: Path) -> Path:
        return move_saved_model(staged, destination)

    def runtime(self, name: str, model: Any, workdir: Path) -> Runtime:
        # the SavedModel is built when the runtime is activated (loading apart from running)
        return get_runtime(name, lambda: export_saved_model(model, Path(workdir) / "saved_model").path)
