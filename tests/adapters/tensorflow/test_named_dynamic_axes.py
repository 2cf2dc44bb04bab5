"""Named dynamic axes on the tf2onnx path with a multi-output Keras model: every output axis that
follows the named batch carries its label, fixed axes are numbers, and onnxruntime runs the model
at another batch without an "Expected shape" warning."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from bridge import api


@pytest.fixture(scope="module")
def multi_output_keras(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import tensorflow as tf

    inp = tf.keras.Input((16, 3), name="x")
    boxes = tf.keras.layers.Reshape((-1, 4), name="boxes")(tf.keras.layers.Conv1D(8, 1)(inp))
    flat = tf.keras.layers.Flatten()(inp)
    model = tf.keras.Model(inp, [boxes, tf.keras.layers.Dense(5, name="fc")(flat),
                                 tf.keras.layers.Dense(4096, name="wide")(flat)])
    path = tmp_path_factory.mktemp("keras_multi") / "multi.keras"
    model.save(path)
    return path


def test_tf2onnx_outputs_carry_the_batch_label(multi_output_keras: Path, tmp_path: Path,
                                               capfd: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "m.onnx"
    api.convert(multi_output_keras, out, inputs=["x:2,16,3"], dynamic=["x:0=batch"], isolated=False)
    model = onnx.load(out)
    assert [[d.dim_param or d.dim_value for d in o.type.tensor_type.shape.dim] for o in model.graph.output] == \
        [["batch", 32, 4], ["batch", 5], ["batch", 4096]]
    options = ort.SessionOptions()
    options.log_severity_level = 1
    session = ort.InferenceSession(str(out), options, providers=["CPUExecutionProvider"])
    capfd.readouterr()
    outs = session.run(None, {session.get_inputs()[0].name: np.zeros((5, 16, 3), np.float32)})
    assert [o.shape[0] for o in outs] == [5, 5, 5]
    assert "Expected shape" not in capfd.readouterr().err
