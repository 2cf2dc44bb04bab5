"""Lowerings of the ``bridge.contrib`` ops (layers ONNX has no op for) to standard ONNX.

Adapters record such layers faithfully as ``bridge.contrib`` nodes (the attribute contract is in
adapters/mxnet/contrib.py); these passes replace them, so every framework's detector shares one
implementation: ``LowerMultiBoxPriorPass`` (anchors), ``LowerMultiBoxDetectionPass`` (SSD decode +
NMS), ``LowerProposalPass`` (the legacy rcnn RPN), ``LowerBoxNMSPass`` and ``LowerBoxDecodePass`` (GluonCV). The NMS and assembly building blocks
in ``nms`` (hard and weighted NMS), the decode kinds and score activations of ``decode`` (registered by name)
and the anchor generators of ``anchor_generators`` are also what ``bridge.graft`` uses to add decoding and NMS to
a headless detector.
"""

from __future__ import annotations

from bridge.passes.contrib.anchors import LowerMultiBoxPriorPass
from bridge.passes.contrib.box_ops import LowerBoxDecodePass, LowerBoxNMSPass
from bridge.passes.contrib.detection import LowerMultiBoxDetectionPass
from bridge.passes.contrib.proposal import LowerProposalPass

__all__ = ["LowerBoxDecodePass", "LowerBoxNMSPass", "LowerMultiBoxDetectionPass", "LowerMultiBoxPriorPass", "LowerProposalPass"]
