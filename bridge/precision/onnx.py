"""``--to onnx --precision int8``: a static int8 QDQ .onnx beside the fp32 one, run by onnxruntime.

The quantization is ``bridge.precision.onnx_int8`` (onnxruntime's pre-processing and ``quantize_static``).
fp16 is refused for this target: onnxruntime's CPU execution provider has no float16 Conv / MatMul kernels
on x86 (a float16 model either fails to load or runs its layers through casts, slower than fp32), so an
fp16 .onnx would be delivered with no runtime here that gains from it.
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path

from bridge.errors import UsageError
from bridge.precision.base import VariantBuild, variant_path
from bridge.precision.calibration import Calibration
from bridge.precision.onnx_int8 import int8_qdq, quantized_nodes


class OnnxVariants:
    target = "onnx"
    runtime = "onnxruntime"
    precisions = ("int8",)
    refused: Mapping[str, str] = {"fp16": "onnxruntime's CPU execution provider has no float16 Conv/MatMul kernels on x86, so a "
                       "float16 .onnx runs no faster here (choose --to openvino or --to tflite for fp16)"}
    keeps_layers_float = True

    def destination(self, output: Path, artefacts: Mapping[str, Path], precision: str) -> Path:
        return variant_path(output, precision)

    def build(self, fp32: Path, precision: str, staging: Path, *, calibration: Calibration | None,
              keep_float: Sequence[str], workdir: Path) -> VariantBuild:
        if precision != "int8":
            raise UsageError(f"--precision {precision} --to onnx: {self.refused.get(precision, 'not built')}")
        if calibration is None:
            raise UsageError("--precision int8 needs calibration images (--calibration or --dataset)")
        start = time.perf_counter()
        out = staging / "model.int8.onnx"
        prepared, region, info = int8_qdq(fp32, out, calibration, keep_float, workdir)
        done = set(quantized_nodes(out))
        return VariantBuild(out, "int8", f"onnxruntime {_ort_version()} static quantization: {info['settings']}",
                            quantized=[n for n in region.quantized if n in done], kept_float=list(keep_float),
                            notes=[*prepared.notes, region.describe()], seconds=time.perf_counter() - start)

    def commit(self, staged: Path, destination: Path) -> Path:
        destination.parent.mkdir(parents=True, exist_ok=True)
        tmp = destination.with_name(f".{destination.name}.{uuid.uuid4().hex[:8]}.tmp")
        shutil.copyfile(staged, tmp)
        os.replace(tmp, destination)
        return destination


def _ort_version() -> str:
    import onnxruntime

    return str(onnxruntime.__version__)


__all__ = ["OnnxVariants"]
