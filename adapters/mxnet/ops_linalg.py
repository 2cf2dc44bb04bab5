"""MXNet's ``linalg`` namespace (and ``khatri_rao``) where ONNX has a form: gemm, det, slogdet,
sumlogdiag, diagonal / triangle extraction and construction (as constant 0/1 selection matmuls), syrk,
trmm. Factorisations, inverses and solves have none and are refused in ``registry.NOT_TRANSLATED``."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from adapters.mxnet.context import ConversionContext
from adapters.mxnet.registry import TRANSLATORS, out, translator
from adapters.mxnet.symbol import MXNode
from bridge.errors import ExportError


@translator("khatri_rao")
def khatri_rao(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # contrib/krprod.h: column-wise Kronecker product of (M_i, K) matrices -> (prod M_i, K), row-major in order
    n = node.name
    k = ctx.static_dims(inputs[0], n, [-1])[0]
    acc = inputs[0]
    for i, b in enumerate(inputs[1:]):
        prod = ctx.emit("Mul", [ctx.unsqueeze(acc, [1], name=f"{n}__a{i}"), ctx.unsqueeze(b, [0], name=f"{n}__b{i}")], 1,
                        name=f"{n}__outer{i}")[0]
        acc = ctx.emit("Reshape", [prod, ctx.i64([-1, k], f"{n}__shape{i}")], 1, name=f"{n}__kr{i}")[0]
    return ctx.emit("Identity", [acc], [out(ctx, node)], name=n)


# ---- linear algebra ------------------------------------------------------------------------------------------
@translator("_linalg_gemm", "linalg_gemm")
def linalg_gemm(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # la_op.h: alpha * op(A) op(B) + beta * C, matrices in axes (axis, -1) like gemm2 (whose translator runs)
    inner = dataclasses.replace(node, op="_linalg_gemm2", name=f"{node.name}__ab")
    ab = TRANSLATORS["_linalg_gemm2"](ctx, inner, inputs[:2])[0]
    c = inputs[2]
    beta = float(node.attrs.optional_float("beta", 1.0) or 0.0)
    if beta != 1.0:
        c = ctx.emit("Mul", [c, ctx.scalar(beta, c, f"{node.name}__beta")], 1, name=f"{node.name}__bc")[0]
    return ctx.emit("Add", [ab, c], [out(ctx, node)], name=node.name)


@translator("_linalg_det", "linalg_det")
def linalg_det(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # la_op.h det over the last two axes (LU in MXNet, ONNX Det); one matrix gives shape (1,) in MXNet
    det = ctx.emit("Det", inputs[:1], 1, name=f"{node.name}__det")[0]
    return [_batch_or_one(ctx, node, inputs[0], det, out(ctx, node))]


def _batch_or_one(ctx: ConversionContext, node: MXNode, a: str, value: str, output: str) -> str:
    """A per-matrix result: shape (1,) for a single matrix (MXNet's la_op shape rule), else the batch shape."""
    if ctx.rank(a, node.name) == 2:
        return ctx.emit("Reshape", [value, ctx.i64([1], f"{node.name}__one")], [output], name=f"{node.name}__r")[0]
    return ctx.emit("Identity", [value], [output], name=f"{node.name}__r")[0]


@translator("_linalg_slogdet", "linalg_slogdet")
def linalg_slogdet(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # la_op.h slogdet: sign(det) and log|det|
    det = ctx.emit("Det", inputs[:1], 1, name=f"{node.name}__det")[0]
    sign = ctx.emit("Sign", [det], 1, name=f"{node.name}__sign")[0]
    log = ctx.emit("Log", [ctx.emit("Abs", [det], 1, name=f"{node.name}__abs")[0]], 1, name=node.name)[0]
    return [_batch_or_one(ctx, node, inputs[0], sign, out(ctx, node, 0, 2)),
            _batch_or_one(ctx, node, inputs[0], log, out(ctx, node, 1, 2))]


def _square(ctx: ConversionContext, node: MXNode, a: str) -> int:
    shape = ctx.static_shape(a, node.name)
    return shape[-1]


@translator("_linalg_sumlogdiag", "linalg_sumlogdiag")
def linalg_sumlogdiag(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # la_op.h: sum(log(diag(A))) over the last two axes
    a = inputs[0]
    n = node.name
    eye = ctx.const(np.eye(_square(ctx, node, a), dtype=ctx.np_dtype(a)), f"{n}__eye")
    diag = ctx.reduce("ReduceSum", ctx.emit("Mul", [a, eye], 1, name=f"{n}__masked")[0], [-1], False, name=f"{n}__diag")
    total = ctx.reduce("ReduceSum", ctx.emit("Log", [diag], 1, name=f"{n}__log")[0], [-1], False, name=n)
    return [_batch_or_one(ctx, node, a, total, out(ctx, node))]


def _selection(ctx: ConversionContext, node: MXNode, x: str, matrix: np.ndarray, out_dims: list[int]) -> list[str]:
    """x's last ``matrix.shape[0]`` elements (flattened trailing dims) times a 0/1 matrix, reshaped to out_dims:
    an exact gather/scatter of fixed positions (each output is one input, or 0)."""
    n = node.name
    lead = ctx.rank(x, n) - (1 if matrix.shape[0] == ctx.static_dims(x, n, [-1])[0] else 2)
    flat = ctx.emit("Reshape", [x, ctx.i64([0] * lead + [-1], f"{n}__flat")], 1, name=f"{n}__flat")[0]
    sel = ctx.emit("MatMul", [flat, ctx.const(matrix.astype(ctx.np_dtype(x)), f"{n}__sel")], 1, name=f"{n}__sel")[0]
    return ctx.emit("Reshape", [sel, ctx.i64([0] * lead + out_dims, f"{n}__oshape")], [out(ctx, node)], name=n)


def _tri_positions(size: int, offset: int, lower: bool) -> list[tuple[int, int]]:
    # la_op.h copytrian: row-major positions of the triangle; offset > 0 selects the upper triangle above
    # that diagonal, offset < 0 the lower one below it, offset 0 the triangle ``lower`` names
    # (MXNet walks the lower triangle row by row and the upper one column by column)
    if offset < 0 or (offset == 0 and lower):
        return [(i, j) for i in range(size) for j in range(size) if j - i <= offset]
    return [(i, j) for j in range(size) for i in range(size) if j - i >= offset]


@translator("_linalg_extractdiag", "linalg_extractdiag")
def linalg_extractdiag(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    a = inputs[0]
    size = _square(ctx, node, a)
    k = node.attrs.optional_int("offset", 0) or 0
    return _extract(ctx, node, a, size, [(i, i + k) for i in range(size) if 0 <= i + k < size])


@translator("_linalg_makediag", "linalg_makediag")
def linalg_makediag(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    a = inputs[0]
    m_len = ctx.static_dims(a, node.name, [-1])[0]
    k = node.attrs.optional_int("offset", 0) or 0
    size = m_len + abs(k)
    m = np.zeros((m_len, size * size))
    for i in range(m_len):
        r, c = (i, i + k) if k >= 0 else (i - k, i)
        m[i, r * size + c] = 1
    return _selection(ctx, node, a, m, [size, size])


@translator("_linalg_extracttrian", "linalg_extracttrian")
def linalg_extracttrian(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    a = inputs[0]
    size = _square(ctx, node, a)
    return _extract(ctx, node, a, size, _tri_positions(size, node.attrs.optional_int("offset", 0) or 0,
                                                       node.attrs.optional_bool("lower", True)))


def _extract(ctx: ConversionContext, node: MXNode, a: str, size: int, pos: list[tuple[int, int]]) -> list[str]:
    """The elements of the trailing size x size matrices at ``pos`` (row, column), as a vector."""
    m = np.zeros((size * size, len(pos)))
    for c, (i, j) in enumerate(pos):
        m[i * size + j, c] = 1
    return _selection(ctx, node, a, m, [len(pos)])


@translator("_linalg_maketrian", "linalg_maketrian")
def linalg_maketrian(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    a = inputs[0]
    length = ctx.static_dims(a, node.name, [-1])[0]
    k = node.attrs.optional_int("offset", 0) or 0
    # the triangle of an n x n matrix with |k| diagonals left out holds length elements: n = n0 + |k|
    n0 = round((math.sqrt(8 * length + 1) - 1) / 2)
    size = n0 + abs(k)
    pos = _tri_positions(size, k, node.attrs.optional_bool("lower", True))
    if len(pos) != length:
        raise ExportError(f"node '{node.name}': {length} elements do not fill a triangle (offset {k})")
    m = np.zeros((length, size * size))
    for c, (i, j) in enumerate(pos):
        m[c, i * size + j] = 1
    return _selection(ctx, node, a, m, [size, size])


@translator("_linalg_syrk", "linalg_syrk")
def linalg_syrk(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # la_op.h: alpha * A A^T (A^T A with transpose)
    a = inputs[0]
    n = node.name
    rank = ctx.rank(a, n)
    at = ctx.emit("Transpose", [a], 1, name=f"{n}__aT", perm=[*range(rank - 2), rank - 1, rank - 2])[0]
    left, right = (at, a) if node.attrs.optional_bool("transpose", False) else (a, at)
    mm = ctx.emit("MatMul", [left, right], 1, name=f"{n}__mm")[0]
    alpha = float(node.attrs.optional_float("alpha", 1.0) or 0.0)
    return ctx.emit("Mul", [mm, ctx.scalar(alpha, a, f"{n}__alpha")], [out(ctx, node)], name=n)


@translator("_linalg_trmm", "linalg_trmm")
def linalg_trmm(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # la_op.h: alpha * op(tri(A)) B, or alpha * B op(tri(A)) with rightside; tri = lower (default) or upper
    a, b = inputs[:2]
    n = node.name
    at = node.attrs
    size = _square(ctx, node, a)
    tri = np.tril(np.ones((size, size))) if at.optional_bool("lower", True) else np.triu(np.ones((size, size)))
    a = ctx.emit("Mul", [a, ctx.const(tri.astype(ctx.np_dtype(a)), f"{n}__tri")], 1, name=f"{n}__masked")[0]
    if at.optional_bool("transpose", False):
        rank = ctx.rank(a, n)
        a = ctx.emit("Transpose", [a], 1, name=f"{n}__aT", perm=[*range(rank - 2), rank - 1, rank - 2])[0]
    pair = [b, a] if at.optional_bool("rightside", False) else [a, b]
    mm = ctx.emit("MatMul", pair, 1, name=f"{n}__mm")[0]
    alpha = float(at.optional_float("alpha", 1.0) or 0.0)
    return ctx.emit("Mul", [mm, ctx.scalar(alpha, mm, f"{n}__alpha")], [out(ctx, node)], name=n)
