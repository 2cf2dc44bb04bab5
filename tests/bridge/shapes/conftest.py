"""Small ONNX models for the shape tools: a fully-convolutional net with dynamic N/H/W (zero padding
is neutral for it, so bucketed runs can be compared exactly), and a static multi-input multi-output
model whose constants baked its batch of 4."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx import numpy_helper as nh
from support import fcn_model, make_model


def baked_model() -> onnx.ModelProto:
    """Static at batch 4: img[4,3,8,8], meta[4,5] -> seq[4,2,5], pooled[4,2,4,4].

    flatten_baked is Reshape(r, [4, -1]); expand_token is Expand(token[1,1,5], [4,1,5]); both baked the 4.
    """
    rng = np.random.default_rng(1)
    nodes = [
        helper.make_node("Conv", ["img", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("Reshape", ["r", "shape4"], ["flat"], name="flatten_baked"),
        helper.make_node("MatMul", ["flat", "fcw"], ["logits0"], name="fc"),
        helper.make_node("Add", ["logits0", "meta"], ["logits"], name="add_meta"),
        helper.make_node("Expand", ["tok", "expand_shape"], ["tokb"], name="expand_token"),
        helper.make_node("Unsqueeze", ["logits", "one"], ["lu"], name="unsq"),
        helper.make_node("Concat", ["tokb", "lu"], ["seq"], axis=1, name="concat"),
        helper.make_node("MaxPool", ["r"], ["pooled"], kernel_shape=[2, 2], strides=[2, 2], name="pool"),
    ]
    inits = [nh.from_array(rng.standard_normal((2, 3, 3, 3)).astype(np.float32), "w"),
             nh.from_array(np.array([4, -1], np.int64), "shape4"),
             nh.from_array(rng.standard_normal((2 * 8 * 8, 5)).astype(np.float32), "fcw"),
             nh.from_array(rng.standard_normal((1, 1, 5)).astype(np.float32), "tok"),
             nh.from_array(np.array([4, 1, 5], np.int64), "expand_shape"),
             nh.from_array(np.array([1], np.int64), "one")]
    return make_model(
        nodes,
        [helper.make_tensor_value_info("img", TensorProto.FLOAT, [4, 3, 8, 8]),
         helper.make_tensor_value_info("meta", TensorProto.FLOAT, [4, 5])],
        [helper.make_tensor_value_info("seq", TensorProto.FLOAT, [4, 2, 5]),
         helper.make_tensor_value_info("pooled", TensorProto.FLOAT, [4, 2, 4, 4])],
        initializers=inits,
    )


@pytest.fixture
def fcn() -> onnx.ModelProto:
    return fcn_model()


@pytest.fixture
def baked() -> onnx.ModelProto:
    return baked_model()
