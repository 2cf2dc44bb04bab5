"""Fixtures of the conversion-layer tests."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper
from support import make_model


@pytest.fixture
def relu(tmp_path: Path) -> Path:
    """An ONNX file: x[2,4] -> Relu -> y."""
    model = make_model([helper.make_node("Relu", ["x"], ["y"], name="relu")],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])])
    onnx.save(model, tmp_path / "relu.onnx")
    return tmp_path / "relu.onnx"
