"""Helpers for the bridge.contrib lowering tests: one-node contrib models, lowering + onnxruntime,
MXNet as the reference, and detector inputs whose scores are well separated."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
from onnx import TensorProto, helper

CONTRIB = "bridge.contrib"

Dims = Sequence[int | str]


def contrib_model(op: str, inputs: Mapping[str, Dims], outputs: Mapping[str, Dims], opset: int = 17,
                  **attrs: Any) -> onnx.ModelProto:
    """A model of one bridge.contrib node, graph inputs/outputs float32 with the given dims."""
    node = helper.make_node(op, list(inputs), list(outputs), name=f"{op}_0", domain=CONTRIB, **attrs)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(d)) for n, d in inputs.items()],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(d)) for n, d in outputs.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(CONTRIB, 1)])
    model.ir_version = 8
    return model


def lower(model: onnx.ModelProto, *passes: ir.passes.PassBase) -> onnx.ModelProto:
    """Run the passes, then require a standard-ONNX model that passes the full checker."""
    irm = ir.serde.deserialize_model(model)
    for p in passes:
        irm = p(irm).model
    lowered = ir.serde.serialize_model(irm)
    assert not [n.op_type for n in lowered.graph.node if n.domain == CONTRIB]
    onnx.checker.check_model(lowered, full_check=True)
    return lowered


def run_ort(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, dict(feeds))


def separated_probs(rng: np.random.Generator, batch: int, classes: int, anchors: int) -> np.ndarray:
    """cls_prob [B, C+1, N]: softmax-like columns whose per-anchor max scores differ by >= 1e-3."""
    probs = rng.random((batch, classes + 1, anchors)).astype(np.float32) * 0.2
    best = rng.integers(0, classes + 1, (batch, anchors))
    top = (rng.permutation(batch * anchors).reshape(batch, anchors) / (batch * anchors) * 0.7 + 0.25)
    np.put_along_axis(probs, best[:, None, :], top[:, None, :].astype(np.float32), axis=1)
    return probs.astype(np.float32)


def corner_anchors(rng: np.random.Generator, anchors: int, spread: float = 0.7) -> np.ndarray:
    xy = rng.random((1, anchors, 2)) * spread
    wh = rng.random((1, anchors, 2)) * 0.3 + 0.05
    return np.concatenate([xy, xy + wh], -1).astype(np.float32)


def tiny_ssd_symbol(mx: ModuleType, **detection: Any) -> Any:
    """A two-scale MXNet SSD (3 classes + background) ending in MultiBoxDetection(**detection)."""
    data = mx.sym.var("data")
    x = mx.sym.Activation(mx.sym.Convolution(data, kernel=(3, 3), pad=(1, 1), stride=(2, 2), num_filter=8, name="c1"),
                          act_type="relu")
    f2 = mx.sym.Activation(mx.sym.Convolution(x, kernel=(3, 3), pad=(1, 1), stride=(2, 2), num_filter=8, name="c2"),
                           act_type="relu")
    locs, clss, anchors = [], [], []
    for i, (feat, sizes, ratios) in enumerate([(x, (0.2, 0.27), (1, 2, 0.5)), (f2, (0.4, 0.5), (1, 2, 0.5, 3))]):
        a = len(sizes) + len(ratios) - 1
        loc = mx.sym.Convolution(feat, kernel=(3, 3), pad=(1, 1), num_filter=4 * a, name=f"loc{i}")
        locs.append(mx.sym.Flatten(mx.sym.transpose(loc, axes=(0, 2, 3, 1))))
        cls = mx.sym.Convolution(feat, kernel=(3, 3), pad=(1, 1), num_filter=4 * a, name=f"cls{i}")  # 3 classes + bg
        clss.append(mx.sym.Flatten(mx.sym.transpose(cls, axes=(0, 2, 3, 1))))
        anchors.append(mx.sym.Flatten(mx.sym.contrib.MultiBoxPrior(feat, sizes=sizes, ratios=ratios, name=f"prior{i}")))
    loc = mx.sym.Concat(*locs, dim=1)
    cls = mx.sym.transpose(mx.sym.Reshape(mx.sym.Concat(*clss, dim=1), shape=(0, -1, 4)), axes=(0, 2, 1))
    anchor = mx.sym.Reshape(mx.sym.Concat(*anchors, dim=1), shape=(0, -1, 4))
    prob = mx.sym.SoftmaxActivation(cls, mode="channel")
    return mx.sym.contrib.MultiBoxDetection(prob, loc, anchor, name="detection", **detection)
