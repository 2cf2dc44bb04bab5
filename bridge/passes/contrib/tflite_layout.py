"""TflitePostprocessLayoutPass: a lowered SSD's detections in the output layout of TFLite_Detection_PostProcess.

Why: TFLite detection apps (the Object Detection task library, the TF Object Detection API's mobile
demos) expect four outputs, the layout of TFLite's ``TFLite_Detection_PostProcess`` custom op:

``detection_boxes``    [B, K, 4] float32, (ymin, xmin, ymax, xmax), normalized
``detection_classes``  [B, K] float32, the class index with background removed, 0-based
``detection_scores``   [B, K] float32
``num_detections``     [B] float32 (the first num rows of each image are real, the rest zero padding)

The detections are bridge's own decode and NMS - the MultiBoxDetection lowering in its
``boxes-scores-classes`` format with ``K = --max-detections`` rows (``bridge.passes.contrib.detection``),
which reproduces MXNet's detections - reordered and cast into this layout. TFLite's custom op is not
used: its decode and NMS (per-class or fast "regular" NMS over the top classes, no ``force_suppress``,
no ``nms_topk``) cannot reproduce MXNet's MultiBoxDetection.

The lowered output must be the model's only MultiBoxDetection output (the four names are fixed). The
model metadata's detection spec (``bridge.detection_outputs``) is rewritten to name the four outputs
(layout ``boxes-scores-classes``, box format ``yxyx``) against the source's MXNet [B, N, 6] output, so
validation compares detections in every runtime. A model with no lowered MultiBoxDetection output is
refused (``UsageError``).
"""

from __future__ import annotations

import json

import numpy as np
import onnx_ir as ir

from bridge.config import DETECTION_META
from bridge.errors import UsageError
from bridge.passes.base import BridgePass

LAYOUT_NAME = "detection-postprocess"
BOXES, CLASSES, SCORES, NUM = "detection_boxes", "detection_classes", "detection_scores", "num_detections"
OUTPUTS = (BOXES, CLASSES, SCORES, NUM)
_FORMAT = "boxes-scores-classes"  # the lowering's format this layout is built from


def lowered_detection_outputs(model: ir.Model) -> list[str]:
    """The source output names of MultiBoxDetection layers lowered to the boxes-scores-classes format."""
    recorded = json.loads(model.metadata_props.get(DETECTION_META, "[]"))
    items = recorded if isinstance(recorded, list) else [recorded]
    return [name for item in items if isinstance(item, dict) and "layout" not in item
            for name, fmt in item.items() if fmt == _FORMAT]


class TflitePostprocessLayoutPass(BridgePass):
    """Replace the boxes-scores-classes outputs of one lowered MultiBoxDetection by the four outputs of the
    TFLite_Detection_PostProcess layout (module docstring)."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        found = lowered_detection_outputs(model)
        why = ("the TFLite_Detection_PostProcess layout is built from bridge's decode + NMS of an SSD's "
               "MultiBoxDetection layer (boxes-scores-classes with --max-detections K)")
        if not found:
            raise UsageError(f"--tflite-outputs {LAYOUT_NAME}: the model has no lowered SSD detection output "
                             f"(MultiBoxDetection); {why}")
        if len(found) > 1:
            raise UsageError(f"--tflite-outputs {LAYOUT_NAME}: the model has {len(found)} MultiBoxDetection "
                             f"outputs ({', '.join(found)}); the layout's four fixed names hold one")
        name = found[0]
        graph = model.graph
        by_name = {str(v.name): v for v in graph.outputs}
        parts = [by_name.get(f"{name}_{suffix}") for suffix in ("boxes", "scores", "classes", "num_detections")]
        taken = [n for n in OUTPUTS if n in by_name or n in {str(v.name) for v in graph.inputs}]
        if any(p is None for p in parts) or taken:
            raise UsageError(f"--tflite-outputs {LAYOUT_NAME}: cannot rename the outputs of '{name}' "
                             f"({'names taken: ' + ', '.join(taken) if taken else 'outputs not found'})")
        boxes, scores, classes, num = parts
        assert boxes is not None and scores is not None and classes is not None and num is not None
        order = ir.Value(name=f"{BOXES}_yxyx_order", const_value=ir.tensor(np.array([1, 0, 3, 2], np.int64)))
        graph.initializers[str(order.name)] = order
        new = [
            (ir.node("Gather", [boxes, order], attributes={"axis": 2}), BOXES, boxes),
            (ir.node("Cast", [classes], attributes={"to": ir.DataType.FLOAT}), CLASSES, classes),
            (ir.node("Identity", [scores]), SCORES, scores),
            (ir.node("Cast", [num], attributes={"to": ir.DataType.FLOAT}), NUM, num),
        ]
        outputs: list[ir.Value] = []
        for node, out_name, old in new:
            graph.append(node)
            out = node.outputs[0]
            out.name = out_name
            out.dtype = ir.DataType.FLOAT
            out.shape = old.shape  # the box reorder gathers all 4 columns: the same [B, K, 4]
            outputs.append(out)
        others = [v for v in graph.outputs if all(v is not p for p in parts)]
        graph.outputs.clear()
        graph.outputs.extend([*others, *outputs])  # the four in the layout's order replace the lowered group
        # the group's spec in the metadata's JSON form (bridge.validation.detection.layouts.DetectionSpec
        # reads it; written here as data, since passes sit below validation in the layer order): the four
        # outputs, boxes yxyx, against the source's MXNet [B, N, 6] rows
        spec = {"layout": _FORMAT, "outputs": {"boxes": BOXES, "scores": SCORES, "labels": CLASSES, "num": NUM},
                "name": name, "box_format": "yxyx",
                "reference": {"layout": "mxnet", "outputs": {"detections": name}, "box_format": "xyxy"}}
        recorded = json.loads(model.metadata_props.get(DETECTION_META, "[]"))
        kept: list[object] = []
        for item in recorded if isinstance(recorded, list) else [recorded]:
            if isinstance(item, dict) and "layout" not in item:  # the lowering's {output: format} entries
                rest = {k: v for k, v in item.items() if k != name}
                kept += [rest] if rest else []
            elif not (isinstance(item, dict) and item.get("name") == name):
                kept.append(item)
        model.metadata_props[DETECTION_META] = json.dumps([*kept, spec])
        return ir.passes.PassResult(model, modified=True)
