"""MXNet detection layers ONNX has no op for, emitted as ``bridge.contrib`` nodes for a later lowering.

The adapter stays thin: it does not lower these layers itself; it records them faithfully, with every
MXNet attribute present (defaults filled in, so the lowering pass never needs to know MXNet's
defaults) as typed ONNX attributes, and declares each output's type and shape in ``value_info``.
The model's ``opset_import`` lists domain ``bridge.contrib`` at version 1. The ONNX node keeps the
MXNet node name; its ``doc_string`` names the original MXNet op.

Attribute contract (domain ``bridge.contrib``, version 1). Types: FLOATS/FLOAT are float32 of the
decimal strings in the symbol file, booleans are INT 0/1.

``MultiBoxPrior`` (from ``_contrib_MultiBoxPrior``; MXNet src/operator/contrib/multibox_prior-inl.h)
    inputs:  data [B, C, H, W] (only its shape is used)
    outputs: anchors float32 [1, H*W*A, 4], A = len(sizes) + len(ratios) - 1, (xmin, ymin, xmax, ymax)
    sizes    FLOATS  default [1.0]
    ratios   FLOATS  default [1.0]
    clip     INT     default 0
    steps    FLOATS  default [-1.0, -1.0]   (step_y, step_x); -1 means 1/H, 1/W
    offsets  FLOATS  default [0.5, 0.5]     (offset_y, offset_x)

``MultiBoxDetection`` (from ``_contrib_MultiBoxDetection``; multibox_detection-inl.h)
    inputs:  cls_prob [B, C+1, N], loc_pred [B, 4N], anchors [1, N, 4]
    outputs: detections (dtype of cls_prob) [B, N, 6] rows (class_id, score, xmin, ymin, xmax, ymax)
    clip            INT     default 1
    threshold       FLOAT   default 0.01
    background_id   INT     default 0
    nms_threshold   FLOAT   default 0.5
    force_suppress  INT     default 0
    variances       FLOATS  default [0.1, 0.1, 0.2, 0.2]
    nms_topk        INT     default -1

``box_nms`` (from ``_contrib_box_nms`` / ``_contrib_box_non_maximum_suppression``; bounding_box-inl.h)
    inputs:  data [..., N, K]
    outputs: output, same dtype and shape as data (MXNet's hidden second output is not exported)
    overlap_thresh  FLOAT   default 0.5
    valid_thresh    FLOAT   default 0.0
    topk            INT     default -1
    coord_start     INT     default 2
    score_index     INT     default 1
    id_index        INT     default -1
    background_id   INT     default -1
    force_suppress  INT     default 0
    in_format       STRING  default "corner"   ("corner" or "center")
    out_format      STRING  default "corner"

``box_decode`` (from ``_contrib_box_decode``; bounding_box-inl.h)
    inputs:  data [B, N, 4] (encoded offsets), anchors [1 or B, N, 4]
    outputs: output, dtype and shape of data
    std0, std1, std2, std3  FLOAT  default 1.0
    clip                    FLOAT  default -1.0   (<= 0: no clipping of the exp() terms)
    format                  STRING default "center"  (anchor format: "center" or "corner")

``Proposal`` (from ``_contrib_Proposal`` / ``_contrib_MultiProposal``; proposal.cc, multi_proposal.cc)
    inputs:  cls_prob [B, 2A, H, W], bbox_pred [B, 4A, H, W], im_info [B, 3] (height, width, scale)
    outputs: rois float32 [B * rpn_post_nms_top_n, 5] (batch index, x1, y1, x2, y2); with output_score
             also scores [B * rpn_post_nms_top_n, 1]
    rpn_pre_nms_top_n   INT     default 6000
    rpn_post_nms_top_n  INT     default 300
    threshold           FLOAT   default 0.7
    rpn_min_size        INT     default 16
    scales              FLOATS  default [4, 8, 16, 32]
    ratios              FLOATS  default [0.5, 1, 2]
    feature_stride      INT     default 16
    output_score        INT     default 0
    iou_loss            INT     default 0

Attributes a newer MXNet adds that are not listed above are carried as STRING (the raw text) with a
warning, so nothing is silently dropped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from onnx import TensorProto

from adapters.mxnet.context import CONTRIB_DOMAIN, ConversionContext, TensorType
from adapters.mxnet.registry import out, translator
from adapters.mxnet.symbol import MXNode

CONTRIB_VERSION = 1

# attribute kind, default. Kinds: floats, float, int, bool, str
Schema = dict[str, tuple[str, Any]]

MULTIBOX_PRIOR: Schema = {
    "sizes": ("floats", (1.0,)), "ratios": ("floats", (1.0,)), "clip": ("bool", False),
    "steps": ("floats", (-1.0, -1.0)), "offsets": ("floats", (0.5, 0.5)),
}
MULTIBOX_DETECTION: Schema = {
    "clip": ("bool", True), "threshold": ("float", 0.01), "background_id": ("int", 0),
    "nms_threshold": ("float", 0.5), "force_suppress": ("bool", False),
    "variances": ("floats", (0.1, 0.1, 0.2, 0.2)), "nms_topk": ("int", -1),
}
BOX_NMS: Schema = {
    "overlap_thresh": ("float", 0.5), "valid_thresh": ("float", 0.0), "topk": ("int", -1),
    "coord_start": ("int", 2), "score_index": ("int", 1), "id_index": ("int", -1), "background_id": ("int", -1),
    "force_suppress": ("bool", False), "in_format": ("str", "corner"), "out_format": ("str", "corner"),
}
BOX_DECODE: Schema = {
    "std0": ("float", 1.0), "std1": ("float", 1.0), "std2": ("float", 1.0), "std3": ("float", 1.0),
    "clip": ("float", -1.0), "format": ("str", "center"),
}
PROPOSAL: Schema = {
    "rpn_pre_nms_top_n": ("int", 6000), "rpn_post_nms_top_n": ("int", 300), "threshold": ("float", 0.7),
    "rpn_min_size": ("int", 16), "scales": ("floats", (4.0, 8.0, 16.0, 32.0)), "ratios": ("floats", (0.5, 1.0, 2.0)),
    "feature_stride": ("int", 16), "output_score": ("bool", False), "iou_loss": ("bool", False),
}
SCHEMAS = {"MultiBoxPrior": MULTIBOX_PRIOR, "MultiBoxDetection": MULTIBOX_DETECTION, "box_nms": BOX_NMS,
           "box_decode": BOX_DECODE, "Proposal": PROPOSAL}


def typed_attributes(ctx: ConversionContext, node: MXNode, schema: Schema) -> dict[str, Any]:
    """Every schema attribute, typed for onnx.helper.make_node (lists of floats -> FLOATS, ...)."""
    a = node.attrs
    result: dict[str, Any] = {}
    getters: dict[str, Callable[[str, Any], Any]] = {
        "floats": lambda k, d: [float(v) for v in a.optional_floats(k, d)],
        "float": lambda k, d: float(a.optional_float(k, d) or 0.0),
        "int": lambda k, d: int(a.optional_int(k, d) or 0),
        "bool": lambda k, d: int(a.optional_bool(k, d)),
        "str": lambda k, d: a.optional_str(k, d) or d,
    }
    for key, (kind, default) in schema.items():
        result[key] = getters[kind](key, default)
    for key, text in node.raw_attrs.items():
        if key not in schema and not key.startswith("__"):
            ctx.warn(f"node '{node.name}' ({node.op}): attribute {key}={text!r} is not in the bridge.contrib "
                     "contract; carried as a STRING attribute")
            result[key] = text
    return result


def _emit(ctx: ConversionContext, node: MXNode, op: str, inputs: list[str], *out_types: TensorType,
          suffixes: tuple[str, ...] = ()) -> list[str]:
    """The contrib node; output names are MXNet's (``<name>_output``, or ``<name>_<suffix>`` per output)."""
    attrs = typed_attributes(ctx, node, SCHEMAS[op])
    names = [ctx.reserve(f"{node.name}_{s}") for s in suffixes] if suffixes else [out(ctx, node)]
    return ctx.emit(op, inputs, names, name=node.name, domain=CONTRIB_DOMAIN, out_types=list(out_types),
                    doc=f"MXNet {node.op} '{node.name}'", **attrs)


@translator("_contrib_MultiBoxPrior", "MultiBoxPrior")
def _contrib_MultiBoxPrior(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    a = node.attrs
    n_anchor = len(a.optional_floats("sizes", (1.0,))) + len(a.optional_floats("ratios", (1.0,))) - 1
    shape = ctx.shape(inputs[0])
    hw = shape[2:4] if shape is not None and len(shape) == 4 else (None, None)
    count = hw[0] * hw[1] * n_anchor if isinstance(hw[0], int) and isinstance(hw[1], int) else None
    return _emit(ctx, node, "MultiBoxPrior", inputs[:1], TensorType(TensorProto.FLOAT, (1, count, 4)))


@translator("_contrib_MultiBoxDetection", "MultiBoxDetection")
def _contrib_MultiBoxDetection(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    cls_shape = ctx.shape(inputs[0]) or (None, None, None)
    anchors = ctx.shape(inputs[2]) or (None, None, None)
    n = cls_shape[2] if isinstance(cls_shape[2], int) else anchors[1]
    elem = ctx.elem(inputs[0]) or TensorProto.FLOAT
    return _emit(ctx, node, "MultiBoxDetection", inputs[:3], TensorType(elem, (cls_shape[0], n, 6)))


@translator("_contrib_box_nms", "_contrib_box_non_maximum_suppression")
def _contrib_box_nms(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    t = ctx.type(inputs[0])
    return _emit(ctx, node, "box_nms", inputs[:1], TensorType(t.elem or TensorProto.FLOAT, t.shape))


@translator("_contrib_box_decode")
def _contrib_box_decode(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    t = ctx.type(inputs[0])
    return _emit(ctx, node, "box_decode", inputs[:2], TensorType(t.elem or TensorProto.FLOAT, t.shape))


@translator("_contrib_Proposal", "_contrib_MultiProposal")
def _contrib_Proposal(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    """The legacy rcnn RPN: one bridge.contrib Proposal for both ops (Proposal is MultiProposal at batch 1)."""
    a = node.attrs
    post = int(a.optional_int("rpn_post_nms_top_n", 300) or 0)
    batch = (ctx.shape(inputs[0]) or (None,))[0]
    rows = batch * post if isinstance(batch, int) else None
    types = [TensorType(TensorProto.FLOAT, (rows, 5))]
    if a.optional_bool("output_score", False):
        types.append(TensorType(TensorProto.FLOAT, (rows, 1)))
    return _emit(ctx, node, "Proposal", inputs[:3], *types, suffixes=("output", "score")[: len(types)])
