"""The ``contrib`` transformer ops of GluonNLP / BERT exports: interleaved self- and encoder-decoder
attention matmuls and ``_contrib_div_sqrt_dim``, as standard ONNX (MatMul over reshaped heads)."""

from __future__ import annotations

import math

import numpy as np

from adapters.mxnet.context import ConversionContext
from adapters.mxnet.registry import out, translator
from adapters.mxnet.symbol import MXNode
from bridge.errors import ExportError


def _heads_split(ctx: ConversionContext, node: MXNode, t: str, slots: int, which: int | None, tag: str) -> str:
    """[L, B, heads * slots * D] -> [B*heads, L, D] (slot ``which`` of interleaved k/v, transformer.cc)."""
    heads = node.attrs.required_int("heads")
    last = ctx.static_dims(t, node.name, [-1])[0]
    d = last // (heads * slots)
    n = node.name
    if slots == 1:
        r = ctx.emit("Reshape", [t, ctx.i64([0, -1, d], f"{n}__{tag}shape")], 1, name=f"{n}__{tag}r")[0]
    else:
        r = ctx.emit("Reshape", [t, ctx.i64([0, -1, slots, d], f"{n}__{tag}shape")], 1, name=f"{n}__{tag}r")[0]
        r = ctx.emit("Gather", [r, ctx.const(np.asarray(which, np.int64), f"{n}__{tag}slot")], 1,
                     name=f"{n}__{tag}slot", axis=2)[0]
    return ctx.emit("Transpose", [r], 1, name=f"{n}__{tag}t", perm=[1, 0, 2])[0]


@translator("_contrib_interleaved_matmul_encdec_qk")
def _contrib_interleaved_matmul_encdec_qk(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # transformer.cc: (q / sqrt(head_dim)) @ k^T per batch*head, k the first slot of interleaved (k, v)
    q_in, kv = inputs[:2]
    d = ctx.static_dims(q_in, node.name, [-1])[0] // node.attrs.required_int("heads")
    q = _heads_split(ctx, node, q_in, 1, None, "q")
    k = _heads_split(ctx, node, kv, 2, 0, "k")
    q = ctx.emit("Mul", [q, ctx.scalar(1.0 / math.sqrt(d), q_in, f"{node.name}__scale")], 1, name=f"{node.name}__qs")[0]
    kt = ctx.emit("Transpose", [k], 1, name=f"{node.name}__kT", perm=[0, 2, 1])[0]
    return ctx.emit("MatMul", [q, kt], [out(ctx, node)], name=node.name)


@translator("_contrib_interleaved_matmul_encdec_valatt")
def _contrib_interleaved_matmul_encdec_valatt(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # transformer.cc: attention @ v per batch*head (v the second slot), back to [Lq, B, heads * head_dim]
    kv, att = inputs[:2]
    heads = node.attrs.required_int("heads")
    e = ctx.static_dims(kv, node.name, [-1])[0] // 2
    v = _heads_split(ctx, node, kv, 2, 1, "v")
    r = ctx.emit("MatMul", [att, v], 1, name=f"{node.name}__mm")[0]
    tb = ctx.emit("Transpose", [r], 1, name=f"{node.name}__tb", perm=[1, 0, 2])[0]
    if e % heads:
        raise ExportError(f"node '{node.name}': the last dim of '{kv}' is not 2 * heads * head_dim")
    return ctx.emit("Reshape", [tb, ctx.i64([0, -1, e], f"{node.name}__oshape")], [out(ctx, node)], name=node.name)


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
    heads = node.attrs.required_int("heads")
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
    e = _head_dim(ctx, node, qkv) * node.attrs.required_int("heads")
    v = _interleaved(ctx, node, qkv, 2)
    ctxv = ctx.emit("MatMul", [att, v], 1, name=f"{node.name}__matmul")[0]  # [B*heads, T, hd]
    tb = ctx.emit("Transpose", [ctxv], 1, name=f"{node.name}__tb", perm=[1, 0, 2])[0]
    return ctx.emit("Reshape", [tb, ctx.i64([0, -1, e], f"{node.name}__shape")], [out(ctx, node)], name=node.name)
