"""Translators for MXNet's sequence layers: the fused RNN op (LSTM / GRU / vanilla, multi-layer,
bidirectional) with Gluon's ``_rnn_param_concat``, SequenceReverse / SequenceMask and Embedding.

MXNet keeps every RNN weight in one flat vector (cuDNN's layout, gates in cuDNN order); ONNX's
LSTM / GRU / RNN take per-layer ``W``, ``R``, ``B`` tensors with gates in ONNX order. The translator
slices the flat vector with ONNX ops (it is often itself computed, by ``_rnn_param_concat``), so the
weights stay in the graph as MXNet stored them and onnxruntime folds the slicing once at load.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from adapters.mxnet.context import ConversionContext
from adapters.mxnet.registry import out, translator
from adapters.mxnet.symbol import MXNode
from bridge.errors import ExportError

# MXNet mode -> (ONNX op, gates, ONNX gate order as indices into MXNet's gate blocks, activations)
# MXNet (cuDNN) gate order: LSTM i, f, g, o; GRU r, z, n. ONNX: LSTM i, o, f, c; GRU z, r, h.
_MODES: dict[str, tuple[str, int, list[int], list[str] | None]] = {
    "lstm": ("LSTM", 4, [0, 3, 1, 2], None),
    "gru": ("GRU", 3, [1, 0, 2], None),
    "rnn_tanh": ("RNN", 1, [0], ["Tanh"]),
    "rnn_relu": ("RNN", 1, [0], ["Relu"]),
}


@translator("_rnn_param_concat")
def _rnn_param_concat(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # Gluon's rnn_layer.py flattens each weight and joins them along ``dim`` (src/operator/nn/concat.cc)
    num = node.attrs.optional_int("num_args", len(inputs)) or len(inputs)
    return ctx.emit("Concat", inputs[:num], [out(ctx, node)], name=node.name, axis=node.attrs.optional_int("dim", 1))


class _FlatParams:
    """Consecutive slices of MXNet's flat RNN parameter vector, in the order MXNet lays them out."""

    def __init__(self, ctx: ConversionContext, node: MXNode, flat: str) -> None:
        self.ctx, self.node, self.flat, self.offset = ctx, node, flat, 0

    def take(self, shape: tuple[int, ...], order: list[int]) -> str:
        """The next prod(shape) values as ``shape`` = (gates*H, ...), gate blocks reordered to ``order``."""
        ctx, name = self.ctx, self.node.name
        n = int(np.prod(shape))
        part = ctx.emit("Slice", [self.flat, ctx.i64([self.offset], f"{name}__p0"),
                                  ctx.i64([self.offset + n], f"{name}__p1")], 1, name=f"{name}__param")[0]
        self.offset += n
        gates = len(order)
        blocks = ctx.emit("Reshape", [part, ctx.i64([gates, -1], f"{name}__gshape")], 1, name=f"{name}__gates")[0]
        if order != list(range(gates)):
            blocks = ctx.emit("Gather", [blocks, ctx.i64(order, f"{name}__gorder")], 1, name=f"{name}__reorder",
                              axis=0)[0]
        return ctx.emit("Reshape", [blocks, ctx.i64([1, *shape], f"{name}__wshape")], 1, name=f"{name}__w")[0]


@translator("RNN")
def RNN(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # MXNet src/operator/rnn-inl.h (GetRnnParamSize, the CPU kernels in rnn_impl.h): data [T, N, I] (layout
    # TNC), parameters = for every layer and direction W_x [G*H, I_l] then W_h [G*H, H], followed by every
    # b_x [G*H], b_h [G*H] in the same order; I_l = I for layer 0 and D*H above. States [L*D, N, H].
    # GRU is cuDNN's: n = tanh(W_n x + b_xn + r * (R_n h + b_hn)), ONNX GRU linear_before_reset=1.
    a = node.attrs
    mode = a.optional_str("mode", "lstm") or "lstm"
    if mode not in _MODES:
        raise ExportError(f"node '{node.name}': RNN mode={mode} is not supported")
    if a.optional_int("projection_size", None):
        raise ExportError(f"node '{node.name}': RNN projection_size (LSTMP) has no ONNX LSTM equivalent")
    if a.optional_float("lstm_state_clip_min", None) is not None or a.optional_float("lstm_state_clip_max", None) is not None:
        raise ExportError(f"node '{node.name}': RNN lstm_state_clip_min/max clips the cell state; ONNX LSTM's "
                          "clip bounds the gate inputs instead, so it cannot be expressed exactly")
    if a.optional_bool("use_sequence_length", False):
        raise ExportError(f"node '{node.name}': RNN use_sequence_length=True is not supported (MXNet 1.9 runs it on "
                          "GPU only, so there is no CPU reference to prove an ONNX translation against)")
    op, gates, order, acts = _MODES[mode]
    hidden = a.required_int("state_size")
    layers = a.optional_int("num_layers", 1) or 1
    dirs = 2 if a.optional_bool("bidirectional", False) else 1
    lstm = mode == "lstm"
    x, flat, h0 = inputs[0], inputs[1], inputs[2]
    c0 = inputs[3] if lstm else None
    in_size = ctx.static_dims(x, node.name, [2])[0]
    name = node.name

    params = _FlatParams(ctx, node, flat)
    weights: list[list[tuple[str, str]]] = []
    for layer in range(layers):
        width = in_size if layer == 0 else dirs * hidden
        weights.append([(params.take((gates * hidden, width), order), params.take((gates * hidden, hidden), order))
                        for _ in range(dirs)])
    biases: list[list[str]] = []
    for _ in range(layers):
        per_dir = []
        for _ in range(dirs):
            bx = params.take((gates * hidden,), order)
            bh = params.take((gates * hidden,), order)
            per_dir.append(ctx.emit("Concat", [bx, bh], 1, name=f"{name}__bias", axis=1)[0])
        biases.append(per_dir)

    def cat(ts: list[str], what: str) -> str:
        return ts[0] if len(ts) == 1 else ctx.emit("Concat", ts, 1, name=f"{name}__{what}", axis=0)[0]

    def state_slice(s: str, layer: int) -> str:
        return ctx.emit("Slice", [s, ctx.i64([layer * dirs], f"{name}__s0"), ctx.i64([(layer + 1) * dirs],
                                                                                         f"{name}__s1")], 1,
                        name=f"{name}__state{layer}")[0]

    direction = "bidirectional" if dirs == 2 else "forward"
    seq = x
    hs, cs = [], []
    for layer in range(layers):
        w = cat([wx for wx, _ in weights[layer]], "W")
        r = cat([wh for _, wh in weights[layer]], "R")
        b = cat(biases[layer], "B")
        ins = [seq, w, r, b, "", state_slice(h0, layer)]
        if lstm:
            assert c0 is not None
            ins.append(state_slice(c0, layer))
        n_out = 3 if lstm else 2
        res = ctx.emit(op, ins, n_out, name=f"{name}__l{layer}", hidden_size=hidden, direction=direction,
                       linear_before_reset=1 if mode == "gru" else None, activations=acts * dirs if acts else None)
        y = ctx.emit("Transpose", [res[0]], 1, name=f"{name}__l{layer}_tnd", perm=[0, 2, 1, 3])[0]  # [T, N, D, H]
        seq = ctx.emit("Reshape", [y, ctx.i64([0, 0, -1], f"{name}__yshape")], 1, name=f"{name}__l{layer}_y")[0]
        hs.append(res[1])
        if lstm:
            cs.append(res[2])
    result = [ctx.emit("Identity", [seq], [out(ctx, node)], name=name)[0]]
    if a.optional_bool("state_outputs", False):
        # MXNet names them <node>_state_output and <node>_statecell_output (rnn.cc FListOutputNames)
        result.append(ctx.emit("Concat", hs, [ctx.reserve(f"{name}_state_output")], name=f"{name}__hy", axis=0)[0])
        if lstm:
            result.append(ctx.emit("Concat", cs, [ctx.reserve(f"{name}_statecell_output")], name=f"{name}__cy",
                                   axis=0)[0])
    return result


def _lengths(ctx: ConversionContext, node: MXNode, lengths: str) -> str:
    """MXNet sequence lengths (any dtype) as int64, truncated like MXNet's static_cast<int>."""
    if ctx.elem(lengths) == TensorProto.INT64:
        return lengths
    return ctx.emit("Cast", [lengths], 1, name=f"{node.name}__len", to=TensorProto.INT64)[0]


@translator("SequenceReverse")
def SequenceReverse(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # MXNet src/operator/sequence_reverse-inl.h: data [T, N, ...] reversed along time (axis 0, the only
    # axis MXNet accepts); with use_sequence_length only the first length[n] steps of sample n
    # (ONNX ReverseSequence, which needs rank >= 2 and keeps the rest in place, as MXNet does)
    a = node.attrs
    x = inputs[0]
    if (a.optional_int("axis", 0) or 0) != 0:
        raise ExportError(f"node '{node.name}': SequenceReverse supports axis=0 only (as MXNet)")
    if a.optional_bool("use_sequence_length", False):
        return ctx.emit("ReverseSequence", [x, _lengths(ctx, node, inputs[1])], [out(ctx, node)], name=node.name,
                        batch_axis=1, time_axis=0)
    big = np.iinfo(np.int64).max
    return ctx.emit("Slice", [x, ctx.i64([-1], f"{node.name}__start"), ctx.i64([-big], f"{node.name}__end"),
                              ctx.i64([0], f"{node.name}__axes"), ctx.i64([-1], f"{node.name}__step")],
                    [out(ctx, node)], name=node.name)


@translator("SequenceMask")
def SequenceMask(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # MXNet src/operator/sequence_mask-inl.h: steps t >= int(length[n]) along ``axis`` (0: [T, N, ...],
    # 1: [N, T, ...]) are set to ``value`` (default 0); without use_sequence_length the op is the identity
    a = node.attrs
    x = inputs[0]
    if not a.optional_bool("use_sequence_length", False):
        return ctx.emit("Identity", [x], [out(ctx, node)], name=node.name)
    axis = a.optional_int("axis", 0) or 0
    if axis not in (0, 1):
        raise ExportError(f"node '{node.name}': SequenceMask axis={axis} (MXNet accepts 0 or 1)")
    rank = ctx.rank(x, node.name)
    name = node.name
    steps_dim = ctx.emit("Gather", [ctx.emit("Shape", [x], 1, name=f"{name}__shape")[0],
                                    ctx.const(np.asarray(axis, np.int64), f"{name}__axis")], 1,
                         name=f"{name}__steps", axis=0)[0]
    t = ctx.emit("Range", [ctx.const(np.asarray(0, np.int64), f"{name}__zero"), steps_dim,
                           ctx.const(np.asarray(1, np.int64), f"{name}__one")], 1, name=f"{name}__t")[0]
    lens = _lengths(ctx, node, inputs[1])
    if axis == 0:  # keep[t, n] = t < len[n]
        keep = ctx.emit("Less", [ctx.unsqueeze(t, [1], name=f"{name}__t_col"), lens], 1, name=f"{name}__keep")[0]
    else:  # keep[n, t]
        keep = ctx.emit("Less", [t, ctx.unsqueeze(lens, [1], name=f"{name}__len_col")], 1, name=f"{name}__keep")[0]
    if rank > 2:
        keep = ctx.unsqueeze(keep, list(range(2, rank)), name=f"{name}__keep_b")
    value = ctx.scalar(float(a.optional_float("value", 0.0) or 0.0), x, f"{name}__value")
    return ctx.emit("Where", [keep, x, value], [out(ctx, node)], name=name)


@translator("Embedding")
def Embedding(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # MXNet src/operator/tensor/indexing_op.h (EmbeddingOpForward -> take with mode 'clip'): indices
    # (any dtype, truncated to int) are clipped to [0, input_dim - 1], then rows of weight are gathered
    data, weight = inputs[:2]
    rows = node.attrs.optional_int("input_dim", None)
    if rows is None:
        rows = ctx.static_dims(weight, node.name, [0])[0]
    idx = data if ctx.elem(data) == TensorProto.INT64 else ctx.emit(
        "Cast", [data], 1, name=f"{node.name}__idx", to=TensorProto.INT64)[0]
    idx = ctx.emit("Clip", [idx, ctx.const(np.asarray(0, np.int64), f"{node.name}__lo"),
                            ctx.const(np.asarray(rows - 1, np.int64), f"{node.name}__hi")], 1,
                   name=f"{node.name}__clip")[0]
    return ctx.emit("Gather", [weight, idx], [out(ctx, node)], name=node.name, axis=0)


@translator("SequenceLast")
def SequenceLast(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # sequence_last-inl.h: the step length[n] - 1 (or the last one) of each sample along ``axis`` (0 or 1)
    a = node.attrs
    x = inputs[0]
    n = node.name
    axis = a.optional_int("axis", 0) or 0
    if not a.optional_bool("use_sequence_length", False):
        return ctx.emit("Gather", [x, ctx.const(np.asarray(-1, np.int64), f"{n}__last")], [out(ctx, node)], name=n,
                        axis=axis)
    rank = ctx.rank(x, n)
    lens = ctx.emit("Cast", [inputs[1]], 1, name=f"{n}__len", to=TensorProto.INT64)[0]
    idx = ctx.emit("Sub", [lens, ctx.const(np.asarray(1, np.int64), f"{n}__one")], 1, name=f"{n}__idx")[0]
    batch_axis = 1 - axis
    idx = ctx.unsqueeze(idx, [d for d in range(rank) if d != batch_axis], name=f"{n}__idx_b")
    one_step = ctx.emit("Slice", [x, ctx.i64([0], f"{n}__s0"), ctx.i64([1], f"{n}__s1"), ctx.i64([axis], f"{n}__sax")],
                        1, name=f"{n}__step")[0]
    idx = ctx.emit("Expand", [idx, ctx.emit("Shape", [one_step], 1, name=f"{n}__step_shape")[0]], 1,
                   name=f"{n}__idx_e")[0]
    picked = ctx.emit("GatherElements", [x, idx], 1, name=f"{n}__pick", axis=axis)[0]
    return [ctx.squeeze(picked, [axis], name=n, output=out(ctx, node))]
