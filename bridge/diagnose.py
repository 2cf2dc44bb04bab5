"""Problems ``bridge inspect`` finds in an ONNX model, each in plain words with the node and op.

Three sources: the onnx checker, graph rules for known traps (Clip on integers before opset 12,
custom-domain ops that still need lowering), and onnxruntime's own load error, explained.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx

from bridge.config import CONTRIB_DOMAIN


@dataclass(frozen=True)
class Problem:
    kind: str  # "checker", "needs-lowering", "runtime-load", "opset-trap"
    message: str
    node: str | None = None
    op: str | None = None


def _opset(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


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
    from bridge.errors import RuntimeLoadError
    from bridge.runtimes.onnxruntime import OnnxRuntime

    runtime = OnnxRuntime(model, log_severity=3)
    try:
        runtime.activate()
    except RuntimeLoadError as exc:
        return [Problem("runtime-load", str(exc))]
    finally:
        runtime.deactivate()
    return []


def find_problems(model: onnx.ModelProto, *, load_in_runtime: bool = True) -> list[Problem]:
    problems = checker_problems(model) + graph_problems(model)
    needs_lowering = any(p.kind == "needs-lowering" for p in problems)
    if load_in_runtime and not needs_lowering:  # a contrib op would only repeat "no op registered"
        problems += runtime_problems(model)
    return problems
