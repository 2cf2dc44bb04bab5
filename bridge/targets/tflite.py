"""ONNX -> .tflite (LiteRT) through the TensorFlow target's SavedModel and ``tf.lite.TFLiteConverter``.

The path is the TF target's (``export_saved_model``: onnx-tf with everything it cannot take settled
first) followed by ``TFLiteConverter.from_saved_model``. By default (``ops="builtin"``) the .tflite may
use LiteRT builtin ops only, the ones every LiteRT interpreter has; ``ops="select"`` also allows select
TF ops (Flex), which need an interpreter linked with the Flex delegate (the ``ai-edge-litert`` wheel is
not: such a model converts but does not run there).

For builtin ops, two things the SSD decode and NMS lower to are changed on the way:

1. float64 islands (``Cast(f64) -> Exp -> Cast(f32)``, the correctly rounded exp of the MXNet-exact box
   decode) run in float32 (``Float32IslandsPass``; its docstring states the error bound, tests check it):
   LiteRT has no float64 Exp, only FlexExp.
2. onnx-tf's NonMaxSuppression handler calls ``tf.image.non_max_suppression`` per batch and class. While
   this target exports, that call is replaced by ``litert_nms`` (``builtin_nms``), which emits what LiteRT's
   builtin ``NON_MAX_SUPPRESSION_V4`` computes correctly, with ONNX's result:

   - boxes reshaped to [-1, 4]: the converter legalises NMS to the builtin only with a static box width 4;
   - the kernel's output is padded to max_output_size with zeros; the converter does not cut it to the
     valid count (selected [0, 0, 0] rows appear), so the padded op is emitted and cut explicitly;
   - the kernel puts every selected box back on its queue and drops it only when it suppresses itself
     (IoU with itself >= threshold). A box whose IoU with itself is not 1 - zero or non-finite area, common
     after clipping to [0, 1] (saturated or random-weight SSDs) - is selected again and again until
     max_output_size is reached, crowding out the rest of its class. Such boxes overlap nothing (IoU 0 in
     ONNX, TF and LiteRT), so they are kept out of the kernel and selected by their score alone, merged
     with the kernel's selection in score order, capped at max_output_size;
   - the kernel suppresses IoU >= threshold where ONNX suppresses IoU > threshold: it gets the next
     float32 above the threshold.

What LiteRT cannot run is named before conversion: nodes still computing in float64 after 1 (LiteRT has
no float64 kernels but Cast) by ONNX node; then any TF op the converter could only keep as a select op,
with the ONNX node it came from (onnx-tf opens a name scope per node), as ``LiteRtUnsupportedError``.

``outputs="detection-postprocess"`` (``--tflite-outputs``) gives an SSD the four outputs of TFLite's
``TFLite_Detection_PostProcess`` layout (detection_boxes [B, K, 4] ymin/xmin/ymax/xmax, detection_classes,
detection_scores [B, K], num_detections [B], all float32), built in the ONNX stage from bridge's own decode
and NMS (``bridge.passes.contrib.tflite_layout``), not TFLite's custom op, which cannot reproduce MXNet's
NMS; it is validated detection-aware against the source like any lowered detection output.

The ONNX -> signature key maps (``input.1`` -> ``input_1``) are stored in the .tflite's own metadata
(``TFLITE_NAME_MAP``), which the LiteRT runtime reads; the file is written atomically.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
import onnx_ir as ir

from bridge.chatter import quiet
from bridge.config import Option
from bridge.errors import ExportError, UnsupportedOpError, UsageError
from bridge.frameworks import import_tensorflow
from bridge.runtimes import Runtime, get_runtime
from bridge.runtimes.litert import TFLITE_NAME_MAP
from bridge.targets.base import TargetResult, onnx_output

if TYPE_CHECKING:
    from bridge.passes.pipeline import Step

logger = logging.getLogger(__name__)

TARGET_NAME = "tflite (LiteRT)"
OPS = ("builtin", "select")
POSTPROCESS = "detection-postprocess"  # bridge.passes.contrib.tflite_layout.LAYOUT_NAME
OUTPUT_LAYOUTS = ("model", POSTPROCESS)
# a converter error names each op it could not legalise: loc(... fused["Exp:", "onnx_tf_prefix_<node>/Exp_110@...
_LOC = re.compile(r"fused\[\"(?P<op>\w+):\", \"(?P<scope>[^\"@]*)[^\"]*\"\].*?'tf\.(?P<tfop>\w+)' op is neither")
_SELECT = re.compile(r"TF Select ops: (?P<ops>[^\n]+)")


class LiteRtUnsupportedError(UnsupportedOpError):
    """Nodes LiteRT's builtin ops cannot run (float64 compute, ops only available as select TF ops)."""

    def __init__(self, unsupported: Mapping[str, Iterable[str]], reasons: Mapping[str, str] | None = None) -> None:
        super().__init__(unsupported, reasons=reasons)
        lines = str(self).split("\n", 1)[1]
        self.args = (f"{len(self.unsupported)} op type(s) cannot run on LiteRT builtin ops "
                     f"(--tflite-ops select keeps them as select TF ops, which need the Flex delegate):\n{lines}",)


# ONNX ops LiteRT's builtin kernels cannot run whatever the converter does, with the reason users see
NO_BUILTIN_KERNEL = {
    "RoiAlign": "LiteRT has no builtin ROI-align kernel: onnx-tf writes RoiAlign as tf.image.crop_and_resize, which "
                "exists as a select TF op only (CropAndResize, Flex delegate), and implements only RoiAlign-10, not "
                "the opset-16 form; R-CNN heads pool their rois with it",
}


def prepare_for_litert(model: onnx.ModelProto, ops: str = "builtin") -> tuple[onnx.ModelProto, list[str]]:
    """The model for the TF converter and notes: ops with no builtin kernel refused by name and reason
    (``NO_BUILTIN_KERNEL``); float64 islands in float32 (builtin ops only); then, for builtin ops, every node
    still computing in float64 is refused (``LiteRtUnsupportedError``)."""
    if ops != "builtin":
        return model, []
    kernelless: dict[str, list[str]] = {}
    for index, node in enumerate(model.graph.node):
        if node.domain in ("", "ai.onnx") and node.op_type in NO_BUILTIN_KERNEL:
            kernelless.setdefault(node.op_type, []).append(node.name or f"<unnamed {node.op_type} #{index}>")
    if kernelless:
        raise LiteRtUnsupportedError(kernelless, {op: NO_BUILTIN_KERNEL[op] for op in kernelless})
    from onnx_ir.passes.common import ShapeInferencePass

    from bridge.passes.contrib.float32_islands import Float32IslandsPass

    work = ir.from_proto(model)
    notes = []
    with contextlib.suppress(Exception):  # dtypes for both steps; a model inference rejects still converts
        ShapeInferencePass(strict_mode=False)(work)
    if Float32IslandsPass()(work).modified:
        notes.append("float64 exp of the box decode runs in float32 on LiteRT (no builtin float64 Exp; "
                     "error bound in bridge.passes.contrib.float32_islands)")
        model = ir.to_proto(work)
    found = float64_nodes(work)
    if found:
        raise LiteRtUnsupportedError(found, {op: "LiteRT builtin kernels have no float64" for op in found})
    return model, notes


def float64_nodes(model: ir.Model) -> dict[str, list[str]]:
    """``{op (float64): [node names]}``: nodes with a float64 input or output other than Cast and shape
    plumbing (LiteRT's builtin kernels are float32/int/bool)."""
    found: dict[str, list[str]] = {}
    for index, node in enumerate(model.graph):
        if node.op_type in ("Cast", "Constant", "Shape", "Identity"):
            continue
        if any(v is not None and v.dtype == ir.DataType.DOUBLE for v in (*node.inputs, *node.outputs)):
            found.setdefault(f"{node.op_type} (float64)", []).append(node.name or f"<unnamed {node.op_type} #{index}>")
    return found


def litert_nms(tf: Any, boxes: Any, scores: Any, max_output_size: Any, iou_threshold: Any = 0.5,
               score_threshold: Any = float("-inf"), name: str | None = None) -> Any:
    """``tf.image.non_max_suppression`` as LiteRT's builtin kernel computes it right (module docstring, 2).

    Returns the selected box indices (int32), in descending score order, at most ``max_output_size``."""
    boxes = tf.reshape(boxes, [-1, 4])
    scores = tf.reshape(scores, [-1])
    score_threshold = tf.cast(score_threshold, tf.float32)
    limit = tf.cast(max_output_size, tf.int32)
    # the kernel's own area, (max - min) y * (max - min) x in float32: a box it could select twice is not > 0
    # and finite (NaN compares false)
    low, high = tf.minimum(boxes[:, :2], boxes[:, 2:]), tf.maximum(boxes[:, :2], boxes[:, 2:])
    extent = high - low
    area = extent[:, 0] * extent[:, 1]
    proper = tf.logical_and(area > 0, area < float("inf"))
    neg_inf = tf.fill(tf.shape(scores), float("-inf"))
    # ONNX suppresses IoU > t, the kernel IoU >= t: the next float above t
    iou = _next_float_up(tf, iou_threshold)
    picked, valid = tf.raw_ops.NonMaxSuppressionV4(
        boxes=boxes, scores=tf.where(proper, scores, neg_inf), max_output_size=limit, iou_threshold=iou,
        score_threshold=score_threshold, pad_to_max_output_size=True)
    picked = picked[:valid]
    # boxes that overlap nothing: selected when their score passes, never suppressing or suppressed
    lone = tf.cast(tf.reshape(tf.where(tf.logical_and(tf.logical_not(proper), scores > score_threshold)), [-1]),
                   tf.int32)
    every = tf.concat([picked, lone], 0)
    count = tf.minimum(tf.size(every), limit)
    _, order = tf.math.top_k(tf.gather(scores, every), k=tf.size(every), sorted=True)
    return tf.gather(every, order[:count], name=name)


def _next_float_up(tf: Any, threshold: Any) -> Any:
    """The float32 after ``threshold`` (>= 0, as ONNX requires): folded when it is a constant, else one add on
    its bits (LiteRT has no NextAfter kernel)."""
    static = tf.get_static_value(threshold)
    if static is not None:
        value = np.float32(np.asarray(static).reshape(-1)[0])
        return tf.constant(np.nextafter(value, np.float32(np.inf)), tf.float32)
    t = tf.maximum(tf.reshape(tf.cast(threshold, tf.float32), []), 0.0)
    return tf.bitcast(tf.bitcast(t, tf.int32) + 1, tf.float32)


class _LiteRtNmsImage:
    """``tf.image`` whose ``non_max_suppression`` is ``litert_nms`` (see module docstring)."""

    def __init__(self, tf: Any) -> None:
        self._tf = tf

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tf.image, name)

    def non_max_suppression(self, boxes: Any, scores: Any, *args: Any, **kwargs: Any) -> Any:
        return litert_nms(self._tf, boxes, scores, *args, **kwargs)


class _LiteRtNmsTf:
    def __init__(self, tf: Any) -> None:
        self._tf = tf
        self.image = _LiteRtNmsImage(tf)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tf, name)


@contextlib.contextmanager
def builtin_nms() -> Iterator[None]:
    """While active, onnx-tf's NonMaxSuppression handler emits ``litert_nms`` (module docstring, 2)."""
    from bridge.targets.onnx_tf_compat import load_onnx_tf

    load_onnx_tf()
    import onnx_tf.handlers.backend.non_max_suppression as handler

    original = handler.tf
    handler.tf = _LiteRtNmsTf(original)
    try:
        yield
    finally:
        handler.tf = original


def _unsupported_from_converter(message: str, scopes: Mapping[str, str]) -> dict[str, list[str]]:
    """``{tf op: [ONNX node names]}`` from a converter error listing ops that need select TF ops."""
    found: dict[str, list[str]] = {}
    for m in _LOC.finditer(message):
        node = _node_of_scope(m.group("scope").removeprefix("onnx_tf_prefix_"), scopes)
        nodes = found.setdefault(f"tf.{m.group('tfop')}", [])
        if node not in nodes:
            nodes.append(node)
    select = _SELECT.search(message)
    if select:
        for op in (o.strip() for o in select.group("ops").split(",")):
            found.setdefault(f"tf.{op}", [])
    return {op: nodes or ["(node not named by the converter)"] for op, nodes in found.items()}


def _node_of_scope(scope: str, scopes: Mapping[str, str]) -> str:
    """The ONNX node whose scope ``scope`` (``<node>`` or ``<node>/<tf op>...``) is in: the longest scope of
    ``scopes`` it is or lies under (node names may hold "/" themselves: exporters name nodes ``/Div_1``)."""
    parts = scope.split("/")
    for end in range(len(parts), 0, -1):
        prefix = "/".join(parts[:end])
        if prefix in scopes:
            return scopes[prefix]
    return parts[0] or scope


def with_name_map(content: bytes, names: Mapping[str, Mapping[str, str]]) -> bytes:
    """``content`` (a .tflite flatbuffer) with the ONNX model's own input / output names and order, and the ONNX ->
    signature key maps as metadata ``TFLITE_NAME_MAP``.

    The converter names a SavedModel's tensors after its function (``serving_default_x:0``, ``PartitionedCall:1``)
    and orders the outputs as it likes; apps read a .tflite's tensors by index or by name (``get_output_details``),
    so each signature tensor is renamed to its ONNX name (the source's) and the subgraph's inputs and outputs, and
    the signature's entries, are put in the ONNX graph's order. ``names``: {"inputs" / "outputs": {ONNX name:
    signature key}}, each in the ONNX graph's order."""
    import flatbuffers
    from ai_edge_litert import schema_py_generated as schema

    model = schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(content, 0))
    _keep_onnx_names(model, names)
    buffer = schema.BufferT()
    buffer.data = list(json.dumps(names).encode())
    model.buffers.append(buffer)
    entry = schema.MetadataT()
    entry.name = TFLITE_NAME_MAP
    entry.buffer = len(model.buffers) - 1
    model.metadata = [m for m in (model.metadata or []) if m.name != TFLITE_NAME_MAP.encode()] + [entry]
    builder = flatbuffers.Builder(len(content) + 1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def _keep_onnx_names(model: Any, names: Mapping[str, Mapping[str, str]]) -> None:
    """Rename and reorder the main signature's tensors after ``names`` (``with_name_map``), in place."""
    signature = next((s for s in model.signatureDefs or [] if (s.signatureKey or b"") == b"serving_default"), None)
    if signature is None or signature.subgraphIndex:
        return
    graph = model.subgraphs[0]
    for side in ("inputs", "outputs"):
        entries = getattr(signature, side) or []
        by_key = {(e.name.decode() if isinstance(e.name, bytes) else e.name): e for e in entries}
        order = [by_key[key] for key in names.get(side, {}).values() if key in by_key]
        if len(order) != len(entries):  # the signature does not hold every ONNX name: leave it as it is
            continue
        taken = {t.name for i, t in enumerate(graph.tensors)}
        for onnx_name, entry in zip(names[side], order, strict=True):
            tensor = graph.tensors[entry.tensorIndex]
            wanted = onnx_name.encode()
            if tensor.name != wanted and wanted in taken:  # an inner tensor has the name already: it yields
                for other in graph.tensors:
                    if other.name == wanted:
                        other.name = wanted + b"__inner"
            tensor.name = wanted
        setattr(signature, side, order)
        setattr(graph, side, [e.tensorIndex for e in order])


REDUCED = ("int8", "fp16")  # --precision variants (bridge.precision.tflite): converter optimisations


def export_tflite(model: Any, path: str | Path, *, ops: str = "builtin", reduced: str | None = None) -> TargetResult:
    """Convert ``model`` (ModelProto, bytes or .onnx path) to a .tflite at ``path`` (module docstring).

    ``reduced`` (``--precision``, issue 34): ``int8`` is the converter's dynamic-range quantization (int8
    weights of the layers with weights; their kernels quantize activations on the fly, everything else
    stays float), ``fp16`` stores float weights as float16."""
    from bridge.targets.tensorflow import export_saved_model

    if ops not in OPS:
        raise UsageError(f"--tflite-ops {ops}: choose one of {', '.join(OPS)}")
    start = time.perf_counter()
    proto = _as_proto(model)
    proto, notes = prepare_for_litert(proto, ops)
    tf = import_tensorflow("converting to TFLite")
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    try:
        with builtin_nms() if ops == "builtin" else contextlib.nullcontext():
            saved = export_saved_model(proto, tmp / "saved_model")
        converter = tf.lite.TFLiteConverter.from_saved_model(str(saved.path))
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS] + (
            [tf.lite.OpsSet.SELECT_TF_OPS] if ops == "select" else [])
        if reduced in REDUCED:  # --precision (issue 34)
            converter.optimizations = [tf.lite.Optimize.DEFAULT]
            if reduced == "fp16":
                converter.target_spec.supported_types = [tf.float16]
        with quiet(["tensorflow", "absl"], "TFLite converter", stderr=True):
            try:
                content = converter.convert()
            except Exception as exc:
                text = str(exc)
                scopes = {_scope(n.name): n.name for n in proto.graph.node if n.name}
                found = _unsupported_from_converter(text, scopes)
                if found:
                    raise LiteRtUnsupportedError(found) from exc
                raise ExportError(f"the TFLite converter failed: {text.strip()[:2000]}") from exc
        content = with_name_map(content, {"inputs": saved.input_names, "outputs": saved.output_names})
        staged = tmp / out.name
        staged.write_bytes(content)
        os.replace(staged, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    seconds = time.perf_counter() - start
    logger.info("wrote %s in %.1f s", out, seconds)
    if ops == "select":
        notes.append("select TF ops allowed (--tflite-ops select): the .tflite needs an interpreter with the Flex delegate")
    return TargetResult(target=TARGET_NAME, path=out, converter=f"onnx-tf + TFLiteConverter (tensorflow {tf.__version__})",
                        opset_in=saved.opset_in, opset_out=saved.opset_out, input_names=saved.input_names,
                        output_names=saved.output_names, notes=[*saved.notes, *notes], warnings=saved.warnings,
                        seconds=seconds)


def _scope(name: str) -> str:
    """The TF name scope onnx-tf opens for an ONNX node name (``bridge.targets.tensorflow`` makes names scope-safe)."""
    return re.sub(r"[^A-Za-z0-9_.\\/>-]", "_", name)


def _as_proto(model: Any) -> onnx.ModelProto:
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, bytes):
        return onnx.load_from_string(model)
    from bridge.io import load_model

    return load_model(model)


def tflite_destination(destination: Path) -> Path:
    """Where the .tflite goes for convert's artefact destination: ``X.tflite`` as given, else ``<stem>.tflite``."""
    if destination.suffix == ".tflite":
        return destination
    return destination.with_name(destination.name.removesuffix("_saved_model") + ".tflite")


def move_tflite(src: Path, destination: Path) -> Path:
    """Move a staged .tflite to ``destination`` atomically (staged beside it: one filesystem)."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    tmp = destination.with_name(f".{destination.name}.{uuid.uuid4().hex[:8]}.tmp")
    shutil.copyfile(src, tmp)
    os.replace(tmp, destination)
    return destination


class TfliteTarget:
    """``--to tflite``: a .tflite (LiteRT) converted through the TF target's SavedModel, run by LiteRT."""

    name = "tflite"
    artefact = True  # writes something besides the validated .onnx
    runtimes = ("litert",)
    default_runtimes = ("onnxruntime", "litert")
    options = (Option("tflite_ops", str, "builtin", "--to tflite: builtin (default) or select (also select TF ops, "
                      "which need the Flex delegate)", choices=lambda: OPS),
               Option("tflite_outputs", str, "model", "--to tflite: model (default: the model's outputs) or "
                      "detection-postprocess (an SSD's detections as TFLite_Detection_PostProcess emits them: "
                      "detection_boxes, detection_classes, detection_scores, num_detections; bridge's own decode "
                      "and NMS, needs --max-detections)", choices=lambda: OUTPUT_LAYOUTS, metavar="LAYOUT"))

    def __init__(self, tflite_ops: str = "builtin", tflite_outputs: str = "model") -> None:
        if tflite_ops not in OPS:
            raise UsageError(f"--tflite-ops {tflite_ops}: choose one of {', '.join(OPS)}")
        if tflite_outputs not in OUTPUT_LAYOUTS:
            raise UsageError(f"--tflite-outputs {tflite_outputs}: choose one of {', '.join(OUTPUT_LAYOUTS)}")
        self.ops = tflite_ops
        self.outputs = tflite_outputs

    def configure(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """Conversion settings this target's options need: the detection-postprocess layout is built from the
        MultiBoxDetection lowering's boxes-scores-classes format with ``--max-detections`` rows."""
        if self.outputs != POSTPROCESS:
            return {}
        if values.get("max_detections") is None:
            raise UsageError(f"--tflite-outputs {POSTPROCESS} needs --max-detections K (the rows of detection_boxes, "
                             "detection_classes and detection_scores)")
        if values.get("detection_format") not in ("mxnet", "boxes-scores-classes"):  # mxnet: the default
            raise UsageError(f"--tflite-outputs {POSTPROCESS} is built from --detection-format boxes-scores-classes, "
                             f"not {values.get('detection_format')}")
        return {"detection_format": "boxes-scores-classes"}

    def onnx_stage_steps(self) -> tuple[Step, ...]:
        """The ONNX stage's rewrite into the detection-postprocess layout (the .onnx carries it too, so every
        runtime validates the same four outputs)."""
        if self.outputs != POSTPROCESS:
            return ()
        from bridge.passes.contrib.tflite_layout import TflitePostprocessLayoutPass
        from bridge.passes.pipeline import Step

        return (Step(TflitePostprocessLayoutPass(), "--tflite-outputs detection-postprocess: the lowered SSD "
                     "detections reordered and cast to the four outputs TFLite detection apps read"),)

    def place(self, output: Path, artefact_dir: Path | None, options: Mapping[str, Any]) -> tuple[Path, dict[str, Path]]:
        """``-o X.tflite`` names the .tflite (the validated ONNX goes beside it as X.onnx); else ``<stem>.tflite``
        goes to ``--artefact-dir`` or beside the .onnx."""
        if output.suffix.lower() == ".tflite":
            return output.with_suffix(".onnx"), {"tflite": output}
        return onnx_output(output), {"tflite": (artefact_dir or output.parent) / f"{output.stem}.tflite"}

    def export(self, model: onnx.ModelProto, staging: Path) -> TargetResult:
        return export_tflite(model, staging / "model.tflite", ops=self.ops)

    def commit(self, staged: Path, destination: Path) -> Path:
        return move_tflite(Path(staged), tflite_destination(Path(destination)))

    def runtime(self, name: str, model: Any, workdir: Path) -> Runtime:
        # the .tflite is built when the runtime is activated (loading apart from running)
        ops = self.ops
        return get_runtime(name, lambda: export_tflite(model, Path(workdir) / "model.tflite", ops=ops).path)
