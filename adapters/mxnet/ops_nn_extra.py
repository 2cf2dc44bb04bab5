"""Translators for the inference-time MXNet layers beyond the SSD set: resizing, ROI pooling,
normalisations (LRN, LayerNorm, InstanceNorm), adaptive pooling and BERT's interleaved attention.

Each function turns one MXNet node into standard ONNX (default domain), choosing the op form the
target opset offers (``ctx.opset``). Formulas follow the MXNet 1.9 operator sources cited at each
translator; inference semantics only. Where an MXNet attribute has no exact ONNX equivalent the
translator refuses with an ExportError naming the node and the reason (never a silent approximation).
"""

from __future__ import annotations

import math

import numpy as np
from onnx import TensorProto

from adapters.mxnet.context import ConversionContext
from adapters.mxnet.registry import out, translator
from adapters.mxnet.symbol import MXNode
from bridge.errors import ExportError

# ---- resizing ---------------------------------------------------------------------------------

_RESIZE_MODES = ("size", "odd_scale", "like", "to_even_down", "to_even_up", "to_odd_down", "to_odd_up")


def _resized(size: int, mode: str, scale: float | None, fixed: int) -> int:
    # as in MXNet src/operator/contrib/bilinear_resize.cc (BilinearSampleOpInferShape)
    if mode == "size":
        return int(np.float32(scale) * size) if scale is not None else fixed
    if mode == "odd_scale":
        if scale is None:
            raise ExportError("mode 'odd_scale' needs scale_height and scale_width")
        return int(size * np.float32(scale)) if size % 2 == 0 else int((size - 1) * np.float32(scale)) + 1
    even = size % 2 == 0
    return {"to_even_down": size if even else size - 1, "to_even_up": size if even else size + 1,
            "to_odd_down": size - 1 if even else size, "to_odd_up": size + 1 if even else size}[mode]


@translator("_contrib_BilinearResize2D")
def _contrib_BilinearResize2D(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # MXNet bilinear_resize.cc: align_corners (default True) samples src = dst * (in-1)/(out-1);
    # otherwise src = max(0, (dst + 0.5) * in/out - 0.5) and src = 0 when out == 1, which is ONNX Resize's
    # 'pytorch_half_pixel' (ONNX 'half_pixel' differs for a 1-pixel output). Both clamp at the border.
    a = node.attrs
    x = inputs[0]
    mode = a.str("mode", "size") or "size"
    if mode not in _RESIZE_MODES:
        raise ExportError(f"node '{node.name}': BilinearResize2D mode={mode} is not supported")
    ctm = "align_corners" if a.bool("align_corners", True) else "pytorch_half_pixel"
    if mode == "like":
        like_shape = ctx.shape(inputs[1]) or ()
        hw_static = [d for d in like_shape[2:4] if isinstance(d, int)]
        if len(hw_static) == 2:
            hw = ctx.i64(hw_static, f"{node.name}__hw")
        else:
            shp = ctx.emit("Shape", [inputs[1]], 1, name=f"{node.name}__like_shape")[0]
            hw = ctx.emit("Slice", [shp, ctx.i64([2], f"{node.name}__s"), ctx.i64([4], f"{node.name}__e")], 1,
                          name=f"{node.name}__like_hw")[0]
    else:
        in_h, in_w = ctx.static_dims(x, node.name, slice(2, 4))
        sh, sw = a.float("scale_height", None), a.float("scale_width", None)
        try:
            h = _resized(in_h, mode, None if sh is None else float(sh), a.int("height", 1) or 1)
            w = _resized(in_w, mode, None if sw is None else float(sw), a.int("width", 1) or 1)
        except ExportError as e:
            raise ExportError(f"node '{node.name}': {e}") from None
        hw = ctx.i64([h, w], f"{node.name}__hw")
    nc = ctx.emit("Slice", [ctx.emit("Shape", [x], 1, name=f"{node.name}__shape")[0], ctx.i64([0], f"{node.name}__s"),
                            ctx.i64([2], f"{node.name}__e")], 1, name=f"{node.name}__nc")[0]
    sizes = ctx.emit("Concat", [nc, hw], 1, name=f"{node.name}__sizes", axis=0)[0]
    return ctx.emit("Resize", [x, "", "", sizes], [out(ctx, node)], name=node.name, mode="linear",
                    coordinate_transformation_mode=ctm)


# ---- ROI pooling ------------------------------------------------------------------------------


def _roi_split(ctx: ConversionContext, node: MXNode, rois: str) -> tuple[str, str]:
    """MXNet rois rows (batch_index, x1, y1, x2, y2) -> ONNX boxes [R, 4] and int64 batch_indices [R]."""
    idx = ctx.emit("Gather", [rois, ctx.i64([0], f"{node.name}__i0")], 1, name=f"{node.name}__bidx", axis=1)[0]
    idx = ctx.squeeze(idx, [1], name=f"{node.name}__bidx_sq")
    idx = ctx.emit("Cast", [idx], 1, name=f"{node.name}__bidx_i64", to=TensorProto.INT64)[0]
    boxes = ctx.emit("Slice", [rois, ctx.i64([1], f"{node.name}__b"), ctx.i64([5], f"{node.name}__e"),
                               ctx.i64([1], f"{node.name}__ax")], 1, name=f"{node.name}__boxes")[0]
    return boxes, idx


@translator("_contrib_ROIAlign")
def _contrib_ROIAlign(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # MXNet src/operator/contrib/roi_align.cc (Detectron's ROIAlign): average of bilinear samples,
    # sample_ratio <= 0 -> ceil(roi_size / pooled) samples per bin (ONNX sampling_ratio 0). aligned=False
    # clamps the ROI to >= 1 pixel, as ONNX 'output_half_pixel' (the only mode before opset 16);
    # aligned=True shifts by half a pixel without the clamp, ONNX 'half_pixel' (opset 16).
    a = node.attrs
    if a.bool("position_sensitive", False):
        raise ExportError(f"node '{node.name}': ROIAlign(position_sensitive=True) has no ONNX equivalent "
                          "(RoiAlign pools every channel per bin, not one channel group per bin)")
    ph, pw = (list(a.ints("pooled_size")) * 2)[:2]
    scale = float(a.float("spatial_scale", 1.0) or 0.0)
    ratio = max(0, a.int("sample_ratio", -1) or 0)
    aligned = a.bool("aligned", False)
    boxes, idx = _roi_split(ctx, node, inputs[1])
    ctm = None  # before opset 16 the attribute does not exist and the behaviour is 'output_half_pixel'
    if ctx.opset >= 16:
        ctm = "half_pixel" if aligned else "output_half_pixel"
    elif aligned:
        raise ExportError(f"node '{node.name}': ROIAlign(aligned=True) needs ONNX RoiAlign-16 "
                          f"(coordinate_transformation_mode); convert with --opset 16 or later")
    return ctx.emit("RoiAlign", [inputs[0], boxes, idx], [out(ctx, node)], name=node.name, mode="avg",
                    output_height=ph, output_width=pw, sampling_ratio=ratio, spatial_scale=scale,
                    coordinate_transformation_mode=ctm)


@translator("ROIPooling")
def ROIPooling(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # MXNet src/operator/roi_pooling.cc is Caffe's (Fast R-CNN) ROI max pooling, as ONNX MaxRoiPool:
    # round(coord * scale), roi size max(x2 - x1 + 1, 1), bins floor/ceil, empty bins 0
    a = node.attrs
    ph, pw = (list(a.ints("pooled_size")) * 2)[:2]
    scale = float(a.float("spatial_scale", 1.0) or 0.0)
    return ctx.emit("MaxRoiPool", inputs[:2], [out(ctx, node)], name=node.name, pooled_shape=[ph, pw],
                    spatial_scale=scale)


# ---- normalisation ----------------------------------------------------------------------------


@translator("LRN")
def LRN(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # MXNet src/operator/nn/lrn.cc: y = x / (knorm + alpha/nsize * sum_{window} x^2)^beta, ONNX LRN's formula
    a = node.attrs
    return ctx.emit("LRN", inputs[:1], [out(ctx, node)], name=node.name, size=a.require_int("nsize"),
                    alpha=float(a.float("alpha", 1e-4) or 0.0), beta=float(a.float("beta", 0.75) or 0.0),
                    bias=float(a.float("knorm", 2.0) or 0.0))


def _along(ctx: ConversionContext, node: MXNode, t: str, axis: int, rank: int) -> str:
    """A per-channel vector reshaped to broadcast along ``axis`` of a rank-``rank`` tensor."""
    if axis == rank - 1:
        return t
    return ctx.emit("Reshape", [t, ctx.i64([-1] + [1] * (rank - 1 - axis), f"{node.name}__bshape")], 1,
                    name=f"{node.name}__bcast")[0]


@translator("LayerNorm")
def LayerNorm(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # MXNet src/operator/nn/layer_norm.cc: normalises over the single axis ``axis`` (default -1),
    # y = (x - mean) / sqrt(var + eps) * gamma + beta, eps default 1e-5; output_mean_var adds the mean and
    # std = sqrt(var + eps), both with ``axis`` kept as size 1. ONNX LayerNormalization (opset 17)
    # normalises over axis..last, so it is used for the last axis only; otherwise, and below 17, the
    # same formula is written out.
    a = node.attrs
    x, gamma, beta = inputs[:3]
    rank = ctx.rank(x, node.name)
    axis = a.int("axis", -1) or 0
    axis = axis + rank if axis < 0 else axis
    eps = float(a.float("eps", 1e-5) or 0.0)
    mean_var = a.bool("output_mean_var", False)
    names = ["output", "mean", "std"] if mean_var else ["output"]
    outs = [ctx.reserve(f"{node.name}_{n}") for n in names]
    if ctx.opset >= 17 and axis == rank - 1 and not mean_var:
        return ctx.emit("LayerNormalization", [x, gamma, beta], outs, name=node.name, axis=-1, epsilon=eps)
    mean = ctx.reduce("ReduceMean", x, [axis], True, name=f"{node.name}__mean",
                      output=outs[1] if mean_var else None)
    d = ctx.emit("Sub", [x, mean], 1, name=f"{node.name}__center")[0]
    var = ctx.reduce("ReduceMean", ctx.emit("Mul", [d, d], 1, name=f"{node.name}__sq")[0], [axis], True,
                     name=f"{node.name}__var")
    ve = ctx.emit("Add", [var, ctx.scalar(eps, x, f"{node.name}__eps")], 1, name=f"{node.name}__var_eps")[0]
    std = ctx.emit("Sqrt", [ve], [outs[2]] if mean_var else 1, name=f"{node.name}__std")[0]
    nrm = ctx.emit("Div", [d, std], 1, name=f"{node.name}__norm")[0]
    scaled = ctx.emit("Mul", [nrm, _along(ctx, node, gamma, axis, rank)], 1, name=f"{node.name}__scale")[0]
    ctx.emit("Add", [scaled, _along(ctx, node, beta, axis, rank)], [outs[0]], name=node.name)
    return outs


@translator("InstanceNorm")
def InstanceNorm(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # MXNet src/operator/instance_norm-inl.h: per sample and channel over the spatial axes,
    # (x - mean) / sqrt(var + eps) * gamma + beta, eps default 1e-3: ONNX InstanceNormalization
    eps = float(node.attrs.float("eps", 1e-3) or 0.0)
    return ctx.emit("InstanceNormalization", inputs[:3], [out(ctx, node)], name=node.name, epsilon=eps)


@translator("LogisticRegressionOutput")
def LogisticRegressionOutput(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # MXNet src/operator/regression_output.cc: the forward pass is sigmoid(data); the label only feeds
    # the gradient, so it is ignored at inference
    return ctx.emit("Sigmoid", inputs[:1], [out(ctx, node)], name=node.name)


# ---- pooling and attention helpers ------------------------------------------------------------


@translator("_contrib_AdaptiveAvgPooling2D")
def _contrib_AdaptiveAvgPooling2D(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # MXNet src/operator/contrib/adaptive_avg_pooling.cc: output cell i averages input rows
    # [floor(i*in/out), ceil((i+1)*in/out)); written as P_h @ x @ P_w^T with constant averaging matrices
    x = inputs[0]
    size = list(node.attrs.ints("output_size")) or [1]
    oh, ow = (size * 2)[:2]
    if oh == 1 and ow == 1:
        return ctx.emit("GlobalAveragePool", [x], [out(ctx, node)], name=node.name)
    in_h, in_w = ctx.static_dims(x, node.name, slice(2, 4))
    dt = ctx.np_dtype(x)

    def matrix(n_in: int, n_out: int) -> np.ndarray:
        m = np.zeros((n_out, n_in), np.float64)
        for i in range(n_out):
            s, e = (i * n_in) // n_out, -((-(i + 1) * n_in) // n_out)
            m[i, s:e] = 1.0 / (e - s)
        return m.astype(dt)

    rows = ctx.emit("MatMul", [ctx.const(matrix(in_h, oh), f"{node.name}__ph"), x], 1, name=f"{node.name}__rows")[0]
    return ctx.emit("MatMul", [rows, ctx.const(matrix(in_w, ow).T.copy(), f"{node.name}__pw")], [out(ctx, node)],
                    name=node.name)


@translator("_contrib_div_sqrt_dim")
def _contrib_div_sqrt_dim(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # MXNet src/operator/contrib/transformer.cc: x / sqrt(x.shape[-1])
    x = inputs[0]
    shape = ctx.shape(x) or ()
    if shape and isinstance(shape[-1], int):
        d = ctx.scalar(math.sqrt(shape[-1]), x, f"{node.name}__sqrt_d")
    else:
        last = ctx.emit("Slice", [ctx.emit("Shape", [x], 1, name=f"{node.name}__shape")[0],
                                  ctx.i64([-1], f"{node.name}__s"), ctx.i64([2**62], f"{node.name}__e")], 1,
                        name=f"{node.name}__last")[0]
        d = ctx.emit("Sqrt", [ctx.emit("Cast", [last], 1, name=f"{node.name}__cast", to=ctx.elem(x))[0]], 1,
                     name=f"{node.name}__sqrt_d")[0]
    return ctx.emit("Div", [x, d], [out(ctx, node)], name=node.name)


def _head_dim(ctx: ConversionContext, node: MXNode, qkv: str) -> int:
    """head_dim from qkv's static last dim, 3 * heads * head_dim (only T and B may be dynamic)."""
    heads = node.attrs.require_int("heads")
    last = (ctx.shape(qkv) or (None,))[-1]
    if not isinstance(last, int) or last % (3 * heads):
        raise ExportError(f"node '{node.name}': the last dim of '{qkv}' must be static and a multiple of "
                          f"3 * heads = {3 * heads} (it is {last})")
    return last // (3 * heads)


def _interleaved(ctx: ConversionContext, node: MXNode, qkv: str, which: int) -> str:
    """Slot ``which`` (0 q, 1 k, 2 v) of MXNet's interleaved projections as [B*heads, T, head_dim].

    qkv is [T, B, heads * 3 * head_dim] laid out (heads, 3, head_dim) on the last axis, as in
    MXNet src/operator/contrib/transformer.cc (interleaved_matmul_selfatt_*).
    """
    hd = _head_dim(ctx, node, qkv)
    r = ctx.emit("Reshape", [qkv, ctx.i64([0, -1, 3, hd], f"{node.name}__qkv_shape")], 1,
                 name=f"{node.name}__qkv")[0]  # [T, B*heads, 3, hd]
    sel = ctx.emit("Gather", [r, ctx.const(np.asarray(which, np.int64), f"{node.name}__slot")], 1,
                   name=f"{node.name}__slot{which}", axis=2)[0]  # [T, B*heads, hd]
    return ctx.emit("Transpose", [sel], 1, name=f"{node.name}__bt{which}", perm=[1, 0, 2])[0]


@translator("_contrib_interleaved_matmul_selfatt_qk")
def _contrib_interleaved_matmul_selfatt_qk(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # transformer.cc: out[b*heads+h] = (q / sqrt(head_dim)) @ k^T, shape [B*heads, T, T]
    hd = _head_dim(ctx, node, inputs[0])
    q = _interleaved(ctx, node, inputs[0], 0)
    k = _interleaved(ctx, node, inputs[0], 1)
    q = ctx.emit("Mul", [q, ctx.scalar(1.0 / math.sqrt(hd), inputs[0], f"{node.name}__scale")], 1,
                 name=f"{node.name}__q_scaled")[0]
    kt = ctx.emit("Transpose", [k], 1, name=f"{node.name}__kT", perm=[0, 2, 1])[0]
    return ctx.emit("MatMul", [q, kt], [out(ctx, node)], name=node.name)


@translator("_contrib_interleaved_matmul_selfatt_valatt")
def _contrib_interleaved_matmul_selfatt_valatt(ctx: ConversionContext, node: MXNode,
                                               inputs: list[str]) -> list[str]:
    # transformer.cc: out[t, b, h*head_dim:(h+1)*head_dim] = (attention[b*heads+h] @ v)[t], shape [T, B, E]
    qkv, att = inputs[:2]
    e = _head_dim(ctx, node, qkv) * node.attrs.require_int("heads")
    v = _interleaved(ctx, node, qkv, 2)
    ctxv = ctx.emit("MatMul", [att, v], 1, name=f"{node.name}__matmul")[0]  # [B*heads, T, hd]
    tb = ctx.emit("Transpose", [ctxv], 1, name=f"{node.name}__tb", perm=[1, 0, 2])[0]
    return ctx.emit("Reshape", [tb, ctx.i64([0, -1, e], f"{node.name}__shape")], [out(ctx, node)], name=node.name)
