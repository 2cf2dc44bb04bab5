"""Input names as TF / TFLite spell them (``serving_default_x:0``) are accepted by ``--input``: in the
unambiguous ``NAME=SHAPE`` form and in ``NAME:SHAPE`` split at the last colon. The model is a TFLite
flatbuffer built in the test with ``tf.lite.TFLiteConverter`` (dynamic batch)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge import api
from bridge.errors import UsageError


@pytest.fixture(scope="module")
def colon_tflite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import tensorflow as tf

    class Affine(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
        def __call__(self, x: tf.Tensor) -> dict[str, tf.Tensor]:
            return {"y": tf.nn.relu(x) * 2.0 + 1.0}

    module = Affine()
    converter = tf.lite.TFLiteConverter.from_concrete_functions([module.__call__.get_concrete_function()], module)
    path = tmp_path_factory.mktemp("colon") / "affine.tflite"
    path.write_bytes(converter.convert())
    return path


@pytest.mark.parametrize("spec", ["serving_default_x:0=3,4", "serving_default_x:0:3,4", "serving_default_x:0=3,4:float32"])
def test_tflite_input_named_with_a_colon(colon_tflite: Path, tmp_path: Path, spec: str) -> None:
    result = api.convert(colon_tflite, tmp_path / "m.onnx", inputs=[spec], isolated=False)
    assert result.passed and result.written
    assert [(m.name, list(m.shape or ())) for m in result.inputs] == [("serving_default_x:0", [3, 4])]


def test_a_misspelt_colon_name_is_named_not_called_a_bad_shape(colon_tflite: Path, tmp_path: Path) -> None:
    with pytest.raises(UsageError) as info:
        api.convert(colon_tflite, tmp_path / "m.onnx", inputs=["serving_default_y:0=3,4"], isolated=False)
    assert "positive integer" not in str(info.value) and "serving_default_x:0" in str(info.value)
