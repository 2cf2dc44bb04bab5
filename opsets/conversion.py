"""Default-domain opset conversion of a whole model, one opset hop at a time.

For each hop ``v -> v±1`` the driver finds the default-domain nodes whose schema changes on
that hop. Those with a bridge version adapter (``opsets.registry``; e.g. Resize 10 -> 11 with
Upsample's asymmetric coordinates, Clip on int64, Relu 14 -> 13, ReduceMean 18 -> 13) are
rewritten first, in onnx_ir. The rest of the hop is delegated: up-hops inside onnxscript's
range go through onnxscript's converter, anything else through onnx's C++ converter. While the
stock converter runs, the nodes our adapters produced are parked in a private domain so it
neither re-adapts nor rejects them (e.g. a Resize that is already in opset-11 form).

Hops no node changes on only bump the opset import. After the last hop, ``opsets.legalize``
fixes forms the target opset rejects that no hop creates (e.g. Clip on int64 below opset 12), the
IR version becomes the lowest that holds the result (``bridge.model.min_ir_version``: a source at
IR 14 taken down to opset 17 must not stay at 14), and the converted model must declare the
source's inputs and outputs (a converter changing them is an error naming the value).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from functools import cache

import onnx
import onnx.version_converter
import onnx_ir as ir
import onnx_ir.passes.common as common_passes
from onnxscript.version_converter import _version_converter as onnxscript_vc

from bridge.errors import UsageError
from bridge.model import min_ir_version
from bridge.rewriting import apply_rewrites, default_opset, node_label
from bridge.rewriting.protos import call_without_weights, infer_shapes
from opsets import legalize, registry, version_adapters
from opsets.errors import OpsetConversionError

__all__ = [
    "MIN_OPSET",
    "OpsetConversionError",
    "check_target",
    "convert_opset",
    "convert_opset_with_report",
    "model_opset",
    "newest_opset",
    "newest_runtime_opset",
]

logger = logging.getLogger(__name__)

MIN_OPSET = 7
_HOLD_DOMAIN = "bridge.opset_hold"  # parking domain for nodes our adapters already converted
_NO_ADAPTER = re.compile(r"No Adapter (?:From|To) Version \$?(?P<v>\d+) for (?P<op>\w+)")


def newest_opset() -> int:
    """The newest default-domain opset the installed onnx knows."""
    return int(onnx.defs.onnx_opset_version())


@cache
def newest_runtime_opset() -> int:
    """The newest default-domain opset the installed onnxruntime loads (probed once per process).

    onnxruntime refuses a model whose opset import is newer than its own ONNX schemas
    (``ValidateOpsetForDomain``), so loading a one-node Identity model per opset, newest first,
    finds the boundary without depending on a version table that goes stale.
    """
    try:
        import onnxruntime as ort
    except ImportError:  # onnxruntime is a core dependency; without it, onnx's own limit applies
        return newest_opset()
    from onnx import TensorProto, helper

    options = ort.SessionOptions()
    options.log_severity_level = 4
    for opset in range(newest_opset(), MIN_OPSET - 1, -1):
        graph = helper.make_graph(
            [helper.make_node("Identity", ["x"], ["y"])], "probe",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
        )
        probe = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
        try:
            ort.InferenceSession(probe.SerializeToString(), options, providers=["CPUExecutionProvider"])
        except Exception:
            continue
        return opset
    return MIN_OPSET


def check_target(target: int) -> None:
    newest = newest_runtime_opset()
    if not MIN_OPSET <= target <= newest:
        raise UsageError(f"--opset {target}: bridge converts between opsets {MIN_OPSET} and {newest} "
                         f"(the newest the installed onnxruntime runs)")


def model_opset(model: ir.Model) -> int:
    return default_opset(model, missing=0)


def convert_opset(model: ir.Model, target: int) -> ir.Model:
    """``model`` converted to default-domain opset ``target`` (a new model; the input is left alone)."""
    return convert_opset_with_report(model, target)[0]


def convert_opset_with_report(model: ir.Model, target: int) -> tuple[ir.Model, list[str]]:
    """Like ``convert_opset``, also naming bridge's adapters that ran (``<op>_<from>_<to>``, once each)."""
    check_target(target)
    current = model_opset(model)
    applied: list[str] = []
    if current == target and not legalize.needed(model, target):
        return model, applied
    if current < MIN_OPSET:
        raise UsageError(f"the model is at opset {current}; bridge reads opset {MIN_OPSET} and newer")
    logger.info("converting opset %d -> %d", current, target)
    work = _copy(model)
    if work.functions:
        # adapters and both stock converters work on the main graph; torch exports may carry functions
        common_passes.InlinePass()(work)
    _infer_shapes(work)  # adapters need dtypes (Clip, Relu) and static shapes (Split)
    step = 1 if target > current else -1
    for opset in range(current, target, step):
        work = _hop(work, opset, step, applied)
    if legalize.apply(work, target):
        applied.append("legalize_clip_integer")
    _check_signature(model, work, current, target)
    work.ir_version = min_ir_version(work)  # the IR follows the opset (the source's may be too new for it)
    return work, applied


def _check_signature(source: ir.Model, converted: ir.Model, current: int, target: int) -> None:
    """The converted model declares the source's inputs and outputs: same names, ranks and static dims (a
    converter that drops an axis from the graph's own inputs, as onnx's does for Scan 8 -> 9, changes what
    the model takes). OpsetConversionError naming the value and both shapes."""
    for kind, before, after in (("input", source.graph.inputs, converted.graph.inputs),
                                ("output", source.graph.outputs, converted.graph.outputs)):
        shapes = {v.name: v.shape for v in after}
        for value in before:
            if value.name not in shapes:
                raise OpsetConversionError(f"converting opset {current} -> {target} lost the model's {kind} "
                                           f"'{value.name}'")
            old, new = value.shape, shapes[value.name]
            if old is None or new is None:
                continue
            changed = len(old) != len(new) or any(
                isinstance(a, int) and isinstance(c, int) and a != c for a, c in zip(old, new, strict=False))
            if changed:
                raise OpsetConversionError(
                    f"converting opset {current} -> {target} changed the model's declared {kind} '{value.name}' "
                    f"from {_dims(old)} to {_dims(new)}: the converted model would not take what the source takes")


def _dims(shape: ir.Shape) -> list[int | str]:
    return [d if isinstance(d, int) else str(getattr(d, "value", None) or "?") for d in shape]


def _hop(model: ir.Model, opset: int, step: int, applied: list[str]) -> ir.Model:
    """One hop ``opset -> opset + step``: our adapters first, then the stock converter for the rest."""
    to = opset + step
    stock: dict[str, list[ir.Node]] = {}

    def select(node: ir.Node) -> registry.VersionAdapter | None:
        if node.domain not in registry.DEFAULT_DOMAINS:
            return None
        change = registry.hop_change(node.op_type, opset, step)
        if change is None:
            return None
        adapter = version_adapters.lookup("", node.op_type, *change)
        if adapter is None:
            stock.setdefault(node.op_type, []).append(node)
        return adapter

    outcome = apply_rewrites(model, select, opset=to)
    converted = outcome.produced
    for name, label in outcome.applied:
        logger.debug("%s on %s", name, label)
        if name not in applied:
            applied.append(name)
    if stock:
        logger.debug("opset %d -> %d: stock converter for %s", opset, to, sorted(stock))
        model = _stock_hop(model, opset, to, converted, stock)
    else:
        _set_opset(model, to)
    for node in model.graph.all_nodes():
        node.version = None  # nodes follow the graph's opset import (onnxscript pins versions)
    return model


def _stock_hop(model: ir.Model, opset: int, to: int, parked: list[ir.Node], stock: dict[str, list[ir.Node]]) -> ir.Model:
    for node in parked:
        node.domain = _HOLD_DOMAIN
    if parked:
        model.opset_imports[_HOLD_DOMAIN] = 1
    if to > opset and opset >= onnxscript_vc.SUPPORTED_MIN_ONNX_OPSET and to <= onnxscript_vc.SUPPORTED_MAX_ONNX_OPSET:
        # onnxscript's converter works in onnx_ir (no protobuf round trip) in its opset range
        onnxscript_vc.convert_version(model, target_version=to)
    else:
        try:
            model = _through_proto(model, lambda proto: onnx.version_converter.convert_version(proto, to))
        except Exception as exc:
            raise _stock_error(exc, opset, to, stock) from exc
        _infer_shapes(model)
    for node in model.graph.all_nodes():
        if node.domain == _HOLD_DOMAIN:
            node.domain = ""
    model.opset_imports.pop(_HOLD_DOMAIN, None)
    _set_opset(model, to)
    return model


def _stock_error(exc: Exception, opset: int, to: int, stock: dict[str, list[ir.Node]]) -> OpsetConversionError:
    m = _NO_ADAPTER.search(str(exc))
    op = m.group("op") if m else None
    candidates = {op: stock[op]} if op in stock else stock
    where = "; ".join(
        f"{name} ({', '.join(node_label(n) for n in nodes[:5])}{', ...' if len(nodes) > 5 else ''})"
        for name, nodes in sorted(candidates.items())
    )
    if m:
        return OpsetConversionError(
            f"cannot convert opset {opset} -> {to}: neither bridge nor onnx's version converter has an adapter "
            f"for {op} at version {m.group('v')}: {where}")
    return OpsetConversionError(f"cannot convert opset {opset} -> {to} (ops changing on this hop: {where}): {exc}")


def _set_opset(model: ir.Model, opset: int) -> None:
    model.opset_imports.pop("ai.onnx", None)
    model.opset_imports[""] = opset
    model.graph.opset_imports.pop("ai.onnx", None)
    model.graph.opset_imports[""] = opset


def _copy(model: ir.Model) -> ir.Model:
    """A new object graph for ``model`` (passes rewrite it in place); the weights are shared, not copied."""
    return _through_proto(model, lambda proto: proto)


def _through_proto(model: ir.Model, func: Callable[[onnx.ModelProto], onnx.ModelProto]) -> ir.Model:
    """``func`` (a protobuf-level step: onnx's version converter, or none for a copy) applied to ``model``,
    as a new IR model, without serialising the weights: initializers over 1 KB stand in as typed graph inputs
    while ``func`` runs (``call_without_weights``), and the result gets the
    same tensor objects back. A 1 GB model is then not copied twice per stock hop. ``model`` is unchanged.

    An initializer that is also a graph input (older exporters' ``keep_initializers_as_inputs``, the IR < 4
    convention) keeps both: its input entry and its value (the stand-in input is the one it already had)."""
    tensors = {v.name: v.const_value for v in model.graph.initializers.values()}
    inputs = {v.name for v in model.graph.inputs}
    result = ir.serde.deserialize_model(call_without_weights(func, model))
    graph = result.graph
    by_name = {v.name: v for v in graph.inputs}
    for name, tensor in tensors.items():  # call_onnx_api lists every initializer as an input while func runs
        value = by_name.get(name)
        if value is None:  # func dropped the input (an unused weight): the initializer was never stood in
            continue
        if name not in inputs:
            graph.inputs.remove(value)
        if name not in graph.initializers and tensor is not None:  # a stood-in weight: the same tensor object back
            value.const_value = tensor
            graph.register_initializer(value)
    return result


def _infer_shapes(model: ir.Model) -> None:
    try:
        infer_shapes(model, data_prop=False)
    except Exception as exc:  # best effort: adapters that need a type or shape say so when it is missing
        logger.debug("shape inference failed before an opset hop: %s", exc)
