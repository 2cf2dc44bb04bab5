"""Finding where a conversion goes wrong: per-tensor comparison against the source framework and
pass-by-pass comparison across the ONNX stage (``bridge debug``, ``--localize``)."""

from __future__ import annotations

from bridge.debug.localize import Divergence, TensorRow, compare_tensors
from bridge.debug.passes import PassVerdict, StageTrace, localize_passes, trace_pipeline
from bridge.debug.run import DebugResult, debug_conversion

__all__ = ["DebugResult", "Divergence", "PassVerdict", "StageTrace", "TensorRow", "compare_tensors",
           "debug_conversion", "localize_passes", "trace_pipeline"]
