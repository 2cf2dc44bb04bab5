"""Shared fixtures: tiny ONNX models built with onnx.helper."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from support import make_model


@pytest.fixture
def relu_model() -> onnx.ModelProto:
    """y = Relu(x * w) with a symbolic batch: the smallest model with a weight and a dynamic dim."""
    w = onnx.numpy_helper.from_array(np.linspace(-1, 1, 4, dtype=np.float32).reshape(1, 4), "w")
    return make_model(
        [helper.make_node("Mul", ["x", "w"], ["m"], name="mul"), helper.make_node("Relu", ["m"], ["y"], name="relu")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
        opset=13, initializers=[w],
    )


@pytest.fixture
def clip_int64_opset11() -> onnx.ModelProto:
    """Clip on int64 at opset 11: valid-looking, but onnxruntime refuses it (integer Clip needs opset 12)."""
    return make_model(
        [helper.make_node("Clip", ["x", "lo", "hi"], ["y"], name="clip_ids")],
        [helper.make_tensor_value_info("x", TensorProto.INT64, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, [2, 3])],
        opset=11,
        initializers=[onnx.numpy_helper.from_array(np.array(0, np.int64), "lo"),
                      onnx.numpy_helper.from_array(np.array(5, np.int64), "hi")],
    )
