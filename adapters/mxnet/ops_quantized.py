"""MXNet's own int8 graphs (``mxnet.contrib.quantization``) as ONNX QuantizeLinear / DequantizeLinear (QDQ).

What MXNet 1.9.1's CPU build runs (checked here, MKL-DNN/oneDNN build): ``quantize_model_mkldnn`` /
``quantize_net`` graphs - Convolution (+ BatchNorm) (+ relu) fused into ``_sg_mkldnn_conv`` with
``quantized=true``, ``_contrib_quantize_v2`` with calibrated ranges, ``_contrib_dequantize``,
``_contrib_quantized_flatten``, ``_contrib_quantized_concat``, ``_contrib_quantized_pooling``,
``_contrib_quantized_act``, ``_contrib_quantized_elemwise_add``, ``_contrib_quantized_elemwise_mul``. The unfused ``quantize_model`` graph (``_contrib_quantized_conv`` ->
``_contrib_requantize``) does not run there: oneDNN's quantized convolution takes only uint8 data while
requantize emits int8 (and without oneDNN the op crashes), so those ops stay refused (``registry``): no
translation of them could be checked against MXNet.

Every quantized MXNet op has three outputs - the int8/uint8 tensor and its float range (min, max) - and
the ranges of a calibrated graph are constants: they become initializers, and each quantized tensor is an
ONNX int8/uint8 tensor whose scale is MXNet's: ``MaxAbs(min, max) / 127`` (int8) or ``/ 255`` (uint8),
zero point 0 (MXNet's quantization is symmetric). The formulas are MXNet's (src/operator/quantization/
mkldnn/mkldnn_quantize_v2-inl.h, mkldnn_dequantize-inl.h, mkldnn_quantized_concat.cc, and
src/operator/subgraph/mkldnn/mkldnn_conv.cc):

- quantize_v2: ``out_type`` auto is uint8 when ``min_calib_range >= 0``; the range is ``MaxAbs(min, max)``
  either way; int8 reports (-range, range), uint8 (min, max); values are rounded to nearest and saturated;
- dequantize: ``q * MaxAbs(min, max) / (127 | 255)``;
- ``_sg_mkldnn_conv`` (quantized): BatchNorm folded into the weights in float32 (``UpdateConvWeightBias``),
  weights quantized per output channel to int8 with scale ``127.5 / MaxAbs(w_c)``, rounded and saturated to
  [-128, 127], the bias to int32 with scale ``weight_scale_c * data_scale``, the int32 accumulator
  requantized to the calibrated output range (uint8 after a fused relu, else int8). In ONNX: DQ(data) ->
  Conv(DQ(int8 weight, per channel), DQ(int32 bias)) [-> Relu] -> Q(output) - the pattern onnxruntime runs
  as one QLinearConv with the same integer accumulator;
- quantized_concat: the output range is (min(0, mins), max(0, maxs)), int8 when any input is int8, each
  input rescaled into it (rounded); DQ each -> Concat -> Q;
- quantized_flatten / pooling / act(relu): the int8 values as they are (max pooling, relu and reshapes
  commute with a positive scale); average pooling averages the integers and rounds to nearest even.
- quantized_elemwise_add (src/operator/quantization/mkldnn/mkldnn_quantized_elemwise_add.cc, output type from
  quantized_elemwise_add.cc ElemwiseAddType): a oneDNN sum ``round(sA * a + sB * b)`` with ``s = out_scale /
  in_scale``, saturated, into the calibrated range; the output is uint8 when both inputs are, else int8. When
  the types differ the uint8 input is first reordered into int8 at the output's scale (a rounding of its
  own). In ONNX: DQ(a) + DQ(b) -> Q(out), with Q -> DQ at the output scale on a uint8 addend of an int8 sum;
- quantized_elemwise_mul (src/operator/quantization/quantized_elemwise_mul.cc, a plain CPU loop, int8 inputs
  only): ``static_cast<int8_t>(a * b * out_scale)`` with ``out_scale = out_data_scale / lhs_scale /
  rhs_scale`` - truncated toward zero and wrapped past the int8 range, not rounded or saturated; with
  ``enable_float_output`` (MKLDNN_QUANTIZE's fusion with the dequantize after it,
  src/operator/subgraph/mkldnn/mkldnn_elemwisemul_post_quantize_property.h) the float ``a * b * out_scale``
  with ``out_scale = 1.0 / lhs_scale / rhs_scale`` (computed in double). In ONNX: Cast, Mul, Mul(scale), then
  the truncation and the wrap spelled out (int8) or nothing more (float).

Checked element by element against MXNet 1.9.1's own int8 run (``tests/adapters/mxnet/test_quantized.py``):
the int8 tensors agree exactly but for rounding where MXNet multiplies by a scale and ONNX divides by its
inverse (an element at an exact half may land one step apart); the tests bound it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from onnx import TensorProto

from adapters.mxnet.context import ConversionContext
from adapters.mxnet.registry import out, translator
from adapters.mxnet.symbol import MXNode
from bridge.errors import ExportError

# MXNet's kInt8Range / kUint8Range (src/operator/quantization/quantization_utils.h): 127.5 and 255.5, so that
# round-to-nearest uses the whole int8 / uint8 range; data scales are quantized_range / MaxAbs(min, max)
INT8_RANGE, UINT8_RANGE = 127.5, 255.5
WEIGHT_RANGE = INT8_RANGE  # weights too: scale 127.5 / MaxAbs(w_c), the extreme saturating to 127 / -128
_QUANTIZED_TYPES = (TensorProto.INT8, TensorProto.UINT8)


def _round_away(x: np.ndarray) -> np.ndarray:
    """``std::round``: halves away from zero (numpy's rint rounds them to even)."""
    return np.sign(x) * np.floor(np.abs(x) + np.float32(0.5))


def _maxabs(lo: float, hi: float) -> np.float32:
    return np.float32(max(abs(lo), abs(hi)))


def _const_range(ctx: ConversionContext, node: MXNode, lo: str, hi: str) -> tuple[float, float]:
    """The (min, max) a quantized tensor's range inputs hold; ExportError when they are computed at run time."""
    a, b = ctx.value(lo), ctx.value(hi)
    if a is None or b is None:
        raise ExportError(f"node '{node.name}' ({node.op}): its quantization range is computed at run time (a model "
                          "quantized without calibration, calib_mode='none'); only calibrated graphs convert "
                          "(quantize with calib_mode='naive' or 'entropy')")
    return float(np.asarray(a).reshape(-1)[0]), float(np.asarray(b).reshape(-1)[0])


# the names MXNet lists for the three outputs (FListOutputNames): quantize_v2 numbers them, the quantized ops
# name them min / max, the fused convolution output_min / output_max
_OUTPUT_NAMES = {"numbered": ("_output0", "_output1", "_output2"), "min_max": ("_output", "_min_output", "_max_output"),
                 "output_min_max": ("_output", "_output_min", "_output_max")}
_STYLE = {"_contrib_quantize_v2": "numbered", "_sg_mkldnn_conv": "output_min_max"}


def _name(node: MXNode, k: int) -> str:
    return node.name + _OUTPUT_NAMES[_STYLE.get(node.op, "min_max")][k]


def _data_out(ctx: ConversionContext, node: MXNode) -> str:
    """Reserve the name of output 0 (the int8 tensor) as MXNet lists it."""
    return ctx.reserve(_name(node, 0))


def _ranges(ctx: ConversionContext, node: MXNode, lo: float, hi: float) -> list[str]:
    """Outputs 1 and 2 (min, max) of ``node`` as float32 [1] initializers under MXNet's names for them."""
    return [ctx.add_initializer(_name(node, 1), np.asarray([lo], np.float32)),
            ctx.add_initializer(_name(node, 2), np.asarray([hi], np.float32))]


def _qparams(ctx: ConversionContext, hint: str, lo: float, hi: float, unsigned: bool) -> tuple[str, str]:
    """(scale, zero point) initializers of a symmetric MXNet quantized tensor with range (lo, hi)."""
    scale = _maxabs(lo, hi) / np.float32(UINT8_RANGE if unsigned else INT8_RANGE)
    zero = np.zeros((), np.uint8 if unsigned else np.int8)
    return ctx.const(np.float32(scale), f"{hint}__scale"), ctx.const(zero, f"{hint}__zero_point")


def _dequantized(ctx: ConversionContext, node: MXNode, q: str, lo: float, hi: float, hint: str) -> str:
    scale, zero = _qparams(ctx, hint, lo, hi, ctx.elem(q) == TensorProto.UINT8)
    return ctx.emit("DequantizeLinear", [q, scale, zero], 1, name=f"{hint}__dequantize")[0]


def _calibrated(node: MXNode) -> tuple[float | None, float | None]:
    """The node's ``min_calib_range`` / ``max_calib_range`` attributes (None when absent)."""
    lo, hi = node.attrs.optional_float("min_calib_range", None), node.attrs.optional_float("max_calib_range", None)
    return (None if lo is None else float(lo)), (None if hi is None else float(hi))


def _quantized_input(ctx: ConversionContext, node: MXNode, x: str) -> None:
    if ctx.elem(x) not in _QUANTIZED_TYPES:
        raise ExportError(f"node '{node.name}' ({node.op}): its data input is not an int8/uint8 tensor of MXNet's "
                          "quantization flow")


@translator("_contrib_quantize_v2")
def _contrib_quantize_v2(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    a = node.attrs
    x = inputs[0]
    lo_attr, hi_attr = _calibrated(node)
    if ctx.elem(x) in _QUANTIZED_TYPES:  # already quantized: passed through with the calibrated or full range
        unsigned = ctx.elem(x) == TensorProto.UINT8
        lo, hi = (lo_attr, hi_attr) if lo_attr is not None and hi_attr is not None else \
            ((0.0, 255.0) if unsigned else (-127.0, 127.0))
        q = ctx.emit("Identity", [x], [_data_out(ctx, node)], name=node.name)[0]
        return [q, *_ranges(ctx, node, float(lo), float(hi))]
    if lo_attr is None or hi_attr is None:
        raise ExportError(f"node '{node.name}' (_contrib_quantize_v2): no calibrated range (min_calib_range / "
                          "max_calib_range): MXNet then picks the range and output type per input at run time; "
                          "quantize with calib_mode='naive' or 'entropy'")
    out_type = (a.optional_str("out_type", "int8") or "int8").lower()
    unsigned = out_type == "uint8" or (out_type == "auto" and bool(lo_attr >= 0))
    if out_type not in ("auto", "int8", "uint8"):
        raise ExportError(f"node '{node.name}' (_contrib_quantize_v2): out_type {out_type} is not int8, uint8 or auto")
    span = float(_maxabs(lo_attr, hi_attr))
    lo, hi = (float(lo_attr), float(hi_attr)) if unsigned else (-span, span)
    scale, zero = _qparams(ctx, node.name, lo_attr, hi_attr, unsigned)
    q = ctx.emit("QuantizeLinear", [x, scale, zero], [_data_out(ctx, node)], name=node.name)[0]
    return [q, *_ranges(ctx, node, lo, hi)]


@translator("_contrib_dequantize")
def _contrib_dequantize(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    q, lo_name, hi_name = inputs[:3]
    _quantized_input(ctx, node, q)
    lo, hi = _const_range(ctx, node, lo_name, hi_name)
    scale, zero = _qparams(ctx, node.name, lo, hi, ctx.elem(q) == TensorProto.UINT8)
    return ctx.emit("DequantizeLinear", [q, scale, zero], [out(ctx, node)], name=node.name)


@translator("_contrib_quantized_flatten")
def _contrib_quantized_flatten(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    q, lo_name, hi_name = inputs[:3]
    _quantized_input(ctx, node, q)
    lo, hi = _const_range(ctx, node, lo_name, hi_name)
    y = ctx.emit("Flatten", [q], [_data_out(ctx, node)], name=node.name, axis=1)[0]
    return [y, *_ranges(ctx, node, lo, hi)]


@translator("_contrib_quantized_act")
def _contrib_quantized_act(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    q, lo_name, hi_name = inputs[:3]
    _quantized_input(ctx, node, q)
    act = node.attrs.optional_str("act_type", "relu")
    if act != "relu":
        raise ExportError(f"node '{node.name}' (_contrib_quantized_act): act_type {act} (MXNet quantizes relu only)")
    lo, hi = _const_range(ctx, node, lo_name, hi_name)
    zero = ctx.const(np.zeros((), np.uint8 if ctx.elem(q) == TensorProto.UINT8 else np.int8), f"{node.name}__zero")
    y = ctx.emit("Max", [q, zero], [_data_out(ctx, node)], name=node.name)[0]  # relu on the integers
    return [y, *_ranges(ctx, node, lo, hi)]


def average_pool(ctx: ConversionContext, node: MXNode, shadow: MXNode, q: str, lo: float, hi: float, output: str
                 ) -> str:
    """oneDNN's int8 average pooling: the integers averaged and rounded to nearest even (on exact float integers),
    written to ``output``."""
    from adapters.mxnet.ops_nn import Pooling

    unsigned = ctx.elem(q) == TensorProto.UINT8
    ints = ctx.emit("Cast", [q], 1, name=f"{node.name}__to_float", to=TensorProto.FLOAT)[0]
    mean = ctx.emit("Round", [Pooling(ctx, shadow, [ints])[0]], 1, name=f"{node.name}__round")[0]
    low, high = (0, 255) if unsigned else (-128, 127)
    mean = ctx.emit("Clip", [mean, ctx.const(np.float32(low), f"{node.name}__low"),
                             ctx.const(np.float32(high), f"{node.name}__high")], 1, name=f"{node.name}__saturate")[0]
    return ctx.emit("Cast", [mean], [output], name=node.name, to=TensorProto.UINT8 if unsigned else TensorProto.INT8)[0]


@translator("_contrib_quantized_pooling")
def _contrib_quantized_pooling(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    from adapters.mxnet.ops_nn import Pooling

    q, lo_name, hi_name = inputs[:3]
    _quantized_input(ctx, node, q)
    lo, hi = _const_range(ctx, node, lo_name, hi_name)
    pool = (node.attrs.optional_str("pool_type", "max") or "max").lower()
    # the int8 output is written under the node's own name (not through an Identity, which the graph passes
    # fold away with the name, so that it would not be compared with MXNet's tensor of that name)
    if pool == "max":  # max pooling commutes with a positive scale: on the integers as they are
        y = Pooling(ctx, MXNode(node.index, "Pooling", node.name, node.inputs, dict(node.raw_attrs)), [q])[0]
    else:
        shadow = MXNode(node.index, "Pooling", f"{node.name}__pool", node.inputs, dict(node.raw_attrs))
        y = average_pool(ctx, node, shadow, q, lo, hi, _data_out(ctx, node))
    return [y, *_ranges(ctx, node, lo, hi)]


@translator("_contrib_quantized_concat")
def _contrib_quantized_concat(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    a = node.attrs
    n = a.optional_int("num_args", len(inputs) // 3) or len(inputs) // 3
    data = inputs[:n]
    for q in data:
        _quantized_input(ctx, node, q)
    ranges = [_const_range(ctx, node, inputs[n + 2 * i], inputs[n + 2 * i + 1]) for i in range(n)]
    lo = min(0.0, *(r[0] for r in ranges))
    hi = max(0.0, *(r[1] for r in ranges))
    unsigned = all(ctx.elem(q) == TensorProto.UINT8 for q in data)
    floats = [_dequantized(ctx, node, q, r[0], r[1], f"{node.name}__in{i}") for i, (q, r) in enumerate(zip(data, ranges,
                                                                                                         strict=True))]
    joined = ctx.emit("Concat", floats, 1, name=f"{node.name}__concat", axis=a.optional_int("dim", 1))[0]
    scale, zero = _qparams(ctx, node.name, lo, hi, unsigned)
    y = ctx.emit("QuantizeLinear", [joined, scale, zero], [_data_out(ctx, node)], name=node.name)[0]
    return [y, *_ranges(ctx, node, lo, hi)]


def _elemwise_inputs(ctx: ConversionContext, node: MXNode, inputs: list[str]
                     ) -> tuple[list[str], list[tuple[float, float]]]:
    """(lhs, rhs) and their constant ranges: the inputs are lhs, rhs, lhs_min, lhs_max, rhs_min, rhs_max."""
    data = inputs[:2]
    for q in data:
        _quantized_input(ctx, node, q)
    return data, [_const_range(ctx, node, inputs[2], inputs[3]), _const_range(ctx, node, inputs[4], inputs[5])]


def _calibrated_output(node: MXNode) -> tuple[float, float]:
    lo, hi = _calibrated(node)
    if lo is None or hi is None:
        raise ExportError(f"node '{node.name}' ({node.op}): no calibrated output range (min_calib_range / "
                          "max_calib_range): MXNet then emits int32 with a range found at run time for a "
                          "_contrib_requantize that follows; quantize with calib_mode='naive' or 'entropy'")
    return lo, hi


def reorder_to_output(ctx: ConversionContext, x: str, scale: str, zero: str, hint: str) -> str:
    """A uint8 addend of an int8 sum as oneDNN takes it: first reordered into int8 at the output's scale
    (rounded, saturated), then summed - two roundings, kept as Q -> DQ (one rounding is 1 step off on ~25%)."""
    q = ctx.emit("QuantizeLinear", [x, scale, zero], 1, name=f"{hint}__to_int8")[0]
    return ctx.emit("DequantizeLinear", [q, scale, zero], 1, name=f"{hint}__rescaled")[0]


@translator("_contrib_quantized_elemwise_add")
def _contrib_quantized_elemwise_add(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    data, ranges = _elemwise_inputs(ctx, node, inputs)
    lo, hi = _calibrated_output(node)
    unsigned = [ctx.elem(q) == TensorProto.UINT8 for q in data]
    out_unsigned = all(unsigned)  # the inputs' type when they agree, else int8 (ElemwiseAddType)
    scale, zero = _qparams(ctx, node.name, lo, hi, out_unsigned)
    floats = []
    for i, (q, (q_lo, q_hi)) in enumerate(zip(data, ranges, strict=True)):
        x = _dequantized(ctx, node, q, q_lo, q_hi, f"{node.name}__in{i}")
        floats.append(reorder_to_output(ctx, x, scale, zero, f"{node.name}__in{i}") if unsigned[i] and not out_unsigned
                      else x)
    total = ctx.emit("Add", floats, 1, name=f"{node.name}__add")[0]
    y = ctx.emit("QuantizeLinear", [total, scale, zero], [_data_out(ctx, node)], name=node.name)[0]
    return [y, *_ranges(ctx, node, lo, hi)]


def truncate_to_int8(ctx: ConversionContext, x: str, hint: str, output: str) -> str:
    """``static_cast<int8_t>(float)`` as MXNet's compiled multiply loop does it: truncated toward zero and, past
    the int8 range, wrapped modulo 256 (checked: a range calibrated too small gives MXNet's wrapped values, not
    saturated ones). The truncation is spelled out rather than left to Cast's float -> int rounding, which
    runtimes differ on; the wrap is ``(t + 128) mod 256 - 128`` on int32 (Mod with fmod=0 takes the divisor's
    sign). Writes ``output`` (an Identity after it would be folded away, and the name with it)."""
    magnitude = ctx.emit("Floor", [ctx.emit("Abs", [x], 1, name=f"{hint}__abs")[0]], 1, name=f"{hint}__floor")[0]
    truncated = ctx.emit("Mul", [ctx.emit("Sign", [x], 1, name=f"{hint}__sign")[0], magnitude], 1,
                         name=f"{hint}__truncate")[0]
    whole = ctx.emit("Cast", [truncated], 1, name=f"{hint}__to_int32", to=TensorProto.INT32)[0]
    shifted = ctx.emit("Add", [whole, ctx.const(np.int32(128), f"{hint}__half_range")], 1, name=f"{hint}__shift")[0]
    wrapped = ctx.emit("Mod", [shifted, ctx.const(np.int32(256), f"{hint}__modulus")], 1, name=f"{hint}__wrap")[0]
    wrapped = ctx.emit("Sub", [wrapped, ctx.const(np.int32(128), f"{hint}__unshift")], 1, name=f"{hint}__unshift")[0]
    return ctx.emit("Cast", [wrapped], [output], name=hint, to=TensorProto.INT8)[0]


@translator("_contrib_quantized_elemwise_mul")
def _contrib_quantized_elemwise_mul(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    data, ranges = _elemwise_inputs(ctx, node, inputs)
    if any(ctx.elem(q) != TensorProto.INT8 for q in data):
        raise ExportError(f"node '{node.name}' (_contrib_quantized_elemwise_mul): a uint8 input; MXNet 1.9.1's "
                          "quantized multiply takes int8 inputs only")
    in_scales = [np.float32(np.float32(INT8_RANGE) / _maxabs(*r)) for r in ranges]
    f32 = [ctx.emit("Cast", [q], 1, name=f"{node.name}__in{i}__to_float", to=TensorProto.FLOAT)[0]
           for i, q in enumerate(data)]
    product = ctx.emit("Mul", f32, 1, name=f"{node.name}__product")[0]  # a * b, exact in float32 (|ab| <= 2^14)
    if node.attrs.optional_bool("enable_float_output", False):  # fused with the dequantize that followed it
        out_scale = np.float32(1.0 / np.float64(in_scales[0]) / np.float64(in_scales[1]))  # 1.0 is a double there
        return ctx.emit("Mul", [product, ctx.const(out_scale, f"{node.name}__scale")], [out(ctx, node)],
                        name=node.name)
    lo, hi = _calibrated_output(node)
    out_scale = np.float32(np.float32(np.float32(INT8_RANGE) / _maxabs(lo, hi)) / in_scales[0]) / in_scales[1]
    scaled = ctx.emit("Mul", [product, ctx.const(np.float32(out_scale), f"{node.name}__scale")], 1,
                      name=f"{node.name}__scaled")[0]
    y = truncate_to_int8(ctx, scaled, node.name, _data_out(ctx, node))
    return [y, *_ranges(ctx, node, lo, hi)]


# ---- the oneDNN-fused convolution -------------------------------------------------------------------


def _subgraph_ops(node: MXNode) -> dict[str, MXNode]:
    if len(node.subgraphs) != 1:
        raise ExportError(f"node '{node.name}' (_sg_mkldnn_conv): expected one subgraph, the file gives "
                          f"{len(node.subgraphs)}")
    ops: dict[str, MXNode] = {}
    for sub in node.subgraphs[0].nodes:
        if sub.is_variable:
            continue
        if sub.op not in ("Convolution", "BatchNorm", "Activation") or sub.op in ops:
            raise ExportError(f"node '{node.name}' (_sg_mkldnn_conv): its subgraph holds {sub.op} '{sub.name}'; bridge "
                              "converts fused Convolution [+ BatchNorm] [+ relu] (a fused residual sum is not "
                              "supported)")
        ops[sub.op] = sub
    if "Convolution" not in ops:
        raise ExportError(f"node '{node.name}' (_sg_mkldnn_conv): its subgraph has no Convolution")
    return ops


def bn_alpha(gamma: np.ndarray, var: np.ndarray, eps: float) -> np.ndarray:
    """BatchNorm's per-channel factor ``gamma / sqrt(var + eps)`` as MXNet folds it: BatchNormParam.eps is a
    double and ::sqrt computes in double, so alpha is rounded to float32 once."""
    return (gamma.astype(np.float64) / np.sqrt(var.astype(np.float64) + eps)).astype(np.float32)


def _folded(ctx: ConversionContext, node: MXNode, ops: dict[str, MXNode], inputs: Sequence[str]
            ) -> tuple[np.ndarray, np.ndarray, int]:
    """The convolution's float32 weight and bias with BatchNorm folded in as MXNet folds it
    (``UpdateConvWeightBias``: alpha = gamma / sqrt(var + eps), bias' = beta + alpha * (bias - mean)),
    and how many inputs the weights took."""
    conv = ops["Convolution"].attrs
    no_bias = conv.optional_bool("no_bias", False)
    w = ctx.value(inputs[1])
    if w is None:
        raise ExportError(f"node '{node.name}' (_sg_mkldnn_conv): its weight is not a parameter of the file")
    w = np.asarray(w, np.float32)
    used = 2
    b = np.zeros(w.shape[0], np.float32)
    if not no_bias:
        given = ctx.value(inputs[2])
        if given is None:
            raise ExportError(f"node '{node.name}' (_sg_mkldnn_conv): its bias is not a parameter of the file")
        b = np.asarray(given, np.float32)
        used = 3
    if "BatchNorm" in ops:
        bn = ops["BatchNorm"].attrs
        values = [ctx.value(inputs[used + k]) for k in range(4)]
        if any(v is None for v in values):
            raise ExportError(f"node '{node.name}' (_sg_mkldnn_conv): its BatchNorm statistics are not parameters")
        gamma, beta, mean, var = (np.asarray(v, np.float32) for v in values)
        if bn.optional_bool("fix_gamma", True):
            gamma = np.ones_like(gamma)
        alpha = bn_alpha(gamma, var, float(bn.optional_float("eps", 1e-3) or 0.0))
        b = (beta + alpha * (b - mean)).astype(np.float32) if not no_bias else (beta - alpha * mean).astype(np.float32)
        w = (w * alpha.reshape(-1, *([1] * (w.ndim - 1)))).astype(np.float32)
        used += 4
    return w, b, used


def _relu(ops: dict[str, MXNode], node: MXNode) -> bool:
    if "Activation" not in ops:
        return False
    act = ops["Activation"].attrs.optional_str("act_type", "relu")
    if act != "relu":
        raise ExportError(f"node '{node.name}' (_sg_mkldnn_conv): fused activation {act}; bridge converts relu")
    return True


@translator("_sg_mkldnn_conv")
def _sg_mkldnn_conv(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    from adapters.mxnet.ops_nn import Convolution

    a = node.attrs
    ops = _subgraph_ops(node)
    if a.optional_bool("with_sum", False) or a.optional_bool("with_postsum_act", False):
        raise ExportError(f"node '{node.name}' (_sg_mkldnn_conv): a fused residual sum (with_sum) is not supported")
    w, b, used = _folded(ctx, node, ops, inputs)
    relu = _relu(ops, node)
    conv_node = MXNode(node.index, "Convolution", f"{node.name}__conv", node.inputs,
                       {**ops["Convolution"].raw_attrs, "no_bias": "False"})
    if not a.optional_bool("quantized", False):  # the float fusion (optimize_for('MKLDNN')): conv, bn, relu
        y = Convolution(ctx, conv_node, [inputs[0], ctx.const(w, f"{node.name}__weight"),
                                         ctx.const(b, f"{node.name}__bias")])[0]
        final = ctx.emit("Relu", [y], [out(ctx, node)], name=node.name) if relu else \
            ctx.emit("Identity", [y], [out(ctx, node)], name=node.name)
        return final
    x = inputs[0]
    _quantized_input(ctx, node, x)
    data_lo, data_hi = _const_range(ctx, node, inputs[used], inputs[used + 1])
    data_scale = np.float32((INT8_RANGE if data_lo < 0 else UINT8_RANGE) / _maxabs(data_lo, data_hi))
    channels = w.shape[0]
    flat = np.abs(w.reshape(channels, -1))
    if a.optional_bool("weight_channelwise_scale", True):
        wscale = (np.float32(WEIGHT_RANGE) / flat.max(axis=1)).astype(np.float32)
    else:
        wscale = np.full(channels, np.float32(WEIGHT_RANGE) / flat.max(), np.float32)
    # saturated to int8 as oneDNN's reorder does (the channel's extreme, 127.5 x, rounds to 128 -> 127)
    qw = np.clip(_round_away(w * wscale.reshape(-1, *([1] * (w.ndim - 1)))), -128, 127).astype(np.int8)
    qb = np.clip(_round_away((b * (wscale * data_scale)).astype(np.float32)), -2**31, 2**31 - 1).astype(np.int32)
    lo_out, hi_out = _calibrated(node)
    if lo_out is None or hi_out is None:
        raise ExportError(f"node '{node.name}' (_sg_mkldnn_conv): a quantized convolution without a calibrated "
                          "output range (its int32 output's range is found at run time); quantize with "
                          "calib_mode='naive' or 'entropy'")
    xf = _dequantized(ctx, node, x, data_lo, data_hi, f"{node.name}__data")
    wf = ctx.emit("DequantizeLinear", [ctx.const(qw, f"{node.name}__weight_quantized"),
                                       ctx.const((1 / wscale).astype(np.float32), f"{node.name}__weight_scale"),
                                       ctx.const(np.zeros(channels, np.int8), f"{node.name}__weight_zero_point")],
                  1, name=f"{node.name}__weight_dequantize", axis=0)[0]
    bf = ctx.emit("DequantizeLinear", [ctx.const(qb, f"{node.name}__bias_quantized"),
                                       ctx.const((1 / (wscale * data_scale)).astype(np.float32), f"{node.name}__bias_scale"),
                                       ctx.const(np.zeros(channels, np.int32), f"{node.name}__bias_zero_point")],
                  1, name=f"{node.name}__bias_dequantize", axis=0)[0]
    y = Convolution(ctx, conv_node, [xf, wf, bf])[0]
    if relu:
        y = ctx.emit("Relu", [y], 1, name=f"{node.name}__relu")[0]
    unsigned = relu  # oneDNN's output is uint8 after a fused relu (IsOutputUInt8), else int8
    lo, hi = float(lo_out), float(hi_out)  # reported as calibrated; the scale is MaxAbs(lo, hi) / range
    scale, zero = _qparams(ctx, f"{node.name}__out", lo, hi, unsigned)
    q = ctx.emit("QuantizeLinear", [y, scale, zero], [_data_out(ctx, node)], name=node.name)[0]
    return [q, *_ranges(ctx, node, lo, hi)]


__all__: list[str] = []
