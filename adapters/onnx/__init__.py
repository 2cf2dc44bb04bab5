"""ONNX files as a source: the same pipeline (opset conversion, rewrites, shape passes) runs on them.

The reference for validation is the original file in onnxruntime, so ``bridge convert old.onnx``
proves the upgraded model computes what the old one did.
"""

from __future__ import annotations

import time
from pathlib import Path

import onnx

from adapters.base import FEEDS_HINT, ExportResult
from bridge.config import ExportSpec, InputSpec, Source, check_names
from bridge.errors import UsageError
from bridge.io import load_model
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


class OnnxFileAdapter:
    framework = "onnx"

    def claims(self, source: Source) -> bool:
        return source.obj is None and Path(source.location or "").suffix.lower() == ".onnx"

    def export(self, source: Source, spec: ExportSpec) -> ExportResult:
        start = time.perf_counter()
        assert source.location is not None
        model = load_model(source.location)
        given = {s.name: s for s in spec.inputs}
        declared = graph_input_specs(model)
        check_names("--input", given, [s.name for s in declared], "input")
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
                            output_names=names,
                            seconds=time.perf_counter() - start)

    def reference_runner(self, source: Source, export: ExportResult) -> Runtime:
        from bridge.runtimes.onnxruntime import OnnxRuntime

        assert source.location is not None
        return OnnxRuntime(source.location, describe=f"the source ONNX file {source.location}",
                           failure_hint=FEEDS_HINT)
