"""``bridge debug --model``: a given converted model whose attribute would crash the runtime loading it (SIGFPE on
ConvTranspose group=0, a zero stride) is refused first, naming the model, the node, the op and the attribute."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from support import make_model

from bridge.errors import NodeError


def _conv_transpose(name: str, **attrs: object) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 6, 6])
    w = onnx.numpy_helper.from_array(np.ones((2, 1, 3, 3), np.float32), "w")
    return make_model([helper.make_node("ConvTranspose", ["x", "w"], ["y"], name=name, **attrs)], [x], [y],
                      initializers=[w])


def test_debug_names_the_attribute_of_a_given_model(tmp_path: Path) -> None:
    """A valid source and a broken --model: the model is refused before onnxruntime loads (and dies on) it."""
    from bridge import api

    onnx.save(_conv_transpose("up", group=1), tmp_path / "ok.onnx")
    onnx.save(_conv_transpose("up", strides=[0, 1]), tmp_path / "bad.onnx")
    with pytest.raises(NodeError) as err:
        api.debug(tmp_path / "ok.onnx", model=tmp_path / "bad.onnx")
    text = str(err.value)
    assert "--model" in text and "node 'up' (ConvTranspose): attribute 'strides' is [0, 1]; each entry must be at least 1" in text
