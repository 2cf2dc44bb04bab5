"""What ``bridge inspect`` reports about an ONNX file, and the problems it finds in plain words.

``inspect_model`` gives opsets, IR version, signature (symbolic dims flagged), op histogram, size and
bridge's own metadata. ``find_problems`` has three sources: the onnx checker, graph rules for known
traps (Clip on integers before opset 12, custom-domain ops that still need lowering), and
onnxruntime's own load error, explained. Used by ``bridge.api.inspect`` and by the shape tools'
checked write (they read back what they wrote the way a user would).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from bridge import provenance
from bridge.config import CONTRIB_DOMAIN
from bridge.io import load_model
from bridge.model import bridge_metadata
from bridge.rewriting import default_opset
from bridge.runtimes.base import TensorMeta


@dataclass(frozen=True)
class Problem:
    kind: str  # "checker", "needs-lowering", "attribute", "runtime-load", "opset-trap"
    message: str
    node: str | None = None
    op: str | None = None


def _opset(model: onnx.ModelProto) -> int:
    return default_opset(model, missing=0)


def _value_types(model: onnx.ModelProto) -> dict[str, int]:
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:
        inferred = model
    g = inferred.graph
    types = {vi.name: vi.type.tensor_type.elem_type for vi in (*g.input, *g.output, *g.value_info)}
    types.update({t.name: t.data_type for t in g.initializer})
    return types


def graph_problems(model: onnx.ModelProto) -> list[Problem]:
    problems: list[Problem] = []
    opset = _opset(model)
    types = _value_types(model)
    ints = {onnx.TensorProto.INT64, onnx.TensorProto.INT32, onnx.TensorProto.INT8, onnx.TensorProto.UINT8}
    contrib: dict[str, list[str]] = {}
    for i, node in enumerate(model.graph.node):
        label = node.name or f"<unnamed {node.op_type} #{i}>"
        if node.domain == CONTRIB_DOMAIN:
            contrib.setdefault(node.op_type, []).append(label)
        if node.op_type == "Clip" and node.domain in ("", "ai.onnx") and opset < 12 and node.input \
                and types.get(node.input[0]) in ints:
            problems.append(Problem(
                "opset-trap",
                f"Clip on {onnx.TensorProto.DataType.Name(types[node.input[0]])} at opset {opset}: integer Clip is "
                "only valid from opset 12 and onnxruntime refuses the model; convert with --opset 12 or newer",
                label, "Clip"))
    for op, nodes in sorted(contrib.items()):
        problems.append(Problem("needs-lowering",
                                f"{op} x{len(nodes)} is a {CONTRIB_DOMAIN} op: it needs lowering to standard ONNX "
                                "before a standard runtime can run it", ", ".join(nodes[:5]), op))
    return problems


def checker_problems(model: onnx.ModelProto) -> list[Problem]:
    has_custom = any(n.domain not in ("", "ai.onnx") for n in model.graph.node)
    try:
        onnx.checker.check_model(model, full_check=not has_custom)
    except Exception as exc:
        return [Problem("checker", str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc))]
    return []


def runtime_problems(model: onnx.ModelProto) -> list[Problem]:
    """Whether onnxruntime loads the model, tried in a child process: a model that crashes the loader
    (e.g. ConvTranspose group=0 raises SIGFPE inside onnxruntime) is a problem to report, not a crash."""
    from bridge.errors import RuntimeCrashedError, RuntimeLoadError
    from bridge.runtimes.isolated import isolate
    from bridge.runtimes.onnxruntime import OnnxRuntime

    runtime = isolate(partial(OnnxRuntime, model.SerializeToString(), log_severity=3), name="onnxruntime",
                      stage="onnxruntime loading the model", timeout=120)
    try:
        runtime.activate()
    except (RuntimeLoadError, RuntimeCrashedError) as exc:
        return [Problem("runtime-load", str(exc))]
    finally:
        runtime.deactivate()
    return []


def attribute_problems(model: onnx.ModelProto) -> list[Problem]:
    """An integer attribute outside the ONNX spec's range (``bridge.passes.attributes``), named by node, op and
    attribute: what the runtime would only report as a crash (ConvTranspose group=0: SIGFPE)."""
    from bridge.errors import NodeError
    from bridge.passes.attributes import check_model_attributes

    try:
        check_model_attributes(model)
    except NodeError as exc:
        return [Problem("attribute", str(exc))]
    return []


def find_problems(model: onnx.ModelProto, *, load_in_runtime: bool = True) -> list[Problem]:
    problems = checker_problems(model) + graph_problems(model) + attribute_problems(model)
    needs_lowering = any(p.kind == "needs-lowering" for p in problems)
    bad_attribute = any(p.kind == "attribute" for p in problems)  # loading it would only crash, naming nothing
    if load_in_runtime and not needs_lowering and not bad_attribute:  # a contrib op would repeat "no op registered"
        problems += runtime_problems(model)
    return problems


@dataclass
class InspectReport:
    path: str
    ir_version: int
    opset_imports: dict[str, int]
    producer: str
    inputs: list[TensorMeta]
    outputs: list[TensorMeta]
    op_histogram: dict[str, int]
    parameter_count: int
    parameter_bytes: int
    problems: list[Problem]
    bridge: dict[str, str]
    nodes: list[NodeTypes] | None = None  # per-node inferred types and shapes (``nodes=True``)

    @property
    def symbolic(self) -> list[str]:
        return [f"{m.name}[{i}]={d}" for m in (*self.inputs, *self.outputs) for i, d in m.symbolic_dims]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["symbolic_dims"] = self.symbolic
        return d


def inspect_model(model: str | Path, *, load_in_runtime: bool = True, nodes: bool = False) -> InspectReport:
    """Describe an ONNX file: opsets, IR version, signature (symbolic dims flagged), ops, size, problems;
    with ``nodes``, every node's inferred input/output types and shapes (``infer_node_types``)."""
    proto = load_model(model)
    hist = Counter((f"{n.domain}::{n.op_type}" if n.domain not in ("", "ai.onnx") else n.op_type)
                   for n in _all_nodes(proto.graph))
    count = 0
    nbytes = 0
    for init in proto.graph.initializer:
        n = int(np.prod(init.dims)) if init.dims else 1
        count += n
        nbytes += n * np.dtype(onnx.helper.tensor_dtype_to_np_dtype(init.data_type)).itemsize
    return InspectReport(
        path=str(model), ir_version=proto.ir_version,
        opset_imports={o.domain or "ai.onnx": o.version for o in proto.opset_import},
        producer=f"{proto.producer_name} {proto.producer_version}".strip(),
        inputs=graph_metas(proto.graph.input, proto), outputs=graph_metas(proto.graph.output, proto),
        op_histogram=dict(hist.most_common()), parameter_count=count, parameter_bytes=nbytes,
        problems=find_problems(proto, load_in_runtime=load_in_runtime), bridge=bridge_metadata(proto),
        nodes=infer_node_types(proto) if nodes else None,
    )


def _all_nodes(graph: onnx.GraphProto) -> Iterable[onnx.NodeProto]:
    for node in graph.node:
        yield node
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _all_nodes(attr.g)
            for g in attr.graphs:
                yield from _all_nodes(g)


def graph_metas(values: Iterable[onnx.ValueInfoProto], model: onnx.ModelProto) -> list[TensorMeta]:
    """The declared signature entries that are real inputs/outputs (initializers listed as inputs excluded)."""
    inits = {i.name for i in model.graph.initializer}
    return [TensorMeta.from_value_info(vi) for vi in values if vi.name not in inits]


# -- per-node type and shape inference (``bridge inspect --nodes``) -----------------------------------

@dataclass
class ValueType:
    """A tensor as shape inference sees it: dtype and dims (ints, symbolic names, None = unknown);
    ``shape`` None when even the rank is unknown."""

    name: str
    dtype: str
    shape: list[int | str | None] | None

    @property
    def complete(self) -> bool:
        return self.shape is not None and all(d is not None for d in self.shape)

    def describe(self) -> str:
        if self.shape is None:
            return f"{self.dtype}[unknown rank]"
        return f"{self.dtype}[" + ", ".join("?" if d is None else str(d) for d in self.shape) + "]"


@dataclass
class NodeTypes:
    """One node's inferred input and output types; ``loses`` says where inference lost a dim or the rank
    although every input was known: where dynamic-axis and "Expected shape" problems begin."""

    index: int
    name: str
    op: str
    inputs: list[ValueType]
    outputs: list[ValueType]
    loses: str = ""
    provenance: dict[str, Any] | None = None  # the source node and op, and what made it (bridge.provenance)


def _value_type(name: str, known: dict[str, onnx.TypeProto]) -> ValueType:
    tp = known.get(name)
    if tp is None or not tp.HasField("tensor_type"):
        return ValueType(name, "unknown" if tp is None else tp.WhichOneof("value") or "unknown", None)
    tt = tp.tensor_type
    dtype = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type).name if tt.elem_type else "unknown"
    if not tt.HasField("shape"):
        return ValueType(name, dtype, None)
    dims: list[int | str | None] = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                                    for d in tt.shape.dim]
    return ValueType(name, dtype, dims)


def _invented(dim: int | str | None) -> bool:
    """Shape inference names a dim it cannot compute ``unk__N``: an unknown, not a user's axis name."""
    return isinstance(dim, str) and dim.startswith("unk__")


def infer_node_types(model: onnx.ModelProto) -> list[NodeTypes]:
    """Run ONNX shape inference (with data propagation) and report every main-graph node's input/output
    types and provenance (source node and op, translator or pass that made it), flagging the nodes whose outputs lose a dim or the rank while all their inputs were known."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    except Exception:
        try:
            inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
        except Exception:
            inferred = model
    g = inferred.graph
    known = {vi.name: vi.type for vi in (*g.input, *g.value_info, *g.output)}
    for init in g.initializer:
        known.setdefault(init.name, onnx.helper.make_tensor_type_proto(init.data_type, list(init.dims)))
    out: list[NodeTypes] = []
    for k, node in enumerate(g.node):
        ins = [_value_type(i, known) for i in node.input if i]
        outs = [_value_type(o, known) for o in node.output if o]
        prov = provenance.read(model.graph.node[k])  # inference may drop node metadata: read the model's own
        entry = NodeTypes(k, node.name or f"<unnamed {node.op_type} #{k}>",
                          node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}::{node.op_type}", ins, outs,
                          provenance=prov.to_dict() if prov is not None else None)
        if all(i.shape is not None for i in ins):
            seen = {d for i in ins for d in (i.shape or ()) if isinstance(d, str)}
            for o in outs:
                if o.shape is None:
                    entry.loses = f"inference loses the rank of '{o.name}' although every input's rank is known"
                    break
                lost = [str(a) for a, d in enumerate(o.shape) if d is None or (_invented(d) and d not in seen)]
                if lost:
                    entry.loses = (f"inference loses dim(s) {', '.join(lost)} of '{o.name}' "
                                   f"(unknown from inputs {', '.join(i.describe() for i in ins) or 'none'})")
                    break
        out.append(entry)
    return out
