"""Which default-domain opset the ONNX stage converts to when the user asked for none.

Converting an exporter's model down (the dynamo exporter writes opset 18 or newer) costs adapters
and can only lose forms; converting an old model up normalises it for the passes and targets. So
with no ``--opset``: keep the exporter's opset, raised to at least ``DEFAULT_OPSET`` and lowered to
the newest opset the installed onnxruntime runs (validation runs there). Targets with a lower ceiling
(onnx-tf) lower their own copy. An asked opset is always used as is.
"""

from __future__ import annotations

import onnx

from bridge.config import DEFAULT_OPSET, ExportSpec
from bridge.rewriting import default_opset
from opsets.conversion import newest_runtime_opset


def exported_opset(model: onnx.ModelProto) -> int | None:
    found: int | None = default_opset(model, missing=None)
    return found


def target_opset(spec: ExportSpec, exported: onnx.ModelProto) -> tuple[int, str | None]:
    """The opset the ONNX stage converts to, and a note saying why when it is not the asked one."""
    if spec.opset_asked:
        return spec.opset, None
    source = exported_opset(exported)
    if source is None:
        return spec.opset, None
    newest = newest_runtime_opset()
    target = min(max(source, DEFAULT_OPSET), newest)
    if target == source:
        return target, f"opset {target}: the exporter's, kept (no --opset asked)"
    why = (f"raised to bridge's minimum default {DEFAULT_OPSET}" if source < DEFAULT_OPSET
           else f"lowered to {newest}, the newest the installed onnxruntime runs")
    return target, f"opset {target}: the exporter wrote {source}, {why} (no --opset asked)"
