"""Spatial layers: resizing (``_contrib_BilinearResize2D``), ROI pooling (``_contrib_ROIAlign``,
``ROIPooling``), adaptive pooling, sampling grids (GridGenerator, BilinearSampler, SpatialTransformer
through ONNX GridSample, opset 16+), im2col / col2im (a convolution / transposed convolution with a 0/1
kernel) and FlowNet's Correlation.

Each picks the op form the target opset offers (``ctx.opset``); where an MXNet attribute has no exact
ONNX equivalent the translator refuses with an ExportError naming the node and the reason.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from onnx import TensorProto

from adapters.mxnet.context import ConversionContext, TensorType
from adapters.mxnet.registry import out, translator
from adapters.mxnet.symbol import MXNode
from bridge.errors import ExportError, at_node

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
    mode = a.optional_str("mode", "size") or "size"
    if mode not in _RESIZE_MODES:
        raise ExportError(f"node '{node.name}': BilinearResize2D mode={mode} is not supported")
    ctm = "align_corners" if a.optional_bool("align_corners", True) else "pytorch_half_pixel"
    out_hw: tuple[Any, Any] = (None, None)
    if mode == "like":
        like_shape = ctx.shape(inputs[1]) or ()
        hw_static = [d for d in like_shape[2:4] if isinstance(d, int)]
        if len(like_shape) >= 4:
            out_hw = (like_shape[2], like_shape[3])
        if len(hw_static) == 2:
            hw = ctx.i64(hw_static, f"{node.name}__hw")
        else:
            shp = ctx.emit("Shape", [inputs[1]], 1, name=f"{node.name}__like_shape")[0]
            hw = ctx.emit("Slice", [shp, ctx.i64([2], f"{node.name}__s"), ctx.i64([4], f"{node.name}__e")], 1,
                          name=f"{node.name}__like_hw")[0]
    else:
        in_h, in_w = ctx.static_dims(x, node.name, slice(2, 4))
        sh, sw = a.optional_float("scale_height", None), a.optional_float("scale_width", None)
        try:
            h = _resized(in_h, mode, None if sh is None else float(sh), a.optional_int("height", 1) or 1)
            w = _resized(in_w, mode, None if sw is None else float(sw), a.optional_int("width", 1) or 1)
        except ExportError as e:
            raise ExportError(at_node(node.name, None, str(e))) from None
        hw = ctx.i64([h, w], f"{node.name}__hw")
        out_hw = (h, w)
    nc = ctx.emit("Slice", [ctx.emit("Shape", [x], 1, name=f"{node.name}__shape")[0], ctx.i64([0], f"{node.name}__s"),
                            ctx.i64([2], f"{node.name}__e")], 1, name=f"{node.name}__nc")[0]
    sizes = ctx.emit("Concat", [nc, hw], 1, name=f"{node.name}__sizes", axis=0)[0]
    y = ctx.emit("Resize", [x, "", "", sizes], [out(ctx, node)], name=node.name, mode="linear",
                 coordinate_transformation_mode=ctm)[0]
    # per-node inference cannot read the computed sizes; the output's shape is known here (a later resize,
    # pooling, ... of this output needs its H, W)
    x_shape = ctx.shape(x)
    if x_shape is not None and len(x_shape) == 4 and ctx.shape(y) != (*x_shape[:2], *out_hw):
        ctx.types[y] = TensorType(ctx.elem(x), (*x_shape[:2], *out_hw))
    return [y]


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
    if a.optional_bool("position_sensitive", False):
        raise ExportError(f"node '{node.name}': ROIAlign(position_sensitive=True) has no ONNX equivalent "
                          "(RoiAlign pools every channel per bin, not one channel group per bin)")
    ph, pw = (list(a.optional_ints("pooled_size")) * 2)[:2]
    scale = float(a.optional_float("spatial_scale", 1.0) or 0.0)
    ratio = max(0, a.optional_int("sample_ratio", -1) or 0)
    aligned = a.optional_bool("aligned", False)
    boxes, idx = _roi_split(ctx, node, inputs[1])
    ctm = None  # before opset 16 the attribute does not exist and the behaviour is 'output_half_pixel'
    if ctx.opset >= 16:
        ctm = "half_pixel" if aligned else "output_half_pixel"
    elif aligned:
        raise ExportError(f"node '{node.name}': ROIAlign(aligned=True) needs ONNX RoiAlign-16 "
                          f"(coordinate_transformation_mode); convert with --opset 16 or later")
    zero = ctx.const(np.int64(0), f"{node.name}__zero")
    valid = ctx.emit("GreaterOrEqual", [idx, zero], 1, name=f"{node.name}__valid")[0]
    clamped = ctx.emit("Max", [idx, zero], 1, name=f"{node.name}__bidx_clamped")[0]
    pooled = ctx.emit("RoiAlign", [inputs[0], boxes, clamped], 1, name=node.name, mode="avg",
                      output_height=ph, output_width=pw, sampling_ratio=ratio, spatial_scale=scale,
                      coordinate_transformation_mode=ctm)[0]
    return [_zero_padding_rois(ctx, node, pooled, valid)]


def _zero_padding_rois(ctx: ConversionContext, node: MXNode, pooled: str, valid: str) -> str:
    """MXNet's ROI layers write zeros for a roi whose batch index is negative (GluonCV pads its rois with
    -1 rows); onnxruntime refuses such an index, so the layer ran on a clamped index and its rows are
    replaced here: ``Where(valid[:, None, None, None], pooled, 0)``."""
    mask = ctx.unsqueeze(valid, [1, 2, 3], name=f"{node.name}__valid4d")
    return ctx.emit("Where", [mask, pooled, ctx.scalar(0, pooled, f"{node.name}__fill")], [out(ctx, node)],
                    name=f"{node.name}__padding_rois")[0]


@translator("ROIPooling")
def ROIPooling(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # MXNet src/operator/roi_pooling.cc is Caffe's (Fast R-CNN) ROI max pooling, as ONNX MaxRoiPool:
    # round(coord * scale), roi size max(x2 - x1 + 1, 1), bins floor/ceil, empty bins 0
    a = node.attrs
    ph, pw = (list(a.optional_ints("pooled_size")) * 2)[:2]
    scale = float(a.optional_float("spatial_scale", 1.0) or 0.0)
    rois = inputs[1]
    n = node.name
    col0 = ctx.emit("Slice", [rois, ctx.i64([0], f"{n}__b0"), ctx.i64([1], f"{n}__e0"), ctx.i64([1], f"{n}__ax")], 1,
                    name=f"{n}__bidx")[0]
    rest = ctx.emit("Slice", [rois, ctx.i64([1], f"{n}__b1"), ctx.i64([5], f"{n}__e1"), ctx.i64([1], f"{n}__ax1")],
                    1, name=f"{n}__boxes")[0]
    # the index is truncated to an integer: valid when > -1; a negative one is clamped to 0 and its row zeroed
    valid = ctx.emit("Greater", [col0, ctx.scalar(-1, col0, f"{n}__minus1")], 1, name=f"{n}__valid")[0]
    clamped = ctx.emit("Max", [col0, ctx.scalar(0, col0, f"{n}__zero")], 1, name=f"{n}__bidx_clamped")[0]
    safe = ctx.emit("Concat", [clamped, rest], 1, name=f"{n}__rois", axis=1)[0]
    pooled = ctx.emit("MaxRoiPool", [inputs[0], safe], 1, name=n, pooled_shape=[ph, pw], spatial_scale=scale)[0]
    return [_zero_padding_rois(ctx, node, pooled, ctx.squeeze(valid, [1], name=f"{n}__valid1d"))]


# ---- adaptive pooling ------------------------------------------------------------------------


@translator("_contrib_AdaptiveAvgPooling2D")
def _contrib_AdaptiveAvgPooling2D(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # MXNet src/operator/contrib/adaptive_avg_pooling.cc: output cell i averages input rows
    # [floor(i*in/out), ceil((i+1)*in/out)); written as P_h @ x @ P_w^T with constant averaging matrices
    x = inputs[0]
    size = list(node.attrs.optional_ints("output_size")) or [1]
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


# ---- sampling grids (ONNX GridSample, opset 16+) --------------------------------------------------------------
def _need_grid_sample(ctx: ConversionContext, node: MXNode) -> None:
    if ctx.opset < 16:
        raise ExportError(f"node '{node.name}' ({node.op}): bilinear sampling needs ONNX GridSample, which exists "
                          f"from opset 16 (converting at opset {ctx.opset}); pass --opset 16 or higher")


def _grid_sample(ctx: ConversionContext, node: MXNode, data: str, grid: str, output: str) -> str:
    # bilinear_sampler-inl.h: grid (N, 2, H, W) of (x, y) in [-1, 1], x_src = (x + 1) * (W - 1) / 2 (corners
    # aligned), taps outside the image read 0: GridSample(align_corners=1, padding zeros) on (N, H, W, 2)
    g = ctx.emit("Transpose", [grid], 1, name=f"{node.name}__grid_nhwc", perm=[0, 2, 3, 1])[0]
    mode = "linear" if ctx.opset >= 20 else "bilinear"
    return ctx.emit("GridSample", [data, g], [output], name=node.name, mode=mode, padding_mode="zeros",
                    align_corners=1)[0]


def _affine_grid(ctx: ConversionContext, node: MXNode, theta: str, h: int, w: int, output: str | None) -> str:
    # grid_generator-inl.h: target pixel (i, j) at x = -1 + 2j/(W-1), y = -1 + 2i/(H-1); grid = theta (2x3) [x y 1]
    n = node.name
    ys, xs = np.meshgrid(np.linspace(-1, 1, h) if h > 1 else np.asarray([-1.0]),
                         np.linspace(-1, 1, w) if w > 1 else np.asarray([-1.0]), indexing="ij")
    base = np.stack([xs.ravel(), ys.ravel(), np.ones(h * w)]).astype(ctx.np_dtype(theta))
    t = ctx.emit("Reshape", [theta, ctx.i64([-1, 2, 3], f"{n}__theta_shape")], 1, name=f"{n}__theta")[0]
    g = ctx.emit("MatMul", [t, ctx.const(base, f"{n}__base")], 1, name=f"{n}__grid_flat")[0]
    return ctx.emit("Reshape", [g, ctx.i64([-1, 2, h, w], f"{n}__grid_shape")], [output] if output else 1,
                    name=f"{n}__grid")[0]


@translator("GridGenerator")
def GridGenerator(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    x = inputs[0]
    n = node.name
    kind = node.attrs.optional_str("transform_type", "affine")
    if kind == "affine":
        h, w = node.attrs.optional_ints("target_shape", (0, 0))
        return [_affine_grid(ctx, node, x, h, w, out(ctx, node))]
    # warp: flow (N, 2, H, W) in pixels; grid = (flow + pixel) / ((size - 1) / 2) - 1
    h, w = ctx.static_dims(x, n, slice(2, 4))
    ys, xs = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    dt = ctx.np_dtype(x)
    base = np.stack([xs, ys])[None].astype(dt)
    scale = np.asarray([(w - 1) / 2.0, (h - 1) / 2.0], dt).reshape(1, 2, 1, 1)
    moved = ctx.emit("Add", [x, ctx.const(base, f"{n}__pixels")], 1, name=f"{n}__moved")[0]
    g = ctx.emit("Div", [moved, ctx.const(scale, f"{n}__half_size")], 1, name=f"{n}__scaled")[0]
    return ctx.emit("Sub", [g, ctx.scalar(1, x, f"{n}__one")], [out(ctx, node)], name=n)


@translator("BilinearSampler")
def BilinearSampler(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    _need_grid_sample(ctx, node)
    return [_grid_sample(ctx, node, inputs[0], inputs[1], out(ctx, node))]


@translator("SpatialTransformer")
def SpatialTransformer(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # spatial_transformer-inl.h: affine grid of target_shape from loc (N, 6), then bilinear sampling
    _need_grid_sample(ctx, node)
    if (node.attrs.optional_str("transform_type", "affine"), node.attrs.optional_str("sampler_type", "bilinear")) != ("affine", "bilinear"):
        raise ExportError(f"node '{node.name}': SpatialTransformer supports affine / bilinear only (as MXNet)")
    h, w = node.attrs.optional_ints("target_shape", (0, 0))
    grid = _affine_grid(ctx, node, inputs[1], h, w, None)
    return [_grid_sample(ctx, node, inputs[0], grid, out(ctx, node))]


# ---- im2col / col2im -----------------------------------------------------------------------------------------
def _patch_kernel(ctx: ConversionContext, node: MXNode, channels: int,
                  like: str) -> tuple[str, list[int], dict[str, Any]]:
    """A 0/1 convolution weight (C*kh*kw, C, kh, kw) copying each patch element to its own channel, in
    im2col's (c, ki, kj) order (src/operator/nn/im2col.h), and the conv attributes."""
    a = node.attrs
    kernel = list(a.optional_ints("kernel"))
    nd = len(kernel)
    k = int(np.prod(kernel))
    w = np.zeros((channels * k, channels, k), ctx.np_dtype(like))
    for c in range(channels):
        w[c * k + np.arange(k), c, np.arange(k)] = 1
    attrs = {"kernel_shape": kernel, "strides": list(a.optional_ints("stride", (1,) * nd)) or [1] * nd,
             "dilations": list(a.optional_ints("dilate", (1,) * nd)) or [1] * nd,
             "pads": list(a.optional_ints("pad", (0,) * nd)) * 2 or [0] * 2 * nd}
    return ctx.const(w.reshape(channels * k, channels, *kernel), f"{node.name}__patch"), kernel, attrs


@translator("im2col")
def im2col(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    x = inputs[0]
    n = node.name
    channels = ctx.static_dims(x, n, [1])[0]
    w, _, attrs = _patch_kernel(ctx, node, channels, x)
    cols = ctx.emit("Conv", [x, w], 1, name=f"{n}__conv", **attrs)[0]
    return ctx.emit("Reshape", [cols, ctx.i64([0, 0, -1], f"{n}__shape")], [out(ctx, node)], name=n)


@translator("col2im")
def col2im(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # the adjoint of im2col: every column element is added back at its pixel (a transposed conv, same kernel)
    x = inputs[0]
    n = node.name
    size = list(node.attrs.optional_ints("output_size"))
    kernel = list(node.attrs.optional_ints("kernel"))
    (ck,) = ctx.static_dims(x, n, [1])
    channels = ck // int(np.prod(kernel))
    w, _, attrs = _patch_kernel(ctx, node, channels, x)
    nd = len(kernel)
    grid = [(size[i] + 2 * attrs["pads"][i] - attrs["dilations"][i] * (kernel[i] - 1) - 1) // attrs["strides"][i] + 1
            for i in range(nd)]
    img = ctx.emit("Reshape", [x, ctx.i64([0, ck, *grid], f"{n}__grid")], 1, name=f"{n}__cols")[0]
    full = [(grid[i] - 1) * attrs["strides"][i] - 2 * attrs["pads"][i] + attrs["dilations"][i] * (kernel[i] - 1) + 1
            for i in range(nd)]
    return ctx.emit("ConvTranspose", [img, w], [out(ctx, node)], name=n,
                    output_padding=[size[i] - full[i] for i in range(nd)], **attrs)


@translator("Correlation")
def Correlation(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # src/operator/correlation.cc (FlowNet): both inputs zero-padded by pad_size; output channel
    # (p, o) (p the row displacement index, o the column one, each in -r..r with r = max_displacement // stride2)
    # at (i, j) is the sum over a kernel_size window at (i*stride1 + max_disp, j*stride1 + max_disp) and all
    # channels of data1 * data2 shifted by (p, o) * stride2 (|data1 - data2| without is_multiply), divided by
    # kernel_size^2 * channels. Written as one shifted product per displacement, a channel mean and an
    # average pool (kernel_size, stride1): (2r + 1)^2 small branches.
    d1, d2 = inputs[:2]
    n = node.name
    a = node.attrs
    k = a.optional_int("kernel_size", 1) or 1
    disp = a.optional_int("max_displacement", 1) or 0
    s1, s2 = a.optional_int("stride1", 1) or 1, a.optional_int("stride2", 1) or 1
    pad = a.optional_int("pad_size", 0) or 0
    multiply = a.optional_bool("is_multiply", True)
    h, w = ctx.static_dims(d1, n, slice(2, 4))
    border = disp + (k - 1) // 2
    top_h = math.ceil((h + 2 * pad - 2 * border) / s1)
    top_w = math.ceil((w + 2 * pad - 2 * border) / s1)
    if top_h < 1 or top_w < 1:
        raise ExportError(f"node '{n}': Correlation output would be empty for input {h}x{w}")
    r = disp // s2
    p1 = ctx.emit("Pad", [d1, ctx.i64([0, 0, pad, pad, 0, 0, pad, pad], f"{n}__pads1")], 1, name=f"{n}__pad1")[0]
    # data2 padded by max_displacement more: the window of any displacement stays inside (those taps are 0)
    extra = pad + disp
    p2 = ctx.emit("Pad", [d2, ctx.i64([0, 0, extra, extra, 0, 0, extra, extra], f"{n}__pads2")], 1, name=f"{n}__pad2")[0]
    rows, cols = (top_h - 1) * s1 + k, (top_w - 1) * s1 + k
    win1 = ctx.emit("Slice", [p1, ctx.i64([disp, disp], f"{n}__w1b"), ctx.i64([disp + rows, disp + cols], f"{n}__w1e"),
                              ctx.i64([2, 3], f"{n}__axes")], 1, name=f"{n}__win1")[0]
    branches = []
    for p in range(-r, r + 1):
        for o in range(-r, r + 1):
            y0, x0 = disp + p * s2 + disp, disp + o * s2 + disp  # in p2's coordinates (shifted by disp more)
            tag = f"{p + r}_{o + r}"
            win2 = ctx.emit("Slice", [p2, ctx.i64([y0, x0], f"{n}__b{tag}"), ctx.i64([y0 + rows, x0 + cols], f"{n}__e{tag}"),
                                      ctx.i64([2, 3], f"{n}__axes{tag}")], 1, name=f"{n}__win{tag}")[0]
            if multiply:
                v = ctx.emit("Mul", [win1, win2], 1, name=f"{n}__prod{tag}")[0]
            else:
                v = ctx.emit("Abs", [ctx.emit("Sub", [win1, win2], 1, name=f"{n}__diff{tag}")[0]], 1,
                             name=f"{n}__absdiff{tag}")[0]
            m = ctx.reduce("ReduceMean", v, [1], True, name=f"{n}__cmean{tag}")
            if k > 1 or s1 > 1:
                m = ctx.emit("AveragePool", [m], 1, name=f"{n}__pool{tag}", kernel_shape=[k, k], strides=[s1, s1])[0]
            branches.append(m)
    cat = ctx.emit("Concat", branches, 1, name=f"{n}__concat", axis=1)[0]
    return ctx.emit("Identity", [cat], [out(ctx, node)], name=n)
