"""Keras layers whose kernels run in compiled tf.functions (ConvNeXt's pattern) convert and validate.

Keras 3 runs grouped convolutions inside ``tf.function(jit_compile=True)``; ConvNeXt's depthwise
convolution is one, next to exact GELU (TF's ``Erfc``), LayerScale and stochastic depth. Frozen, such a
call stays a ``StatefulPartitionedCall`` node grappler will not inline and tf2onnx cannot convert; a
user layer whose call is a jit-compiled tf.function leaves the same node.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import onnx
import pytest

import bridge


def convnext_like(dim: int = 8, custom: bool = True) -> Any:
    """Stem -> one ConvNeXt block (grouped 7x7 conv, LayerNorm, Dense, exact GELU, Dense, LayerScale,
    stochastic depth, residual) -> a custom layer computing in a jit-compiled tf.function -> pooled head.
    ``custom=False`` keeps Keras' own layers only (a saved file loads anywhere; the isolated reference
    process does not know the test's custom classes)."""
    import keras
    import tensorflow as tf

    @keras.saving.register_keras_serializable(package="bridge_tests")
    class LayerScale(keras.layers.Layer):
        def __init__(self, dim: int, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.dim = dim

        def build(self, _: Any) -> None:
            self.gamma = self.add_weight(shape=(self.dim,), initializer=keras.initializers.RandomUniform(0.5, 1.5))

        def call(self, x: Any) -> Any:
            return x * self.gamma

        def get_config(self) -> dict[str, Any]:
            return {**super().get_config(), "dim": self.dim}

    @keras.saving.register_keras_serializable(package="bridge_tests")
    class StochasticDepth(keras.layers.Layer):
        def call(self, x: Any, training: Any = None) -> Any:
            if training:
                keep = tf.cast(tf.random.uniform((tf.shape(x)[0], 1, 1, 1)) > 0.1, x.dtype)
                return x * keep / 0.9
            return x

    @keras.saving.register_keras_serializable(package="bridge_tests")
    class CompiledScale(keras.layers.Layer):
        """A user layer whose computation is a jit-compiled tf.function (a call node once frozen)."""

        def build(self, shape: Any) -> None:
            self.w = self.add_weight(shape=(shape[-1],), initializer="ones")

        def call(self, x: Any) -> Any:
            @tf.function(jit_compile=True)
            def scaled(t: Any, w: Any) -> Any:
                return tf.nn.relu6(t * w) - 1.0

            return scaled(x, tf.convert_to_tensor(self.w))

        def compute_output_shape(self, shape: Any) -> Any:
            return shape

    keras.utils.set_random_seed(0)
    inp = keras.Input((16, 16, 3), name="image")
    x = keras.layers.Conv2D(dim, 4, strides=4, name="stem")(inp)
    y = keras.layers.Conv2D(dim, 7, padding="same", groups=dim, name="depthwise")(x)
    y = keras.layers.LayerNormalization(epsilon=1e-6, name="norm")(y)
    y = keras.layers.Dense(4 * dim, name="pw1")(y)
    y = keras.layers.Activation("gelu", name="gelu")(y)
    y = keras.layers.Dense(dim, name="pw2")(y)
    if custom:
        y = LayerScale(dim, name="layer_scale")(y)
        y = StochasticDepth(name="drop_path")(y)
    x = keras.layers.Add(name="residual")([x, y])
    if custom:
        x = CompiledScale(name="compiled")(x)
    out = keras.layers.Dense(5, name="head")(keras.layers.GlobalAveragePooling2D(name="gap")(x))
    return keras.Model(inp, out, name="convnext_like")


@pytest.mark.parametrize("form", ["object", "keras_file"])
def test_compiled_calls_are_inlined_and_validate(form: str, tmp_path: Path) -> None:
    model = convnext_like(custom=form == "object")
    source: Any = model
    if form == "keras_file":
        source = tmp_path / "convnext_like.keras"
        model.save(source)
    result = bridge.convert(source, tmp_path / "m.onnx", validate=["onnxruntime"])
    assert result.passed
    assert max(o.max_abs or 0.0 for c in result.validation for o in c.outputs) < 1e-4
    ops = {n.op_type for n in onnx.load(tmp_path / "m.onnx").graph.node}
    assert not ops & {"StatefulPartitionedCall", "PartitionedCall", "Erfc"}
    assert "Erf" in ops  # the exact GELU kept exact


def test_inline_compiled_calls_clears_only_inlining_blockers() -> None:
    import tensorflow as tf

    from adapters.tensorflow.adapter import freeze, inline_compiled_calls

    model = convnext_like()
    spec = tf.TensorSpec((1, 16, 16, 3), tf.float32, name="image")
    concrete = tf.function(lambda x: model(x, training=False), input_signature=[spec]).get_concrete_function()
    graph_def = freeze(concrete)
    changed = inline_compiled_calls(graph_def)
    assert any("depthwise" in n for n in changed) and any("compiled" in n for n in changed)
    for node in [*graph_def.node, *(n for f in graph_def.library.function for n in f.node_def)]:
        assert "_XlaMustCompile" not in node.attr
        if node.op.endswith("PartitionedCall"):
            assert node.attr["f"].func.name  # the call itself is untouched: grappler inlines it
    assert inline_compiled_calls(graph_def) == []
