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
from bridge.runtimes.base import Runtime

_ELEM_TO_NUMPY = {k: onnx.helper.tensor_dtype_to_np_dtype(k).name for k in
                  (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16, onnx.TensorProto.INT64,
                   onnx.TensorProto.INT32, onnx.TensorProto.INT8, onnx.TensorProto.UINT8, onnx.TensorProto.BOOL)}


def graph_input_specs(model: onnx.ModelProto) -> list[InputSpec]:
    """InputSpecs of the real graph inputs (initializers listed as inputs excluded); symbolic dims -> no shape."""
    inits = {i.name for i in model.graph.initializer}
    specs = []
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
        shape = tuple(d for d in dims if d is not None) if tt.HasField("shape") and None not in dims else None
        specs.append(InputSpec(vi.name, shape, _ELEM_TO_NUMPY.get(tt.elem_type, "float32")))
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
