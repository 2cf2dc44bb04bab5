"""A SavedModel whose signature captures a ``tf.constant`` (an SSD head's anchors) converts to a model whose
inputs are exactly the signature's: the captured tensor is a constant of the written model, never an extra
input that validation would feed random data on both sides."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import bridge
from adapters.tensorflow.adapter import fold_captured_inputs

ANCHORS = np.random.default_rng(0).random((192, 4)).astype(np.float32)


@pytest.fixture(scope="module")
def captured_saved_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import tensorflow as tf

    anchors = tf.constant(ANCHORS)  # captured by the signature, not a variable

    class Head(tf.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = tf.Variable(np.eye(4, dtype=np.float32) * 2.0)

        @tf.function(input_signature=[tf.TensorSpec([1, 192, 4], tf.float32, name="deltas")])
        def serve(self, deltas: tf.Tensor) -> dict[str, tf.Tensor]:
            return {"boxes": tf.matmul(deltas, self.w) + anchors}

    head = Head()
    path = tmp_path_factory.mktemp("captured") / "ssd_head"
    tf.saved_model.save(head, str(path), signatures={"serving_default": head.serve})
    return path


def test_captured_constant_is_not_an_input(captured_saved_model: Path, tmp_path: Path) -> None:
    out = tmp_path / "head.onnx"
    result = bridge.convert(captured_saved_model, out, validate=["onnxruntime"])
    assert result.passed and [m.name for m in result.inputs] == ["deltas"]
    model = onnx.load(out)
    assert [i.name for i in model.graph.input] == ["deltas"]
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["deltas"]
    deltas = np.random.default_rng(1).standard_normal((1, 192, 4)).astype(np.float32)
    np.testing.assert_allclose(session.run(None, {"deltas": deltas})[0], deltas @ (2 * np.eye(4)) + ANCHORS,
                               rtol=1e-5, atol=1e-5)


def _with_captured_input(read: bool) -> onnx.ModelProto:
    """What tf2onnx writes when a captured placeholder stays an input: 'x' plus the capture '69:0'."""
    nodes = [helper.make_node("Add", ["x", "69:0"] if read else ["x", "x"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [192, 4]),
                                           helper.make_tensor_value_info("69:0", TensorProto.FLOAT, [192, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [192, 4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


@pytest.mark.parametrize("read", [True, False], ids=["read", "unread"])
def test_fold_captured_inputs(read: bool) -> None:
    model = _with_captured_input(read)
    assert fold_captured_inputs(model, ["x"], {"69:0": lambda: ANCHORS}) == ["69:0"]
    assert [i.name for i in model.graph.input] == ["x"]
    assert [t.name for t in model.graph.initializer] == (["69:0"] if read else [])
    x = np.ones((192, 4), np.float32)
    got = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, x + (ANCHORS if read else x))


def test_unknown_extra_input_is_left_for_the_check() -> None:
    model = _with_captured_input(True)
    assert fold_captured_inputs(model, ["x"], {}) == []
    assert [i.name for i in model.graph.input] == ["x", "69:0"]
