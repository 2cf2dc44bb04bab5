"""ONNX files as a source: the same pipeline (opset conversion, rewrites, shape passes) runs on them.

The reference for validation is the original file in onnxruntime, so ``bridge convert old.onnx``
proves the upgraded model computes what the old one did.
"""

from __future__ import annotations

import time
from pathlib import Path

import onnx

from adapters.base import ExportResult
from bridge.config import ExportSpec, InputSpec, Source
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
        inputs = tuple(
            InputSpec(s.name, given[s.name].shape or s.shape, s.dtype) if s.name in given else s
            for s in graph_input_specs(model)
        )
        return ExportResult(model=model, exporter="onnx file (loaded as is)", inputs=inputs,
                            output_names=tuple(o.name for o in model.graph.output),
                            seconds=time.perf_counter() - start)

    def reference_runner(self, source: Source, export: ExportResult) -> Runtime:
        from bridge.runtimes.onnxruntime import OnnxRuntime

        assert source.location is not None
        return OnnxRuntime(source.location)
