"""The ``contrib`` box ops that have an exact standard-ONNX form: ``_contrib_box_iou`` and
``_contrib_box_encode`` (the detection layers ONNX has no op for are in ``contrib.py``)."""

from __future__ import annotations

from onnx import TensorProto

from adapters.mxnet.context import ConversionContext
from adapters.mxnet.registry import out, translator
from adapters.mxnet.symbol import MXNode


# ---- box overlap and encoding -----------------------------------------------------------------------------
def _coords(ctx: ConversionContext, t: str, name: str, fmt: str) -> list[str]:
    """x1, y1, x2, y2 columns (keeping the last axis) of boxes in corner or center format."""
    cols = ctx.emit("Split", [t, ctx.i64([1, 1, 1, 1], f"{name}__split")], 4, name=f"{name}__split", axis=-1)
    if fmt == "corner":
        return cols
    cx, cy, w, h = cols
    hw = ctx.emit("Mul", [w, ctx.scalar(0.5, t, f"{name}__half")], 1, name=f"{name}__hw")[0]
    hh = ctx.emit("Mul", [h, ctx.scalar(0.5, t, f"{name}__half")], 1, name=f"{name}__hh")[0]
    return [ctx.emit("Sub", [cx, hw], 1, name=f"{name}__x1")[0], ctx.emit("Sub", [cy, hh], 1, name=f"{name}__y1")[0],
            ctx.emit("Add", [cx, hw], 1, name=f"{name}__x2")[0], ctx.emit("Add", [cy, hh], 1, name=f"{name}__y2")[0]]


@translator("_contrib_box_iou")
def _contrib_box_iou(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # bounding_box-inl.h box_overlap: inter / (area_l + area_r - inter), output lhs.shape[:-1] + rhs.shape[:-1]
    lhs, rhs = inputs[:2]
    n = node.name
    fmt = node.attrs.optional_str("format", "corner") or "corner"
    flat = ctx.i64([-1, 4], f"{n}__flat")
    left = ctx.emit("Reshape", [lhs, flat], 1, name=f"{n}__l")[0]  # (L, 4)
    right = ctx.emit("Reshape", [rhs, flat], 1, name=f"{n}__r")[0]
    lx1, ly1, lx2, ly2 = _coords(ctx, left, f"{n}__lc", fmt)  # (L, 1) each
    rx1, ry1, rx2, ry2 = (ctx.emit("Transpose", [c], 1, name=f"{n}__rc{i}", perm=[1, 0])[0]  # (1, R) each
                          for i, c in enumerate(_coords(ctx, right, f"{n}__rc", fmt)))
    zero = ctx.scalar(0, lhs, f"{n}__zero")

    def extent(lo1: str, hi1: str, lo2: str, hi2: str, tag: str) -> str:
        lo = ctx.emit("Max", [lo1, lo2], 1, name=f"{n}__{tag}lo")[0]
        hi = ctx.emit("Min", [hi1, hi2], 1, name=f"{n}__{tag}hi")[0]
        return ctx.emit("Max", [ctx.emit("Sub", [hi, lo], 1, name=f"{n}__{tag}d")[0], zero], 1, name=f"{n}__{tag}")[0]

    inter = ctx.emit("Mul", [extent(lx1, lx2, rx1, rx2, "w"), extent(ly1, ly2, ry1, ry2, "h")], 1, name=f"{n}__inter")[0]

    def area(x1: str, y1: str, x2: str, y2: str, tag: str) -> str:
        w = ctx.emit("Sub", [x2, x1], 1, name=f"{n}__{tag}w")[0]
        h = ctx.emit("Sub", [y2, y1], 1, name=f"{n}__{tag}h")[0]
        return ctx.emit("Mul", [w, h], 1, name=f"{n}__{tag}area")[0]

    union = ctx.emit("Sub", [ctx.emit("Add", [area(lx1, ly1, lx2, ly2, "l"), area(rx1, ry1, rx2, ry2, "r")], 1,
                                      name=f"{n}__areas")[0], inter], 1, name=f"{n}__union")[0]
    iou = ctx.emit("Div", [inter, union], 1, name=f"{n}__iou")[0]
    lead = [ctx.emit("Slice", [ctx.emit("Shape", [t], 1, name=f"{n}__shape{i}")[0], ctx.i64([0], f"{n}__b"),
                               ctx.i64([-1], f"{n}__e")], 1, name=f"{n}__lead{i}")[0] for i, t in enumerate((lhs, rhs))]
    shape = ctx.emit("Concat", lead, 1, name=f"{n}__oshape", axis=0)[0]
    return ctx.emit("Reshape", [iou, shape], [out(ctx, node)], name=n)


@translator("_contrib_box_encode")
def _contrib_box_encode(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # bounding_box-inl.h box_encode: for anchor i matched to ref matches[i] (corner boxes), with mask
    # samples > 0.5: ((ref_c - a_c) / a_size - means) / stds for centers, (log(ref_size / a_size) - means) /
    # stds for sizes, 0 where unmasked; second output is the mask repeated over the 4 coordinates
    samples, matches, anchors, refs, means, stds = inputs[:6]
    n = node.name
    idx = ctx.emit("Cast", [matches], 1, name=f"{n}__idx", to=TensorProto.INT64)[0]
    idx = ctx.unsqueeze(idx, [2], name=f"{n}__idx3")
    idx = ctx.emit("Expand", [idx, ctx.i64([1, 1, 4], f"{n}__four")], 1, name=f"{n}__idx4")[0]
    ref = ctx.emit("GatherElements", [refs, idx], 1, name=f"{n}__ref", axis=1)[0]  # (B, N, 4)

    def center_size(t: str, tag: str) -> tuple[str, str, str, str]:
        x1, y1, x2, y2 = ctx.emit("Split", [t, ctx.i64([1, 1, 1, 1], f"{n}__{tag}s")], 4, name=f"{n}__{tag}s", axis=-1)
        w = ctx.emit("Sub", [x2, x1], 1, name=f"{n}__{tag}w")[0]
        h = ctx.emit("Sub", [y2, y1], 1, name=f"{n}__{tag}h")[0]
        half = ctx.scalar(0.5, t, f"{n}__half")
        cx = ctx.emit("Add", [x1, ctx.emit("Mul", [w, half], 1, name=f"{n}__{tag}hw")[0]], 1, name=f"{n}__{tag}cx")[0]
        cy = ctx.emit("Add", [y1, ctx.emit("Mul", [h, half], 1, name=f"{n}__{tag}hh")[0]], 1, name=f"{n}__{tag}cy")[0]
        return cx, cy, w, h

    rx, ry, rw, rh = center_size(ref, "r")
    ax, ay, aw, ah = center_size(anchors, "a")
    tx = ctx.emit("Div", [ctx.emit("Sub", [rx, ax], 1, name=f"{n}__dx")[0], aw], 1, name=f"{n}__tx")[0]
    ty = ctx.emit("Div", [ctx.emit("Sub", [ry, ay], 1, name=f"{n}__dy")[0], ah], 1, name=f"{n}__ty")[0]
    tw = ctx.emit("Log", [ctx.emit("Div", [rw, aw], 1, name=f"{n}__rw")[0]], 1, name=f"{n}__tw")[0]
    th = ctx.emit("Log", [ctx.emit("Div", [rh, ah], 1, name=f"{n}__rh")[0]], 1, name=f"{n}__th")[0]
    t = ctx.emit("Concat", [tx, ty, tw, th], 1, name=f"{n}__t", axis=-1)[0]
    t = ctx.emit("Div", [ctx.emit("Sub", [t, means], 1, name=f"{n}__sub_mean")[0], stds], 1, name=f"{n}__norm")[0]
    valid = ctx.emit("Greater", [samples, ctx.scalar(0.5, samples, f"{n}__thresh")], 1, name=f"{n}__valid")[0]
    valid = ctx.unsqueeze(valid, [2], name=f"{n}__valid3")
    zero = ctx.scalar(0, anchors, f"{n}__zero")
    targets = ctx.emit("Where", [valid, t, zero], [out(ctx, node, 0, 2)], name=n)[0]
    mask = ctx.emit("Cast", [valid], 1, name=f"{n}__maskf", to=ctx.elem(anchors))[0]
    masks = ctx.emit("Expand", [mask, ctx.i64([1, 1, 4], f"{n}__four4")], [out(ctx, node, 1, 2)], name=f"{n}__mask")[0]
    return [targets, masks]
