"""Resize version adapters: Resize-10 -> 11 (fixes the stock converter's coordinates) and every
down-hop from Resize-19 to Resize-10 that onnx's converter has no adapter for.

Resize-10 (and Upsample-7/9, which onnx's converter turns into Resize-10 exactly) maps output
pixel ``x`` to input ``x / scale`` -- "asymmetric" -- and onnxruntime rounds nearest with floor
when upscaling and ceil when downscaling (its opset<11 "simple" mode; checked numerically in
tests/opsets/test_resize_adapters.py). onnx's Resize 10 -> 11 adapter leaves the Resize-11
defaults (half_pixel, round_prefer_floor), which moves a linear upsample by ~1.25 on a ramp.
"""

from __future__ import annotations

import logging

import numpy as np
import onnx_ir as ir

from bridge.rewriting import Builder
from bridge.rewriting.attrs import optional_int, optional_ints, optional_str
from opsets.registry import register
from opsets.version_adapters._util import (
    Rewritten,
    const_array,
    fail,
    in_place,
    input_or_none,
    static_shape,
)

logger = logging.getLogger(__name__)


def _known_scales(node: ir.Node, scales_index: int, sizes_index: int | None) -> np.ndarray | None:
    """Per-axis scales from a constant scales input, or from constant sizes and a static input shape."""
    scales = const_array(input_or_none(node, scales_index))
    if scales is not None and scales.size:
        return scales.astype(np.float64)
    sizes = const_array(input_or_none(node, sizes_index)) if sizes_index is not None else None
    shape = static_shape(node.inputs[0])
    if sizes is not None and sizes.size and shape is not None and len(shape) == sizes.size and all(shape):
        return sizes.astype(np.float64) / np.asarray(shape, dtype=np.float64)
    return None


@register("Resize", 10, 11)
def resize_10_11(b: Builder, node: ir.Node) -> Rewritten:
    # Resize-10: (X, scales); Resize-11: (X, roi, scales[, sizes]) + coordinate/nearest attributes
    mode = optional_str(node, "mode", "nearest")
    attrs = {"coordinate_transformation_mode": ir.AttrString("coordinate_transformation_mode", "asymmetric")}
    if mode == "nearest":
        scales = _known_scales(node, 1, None)
        if scales is None or np.all(scales >= 1):
            if scales is None:
                logger.warning("Resize '%s': scales are not constant; assuming an upscale (nearest_mode=floor)",
                               node.name)
            rounding = "floor"
        elif np.all(scales <= 1):
            rounding = "ceil"
        else:
            raise fail(node, "resize_10_11", f"nearest with scales {scales.tolist()} both up and down: onnxruntime's "
                       "Resize-10 floors one way and ceils the other, which no single Resize-11 reproduces")
        attrs["nearest_mode"] = ir.AttrString("nearest_mode", rounding)
    x, scales_value = node.inputs[0], node.inputs[1]
    roi = b.const(np.zeros(0, np.float32))
    node.resize_inputs(3)
    node.replace_input_with(0, x)
    node.replace_input_with(1, roi)
    node.replace_input_with(2, scales_value)
    return in_place(node, set_attrs=attrs)


@register("Resize", 11, 10)
def resize_11_10(b: Builder, node: ir.Node) -> Rewritten:
    hop = "resize_11_10"
    mode = optional_str(node, "mode", "nearest")
    coord = optional_str(node, "coordinate_transformation_mode", "half_pixel")
    if mode == "cubic":
        raise fail(node, hop, "Resize-10 has no cubic mode")
    scales = _known_scales(node, 2, 3)
    if scales is None:
        raise fail(node, hop, "Resize-10 needs constant scales (or constant sizes with a static input shape)")
    shape = static_shape(node.inputs[0])
    if shape is not None and input_or_none(node, 3) is not None:
        want = const_array(node.inputs[3])
        # Resize-10 output dims are floor(in * scale): the scales must reproduce the sizes exactly
        if want is not None and np.any(np.floor(np.asarray(shape) * scales.astype(np.float32)) != want):
            raise fail(node, hop, f"sizes {want.tolist()} are not reproducible as floor(input * scale)")
    from opsets.resize_forms import asymmetric_floor_equivalent

    if mode == "nearest":
        rounding = optional_str(node, "nearest_mode", "round_prefer_floor")
        upscale = bool(np.all(scales >= 1))
        simple = "floor" if upscale else "ceil"
        ok = (coord == "asymmetric" and (rounding == simple or np.all(scales == 1))) or (
            upscale and asymmetric_floor_equivalent(coord, rounding, scales) is None)
        if not ok:
            raise fail(node, hop, f"nearest with {coord}/{rounding} at scales {scales.tolist()} differs from "
                       "Resize-10's asymmetric coordinates")
    elif coord != "asymmetric" and not np.all(scales == 1):
        raise fail(node, hop, f"linear with {coord} coordinates: Resize-10 only has asymmetric")
    if coord == "tf_crop_and_resize":
        raise fail(node, hop, "Resize-10 has no tf_crop_and_resize")
    scales_value = b.const(scales.astype(np.float32))
    x = node.inputs[0]
    node.resize_inputs(2)
    node.replace_input_with(0, x)
    node.replace_input_with(1, scales_value)
    return in_place(node, drop_attrs=[k for k in list(node.attributes) if k != "mode"])


@register("Resize", 13, 11)
def resize_13_11(b: Builder, node: ir.Node) -> Rewritten:
    # Resize-13 made roi optional and lets scales be absent when sizes are given; Resize-11 needs
    # both inputs present (an empty tensor stands for "not given")
    inputs = list(node.inputs) + [None] * (4 - len(node.inputs))
    if inputs[1] is None:
        inputs[1] = b.const(np.zeros(0, np.float32))
    if inputs[2] is None:
        inputs[2] = b.const(np.zeros(0, np.float32))
    if inputs[3] is None:
        inputs = inputs[:3]
    node.resize_inputs(len(inputs))
    for i, value in enumerate(inputs):
        node.replace_input_with(i, value)
    return None


@register("Resize", 18, 13)
def resize_18_13(b: Builder, node: ir.Node) -> Rewritten:
    hop = "resize_18_13"
    mode = optional_str(node, "mode", "nearest")
    if optional_int(node, "antialias", 0) and mode != "nearest":
        scales = _known_scales(node, 2, 3)
        if scales is None or np.any(scales < 1):
            raise fail(node, hop, "antialias=1 on a downscale (or unknown scales) has no Resize-13 equivalent")
    sizes_given = input_or_none(node, 3) is not None
    policy = optional_str(node, "keep_aspect_ratio_policy", "stretch")
    if sizes_given and policy != "stretch":
        raise fail(node, hop, f"keep_aspect_ratio_policy={policy} has no Resize-13 equivalent")
    axes = optional_ints(node, "axes")
    if axes is not None:
        _expand_axes(b, node, axes, hop)
    return in_place(node, drop_attrs=["antialias", "axes", "keep_aspect_ratio_policy"])


@register("Resize", 19, 18)
def resize_19_18(b: Builder, node: ir.Node) -> Rewritten:
    coord = optional_str(node, "coordinate_transformation_mode", "half_pixel")
    if coord != "half_pixel_symmetric":
        return None
    # half_pixel_symmetric adds ``L / 2 * (1 - floor(L s) / (L s))`` to half_pixel's input coordinate
    # (onnx/reference/ops/op_resize.py): zero when every resized length L s is a whole number, i.e. with sizes
    # under the "stretch" policy, or scales that give whole lengths of a static input
    if _whole_output_lengths(node):
        return in_place(node, set_attrs={"coordinate_transformation_mode": ir.AttrString(
            "coordinate_transformation_mode", "half_pixel")})
    raise fail(node, "resize_19_18", "half_pixel_symmetric coordinates with fractional output lengths (L * scale) "
                                     "do not exist before Resize-19")


def _whole_output_lengths(node: ir.Node) -> bool:
    """Whether every resized axis of ``node`` (a Resize-18/19) has a whole output length ``L * scale``."""
    if input_or_none(node, 3) is not None:
        return optional_str(node, "keep_aspect_ratio_policy", "stretch") == "stretch"
    scales = const_array(input_or_none(node, 2))
    shape = static_shape(node.inputs[0])
    if scales is None or shape is None:
        return False
    axes = optional_ints(node, "axes") or list(range(len(shape)))
    lengths = [np.float32(shape[a]) * np.float32(s) for a, s in zip(axes, scales.reshape(-1), strict=False)]
    return all(float(length).is_integer() for length in lengths)


def _expand_axes(b: Builder, node: ir.Node, axes: list[int], hop: str) -> None:
    """Turn Resize-18's per-axis scales/sizes into full-rank ones (1 / the input dim elsewhere)."""
    shape = static_shape(node.inputs[0])
    rank = len(node.inputs[0].shape) if node.inputs[0] is not None and node.inputs[0].shape is not None else None
    if rank is None:
        raise fail(node, hop, "the axes attribute needs the input rank to be known")
    axes = [a % rank for a in axes]
    for index, fill_from_shape in ((2, False), (3, True)):
        given = const_array(input_or_none(node, index))
        if given is None or not given.size:
            if input_or_none(node, index) is not None and given is None:
                raise fail(node, hop, "the axes attribute needs constant scales/sizes")
            continue
        if fill_from_shape:
            if shape is None:
                raise fail(node, hop, "sizes with axes need a static input shape")
            full = np.asarray(shape, dtype=given.dtype)
        else:
            full = np.ones(rank, dtype=given.dtype)
        full[axes] = given
        node.replace_input_with(index, b.const(full))
