"""ONNX files as a source: the same pipeline (opset conversion, rewrites, shape passes) runs on them.

The reference for validation is the original file in onnxruntime, so ``bridge convert old.onnx``
proves the upgraded model computes what the old one did.

Older exporters wrote graph outputs with a type but no shape (not even a rank); today's onnx checker
refuses them ("Field 'shape' of 'type' is required"), which would fail the written model at the very
end. ``repair_output_shapes`` fills in what shape inference knows (with a warning) and otherwise says,
before any work, that the source itself fails the checker and which outputs are to blame.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from types import MappingProxyType
from typing import Any

import onnx

from adapters.base import FEEDS_HINT, ExportResult
from bridge.config import ExportSpec, InputSpec, Source, check_names
from bridge.errors import BadInputFileError, NodeError, UsageError
from bridge.io import load_model
from bridge.passes.attributes import check_model_attributes
from bridge.runtimes.base import Runtime, TensorMeta


def graph_input_specs(model: onnx.ModelProto) -> list[InputSpec]:
    """InputSpecs of the real graph inputs (initializers listed as inputs excluded); symbolic dims -> no shape."""
    inits = {i.name for i in model.graph.initializer}
    specs = []
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        meta = TensorMeta.from_value_info(vi, unknown_dtype="float32")
        shape = meta.shape or ()
        concrete = meta.shape is not None and all(isinstance(d, int) for d in shape)
        specs.append(InputSpec(vi.name, tuple(int(d) for d in shape if isinstance(d, int)) if concrete else None,
                               meta.dtype))
    return specs


def _unshaped(values: list[onnx.ValueInfoProto]) -> list[onnx.ValueInfoProto]:
    return [v for v in values if v.type.HasField("tensor_type") and not v.type.tensor_type.HasField("shape")]


def repair_output_shapes(model: onnx.ModelProto, where: str) -> list[str]:
    """Give graph outputs declared with a type but no shape the shape inference finds (in place);
    warnings saying what was filled in. BadInputFileError naming the outputs inference cannot settle."""
    lacking = _unshaped(list(model.graph.output))
    if not lacking:
        return []
    known: dict[str, onnx.TensorShapeProto] = {}
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:  # inference only helps here; what stays unknown is reported below
        inferred = None
    if inferred is not None:
        g = inferred.graph
        for vi in (*g.input, *g.value_info, *g.output):
            if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
                known.setdefault(vi.name, vi.type.tensor_type.shape)
    unknown = [o.name for o in lacking if o.name not in known]
    if unknown:
        raise BadInputFileError(
            f"{where}: the source itself fails onnx's checker: graph output(s) {unknown} declare a type but no "
            "shape (Field 'shape' of 'type' is required), and shape inference cannot tell their rank; re-export "
            "the model with output shapes, or set them (e.g. onnx.helper.make_tensor_value_info(name, dtype, "
            "[dims or names])) and convert that file")
    warnings = []
    for o in lacking:
        o.type.tensor_type.shape.CopyFrom(known[o.name])
        dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in known[o.name].dim]
        warnings.append(f"{where}: graph output '{o.name}' had a type but no shape (onnx's checker refuses that); "
                        f"shape inference gives {dims}, written into the converted model")
    return warnings


def _graphs(graph: onnx.GraphProto) -> list[onnx.GraphProto]:
    """``graph`` and every subgraph in it."""
    found = [graph]
    for node in graph.node:
        for attr in node.attribute:
            for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)):
                found += _graphs(sub)
    return found


def nms_iou_thresholds(model: onnx.ModelProto) -> dict[str, float]:
    """Every NonMaxSuppression of ``model`` (subgraphs too) whose IoU threshold is a constant (an initializer or a
    Constant node; absent: ONNX's default 0): its node name (its first output's when unnamed) -> the threshold."""
    graphs = _graphs(model.graph)
    constants: dict[str, onnx.TensorProto] = {t.name: t for g in graphs for t in g.initializer}
    for g in graphs:
        for node in g.node:
            value = next((a.t for a in node.attribute if a.name == "value"), None) if node.op_type == "Constant" else None
            if value is not None:
                constants[node.output[0]] = value
    found: dict[str, float] = {}
    for g in graphs:
        for node in g.node:
            if node.op_type != "NonMaxSuppression" or node.domain not in ("", "ai.onnx"):
                continue
            name = node.input[3] if len(node.input) > 3 else ""
            if not name:
                found[node.name or node.output[0]] = 0.0
            elif name in constants:
                found[node.name or node.output[0]] = float(onnx.numpy_helper.to_array(constants[name]).reshape(-1)[0])
    return found


class OnnxFileAdapter:
    framework = "onnx"
    honours = ("output_names",)  # read to refuse names other than the file's (see export)
    # --dataset preprocessing when the user gives none (bridge.validation.dataset; stated in the report)
    dataset_preprocessing = MappingProxyType({"channel_order": "RGB", "why": "no framework convention: RGB pixels 0..255"})

    def claims(self, source: Source) -> bool:
        return source.obj is None and Path(source.location or "").suffix.lower() == ".onnx"

    def export(self, source: Source, spec: ExportSpec) -> ExportResult:
        start = time.perf_counter()
        assert source.location is not None
        model = load_model(source.location)
        try:  # before anything runs it: a bad attribute (group=0) crashes the runtime loading the file
            check_model_attributes(model)
        except NodeError as exc:
            raise NodeError(exc.node, exc.op, f"{source.location}: {exc}") from None
        warnings = repair_output_shapes(model, source.location)
        given = {s.name: s for s in spec.inputs}
        declared = graph_input_specs(model)
        check_names("--input", given, [s.name for s in declared], "input")
        check_names("--dynamic", [d.input for d in spec.dynamic], [s.name for s in declared], "input")
        for s in declared:  # NAME:SHAPE:DTYPE naming a dtype the model does not declare would be ignored: refuse
            g = given.get(s.name)
            if g is not None and g.dtype_given and g.dtype != s.dtype:
                raise UsageError(f"--input {s.name}:...:{g.dtype}: the model declares '{s.name}' as {s.dtype}; "
                                 f"drop the dtype or give {s.dtype}")
            if g is not None and g.shape is not None and s.shape is not None and g.shape != s.shape:
                raise UsageError(f"--input {s.name}:{','.join(map(str, g.shape))}: the model fixes '{s.name}' to "
                                 f"{list(s.shape)}")
        names = tuple(o.name for o in model.graph.output)
        if spec.output_names and tuple(spec.output_names) != names:
            raise UsageError(f"--output-names {','.join(spec.output_names)}: an ONNX source keeps its output names "
                             f"({', '.join(names)}); --output-names names the outputs of framework exports")
        inputs = tuple(
            InputSpec(s.name, given[s.name].shape or s.shape, s.dtype) if s.name in given else s
            for s in declared
        )
        return ExportResult(model=model, exporter="onnx file (loaded as is)", inputs=inputs,
                            output_names=names, warnings=warnings,
                            seconds=time.perf_counter() - start)

    def nms_iou_thresholds(self, source: Source, run: Callable[..., Any] | None = None) -> dict[str, float] | None:
        """The constant IoU threshold of every NonMaxSuppression of the source file, by node name (validation's
        tie rules take it from here, not from the candidate); the weights are not read. Read here (onnx only):
        ``run`` (where the reference runs) is not needed."""
        if source.location is None or source.obj is not None:
            return None
        return nms_iou_thresholds(onnx.load(source.location, load_external_data=False))

    def reference_runner(self, source: Source, export: ExportResult) -> Runtime:
        from bridge.runtimes.onnxruntime import OnnxRuntime

        assert source.location is not None
        return OnnxRuntime(source.location, describe=f"the source ONNX file {source.location}",
                           failure_hint=FEEDS_HINT)
