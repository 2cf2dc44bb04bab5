"""Translators for MXNet ops that create tensors: constant fills, eye / linspace / index_array,
arange_like and the random samplers.

``_zeros`` / ``_ones`` / ``_full`` become ConstantOfShape and ``_eye`` EyeLike (small graphs even for
large shapes); ``_linspace`` is folded to a constant computed as MXNet computes it;
``_contrib_arange_like`` is computed at run time from the input's shape, in the input's dtype as MXNet
does (src/operator/tensor/init_op.h, range_fwd: ``start + (i / repeat) * step`` with start and step cast
to DType). The samplers (``_random_normal``, ``_random_uniform``, their ``_like`` forms and
``_sample_multinomial``) become ONNX RandomNormal / RandomUniform / Multinomial: same distribution,
shape and dtype, but other values, so each one warns and the adapter marks its outputs as
nondeterministic (adapters/mxnet/nondeterministic.py) for validation to compare by shape and dtype.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from onnx import TensorProto, numpy_helper

from adapters.mxnet.context import ConversionContext, TensorType, onnx_to_np
from adapters.mxnet.infer_states import DIMS_LIKE
from adapters.mxnet.ops_indexing import DimRef, dims_tensor, reshape_dims
from adapters.mxnet.ops_tensor import DTYPES
from adapters.mxnet.registry import out, translator
from adapters.mxnet.symbol import MXNode
from bridge.errors import ExportError


def _dtype(node: MXNode, default: str = "float32", allowed: tuple[str, ...] | None = None) -> int:
    name = node.attrs.optional_str("dtype", default) or default
    if name not in DTYPES or (allowed is not None and name not in allowed):
        raise ExportError(f"node '{node.name}': {node.op} dtype='{name}' is not supported")
    return DTYPES[name]


def _shape(node: MXNode) -> list[int]:
    shape = list(node.attrs.optional_ints("shape"))
    if any(d <= 0 for d in shape):
        # MXNet 1.x reads 0 as "unknown" (filled in by shape inference from a consumer): not a constant
        raise ExportError(f"node '{node.name}': {node.op} shape {tuple(shape)} has unknown (0) dims")
    return shape


def _fill(ctx: ConversionContext, node: MXNode, value: float, elem: int, inputs: list[str]) -> list[str]:
    fill = numpy_helper.from_array(np.asarray([value]).astype(onnx_to_np(elem)))
    if inputs and node.attrs.optional_bool(DIMS_LIKE, False):  # 0 dims from the input (infer_states.py)
        like = inputs[0]
        like_shape = ctx.shape(like) or ()
        shape = list(node.attrs.optional_ints("shape"))
        dims: list[DimRef] = [d if d > 0 else (like, ax) for ax, d in enumerate(shape)]
        y = ctx.emit("ConstantOfShape", [dims_tensor(ctx, dims, name=node.name)], [out(ctx, node)], name=node.name,
                     value=fill)[0]
        known = tuple(d if d > 0 else like_shape[ax] if ax < len(like_shape) else None for ax, d in enumerate(shape))
        ctx.types[y] = ctx.declared[y] = TensorType(elem, known)
        return [y]
    return ctx.emit("ConstantOfShape", [ctx.i64(_shape(node), f"{node.name}__shape")], [out(ctx, node)],
                    name=node.name, value=fill)


@translator("_zeros")
def _zeros(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    return _fill(ctx, node, 0, _dtype(node), inputs)


@translator("_ones")
def _ones(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    return _fill(ctx, node, 1, _dtype(node), inputs)


@translator("_full")
def _full(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # value is a double parameter cast to DType (init_op.h InitOpWithScalarParam)
    return _fill(ctx, node, float(node.attrs.optional_str("value", "0") or 0), _dtype(node), inputs)


@translator("_eye")
def _eye(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # as in init_op.h (EyeParam): N x M (M=0: N) with ones on diagonal k
    a = node.attrs
    n = a.required_int("N")
    m = a.optional_int("M", 0) or n
    zeros = numpy_helper.from_array(np.zeros(1, np.float32))
    base = ctx.emit("ConstantOfShape", [ctx.i64([n, m], f"{node.name}__shape")], 1, name=f"{node.name}__zeros",
                    value=zeros)[0]
    eye = ctx.emit("EyeLike", [base], 1, name=f"{node.name}__eye", k=a.optional_int("k", 0) or 0)[0]
    return ctx.emit("Cast", [eye], [out(ctx, node)], name=node.name, to=_dtype(node))


@translator("_linspace")
def _linspace(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # as in init_op.h (LinspaceParam, linspace_fwd): start + step * i in double, cast to DType, with
    # step = (stop - start) / (num - 1) with the endpoint (num > 1), else / num; a constant, folded here
    a = node.attrs
    start, stop = float(a.optional_str("start", "0") or 0), float(a.optional_str("stop", "0") or 0)
    num = a.required_int("num")
    endpoint = a.optional_bool("endpoint", True)
    div = (num - 1 if endpoint else num) if num > 1 else 1
    vals = start + (stop - start) / div * np.arange(num, dtype=np.float64)
    c = ctx.const(vals.astype(onnx_to_np(_dtype(node))), f"{node.name}__values")
    return ctx.emit("Identity", [c], [out(ctx, node)], name=node.name)


@translator("_contrib_index_array")
def _contrib_index_array(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # as in src/operator/contrib/index_array-inl.h: int64 (*data.shape, len(axes)), the element's index
    # along each of ``axes`` (default: all axes, in order)
    x = inputs[0]
    rank = ctx.rank(x, node.name)
    axes = [d + rank if d < 0 else d for d in node.attrs.optional_ints("axes")] or list(range(rank))
    full = dims_tensor(ctx, [(x, d) for d in range(rank)], name=f"{node.name}__shape")
    parts = []
    for d in axes:
        n = ctx.squeeze(dims_tensor(ctx, [(x, d)], name=f"{node.name}__n{d}"), [0], name=f"{node.name}__len{d}")
        r = ctx.emit("Range", [ctx.const(np.int64(0), f"{node.name}__zero"), n, ctx.const(np.int64(1), f"{node.name}__one")],
                     1, name=f"{node.name}__range{d}")[0]
        shape = [-1 if e == d else 1 for e in range(rank)]
        r = ctx.emit("Reshape", [r, ctx.i64(shape, f"{node.name}__along{d}")], 1, name=f"{node.name}__along{d}")[0]
        r = ctx.emit("Expand", [r, full], 1, name=f"{node.name}__expand{d}")[0]
        parts.append(ctx.unsqueeze(r, [rank], name=f"{node.name}__last{d}"))
    return ctx.emit("Concat", parts, [out(ctx, node)], name=node.name, axis=rank)


@translator("_contrib_arange_like")
def _contrib_arange_like(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # as in MXNet init_op.h (RangeLikeParam): axis None -> the input's shape filled in row-major order,
    # else a 1-D array of the length of that axis; values start + (i // repeat) * step in the input dtype
    a = node.attrs
    x = inputs[0]
    elem = ctx.elem(x)
    np_dtype = onnx_to_np(elem)
    axis = a.optional_int("axis", None)
    repeat = a.optional_int("repeat", 1) or 1
    if repeat < 1:
        raise ExportError(f"node '{node.name}': repeat={repeat} must be >= 1")
    rank = ctx.rank(x, node.name)
    dims = [(x, d) for d in range(rank)] if axis is None else [(x, axis + rank if axis < 0 else axis)]
    shape = ctx.shape(x) or ()
    static = [shape[d] for _, d in dims]
    if all(isinstance(v, int) for v in static):  # a constant length: Range's output shape is known
        n = ctx.const(np.int64(math.prod(v for v in static if isinstance(v, int))), f"{node.name}__n")
    elif axis is None:
        n = ctx.emit("Size", [x], 1, name=f"{node.name}__size")[0]
    else:
        n = ctx.squeeze(dims_tensor(ctx, dims, name=f"{node.name}__len"), [0], name=f"{node.name}__n")
    i = ctx.emit("Range", [ctx.const(np.int64(0), f"{node.name}__zero"), n, ctx.const(np.int64(1), f"{node.name}__one")],
                 1, name=f"{node.name}__range")[0]
    if repeat > 1:
        i = ctx.emit("Div", [i, ctx.const(np.int64(repeat), f"{node.name}__repeat")], 1, name=f"{node.name}__rep")[0]
    start_f, step_f = float(a.optional_str("start", "0") or 0), float(a.optional_str("step", "1") or 1)
    if elem == TensorProto.FLOAT16:
        # MXNet 1.9.1 (CPU) truncates start and step to integers for float16 outputs, as for int types:
        # arange_like(float16 x, start=0.5, step=0.25) is all zeros there; reproduced, not "fixed"
        start_f, step_f = float(np.trunc(start_f)), float(np.trunc(step_f))
    # 8-bit integers: ONNX Mul/Add take them only from opset 14, so the DType values are widened to int32;
    # the final Cast wraps modulo 256 as MXNet's 8-bit arithmetic does
    narrow = np_dtype.kind in "iu" and np_dtype.itemsize == 1
    work_elem = TensorProto.INT32 if narrow else elem
    work = np.dtype(np.int32) if narrow else np_dtype
    start = np.asarray(start_f).astype(np_dtype).astype(work)
    step = np.asarray(step_f).astype(np_dtype).astype(work)
    v = ctx.emit("Cast", [i], 1, name=f"{node.name}__cast", to=work_elem)[0]
    v = ctx.emit("Mul", [v, ctx.const(step, f"{node.name}__step")], 1, name=f"{node.name}__mul")[0]
    v = ctx.emit("Add", [v, ctx.const(start, f"{node.name}__start")], 1, name=f"{node.name}__add")[0]
    if narrow:
        v = ctx.emit("Cast", [v], 1, name=f"{node.name}__narrow", to=elem)[0]
    if axis is not None:
        return ctx.emit("Identity", [v], [out(ctx, node)], name=node.name)
    return [reshape_dims(ctx, v, dims, name=node.name, output=out(ctx, node))]


# ---- random samplers -------------------------------------------------------------------------------
_RANDOM_DTYPES = ("float16", "float32", "float64")


def _random_note(ctx: ConversionContext, node: MXNode, onnx_op: str) -> None:
    ctx.warn(f"node '{node.name}' ({node.op}) samples random numbers: converted to ONNX {onnx_op} (same distribution, "
             "shape and dtype, different values); validation compares this output's shape and dtype only")


def _sampler(ctx: ConversionContext, node: MXNode, op: str, elem: int, attrs: dict[str, Any],
             like: str | None) -> list[str]:
    """Random{op}[Like] in float/double (onnxruntime has no float16 samplers: sampled in float, cast)."""
    _random_note(ctx, node, op + ("Like" if like else ""))
    sample_elem = TensorProto.FLOAT if elem == TensorProto.FLOAT16 else elem
    direct = sample_elem == elem
    outputs = [out(ctx, node)] if direct else 1
    name = node.name if direct else f"{node.name}__sample"
    if like is None:
        r = ctx.emit(op, [], outputs, name=name, dtype=sample_elem, shape=_shape(node), **attrs)[0]
    else:
        r = ctx.emit(op + "Like", [like], outputs, name=name, dtype=sample_elem, **attrs)[0]
    if direct:
        return [r]
    return ctx.emit("Cast", [r], [out(ctx, node)], name=node.name, to=elem)


def _normal_params(a: Any) -> dict[str, float]:
    """MXNet's loc/scale as ONNX RandomNormal's mean/scale."""
    return {"mean": float(a.optional_float("loc", 0.0) or 0.0), "scale": float(a.optional_float("scale", 1.0) or 0.0)}


def _uniform_params(a: Any) -> dict[str, float]:
    """MXNet's low/high as ONNX RandomUniform's (the same names)."""
    return {"low": float(a.optional_float("low", 0.0) or 0.0), "high": float(a.optional_float("high", 1.0) or 0.0)}


@translator("_random_normal", "random_normal", "normal")
def _random_normal(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    a = node.attrs
    return _sampler(ctx, node, "RandomNormal", _dtype(node, allowed=_RANDOM_DTYPES),
                    _normal_params(a), None)


@translator("_random_uniform", "random_uniform", "uniform")
def _random_uniform(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    a = node.attrs
    return _sampler(ctx, node, "RandomUniform", _dtype(node, allowed=_RANDOM_DTYPES),
                    _uniform_params(a), None)


@translator("_random_normal_like")
def _random_normal_like(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    a = node.attrs
    x = inputs[0]
    return _sampler(ctx, node, "RandomNormal", ctx.elem(x),
                    _normal_params(a), x)


@translator("_random_uniform_like")
def _random_uniform_like(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    a = node.attrs
    x = inputs[0]
    return _sampler(ctx, node, "RandomUniform", ctx.elem(x),
                    _uniform_params(a), x)


@translator("_sample_multinomial", "sample_multinomial")
def _sample_multinomial(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # as in MXNet src/operator/random/sample_multinomial_op.h: data (..., K) probabilities, ``shape``
    # samples per distribution -> output data.shape[:-1] + shape ((1,) when that is empty), dtype int32;
    # get_prob adds log(p[sample]) in the data dtype. ONNX Multinomial takes [batch, K] log-probabilities.
    a = node.attrs
    p = inputs[0]
    shape = list(a.optional_ints("shape"))
    get_prob = a.optional_bool("get_prob", False)
    elem = _dtype(node, "int32", ("float16", "float32", "float64", "int32", "uint8"))
    dims = ctx.shape(p)
    if dims is None or not isinstance(dims[-1], int):
        raise ExportError(f"node '{node.name}': _sample_multinomial needs the static class count of '{p}'")
    rank = len(dims)
    _random_note(ctx, node, "Multinomial")
    n = int(np.prod(shape)) if shape else 1
    p2 = ctx.emit("Reshape", [p, ctx.i64([-1, int(dims[-1])], f"{node.name}__2d")], 1, name=f"{node.name}__2d")[0]
    if ctx.elem(p) != TensorProto.FLOAT:  # onnxruntime samples from float log-probabilities only
        p2 = ctx.emit("Cast", [p2], 1, name=f"{node.name}__float", to=TensorProto.FLOAT)[0]
    logp = ctx.emit("Log", [p2], 1, name=f"{node.name}__log")[0]
    s = ctx.emit("Multinomial", [logp], 1, name=f"{node.name}__sample", sample_size=n, dtype=TensorProto.INT64)[0]
    out_dims: list[DimRef] = [(p, d) for d in range(rank - 1)]
    out_dims.extend(shape)
    count = 2 if get_prob else 1
    sample = reshape_dims(ctx, s, out_dims or [1], name=f"{node.name}__reshape")
    outs = [ctx.emit("Cast", [sample], [out(ctx, node, 0, count)], name=node.name, to=elem)[0]]
    if get_prob:
        lp = ctx.emit("GatherElements", [logp, s], 1, name=f"{node.name}__logp", axis=1)[0]
        lp = reshape_dims(ctx, lp, out_dims or [1], name=f"{node.name}__logp_shape")
        outs.append(ctx.emit("Cast", [lp], [out(ctx, node, 1, count)], name=f"{node.name}__prob", to=ctx.elem(p))[0])
    return outs
