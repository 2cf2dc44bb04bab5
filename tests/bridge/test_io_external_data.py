"""``bridge.io.save_model`` with external data: large tensors go to ``<model>.data`` beside the model (forced,
or automatically past protobuf's 2 GiB limit), ``onnx.load`` and onnxruntime read it back unchanged, and
the caller's ModelProto is left as it was."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from bridge import io as bio


def _model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    big = rng.standard_normal((64, 32)).astype(np.float32)  # 8 KiB: external
    small = np.arange(4, dtype=np.float32)  # 16 B: stays inline
    inner = helper.make_graph([helper.make_node("Identity", ["w_sub"], ["y_sub"])], "sub", [],
                              [helper.make_tensor_value_info("y_sub", TensorProto.FLOAT, [32, 32])],
                              initializer=[numpy_helper.from_array(big[:32], "w_sub")])
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["y"]),
             helper.make_node("If", ["cond"], ["z"], then_branch=inner, else_branch=inner)]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64]),
                     helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 32]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, [32, 32])],
        initializer=[numpy_helper.from_array(big, "w"),
                     numpy_helper.from_array(np.resize(small, 32).astype(np.float32), "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("how", ["forced", "automatic-past-the-limit", "inline"])
def test_external_data_round_trip(tmp_path: Path, how: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import onnxruntime as ort

    model = _model()
    before = model.SerializeToString()
    target = tmp_path / "m.onnx"
    if how == "automatic-past-the-limit":
        monkeypatch.setattr(bio, "_PROTOBUF_LIMIT", 1000)
    bio.save_model(model, target, external_data=True if how == "forced" else None)
    assert model.SerializeToString() == before  # the caller's proto is unchanged
    data = target.with_name("m.onnx.data")
    assert data.exists() == (how != "inline")
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp files left
    if how != "inline":
        # w and the subgraph's w_sub (in both branches of the If) go out, the small b stays inline
        assert data.stat().st_size == 64 * 32 * 4 + 2 * 32 * 32 * 4
        assert target.stat().st_size < 2000
    loaded = bio.load_model(target)
    for a, b in zip(loaded.graph.initializer, model.graph.initializer, strict=True):
        np.testing.assert_array_equal(numpy_helper.to_array(a), numpy_helper.to_array(b))
    x = np.ones((2, 64), np.float32)
    sess = ort.InferenceSession(str(target), providers=["CPUExecutionProvider"])
    y, z = sess.run(None, {"x": x, "cond": np.array(True)})
    w = numpy_helper.to_array(model.graph.initializer[0])
    np.testing.assert_allclose(y, x @ w + numpy_helper.to_array(model.graph.initializer[1]), rtol=1e-5)
    np.testing.assert_array_equal(z, w[:32])


def test_rewriting_replaces_a_stale_data_file(tmp_path: Path) -> None:
    target = tmp_path / "m.onnx"
    target.with_name("m.onnx.data").write_bytes(b"stale" * 10_000)
    bio.save_model(_model(), target, external_data=True)
    assert target.with_name("m.onnx.data").stat().st_size == 64 * 32 * 4 + 2 * 32 * 32 * 4
    assert len(bio.load_model(target).graph.initializer) == 2
