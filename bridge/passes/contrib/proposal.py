"""LowerProposalPass: the legacy rcnn RPN (``bridge.contrib`` Proposal, from MXNet's ``_contrib_Proposal`` and
``_contrib_MultiProposal``) -> standard ONNX, so legacy Faster R-CNN symbol files convert whole.

Semantics, as MXNet src/operator/contrib/proposal.cc / multi_proposal.cc (tag 1.9.1) compute them, per image:
  - anchors: A = len(ratios) * len(scales) base anchors from the box (0, 0, stride - 1, stride - 1) (ratios outer,
    scales inner; py-faster-rcnn's whctrs rounding, ``base_anchors``), shifted by (w * stride, h * stride) over the
    H x W feature map; anchor (h, w, a) is row h * W * A + w * A + a;
  - scores: the foreground half of cls_prob (channels A..2A-1);
  - decode (BBoxTransformInv, the +1 pixel convention): width = x2 - x1 + 1, ctr = x1 + 0.5 * (width - 1),
    pred_ctr = d * width + ctr, pred_w = exp(dw) * width, box = ctr -+ 0.5 * (pred_w - 1); with ``iou_loss``
    (IoUTransformInv) the deltas are added to the corners. Boxes are clipped to [0, im_w - 1] x [0, im_h - 1];
    anchors on rows/columns past int(im_h / stride), int(im_w / stride) get score -1;
  - FilterBox: a box narrower or lower (x2 - x1 + 1) than rpn_min_size * im_scale grows by min_size / 2 on each
    side and gets score -1 (it stays a candidate, sorted last);
  - the rpn_pre_nms_top_n best by score (MXNet's std::sort, descending), greedy NMS in that order with the +1
    area convention and ``ovr > threshold``, stopping at rpn_post_nms_top_n kept boxes;
  - output: rpn_post_nms_top_n rows (batch index, x1, y1, x2, y2) per image; when fewer boxes are kept the kept
    rows repeat cyclically (row i is kept[i % kept_count]); ``output_score`` adds their scores.

Float32 arithmetic follows MXNet's expressions: the terms C++ computes in double (``0.5 * (width - 1.0)``) are
computed in float64 and rounded once, exp in float64 then rounded (see ``decode.DECODERS["ssd"]``). Two known limits:
equal scores are ordered by anchor index (TopK); MXNet's std::sort is an insertion sort - so the same order - up
to 16 anchors, and an unspecified introsort order beyond. The NMS is ONNX NonMaxSuppression on boxes with
x2 + 1, y2 + 1 (the +1 area convention), whose IoU may round differently from MXNet's by an ulp, which matters
only for an IoU equal to the threshold to the last bit.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx_ir as ir

from bridge.errors import NodeError
from bridge.passes.contrib import nms
from bridge.passes.contrib.common import LoweringPass
from bridge.rewriting import node_label
from bridge.rewriting.attrs import required_float, required_floats, required_int
from bridge.rewriting.builder import F32, Builder

F64 = ir.DataType.DOUBLE


def base_anchors(stride: int, ratios: Sequence[float], scales: Sequence[float]) -> np.ndarray:
    """MXNet's GenerateAnchors (proposal-inl.h) in float32: [A, 4] rows (x1, y1, x2, y2), ratios outer."""
    f = np.float32
    x1, y1, x2, y2 = f(0.0), f(0.0), f(stride - 1.0), f(stride - 1.0)
    rows = []
    for ratio in ratios:
        for scale in scales:
            r, s = f(ratio), f(scale)
            w = f(x2 - x1 + f(1.0))
            h = f(y2 - y1 + f(1.0))
            x_ctr = f(np.float64(x1) + 0.5 * (np.float64(w) - 1.0))
            y_ctr = f(np.float64(y1) + 0.5 * (np.float64(h) - 1.0))
            size = f(w * h)
            size_ratios = f(np.floor(f(size / r)))
            new_w = f(f(np.floor(f(np.sqrt(size_ratios)) + f(0.5))) * s)
            new_h = f(f(np.floor(f(f(new_w / s) * r) + f(0.5))) * s)
            rows.append([f(x_ctr - f(0.5) * f(new_w - f(1.0))), f(y_ctr - f(0.5) * f(new_h - f(1.0))),
                         f(x_ctr + f(0.5) * f(new_w - f(1.0))), f(y_ctr + f(0.5) * f(new_h - f(1.0)))])
    return np.array(rows, np.float32)


class LowerProposalPass(LoweringPass):
    """Lower every bridge.contrib Proposal (the module docstring has the semantics)."""

    op_type = "Proposal"
    input_names = ("cls_prob", "bbox_pred", "im_info")
    float32_inputs = (0, 1, 2)

    def lower(self, b: Builder, node: ir.Node) -> list[ir.Value]:
        cls_prob, bbox_pred, im_info = node.inputs[0], node.inputs[1], node.inputs[2]
        assert cls_prob is not None and bbox_pred is not None and im_info is not None  # check() made sure
        label = node_label(node)
        stride = required_int(node, "feature_stride")
        ratios, scales = required_floats(node, "ratios"), required_floats(node, "scales")
        post = required_int(node, "rpn_post_nms_top_n")
        if stride <= 0 or not ratios or not scales or post <= 0:
            raise NodeError(label, node.op_type, f"feature_stride={stride}, ratios={ratios}, scales={scales}, "
                            f"rpn_post_nms_top_n={post}: need positive values")
        rois, scores = build_proposal(
            b, cls_prob, bbox_pred, im_info, anchors=base_anchors(stride, ratios, scales), stride=stride,
            pre=required_int(node, "rpn_pre_nms_top_n"), post=post, threshold=required_float(node, "threshold"),
            min_size=required_int(node, "rpn_min_size"), iou_loss=bool(required_int(node, "iou_loss")))
        return [rois, scores][: len(node.outputs)]


def _f64(b: Builder, x: ir.Value) -> ir.Value:
    return b.cast(x, F64)


def _half_extent(b: Builder, size: ir.Value) -> ir.Value:
    """0.5 * (size - 1.0) in float64 (C++ promotes the double literals), size float32."""
    return b.op("Mul", b.op("Sub", _f64(b, size), b.const(np.array(1.0))), b.const(np.array(0.5)))


def build_proposal(b: Builder, cls_prob: ir.Value, bbox_pred: ir.Value, im_info: ir.Value, *, anchors: np.ndarray,
                   stride: int, pre: int, post: int, threshold: float, min_size: int,
                   iou_loss: bool) -> tuple[ir.Value, ir.Value]:
    """rois [B * post, 5] and scores [B * post, 1] (module docstring)."""
    a = anchors.shape[0]
    height, width = b.dim(cls_prob, 2), b.dim(cls_prob, 3)
    # foreground scores [B, A, H, W] -> [B, H*W*A] (anchor-fastest, as MXNet enumerates them)
    fg = b.op("Slice", cls_prob, b.i64(a), b.i64(2 * a), b.i64(1))
    score = b.op("Reshape", b.op("Transpose", fg, perm=[0, 2, 3, 1]), b.i64(0, -1))
    deltas = b.op("Reshape", bbox_pred, b.op("Concat", b.dim(bbox_pred, 0), b.i64(a, 4), height, width, axis=0))
    deltas = b.op("Reshape", b.op("Transpose", deltas, perm=[0, 3, 4, 1, 2]), b.i64(0, -1, 4))  # [B, N, 4]
    # anchors [1, N, 4]: base + (w * stride, h * stride) (integer products, exact in float32)
    ys = b.op("Mul", b.cast(nms.arange(b, height), F32), b.f32(float(stride)))
    xs = b.op("Mul", b.cast(nms.arange(b, width), F32), b.f32(float(stride)))
    hw = b.op("Concat", height, width, axis=0)
    grid_x = b.op("Expand", b.unsqueeze(xs, 0), hw)  # [H, W]
    grid_y = b.op("Expand", b.unsqueeze(ys, 1), hw)
    shift = b.op("Concat", *(b.unsqueeze(g, -1, -2) for g in (grid_x, grid_y, grid_x, grid_y)), axis=-1)  # [H, W, 1, 4]
    boxes = b.op("Reshape", b.op("Add", shift, b.const(anchors)), b.i64(1, -1, 4))  # [1, N, 4]
    x1, y1, x2, y2 = b.columns(boxes, 4)
    dx, dy, dw, dh = b.columns(deltas, 4)
    if iou_loss:
        px1, py1, px2, py2 = (b.op("Add", c, d) for c, d in ((x1, dx), (y1, dy), (x2, dw), (y2, dh)))
    else:
        one = b.f32(1.0)
        wa, ha = b.op("Add", b.op("Sub", x2, x1), one), b.op("Add", b.op("Sub", y2, y1), one)
        cxa = b.cast(b.op("Add", _f64(b, x1), _half_extent(b, wa)), F32)
        cya = b.cast(b.op("Add", _f64(b, y1), _half_extent(b, ha)), F32)
        cx, cy = b.op("Add", b.op("Mul", dx, wa), cxa), b.op("Add", b.op("Mul", dy, ha), cya)
        pw = b.op("Mul", b.cast(b.op("Exp", _f64(b, dw)), F32), wa)
        ph = b.op("Mul", b.cast(b.op("Exp", _f64(b, dh)), F32), ha)
        ew, eh = _half_extent(b, pw), _half_extent(b, ph)
        px1, px2 = (b.cast(b.op(op, _f64(b, cx), ew), F32) for op in ("Sub", "Add"))
        py1, py2 = (b.cast(b.op(op, _f64(b, cy), eh), F32) for op in ("Sub", "Add"))
    im_h, im_w, im_scale = (b.unsqueeze(c, 1) for c in b.columns(im_info, 3))  # [B, 1, 1] each
    one, zero = b.f32(1.0), b.f32(0.0)
    lim_w, lim_h = b.op("Sub", im_w, one), b.op("Sub", im_h, one)
    px1, px2 = (b.op("Max", b.op("Min", v, lim_w), zero) for v in (px1, px2))
    py1, py2 = (b.op("Max", b.op("Min", v, lim_h), zero) for v in (py1, py2))
    # anchors past the real (unpadded) feature map: score -1
    real_h = b.op("Floor", b.op("Div", im_h, b.f32(float(stride))))  # static_cast<int> of a non-negative float
    real_w = b.op("Floor", b.op("Div", im_w, b.f32(float(stride))))
    row = b.op("Reshape", b.op("Expand", b.unsqueeze(b.cast(nms.arange(b, height), F32), 1, 2),
                               b.op("Concat", hw, b.i64(a), axis=0)), b.i64(1, -1))  # [1, N]
    col = b.op("Reshape", b.op("Expand", b.unsqueeze(b.cast(nms.arange(b, width), F32), 0, 2),
                               b.op("Concat", hw, b.i64(a), axis=0)), b.i64(1, -1))
    padded = b.op("Or", b.op("GreaterOrEqual", row, b.squeeze(real_h, 2)),
                  b.op("GreaterOrEqual", col, b.squeeze(real_w, 2)))  # [B, N]
    minus_one = b.f32(-1.0)
    score = b.where(padded, minus_one, score)
    # FilterBox: too small -> grown by min_size / 2 on each side, score -1
    limit = b.op("Mul", b.f32(float(min_size)), im_scale)  # [B, 1, 1]
    small = b.op("Or", b.op("Less", b.op("Add", b.op("Sub", px2, px1), one), limit),
                 b.op("Less", b.op("Add", b.op("Sub", py2, py1), one), limit))  # [B, N, 1]
    half = b.op("Div", limit, b.f32(2.0))
    px1, py1 = (b.where(small, b.op("Sub", v, half), v) for v in (px1, py1))
    px2, py2 = (b.where(small, b.op("Add", v, half), v) for v in (px2, py2))
    score = b.where(b.squeeze(small, 2), minus_one, score)
    dets = b.op("Concat", px1, py1, px2, py2, axis=-1)  # [B, N, 4]
    # pre-NMS top-N in score order (equal scores: lower anchor index first)
    values, order = nms.top_candidates(b, score, pre if pre > 0 else None)  # [B, K]
    cand = b.gather_rows(dets, order)  # [B, K, 4]
    k = b.dim(order, 1)
    # NMS in exactly that order: strictly decreasing stand-in scores K, K-1, ..., 1
    rank = b.op("Sub", b.cast(k, F32), b.cast(nms.arange(b, k), F32))
    nms_scores = b.unsqueeze(b.op("Expand", b.unsqueeze(rank, 0), b.op("Shape", values)), 1)  # [B, 1, K]
    plus = b.const(np.array([0.0, 0.0, 1.0, 1.0], np.float32))  # the +1 area convention
    selected = nms.non_max_suppression(b, b.op("Add", cand, plus), nms_scores, iou_threshold=float(np.float32(threshold)),
                                       max_per_class=post)
    kept = nms.selected_mask(b, selected, values, (0, 2))  # [B, K]
    kept_pos = nms.stable_partition(b, kept)  # kept positions first, in score order
    n_kept = nms.count_true(b, kept)  # [B, 1]
    pos = b.op("Mod", b.unsqueeze(nms.arange(b, b.i64(post)), 0), n_kept)  # [B, post]: cyclic repeat
    take = b.gather_cols(kept_pos, pos)
    out_boxes = b.gather_rows(cand, take)  # [B, post, 4]
    out_scores = b.unsqueeze(b.gather_cols(values, take), -1)  # [B, post, 1]
    batch = b.dim(cls_prob, 0)
    index = b.op("Expand", b.unsqueeze(b.cast(nms.arange(b, batch), F32), 1, 2),
                 b.op("Concat", batch, b.i64(post, 1), axis=0))
    rois = b.op("Reshape", b.op("Concat", index, out_boxes, axis=-1), b.i64(-1, 5))
    return rois, b.op("Reshape", out_scores, b.i64(-1, 1))


__all__ = ["LowerProposalPass", "base_anchors", "build_proposal"]
