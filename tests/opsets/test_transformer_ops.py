"""A decoder block written with opset-23 ops (RMSNormalization, RotaryEmbedding, Attention with a causal mask,
grouped-query heads) converts to opset 17 through ``bridge.api.convert`` and validates against the source in
onnxruntime, with a dynamic sequence length: the down adapters compose, and later hops convert what they emit."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from bridge import api


def _block(hidden: int, q_heads: int, kv_heads: int, interleaved: int) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    head = hidden // q_heads
    angles = rng.random((64, head // 2)) * 6

    def w(name: str, shape: tuple[int, ...]) -> onnx.TensorProto:
        return numpy_helper.from_array((rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32), name)

    nodes = [
        helper.make_node("RMSNormalization", ["x", "g"], ["h"], epsilon=1e-6),
        helper.make_node("MatMul", ["h", "wq"], ["q"]),
        helper.make_node("MatMul", ["h", "wk"], ["k"]),
        helper.make_node("MatMul", ["h", "wv"], ["v"]),
        helper.make_node("RotaryEmbedding", ["q", "cos", "sin", "pos"], ["qr"], num_heads=q_heads, interleaved=interleaved),
        helper.make_node("RotaryEmbedding", ["k", "cos", "sin", "pos"], ["kr"], num_heads=kv_heads, interleaved=interleaved),
        helper.make_node("Attention", ["qr", "kr", "v"], ["a"], q_num_heads=q_heads, kv_num_heads=kv_heads, is_causal=1),
        helper.make_node("Add", ["x", "a"], ["y"]),
    ]
    inits = [numpy_helper.from_array(np.ones(hidden, np.float32), "g"), w("wq", (hidden, hidden)),
             w("wk", (hidden, kv_heads * head)), w("wv", (hidden, kv_heads * head)),
             numpy_helper.from_array(np.cos(angles).astype(np.float32), "cos"),
             numpy_helper.from_array(np.sin(angles).astype(np.float32), "sin")]
    graph = helper.make_graph(
        nodes, "block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "seq", hidden]),
         helper.make_tensor_value_info("pos", TensorProto.INT64, [1, "seq"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "seq", hidden])], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)], ir_version=10)


@pytest.mark.parametrize(("q_heads", "kv_heads", "interleaved"), [(4, 4, 0), (4, 2, 1)])
def test_opset23_decoder_block_converts_to_17_and_validates(tmp_path: Path, q_heads: int, kv_heads: int,
                                                            interleaved: int) -> None:
    onnx.save(_block(32, q_heads, kv_heads, interleaved), tmp_path / "block.onnx")
    feeds: dict[str, np.ndarray] = {"x": np.random.default_rng(1).standard_normal((1, 7, 32)).astype(np.float32),
             "pos": np.arange(3, 10, dtype=np.int64)[None]}
    np.savez(tmp_path / "feeds.npz", **feeds)  # positions index the caches: generated ids could leave them
    result = api.convert(tmp_path / "block.onnx", tmp_path / "out.onnx", opset=17, feeds=tmp_path / "feeds.npz",
                         dynamic=["x:1=seq", "pos:1=seq"])
    assert result.passed
    out = onnx.load(tmp_path / "out.onnx")
    assert out.opset_import[0].version == 17
    assert out.graph.input[0].type.tensor_type.shape.dim[1].dim_param == "seq"  # the sequence stays dynamic
    assert not {n.op_type for n in out.graph.node} & {"RMSNormalization", "RotaryEmbedding", "Attention"}
