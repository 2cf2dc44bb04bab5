"""``--to tflite --precision int8|fp16``: a .tflite beside the fp32 one, run by LiteRT.

int8 is the TFLite converter's **dynamic-range** quantization (``bridge.targets.tflite.export_tflite(reduced=
"int8")``): the weights of the layers that have them (Conv2D, DepthwiseConv2D, FullyConnected) are stored in
int8 and their kernels quantize activations on the fly per call; every other op - the box decode, NMS, the
anchors - stays float, which is the float region's rule by construction. No calibration is needed (the
calibration images are not used).

Full-integer quantization (a representative dataset, int8 activations everywhere) is not offered: on the
SSDs bridge lowers, TensorFlow 2.21's calibrator crashes (a segmentation fault in
``tensorflow/lite/python/optimize/calibrator.py`` ``_feed_tensors``, with fixed and dynamic batch alike),
and the converter has no per-node float denylist for dynamic range, so the accuracy-aware fallback cannot
keep chosen layers float here (``keeps_layers_float`` False: a variant over budget FAILs naming its worst
layers, measured on the onnxruntime QDQ model).

fp16 stores the float weights as float16 (LiteRT's CPU kernels dequantize them at load).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from bridge.errors import UsageError
from bridge.precision.base import VariantBuild, variant_path
from bridge.precision.calibration import Calibration


class TfliteVariants:
    target = "tflite"
    runtime = "litert"
    precisions = ("int8", "fp16")
    refused: Mapping[str, str] = {}
    keeps_layers_float = False

    def __init__(self, tflite_ops: str = "builtin") -> None:
        self.ops = tflite_ops

    def destination(self, output: Path, artefacts: Mapping[str, Path], precision: str) -> Path:
        from bridge.targets.tflite import tflite_destination

        return variant_path(tflite_destination(artefacts["tflite"]), precision)

    def build(self, fp32: Path, precision: str, staging: Path, *, calibration: Calibration | None,
              keep_float: Sequence[str], workdir: Path) -> VariantBuild:
        from bridge.targets.tflite import REDUCED, export_tflite

        if precision not in REDUCED:
            raise UsageError(f"--precision {precision} --to tflite: choose int8 or fp16")
        if keep_float:
            raise UsageError("--keep-float --to tflite: the TFLite converter's dynamic-range quantization cannot "
                             "keep chosen layers float")
        start = time.perf_counter()
        result = export_tflite(fp32, staging / f"model.{precision}.tflite", ops=self.ops, reduced=precision)
        method = ("TFLite converter dynamic-range quantization: int8 weights of Conv/FullyConnected layers, "
                  "activations quantized per call inside those kernels, every other op float" if precision == "int8"
                  else "TFLite converter float16 weights (dequantized at load)")
        return VariantBuild(result.path, precision, f"{result.converter}: {method}", notes=list(result.notes),
                            seconds=time.perf_counter() - start)

    def commit(self, staged: Path, destination: Path) -> Path:
        from bridge.targets.tflite import move_tflite

        return move_tflite(Path(staged), destination)


__all__ = ["TfliteVariants"]
