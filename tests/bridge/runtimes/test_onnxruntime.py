"""The onnxruntime runtime: protocol behaviour and plain-words explanations of load errors."""

import numpy as np
import onnx
import pytest

from bridge.errors import RuntimeLoadError
from bridge.runtimes import Runtime, activated, get_runtime
from bridge.runtimes.onnxruntime import explain_load_error


def test_runs_by_name_and_reports_symbolic_input_dims(relu_model: onnx.ModelProto) -> None:
    rt = get_runtime("onnxruntime", relu_model)
    assert isinstance(rt, Runtime)
    with activated(rt):
        (meta,) = rt.input_metadata()
        assert (meta.name, meta.shape, meta.dtype) == ("x", ("N", 4), "float32")
        x = np.array([[1, 2, 3, 4]], np.float32)
        y = rt.infer({"x": x})["y"]
    np.testing.assert_allclose(y, np.maximum(x * np.linspace(-1, 1, 4, dtype=np.float32), 0))


def test_clip_int64_before_opset_12_is_explained(clip_int64_opset11: onnx.ModelProto) -> None:
    with pytest.raises(RuntimeLoadError) as info:
        get_runtime("onnxruntime", clip_int64_opset11).activate()
    text = str(info.value)
    assert "clip_ids" in text and "opset 12" in text and "--opset" in text


@pytest.mark.parametrize(("message", "fragment"), [
    ("Could not find an implementation for Clip(11) node with name 'c1'", "only valid from opset 12"),
    ("Could not find an implementation for Gemm(9) node with name 'g'", "no kernel for Gemm"),
    ("Fatal error: bridge.contrib:MultiBoxPrior(-1) is not a registered function/op. "
     "No Op registered for MultiBoxPrior with domain_version of 1", "needs\nlowering".replace("\n", " ")),
    ("Unsupported model IR version: 12, max supported IR version: 11", "IR version 12"),
])
def test_explanations(message: str, fragment: str) -> None:
    explained = explain_load_error(message)
    assert explained is not None and fragment in explained


def test_unknown_errors_are_not_explained() -> None:
    assert explain_load_error("something entirely different") is None
