"""The target registry and the ONNX target: names come from the registry, candidates for validation are
made per runtime name, and a target's artefact is used when one was written."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from bridge.errors import UsageError
from bridge.runtimes.onnxruntime import OnnxRuntime
from bridge.targets import candidate_runtime, get_target, registered_targets


def _relu() -> onnx.ModelProto:
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_every_registered_target_satisfies_the_protocol() -> None:
    assert registered_targets()[:2] == ["onnx", "tensorflow"]
    for name in registered_targets():
        target = get_target(name)
        assert target.name == name
        assert set(target.default_runtimes) >= set(target.runtimes) or name == "onnx"
        assert isinstance(target.artefact, bool)
        assert callable(target.export) and callable(target.commit) and callable(target.runtime)


def test_unknown_target_lists_the_registry() -> None:
    with pytest.raises(UsageError, match="--to 'coreml': choose one of onnx, tensorflow"):
        get_target("coreml")


def test_onnx_target_writes_nothing_extra_and_runs_in_onnxruntime(tmp_path: Path) -> None:
    target = get_target("onnx")
    assert not target.artefact and target.export(_relu(), tmp_path) is None
    rt = candidate_runtime("onnxruntime", _relu(), tmp_path)
    assert isinstance(rt, OnnxRuntime)
    rt.activate()
    np.testing.assert_array_equal(rt.infer({"x": np.array([-1, 2], np.float32)})["y"], [0, 2])
    rt.deactivate()
    assert not any(tmp_path.iterdir())


def test_a_written_artefact_is_what_the_candidate_runs(tmp_path: Path) -> None:
    path = tmp_path / "other.onnx"
    onnx.save(_relu(), path)
    rt = candidate_runtime("onnxruntime", None, tmp_path, artefacts={"onnxruntime": str(path)})
    rt.activate()
    assert list(rt.infer({"x": np.ones(2, np.float32)})) == ["y"]
    rt.deactivate()


def test_unknown_runtime_name_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="unknown runtime 'tensorrt'"):
        candidate_runtime("tensorrt", _relu(), tmp_path)
