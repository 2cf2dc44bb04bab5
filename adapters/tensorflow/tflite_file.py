""".tflite flatbuffers as people ship them, made convertible before tf2onnx and the interpreter read them.

- **Cut** (``--outputs`` on a .tflite): ``prune`` keeps only the operators the named tensors need and makes them
  the subgraph's outputs; the reference interpreter and tf2onnx then both see the same, smaller model. This is
  how a model ending in a custom op is converted up to it.
- **Custom ops**: ``custom_ops`` lists the CUSTOM operators (not Flex, which tf2onnx converts) with the tensors
  they read; ``CustomOpError`` names them as custom, says what can be done and which ``--outputs`` cut stops
  before them.
- **Sparse weights** (``DENSIFY``): tf2onnx reads a sparse constant as if it were dense and fails. ``densify``
  runs the model once in the TFLite interpreter (no delegate, every tensor preserved) and stores each DENSIFY
  output - the dense weight the interpreter itself computes from the sparse one - as a constant buffer, dropping
  the DENSIFY operators and the sparse tensors. The converted model therefore holds exactly the weights the
  source runs with; the reference keeps running the sparse original.

Flatbuffers are read and written with LiteRT's generated schema (``ai_edge_litert.schema_py_generated``, its
object API, as the tflite target does), or the copy TensorFlow ships when LiteRT is not installed.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bridge.errors import UnsupportedOpError, UsageError

CUSTOM = 32  # BuiltinOperator.CUSTOM
DENSIFY = 124  # BuiltinOperator.DENSIFY


def _schema() -> Any:
    """LiteRT's generated schema, or the copy TensorFlow ships (a TensorFlow-only install has no ai_edge_litert)."""
    try:
        from ai_edge_litert import schema_py_generated as schema
    except ImportError:
        from tensorflow.lite.python import schema_py_generated as schema
    return schema


def read(content: bytes) -> Any:
    """The flatbuffer as LiteRT's object API ``ModelT``."""
    schema = _schema()
    return schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(content, 0))


def write(model: Any, size_hint: int = 0) -> bytes:
    import flatbuffers

    builder = flatbuffers.Builder(size_hint + 1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def _name(tensor: Any) -> str:
    raw = tensor.name
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)


def _code(model: Any, op: Any) -> tuple[int, str | None]:
    """(builtin code, custom code) of an operator (the builtin code is max(deprecated, new) as the schema says)."""
    oc = model.operatorCodes[op.opcodeIndex]
    builtin = max(int(oc.builtinCode or 0), int(oc.deprecatedBuiltinCode or 0))
    custom = oc.customCode.decode("utf-8", "replace") if isinstance(oc.customCode, bytes) else oc.customCode
    return builtin, custom


def _ints(values: Any) -> list[int]:
    return [] if values is None else [int(v) for v in values]


@dataclass(frozen=True)
class CustomOp:
    """A CUSTOM operator of subgraph 0: its custom code, position, and the tensors it reads and writes."""

    code: str
    index: int
    inputs: tuple[str, ...]  # non-constant inputs (activations)
    outputs: tuple[str, ...]


def custom_ops(content: bytes) -> list[CustomOp]:
    """The custom operators of the main subgraph (Flex ops, select TF ops tf2onnx converts, excluded)."""
    model = read(content)
    graph = model.subgraphs[0]
    found = []
    for i, op in enumerate(graph.operators or []):
        builtin, custom = _code(model, op)
        if builtin != CUSTOM or custom is None or custom.startswith("Flex"):
            continue
        reads = tuple(_name(graph.tensors[t]) for t in _ints(op.inputs) if t >= 0 and not _constant(model, graph, t))
        found.append(CustomOp(custom, i, reads, tuple(_name(graph.tensors[t]) for t in _ints(op.outputs) if t >= 0)))
    return found


def _constant(model: Any, graph: Any, index: int) -> bool:
    buffer = model.buffers[graph.tensors[index].buffer] if graph.tensors[index].buffer else None
    return buffer is not None and buffer.data is not None and len(buffer.data) > 0


def cut_before(content: bytes, ops: Sequence[CustomOp]) -> list[str]:
    """The ``--outputs`` that stop before ``ops``: the model outputs that do not depend on them, then the
    activations they read that do not depend on any of them."""
    model = read(content)
    graph = model.subgraphs[0]
    bad = {op.index for op in ops}
    tainted: set[int] = set()  # tensors computed from a custom op's result; operators are stored in execution order
    for i, op in enumerate(graph.operators or []):
        if i in bad or any(t in tainted for t in _ints(op.inputs)):
            tainted.update(_ints(op.outputs))

    def depends(tensor: int) -> bool:
        return tensor in tainted

    names = {_name(t): i for i, t in enumerate(graph.tensors)}
    chosen = [_name(graph.tensors[t]) for t in _ints(graph.outputs) if not depends(t)]
    for op in ops:
        for name in op.inputs:
            if name not in chosen and not depends(names[name]):
                chosen.append(name)
    return chosen


class CustomOpError(UnsupportedOpError):
    """A .tflite uses ops no converter knows: custom ops (code its app provides) or builtins tf2onnx lacks."""

    def __init__(self, unsupported: Mapping[str, Iterable[str]], reasons: Mapping[str, str], cut: Sequence[str],
                 file: str) -> None:
        super().__init__(unsupported, framework="TFLite", reasons=reasons)
        choices = [f"  - convert the part before them: --outputs {','.join(cut)} (bridge cuts {file} there and "
                   "validates that part against the TFLite interpreter); run the rest in your app as it does today"
                   if cut else "  - every output depends on them: there is no part before them to convert"]
        choices.append("  - re-export the model from its training source with TFLite builtin ops only (the custom "
                       "op's job written with standard ops), then convert that")
        self.args = (f"{self.args[0]}\nchoices:\n" + "\n".join(choices),)


def unsupported_in_export(onnx_ops: Iterable[tuple[str, str]], content: bytes, file: str) -> CustomOpError | None:
    """The error for ONNX nodes tf2onnx left as TFLite ops (``TFL_<op>``), or None when there are none.
    ``onnx_ops``: (op_type, node name) of the exported model."""
    left: dict[str, list[str]] = {}
    for op_type, node in onnx_ops:
        if op_type.startswith("TFL_"):
            left.setdefault(op_type.removeprefix("TFL_"), []).append(node)
    if not left:
        return None
    customs = custom_ops(content)
    custom_codes = {c.code for c in customs}
    reasons = {}
    for op in left:
        if op in custom_codes:
            reads = next(c.inputs for c in customs if c.code == op)
            reasons[op] = (f"a custom op: code the app shipping the model provides (as MediaPipe provides "
                           f"Convolution2DTransposeBias), not part of TFLite or ONNX; it reads {', '.join(reads)}")
        else:
            reasons[op] = "a TFLite builtin op tf2onnx has no conversion for"
    cut = cut_before(content, [c for c in customs if c.code in left]) if custom_codes & set(left) else []
    return CustomOpError(left, reasons, cut, file)


def prune(content: bytes, outputs: Sequence[str], file: str) -> bytes:
    """Subgraph 0 cut at the tensors named ``outputs`` (they become its outputs, in that order): only the
    operators they need stay, and the inputs those read. Signature defs go (they name the old outputs)."""
    model = read(content)
    graph = model.subgraphs[0]
    by_name = {_name(t): i for i, t in enumerate(graph.tensors)}
    missing = [o for o in outputs if o not in by_name]
    if missing:
        near = sorted(n for n in by_name if any(m.split(":")[0] in n for m in missing))[:8]
        raise UsageError(f"--outputs {','.join(missing)}: {file} has no tensor of that name"
                         + (f" (similar: {', '.join(near)})" if near else ""))
    wanted = [by_name[o] for o in outputs]
    producers = {t: i for i, op in enumerate(graph.operators or []) for t in _ints(op.outputs)}
    keep: set[int] = set()
    stack = [producers[t] for t in wanted if t in producers]
    while stack:
        i = stack.pop()
        if i in keep:
            continue
        keep.add(i)
        stack.extend(producers[t] for t in _ints(graph.operators[i].inputs) if t in producers)
    graph.operators = [op for i, op in enumerate(graph.operators or []) if i in keep]
    used = {t for op in graph.operators for t in _ints(op.inputs)}
    graph.inputs = [t for t in _ints(graph.inputs) if t in used or t in wanted]
    graph.outputs = wanted
    model.signatureDefs = []
    _drop_unused_tensors(model)
    return write(model, len(content))


def densify(content: bytes) -> bytes | None:
    """The model with every DENSIFY of a constant replaced by the dense constant it computes (module docstring);
    None when there is no DENSIFY."""
    model = read(content)
    graph = model.subgraphs[0]
    targets = [(i, op) for i, op in enumerate(graph.operators or []) if _code(model, op)[0] == DENSIFY]
    if not targets:
        return None
    dense = _dense_values(content, [_ints(op.outputs)[0] for _, op in targets])
    schema = _schema()
    drop = {i for i, _ in targets}
    for (_, op), value in zip(targets, dense, strict=True):
        out = _ints(op.outputs)[0]
        buffer = schema.BufferT()
        buffer.data = np.frombuffer(np.ascontiguousarray(value).tobytes(), np.uint8)
        model.buffers.append(buffer)
        graph.tensors[out].buffer = len(model.buffers) - 1
    graph.operators = [op for i, op in enumerate(graph.operators) if i not in drop]
    _drop_unused_tensors(model)
    return write(model, len(content))


def _dense_values(content: bytes, tensors: Sequence[int]) -> list[np.ndarray]:
    """The values of ``tensors`` after one run of the interpreter on zero inputs (DENSIFY of a constant does not
    depend on the inputs); no delegate, so no tensor is folded away into one."""
    try:
        from ai_edge_litert import interpreter as litert

        interpreter, resolver = litert.Interpreter, litert.OpResolverType
    except ImportError:  # TensorFlow's own interpreter (deprecated, same kernels)
        import tensorflow as tf

        interpreter, resolver = tf.lite.Interpreter, tf.lite.experimental.OpResolverType
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*tf.lite.Interpreter is deprecated.*")
        interp = interpreter(model_content=content, experimental_preserve_all_tensors=True,
                             experimental_op_resolver_type=resolver.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    interp.allocate_tensors()
    for d in interp.get_input_details():
        interp.set_tensor(d["index"], np.zeros(d["shape"], d["dtype"]))
    interp.invoke()
    return [np.array(interp.get_tensor(t)) for t in tensors]


def _drop_unused_tensors(model: Any) -> None:
    """Remove the tensors of subgraph 0 no operator, input or output refers to, renumbering every reference
    (operators, subgraph inputs / outputs, signature defs)."""
    graph = model.subgraphs[0]
    used = set(_ints(graph.inputs)) | set(_ints(graph.outputs))
    for op in graph.operators or []:
        used.update(t for t in (*_ints(op.inputs), *_ints(op.outputs), *_ints(op.intermediates)) if t >= 0)
    old = sorted(used)
    new_index = {t: i for i, t in enumerate(old)}
    graph.tensors = [graph.tensors[t] for t in old]

    def renumber(values: Any) -> list[int]:
        return [new_index[t] if t >= 0 else t for t in _ints(values)]

    for op in graph.operators or []:
        op.inputs, op.outputs = renumber(op.inputs), renumber(op.outputs)
        if op.intermediates is not None:
            op.intermediates = renumber(op.intermediates)
    graph.inputs, graph.outputs = renumber(graph.inputs), renumber(graph.outputs)
    for signature in model.signatureDefs or []:
        if signature.subgraphIndex:
            continue
        for entry in (*(signature.inputs or []), *(signature.outputs or [])):
            entry.tensorIndex = new_index.get(entry.tensorIndex, entry.tensorIndex)


__all__ = ["CustomOp", "CustomOpError", "custom_ops", "cut_before", "densify", "prune", "read",
           "unsupported_in_export", "write"]
