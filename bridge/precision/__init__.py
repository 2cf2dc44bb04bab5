"""Reduced-precision variants (``--precision fp16|int8``): built per target, judged on the user's images.

The fp32 artefact is converted and validated elementwise as always; the variant is made from that validated
.onnx by its target's builder (the registry below: onnx -> onnxruntime static int8 QDQ, openvino -> NNCF
int8 or fp16 weights, tflite -> dynamic-range int8 or fp16 weights), with a float region found from the
graph's structure (``regions``: the decode, NMS and every index/geometry path stay float), calibrated on the
dataset's own preprocessing (``calibration``), and judged by ``bridge.validation.dataset`` - agreement with
the source and mAP drop within a budget - with an accuracy-aware fallback that keeps the most costly layers
float (``sensitivity``, ``run``). ``options`` declares the option group; ``run.deliver_variant`` is the entry.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from bridge.errors import UsageError
from bridge.precision.options import PRECISION_OPTIONS, PRECISIONS, PrecisionSettings, precision_settings
from bridge.registry import LazyRegistry

# target name -> its variant builder ("module:Class"); the only list of which targets have variants
_BUILDERS = LazyRegistry({
    "onnx": "bridge.precision.onnx:OnnxVariants",
    "openvino": "bridge.precision.openvino:OpenVinoVariants",
    "tflite": "bridge.precision.tflite:TfliteVariants",
}, "--precision: --to '{name}' has no reduced-precision variant; targets with one: {known}")


def variant_builder(target: str, precision: str, **target_options: Any) -> Any:
    """The builder of ``target``'s ``precision`` variant; UsageError naming why when there is none."""
    if target not in _BUILDERS.names():
        raise UsageError(f"--precision {precision}: --to {target} has no reduced-precision variant (targets with "
                         f"one: {', '.join(_BUILDERS.names())})")
    cls = _BUILDERS.load(target)
    params = inspect.signature(cls).parameters  # a builder takes the target options it needs (tflite_ops)
    builder = cls(**{k: v for k, v in target_options.items() if k in params})
    if precision not in builder.precisions:
        why = builder.refused.get(precision, f"it builds {', '.join(builder.precisions)}")
        raise UsageError(f"--precision {precision} --to {target}: {why}")
    return builder


def check_precision(values: Mapping[str, Any]) -> PrecisionSettings | None:
    """The settings of ``values`` (convert option values) checked against the chosen target before anything
    runs; None for fp32."""
    settings = precision_settings(values)
    if settings is not None:
        variant_builder(str(values.get("to", "onnx")), settings.precision)
    return settings


__all__ = ["PRECISIONS", "PRECISION_OPTIONS", "PrecisionSettings", "check_precision", "precision_settings",
           "variant_builder"]
