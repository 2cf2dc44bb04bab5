"""Targets: ONNX -> other formats (today: TensorFlow SavedModel through onnx-tf).

Each target module imports its framework lazily, inside its functions, so ``import bridge`` and
``import bridge.targets`` stay framework-free. ``bridge.targets.tensorflow.export_saved_model`` is
the TF entry point; ``bridge.targets.onnx_tf_compat`` makes onnx-tf importable on today's stack.
"""

from __future__ import annotations

from bridge.targets.base import TargetResult

TARGETS = {"tensorflow": "bridge.targets.tensorflow:export_saved_model"}

__all__ = ["TARGETS", "TargetResult"]
