"""TensorFlowRuntime: the Runtime protocol over a SavedModel, given one or a loader that builds one."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
pytest.importorskip("tensorflow")
if importlib.util.find_spec("onnx_tf") is None:
    pytest.skip("onnx-tf is not installed", allow_module_level=True)

import bridge.runtimes as runtimes
from bridge.errors import UsageError
from bridge.runtimes.base import Runtime, activated
from bridge.runtimes.onnxruntime import OnnxRuntime
from bridge.runtimes.tensorflow import TensorFlowRuntime
from bridge.targets import candidate_runtime


@pytest.fixture(scope="module", autouse=True)
def tf_runtime_registered() -> Iterator[None]:
    previous = runtimes._RUNTIMES.get("tensorflow")
    runtimes._RUNTIMES["tensorflow"] = "bridge.runtimes.tensorflow:TensorFlowRuntime"
    yield
    if previous is None:
        runtimes._RUNTIMES.pop("tensorflow", None)
    else:
        runtimes._RUNTIMES["tensorflow"] = previous


@pytest.fixture(scope="module")
def gemm_model() -> onnx.ModelProto:
    """y:0 = Relu(x.1 @ W + b) with a dynamic batch: names TF signatures cannot use as they are."""
    rng = np.random.default_rng(0)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x.1", "W"], ["m"], name="mm"), helper.make_node("Add", ["m", "b"], ["a"], name="add"),
         helper.make_node("Relu", ["a"], ["y:0"], name="relu")], "g",
        [helper.make_tensor_value_info("x.1", TensorProto.FLOAT, ["batch", 6])],
        [helper.make_tensor_value_info("y:0", TensorProto.FLOAT, ["batch", 3])],
        initializer=[numpy_helper.from_array(rng.standard_normal((6, 3)).astype(np.float32), "W"),
                     numpy_helper.from_array(rng.standard_normal(3).astype(np.float32), "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.fixture(scope="module")
def saved_model(gemm_model: onnx.ModelProto, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from bridge.targets.tensorflow import export_saved_model

    return export_saved_model(gemm_model, tmp_path_factory.mktemp("rt") / "sm").path


def test_onnx_model_is_converted_by_the_target_on_activate(gemm_model: onnx.ModelProto, tmp_path: Path) -> None:
    # the runtime never converts: the TF target hands it a loader that builds the SavedModel on activate
    rt = candidate_runtime("tensorflow", gemm_model, tmp_path)
    assert isinstance(rt, TensorFlowRuntime) and isinstance(rt, Runtime) and rt.name == "tensorflow"
    assert not any(tmp_path.iterdir())  # loading apart from running: nothing converted yet
    x = np.random.default_rng(1).standard_normal((5, 6)).astype(np.float32)  # another batch than any sample
    with activated(rt):
        assert [(m.name, m.shape, m.dtype) for m in rt.input_metadata()] == [("x.1", (None, 6), "float32")]
        got = rt.infer({"x.1": x})
    assert (tmp_path / "tensorflow" / "saved_model" / "saved_model.pb").is_file()
    np.testing.assert_allclose(got["y:0"], OnnxRuntime(gemm_model).infer({"x.1": x})["y:0"], atol=1e-5)


def test_an_onnx_model_given_to_the_runtime_itself_is_a_usage_error(tmp_path: Path) -> None:
    model = tmp_path / "m.onnx"
    model.write_bytes(b"")
    with pytest.raises(UsageError, match="TensorFlow target"):
        TensorFlowRuntime(model)


def test_saved_model_folder_is_loaded_directly(saved_model: Path, gemm_model: onnx.ModelProto) -> None:
    x = np.ones((2, 6), np.float32)
    with activated(TensorFlowRuntime(saved_model)) as rt:
        got = rt.infer({"x.1": x})
    assert list(got) == ["y:0"]
    np.testing.assert_allclose(got["y:0"], OnnxRuntime(gemm_model).infer({"x.1": x})["y:0"], atol=1e-5)


def test_bad_signature_feed_and_folder_are_usage_errors(saved_model: Path, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="serving_default"):
        TensorFlowRuntime(saved_model, signature="nope").activate()
    rt = TensorFlowRuntime(saved_model)
    rt.activate()
    with pytest.raises(UsageError, match="not an input"):
        rt.infer({"z": np.ones((1, 6), np.float32)})
    with pytest.raises(UsageError, match="not a SavedModel"):
        TensorFlowRuntime(tmp_path)
