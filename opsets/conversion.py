"""Default-domain opset conversion of a whole model.

Up-conversion goes through onnxscript's version converter (which hands hops it has no adapter for
to onnx's C++ converter); down-conversion and anything onnxscript leaves short of the target go
through onnx's C++ converter directly, so its error names the op and version it has no adapter
for. Issue C adds bridge's own adapters that run first where the stock converters lack one or
change results (Upsample -> Resize, Clip on int64, Relu 14 -> 13, ...).
"""

from __future__ import annotations

import logging
import re

import onnx
import onnx.version_converter
import onnx_ir as ir
from onnxscript import version_converter

from bridge.errors import BridgeError, UsageError

logger = logging.getLogger(__name__)

MIN_OPSET = 7
_NO_ADAPTER = re.compile(r"No Adapter (?:From|To) Version \$?(?P<v>\d+) for (?P<op>\w+)")


class OpsetConversionError(BridgeError):
    """The model cannot be converted to the requested opset; names the op (and its nodes) that blocks it."""


def newest_opset() -> int:
    """The newest default-domain opset the installed onnx knows."""
    return int(onnx.defs.onnx_opset_version())


def check_target(target: int) -> None:
    if not MIN_OPSET <= target <= newest_opset():
        raise UsageError(f"--opset {target}: bridge converts between opsets {MIN_OPSET} and {newest_opset()}")


def model_opset(model: ir.Model) -> int:
    return int(model.opset_imports.get("", model.opset_imports.get("ai.onnx", 0)))


def convert_opset(model: ir.Model, target: int) -> ir.Model:
    """``model`` converted to default-domain opset ``target`` (a new model; the input is left alone)."""
    check_target(target)
    current = model_opset(model)
    if current == target:
        return model
    if current < MIN_OPSET:
        raise UsageError(f"the model is at opset {current}; bridge reads opset {MIN_OPSET} and newer")
    logger.info("converting opset %d -> %d", current, target)
    proto = ir.serde.serialize_model(model)
    if target > current:
        converted = ir.serde.deserialize_model(proto)
        # onnxscript warns each time it hands a hop to onnx's C++ converter; that is the expected path here
        vc_logger = logging.getLogger("onnxscript.version_converter")
        level = vc_logger.level
        vc_logger.setLevel(logging.ERROR)
        try:
            version_converter.convert_version(converted, target_version=target, fallback=True)
        finally:
            vc_logger.setLevel(level)
        if model_opset(converted) == target:
            return converted
    return ir.serde.deserialize_model(_convert_with_onnx(proto, current, target))


def _convert_with_onnx(proto: onnx.ModelProto, current: int, target: int) -> onnx.ModelProto:
    try:
        return onnx.version_converter.convert_version(proto, target)
    except Exception as exc:
        m = _NO_ADAPTER.search(str(exc))
        if m:
            op = m.group("op")
            nodes = [n.name or f"<unnamed #{i}>" for i, n in enumerate(proto.graph.node) if n.op_type == op]
            raise OpsetConversionError(
                f"cannot convert opset {current} -> {target}: onnx's version converter has no adapter for "
                f"{op} at version {m.group('v')} (nodes: {', '.join(nodes[:5]) or '-'})"
            ) from exc
        raise OpsetConversionError(f"cannot convert opset {current} -> {target}: {exc}") from exc
