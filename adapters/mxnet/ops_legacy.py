"""Legacy spellings and ops that are the identity at inference.

- aliases MXNet still registers under a second name (``_Equal``, ``crop``, ``Softmax``, ...): the
  translator of the canonical op runs on the node with its op renamed (nnvm writes the canonical name,
  older files the alias);
- loss heads and gradient tricks whose forward pass copies (or squashes) the data: ``MakeLoss``,
  ``SVMOutput``, the regression outputs, ``_contrib_gradientmultiplier``, ``_contrib_sign_ste``
  (MXNet src/operator/regression_output-inl.h, make_loss-inl.h, svm_output-inl.h), ``amp_multicast``.
"""

from __future__ import annotations

import dataclasses

from onnx import TensorProto

from adapters.mxnet.context import ConversionContext
from adapters.mxnet.registry import TRANSLATORS, out, translator
from adapters.mxnet.symbol import MXNode

# ---- aliases MXNet registers under a second name (nnvm writes the canonical one, old files the alias) ----
ALIASES: dict[str, str] = {
    "cast": "Cast", "flatten": "Flatten", "reshape": "Reshape", "Softmax": "SoftmaxOutput", "crop": "slice",
    "choose_element_0index": "pick", "_Equal": "_equal", "_Not_Equal": "_not_equal", "_Greater": "_greater",
    "_Greater_Equal": "_greater_equal", "_Lesser": "_lesser", "_Lesser_Equal": "_lesser_equal",
    "_EqualScalar": "_equal_scalar", "_NotEqualScalar": "_not_equal_scalar", "_GreaterScalar": "_greater_scalar",
    "_GreaterEqualScalar": "_greater_equal_scalar", "_LesserScalar": "_lesser_scalar",
    "_LesserEqualScalar": "_lesser_equal_scalar", "_MaximumScalar": "_maximum_scalar",
    "_MinimumScalar": "_minimum_scalar", "_PowerScalar": "_power_scalar", "_RPowerScalar": "_rpower_scalar",
    # ops whose inference forward is another op's (same attributes)
    "_contrib_round_ste": "round", "_contrib_SyncBatchNorm": "BatchNorm", "Convolution_v1": "Convolution",
    "Pooling_v1": "Pooling", "BatchNorm_v1": "BatchNorm", "_contrib_SparseEmbedding": "Embedding",
}


@translator(*ALIASES)
def alias(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    canonical = ALIASES[node.op]
    return TRANSLATORS[canonical](ctx, dataclasses.replace(node, op=canonical), inputs)


# ---- identity at inference --------------------------------------------------------------------------
IDENTITY = ("MakeLoss", "make_loss", "IdentityAttachKLSparseReg", "LinearRegressionOutput", "MAERegressionOutput",
            "SVMOutput", "_contrib_gradientmultiplier")


@translator(*IDENTITY)
def MakeLoss(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # forward copies the data; labels, regularisation state and gradient scales act in backward only
    # (make_loss names its output <node>_loss, as its FListOutputNames does)
    name = ctx.reserve(f"{node.name}_loss") if node.op == "make_loss" else out(ctx, node)
    return ctx.emit("Identity", inputs[:1], [name], name=node.name)


@translator("_contrib_sign_ste")
def _contrib_sign_ste(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # straight-through estimator: forward is sign(x) (src/operator/contrib/stes_op.h)
    return ctx.emit("Sign", inputs[:1], [out(ctx, node)], name=node.name)


@translator("amp_multicast")
def amp_multicast(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # src/operator/tensor/amp_cast.h: every float16/float32 input is cast to the widest of them (narrowest with
    # cast_narrow); other dtypes pass through unchanged
    count = node.attrs.optional_int("num_outputs", len(inputs)) or len(inputs)
    floats = [ctx.elem(x) for x in inputs if ctx.elem(x) in (TensorProto.FLOAT16, TensorProto.FLOAT)]
    narrow = node.attrs.optional_bool("cast_narrow", False)
    target = (min if narrow else max)(floats, key=lambda e: e == TensorProto.FLOAT) if floats else None
    outs = []
    for i, x in enumerate(inputs[:count]):
        name = out(ctx, node, i, count)
        if target is not None and ctx.elem(x) in (TensorProto.FLOAT16, TensorProto.FLOAT):
            outs += ctx.emit("Cast", [x], [name], name=f"{node.name}_{i}", to=target)
        else:
            outs += ctx.emit("Identity", [x], [name], name=f"{node.name}_{i}")
    return outs


@translator("LogisticRegressionOutput")
def LogisticRegressionOutput(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # MXNet src/operator/regression_output.cc: the forward pass is sigmoid(data); the label only feeds
    # the gradient, so it is ignored at inference
    return ctx.emit("Sigmoid", inputs[:1], [out(ctx, node)], name=node.name)
