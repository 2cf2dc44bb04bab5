"""ONNX sources: options naming inputs/outputs the model does not have, or contradicting it, are usage
errors listing what the model has; a source that fails in onnxruntime names the node and asks for --feeds."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from support import make_model

from adapters.onnx import OnnxFileAdapter
from bridge.config import ExportSpec, InputSpec, Source
from bridge.errors import InferenceError, UsageError


def _gather(tmp_path: Path) -> Path:
    m = make_model([helper.make_node("Gather", ["x", "i"], ["y"], name="gather", axis=0)],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 2]),
                    helper.make_tensor_value_info("i", TensorProto.INT64, [4])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 2])])
    p = tmp_path / "m.onnx"
    onnx.save(m, p)
    return p


@pytest.mark.parametrize(("spec", "words"), [
    (ExportSpec(inputs=(InputSpec.parse("xx:3,2"),)), "--input 'xx': the model has no input of that name (did you mean 'x'?); its inputs: x, i"),
    (ExportSpec(inputs=(InputSpec.parse("x:3,2:int64"),)), "the model declares 'x' as float32"),
    (ExportSpec(inputs=(InputSpec.parse("x:4,2"),)), "the model fixes 'x' to [3, 2]"),
    (ExportSpec(output_names=("out",)), "an ONNX source keeps its output names (y)"),
])
def test_options_contradicting_the_model_are_usage_errors(tmp_path: Path, spec: ExportSpec, words: str) -> None:
    with pytest.raises(UsageError) as err:
        OnnxFileAdapter().export(Source(location=str(_gather(tmp_path))), spec)
    assert words in str(err.value)


def test_options_agreeing_with_the_model_are_fine(tmp_path: Path) -> None:
    spec = ExportSpec(inputs=(InputSpec.parse("x:3,2:float32"),), output_names=("y",))
    result = OnnxFileAdapter().export(Source(location=str(_gather(tmp_path))), spec)
    assert [s.name for s in result.inputs] == ["x", "i"]


def test_source_failing_in_onnxruntime_names_node_and_asks_for_feeds(tmp_path: Path) -> None:
    adapter = OnnxFileAdapter()
    source = Source(location=str(_gather(tmp_path)))
    rt = adapter.reference_runner(source, adapter.export(source, ExportSpec()))
    rt.activate()
    with pytest.raises(InferenceError) as err:
        rt.infer({"x": np.ones((3, 2), np.float32), "i": np.array([0, 1, 2, 9])})
    assert err.value.node == "gather" and err.value.framework == "onnxruntime" and err.value.exit_code == 3
    assert "at Gather node 'gather': indices element out of data bounds" in str(err.value)
    assert "the source ONNX file" in str(err.value) and "--feeds" in str(err.value)
