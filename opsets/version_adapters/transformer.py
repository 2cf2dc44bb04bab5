"""Transformer ops of opset 23 (RMSNormalization, RotaryEmbedding, Attention) decomposed for opset 22 and older,
as none of them exists before 23 and onnx's version converter has no previous version for them.

The formulas follow onnx's reference implementations (onnx/reference/ops/op_*.py) and function bodies:

- RMSNormalization: ``y = x / sqrt(mean(x^2 over axis..rank-1) + epsilon) * scale``, computed in
  ``stash_type`` (float) and cast back.
- RotaryEmbedding: the first ``rotary_embedding_dim`` features of each head (all when 0) are rotated pairwise
  by the cos/sin caches (gathered by ``position_ids`` when given); pairs are the two halves, or neighbours when
  ``interleaved``. 4-D inputs are ``[B, heads, S, D]``, 3-D ones ``[B, S, heads * D]`` (``num_heads``).
- Attention (no KV cache): ``softmax(softcap(Q K^T * scale) + bias) V`` with ``bias`` from ``attn_mask``
  (boolean: False masks) and ``is_causal`` (top-left), K/V heads repeated for grouped-query attention, rows
  whose bias is all ``-inf`` giving zeros. ``past_key``/``past_value`` and the ``qk_matmul_output`` output are
  refused naming the node; ``present_key``/``present_value`` are K and V in 4-D form.

The decompositions are emitted at the hop's opset (22); later hops adapt their ops (ReduceMean, Split) further.
"""

from __future__ import annotations

import math

import numpy as np
import onnx_ir as ir

from bridge.rewriting import Builder
from bridge.rewriting.attrs import optional_float, optional_int
from opsets.registry import register
from opsets.version_adapters._util import Rewritten, fail, input_or_none


def _np_dtype(x: ir.Value) -> type:
    return x.dtype.numpy().type if x.dtype is not None else np.float32  # type: ignore[no-any-return]


def _scalar(b: Builder, x: ir.Value, value: float) -> ir.Value:
    return b.const(np.asarray(value, dtype=_np_dtype(x)))


def _rank(node: ir.Node, hop: str, x: ir.Value | None) -> int:
    if x is None or x.shape is None:
        raise fail(node, hop, "the input rank must be known")
    return len(x.shape)


def _unused(node: ir.Node, index: int) -> bool:
    if index >= len(node.outputs):
        return True
    out = node.outputs[index]
    return not out.uses() and not out.is_graph_output()


@register("RMSNormalization", 23, 22)
def rmsnormalization_23_22(b: Builder, node: ir.Node) -> Rewritten:
    hop = "rmsnormalization_23_22"
    x, scale = node.inputs[0], node.inputs[1]
    rank = _rank(node, hop, x)
    assert x is not None
    if optional_int(node, "stash_type", 1) != 1:
        raise fail(node, hop, "stash_type other than float is not supported")
    axis = optional_int(node, "axis", -1)
    if not -rank <= axis < rank:
        raise fail(node, hop, f"axis={axis} is out of range for rank {rank}")
    axis %= rank
    eps = optional_float(node, "epsilon", 1e-5)
    dtype = x.dtype
    stash = dtype not in (None, ir.DataType.FLOAT)
    work = b.cast(x, ir.DataType.FLOAT) if stash else x
    mean_sq = b.reduce("ReduceMean", b.op("Mul", work, work), list(range(axis, rank)), keepdims=1)
    rms = b.op("Sqrt", b.op("Add", mean_sq, b.f32(eps) if stash or dtype is None else _scalar(b, x, eps)))
    normed = b.op("Div", work, rms)
    if stash:
        normed = b.cast(normed, dtype)  # type: ignore[arg-type]
    return [b.op("Mul", normed, scale)]


@register("RotaryEmbedding", 23, 22)
def rotaryembedding_23_22(b: Builder, node: ir.Node) -> Rewritten:
    hop = "rotaryembedding_23_22"
    x, cos, sin = node.inputs[0], node.inputs[1], node.inputs[2]
    rank = _rank(node, hop, x)
    assert x is not None and cos is not None and sin is not None
    positions = input_or_none(node, 3)
    interleaved = optional_int(node, "interleaved", 0) != 0
    rot_dim = optional_int(node, "rotary_embedding_dim", 0)
    if rank == 3:
        heads = optional_int(node, "num_heads", 0)
        if heads <= 0:
            raise fail(node, hop, "a 3-D input needs num_heads")
        work = b.op("Reshape", x, b.i64(0, 0, heads, -1))  # [B, S, H, D]
        cache_axis = 2
    elif rank == 4:
        work, cache_axis = x, 1  # [B, H, S, D]
    else:
        raise fail(node, hop, f"the input has rank {rank}; RotaryEmbedding takes 3-D or 4-D input")
    if positions is not None:
        cos, sin = b.op("Gather", cos, positions, axis=0), b.op("Gather", sin, positions, axis=0)
    cos, sin = b.unsqueeze(cos, cache_axis), b.unsqueeze(sin, cache_axis)  # broadcast over the heads
    big = np.iinfo(np.int64).max
    if rot_dim > 0:
        rotate, keep = b.slice(work, 3, 0, rot_dim), b.slice(work, 3, rot_dim, big)
    else:
        rotate, keep = work, None
    if interleaved:
        x1 = b.op("Slice", rotate, b.i64(0), b.i64(big), b.i64(3), b.i64(2))
        x2 = b.op("Slice", rotate, b.i64(1), b.i64(big), b.i64(3), b.i64(2))
    else:
        x1, x2 = b.op_multi("Split", rotate, num_outputs=2, axis=3)
    real = b.op("Sub", b.op("Mul", cos, x1), b.op("Mul", sin, x2))
    imag = b.op("Add", b.op("Mul", sin, x1), b.op("Mul", cos, x2))
    if interleaved:
        pairs = b.op("Concat", b.unsqueeze(real, 4), b.unsqueeze(imag, 4), axis=4)
        rotated = b.op("Reshape", pairs, b.op("Shape", rotate))
    else:
        rotated = b.op("Concat", real, imag, axis=3)
    out = rotated if keep is None else b.op("Concat", rotated, keep, axis=3)
    if rank == 3:
        out = b.op("Reshape", out, b.op("Shape", x))
    return [out]


def _to_heads(b: Builder, x: ir.Value, heads: int) -> ir.Value:
    """``[B, S, heads * D]`` -> ``[B, heads, S, D]``."""
    return b.op("Transpose", b.op("Reshape", x, b.i64(0, 0, heads, -1)), perm=[0, 2, 1, 3])


def _repeat_heads(b: Builder, x: ir.Value, kv_heads: int, q_heads: int) -> ir.Value:
    """``[B, kv, S, D]`` -> ``[B, q, S, D]`` with each head repeated ``q / kv`` times in place (h0 h0 h1 h1)."""
    reps = q_heads // kv_heads
    shape = b.op("Shape", x)
    wide = b.op("Concat", b.slice(shape, 0, 0, 2), b.i64(reps), b.slice(shape, 0, 2, 4), axis=0)
    expanded = b.op("Expand", b.unsqueeze(x, 2), wide)
    return b.op("Reshape", expanded, b.op("Concat", b.i64(0, q_heads), b.slice(shape, 0, 2, 4), axis=0))


def _dim_scalar(b: Builder, x: ir.Value, axis: int) -> ir.Value:
    return b.op("Squeeze", b.dim(x, axis), b.i64(0))


@register("Attention", 23, 22)
def attention_23_22(b: Builder, node: ir.Node) -> Rewritten:
    hop = "attention_23_22"
    q, k, v = node.inputs[0], node.inputs[1], node.inputs[2]
    rank = _rank(node, hop, q)
    assert q is not None and k is not None and v is not None
    mask = input_or_none(node, 3)
    if input_or_none(node, 4) is not None or input_or_none(node, 5) is not None:
        raise fail(node, hop, "past_key/past_value (a KV cache) is not supported; export without the cache")
    if len(node.inputs) > 6 and node.inputs[6] is not None:
        raise fail(node, hop, "nonpad_kv_seqlen is not supported")
    if not _unused(node, 3):
        raise fail(node, hop, "the qk_matmul_output output is used (qk_matmul_output_mode="
                   f"{optional_int(node, 'qk_matmul_output_mode', 0)}); only Y and present_key/value convert")
    for attr in ("left_window_size", "right_window_size"):
        if optional_int(node, attr, -1) != -1:
            raise fail(node, hop, f"{attr} (sliding window) is not supported")
    dtype = _np_dtype(q)
    if rank == 3:
        q_heads, kv_heads = optional_int(node, "q_num_heads", 0), optional_int(node, "kv_num_heads", 0)
        if q_heads <= 0 or kv_heads <= 0:
            raise fail(node, hop, "3-D Q/K/V need q_num_heads and kv_num_heads")
        q4, k4, v4 = _to_heads(b, q, q_heads), _to_heads(b, k, kv_heads), _to_heads(b, v, kv_heads)
    elif rank == 4:
        q4, k4, v4 = q, k, v
        q_dim = q.shape[1] if q.shape is not None else None
        k_dim = k.shape[1] if k.shape is not None else None
        # dynamic head counts: MatMul broadcasting covers equal counts and a single K/V head
        q_heads = q_dim if isinstance(q_dim, int) else 0
        kv_heads = k_dim if isinstance(k_dim, int) else 0
    else:
        raise fail(node, hop, f"Q has rank {rank}; Attention takes 3-D or 4-D inputs")
    present = [k4, v4]
    if q_heads and kv_heads and q_heads != kv_heads:
        if q_heads % kv_heads:
            raise fail(node, hop, f"q heads ({q_heads}) are not a multiple of kv heads ({kv_heads})")
        k4, v4 = _repeat_heads(b, k4, kv_heads, q_heads), _repeat_heads(b, v4, kv_heads, q_heads)
    if "scale" in node.attributes:
        root = b.const(np.asarray(math.sqrt(optional_float(node, "scale", 1.0)), dtype=dtype))
    else:
        head = b.op("Cast", b.dim(q4, 3), to=q.dtype or ir.DataType.FLOAT)
        scale = b.op("Sqrt", b.op("Div", b.const(np.ones(1, dtype)), head))  # 1 / sqrt(D)
        root = b.op("Sqrt", scale)  # applied to each of Q and K, as onnx's reference does
    scores = b.op("MatMul", b.op("Mul", q4, root), b.op("Transpose", b.op("Mul", k4, root), perm=[0, 1, 3, 2]))
    softcap = optional_float(node, "softcap", 0.0)
    if softcap > 0:
        cap = b.const(np.asarray(softcap, dtype=dtype))
        scores = b.op("Mul", b.op("Tanh", b.op("Div", scores, cap)), cap)
    zero, neg_inf = b.const(np.asarray(0, dtype)), b.const(np.asarray(-np.inf, dtype))
    bias: ir.Value | None = None
    if mask is not None:
        bias = b.where(mask, zero, neg_inf) if mask.dtype == ir.DataType.BOOL else mask
        bias = _pad_keys(b, node, bias, mask, k4, neg_inf)
    if optional_int(node, "is_causal", 0):
        rows = b.op("Range", b.const(np.asarray(0, np.int64)), _dim_scalar(b, q4, 2), b.const(np.asarray(1, np.int64)))
        cols = b.op("Range", b.const(np.asarray(0, np.int64)), _dim_scalar(b, k4, 2), b.const(np.asarray(1, np.int64)))
        allowed = b.op("LessOrEqual", b.unsqueeze(cols, 0), b.unsqueeze(rows, 1))
        causal = b.where(allowed, zero, neg_inf)
        bias = causal if bias is None else b.op("Add", bias, causal)
    if bias is not None:
        scores = b.op("Add", scores, bias)
    precision = optional_int(node, "softmax_precision", 0)
    if precision and q.dtype is not None and precision != q.dtype.value:
        probs = b.cast(b.op("Softmax", b.cast(scores, ir.DataType(precision)), axis=-1), q.dtype)
    else:
        probs = b.op("Softmax", scores, axis=-1)
    if mask is not None and bias is not None:
        # a row with every key masked: softmax gives NaN, Attention gives zeros
        dead = b.op("Equal", b.reduce("ReduceMax", bias, [-1], keepdims=1), neg_inf)
        probs = b.where(dead, zero, probs)
    y = b.op("MatMul", probs, v4)
    if rank == 3:
        y = b.op("Reshape", b.op("Transpose", y, perm=[0, 2, 1, 3]), b.i64(0, 0, -1))
    outs: list[ir.Value] = [y, *present][: len(node.outputs)]
    if len(node.outputs) > 3:
        outs.append(b.op("Identity", y))  # unused (checked above); keeps the output count
    return outs


def _pad_keys(b: Builder, node: ir.Node, bias: ir.Value, mask: ir.Value, k4: ir.Value, neg_inf: ir.Value) -> ir.Value:
    """``bias`` (from ``mask``) padded with ``-inf`` on its last axis up to the keys' length: attn_mask may be
    shorter than the keys."""
    if mask.shape is None:
        raise fail(node, "attention_23_22", "attn_mask's rank must be known")
    rank = len(mask.shape)
    keys = k4.shape[2] if k4.shape is not None else None
    if isinstance(keys, int) and mask.shape[-1] == keys:
        return bias
    missing = b.op("Sub", b.dim(k4, 2), b.dim(bias, rank - 1))
    pads = b.op("Concat", b.i64(*([0] * (2 * rank - 1))), missing, axis=0)
    return b.op("Pad", bias, pads, neg_inf)
