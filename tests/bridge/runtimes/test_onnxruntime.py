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


def _model(inputs: list[onnx.ValueInfoProto], initializers: list[onnx.TensorProto] = ()) -> onnx.ModelProto:  # type: ignore[assignment]
    from onnx import helper

    nodes = [helper.make_node("Identity", [vi.name], [f"out_{i}"]) for i, vi in enumerate(inputs)]
    outputs = [helper.make_tensor_value_info(f"out_{i}", vi.type.tensor_type.elem_type, None)
               for i, vi in enumerate(inputs)]
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_declared_input_metadata_is_what_a_session_says() -> None:
    """The inputs validation sizes its feeds by, read from the graph without a session: the same as
    onnxruntime's (symbolic and unknown dims, integer and bool types, an initializer listed as an input)."""
    from onnx import TensorProto, helper, numpy_helper

    from bridge.runtimes.onnxruntime import OnnxRuntime

    unknown = helper.make_tensor_value_info("u", TensorProto.FLOAT, [2, 3])
    unknown.type.tensor_type.shape.dim[1].Clear()  # a dim with neither a value nor a name
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 224, 224]),
              helper.make_tensor_value_info("ids", TensorProto.INT64, [1, "seq"]),
              helper.make_tensor_value_info("flag", TensorProto.BOOL, []), unknown,
              helper.make_tensor_value_info("h", TensorProto.FLOAT16, [4]),
              helper.make_tensor_value_info("w", TensorProto.FLOAT, [2])]
    model = _model(inputs, [numpy_helper.from_array(np.ones(2, np.float32), "w")])
    declared = OnnxRuntime.declared_input_metadata(model)
    with activated(get_runtime("onnxruntime", model)) as rt:
        assert declared == list(rt.input_metadata())
    assert declared is not None and [m.name for m in declared] == ["x", "ids", "flag", "u", "h"]


def test_declared_input_metadata_leaves_what_the_graph_does_not_settle_to_the_session() -> None:
    from onnx import TensorProto, helper

    from bridge.runtimes.onnxruntime import OnnxRuntime

    rankless = helper.make_tensor_value_info("x", TensorProto.FLOAT, None)
    odd = helper.make_tensor_value_info("b", TensorProto.BFLOAT16, [2])
    assert OnnxRuntime.declared_input_metadata(_model([rankless])) is None
    assert OnnxRuntime.declared_input_metadata(_model([odd])) is None
