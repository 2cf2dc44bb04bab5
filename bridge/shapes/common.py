"""Helpers shared by ``bridge shapes fix|dynamic|buckets``: loading, concrete shapes of a static model,
listing symbolic dims, seeded feeds at chosen sizes, and the checked atomic write.

The write is checked the way a user would check it: the model goes to a temporary file beside the
target, ``bridge inspect``'s reader (``bridge.inspection``) reads it back, and only if inspect agrees with the promise (no symbolic
input/output dim for a static model) is it renamed into place.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx

from bridge.config import InputSpec
from bridge.errors import ExportError, UsageError
from bridge.inspection import inspect_model
from bridge.io import atomic_path, load_model, save_model
from bridge.runtimes.base import TensorMeta

logger = logging.getLogger(__name__)

Progress = Callable[[str], None]


def quiet(_msg: str) -> None:
    """The default progress callback: say nothing."""


def load(model: str | Path | onnx.ModelProto) -> tuple[onnx.ModelProto, str]:
    """The model as a proto, and how to name it in messages."""
    if isinstance(model, onnx.ModelProto):
        return model, "<ModelProto>"
    return load_model(model), str(model)


def dims(vi: onnx.ValueInfoProto) -> list[int | str | None] | None:
    """Dims of a value_info: ints, symbolic names, or None for unknown; None when it has no shape."""
    tt = vi.type.tensor_type
    if not tt.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim]


def graph_inputs(proto: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """The real graph inputs (initializers listed as inputs excluded)."""
    inits = {i.name for i in proto.graph.initializer}
    return [vi for vi in proto.graph.input if vi.name not in inits]


def input_metas(proto: onnx.ModelProto) -> list[TensorMeta]:
    return [TensorMeta.from_value_info(vi, unknown_dtype="float32") for vi in graph_inputs(proto)]


def symbolic_dims(proto: onnx.ModelProto, *, value_info: bool = True) -> list[str]:
    """``tensor[axis]=symbol`` for every non-concrete dim of inputs, outputs (and value_info)."""
    found = []
    values = [*graph_inputs(proto), *proto.graph.output, *(proto.graph.value_info if value_info else ())]
    for vi in values:
        d = dims(vi)
        if d is None:
            if vi in proto.graph.output or vi in proto.graph.input:
                found.append(f"{vi.name}[?]=unknown shape")
            continue
        found += [f"{vi.name}[{i}]={x or '?'}" for i, x in enumerate(d) if not isinstance(x, int)]
    return found


def static_dims(proto: onnx.ModelProto) -> dict[str, list[int]]:
    """Concrete dims of every value onnx shape inference can size in a (static) model, by name."""
    try:
        inferred = onnx.shape_inference.infer_shapes(proto, data_prop=True)
    except Exception as exc:  # InferenceError, or a model with custom ops
        logger.warning("shape inference on the original model failed: %s", exc)
        inferred = proto
    out: dict[str, list[int]] = {}
    for vi in (*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output):
        d = dims(vi)
        if d is not None and all(isinstance(x, int) for x in d):
            out[vi.name] = [int(x) for x in d]  # type: ignore[arg-type]
    for init in inferred.graph.initializer:
        out.setdefault(init.name, list(init.dims))
    return out


def feeds_at(metas: Sequence[TensorMeta], shapes: Mapping[str, Sequence[int]], seed: int) -> dict[str, np.ndarray]:
    """Seeded inputs with exactly these shapes (bridge.validation's generator, sizes given)."""
    from bridge.validation.inputs import make_inputs

    return make_inputs(metas, (), seed=seed, shapes={k: tuple(v) for k, v in shapes.items()})


def parse_specs(items: Sequence[str | InputSpec]) -> tuple[InputSpec, ...]:
    specs = tuple(i if isinstance(i, InputSpec) else InputSpec.parse(i) for i in items)
    names = [s.name for s in specs]
    if len(names) != len(set(names)):
        raise UsageError(f"--input names repeat: {names}")
    return specs


def write_checked(proto: onnx.ModelProto, output: Path, *, require_static: bool) -> list[str]:
    """Write ``proto`` atomically after ``bridge.inspection.inspect_model`` has read it back; the problems it found.

    With ``require_static``, any symbolic input/output dim inspect reports is an ExportError and
    nothing is written.
    """
    output = Path(output)
    if output.suffix.lower() != ".onnx":
        raise UsageError(f"-o '{output}': the output is an .onnx file")
    with atomic_path(output) as tmp:
        save_model(proto, tmp)
        report = inspect_model(tmp, load_in_runtime=False)
        if require_static and report.symbolic:
            raise ExportError(f"{output}: inspect still finds symbolic dims after fixing: {', '.join(report.symbolic)}")
        return [f"{p.kind}: {p.message}" for p in report.problems]
