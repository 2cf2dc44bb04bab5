"""Validation never invents a value for a weight: an input that holds an initializer is a default, fed its stored
value; a converted model that needs an input its source does not take (a weight that lost its initializer) is
an error naming it, never a PASS on the same random weight fed to both sides."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from bridge.config import Tolerance
from bridge.errors import UnexpectedInputError
from bridge.runtimes.base import TensorMeta
from bridge.runtimes.onnxruntime import OnnxRuntime
from bridge.validation.inputs import make_inputs
from bridge.validation.run import FeedSource, run_and_compare

W = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)


def _matmul(ir_version: int, keep_weight: bool = True) -> onnx.ModelProto:
    """y = x @ w with w an initializer listed as a graph input (keep_weight=False: the weight lost its value)."""
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4]),
                               helper.make_tensor_value_info("w", TensorProto.FLOAT, [4, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 64])],
                              initializer=[numpy_helper.from_array(W, "w")] if keep_weight else [])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 8 if ir_version == 3 else 13)],
                             ir_version=ir_version)


def test_generated_inputs_skip_inputs_holding_an_initializer() -> None:
    metas = [TensorMeta("x", (2, 4), "float32"), TensorMeta("w", (4, 64), "float32")]
    assert set(make_inputs(metas, model=_matmul(7))) == {"x"}
    assert set(make_inputs(metas)) == {"x", "w"}  # without the graph there is nothing to tell them apart


def test_feeds_file_is_not_asked_for_a_weight(tmp_path: Path) -> None:
    path = tmp_path / "feeds.npz"
    np.savez(path, x=np.ones((2, 4), np.float32))
    metas = [TensorMeta("x", (2, 4), "float32"), TensorMeta("w", (4, 64), "float32")]
    assert set(FeedSource(file=path, model=_matmul(7)).make(metas)) == {"x"}


@pytest.mark.parametrize("ir_version", [3, 7])
def test_a_candidate_needing_the_sources_weight_is_an_error_not_a_pass(ir_version: int) -> None:
    source = _matmul(ir_version)
    lost = _matmul(ir_version, keep_weight=False)
    with pytest.raises(UnexpectedInputError, match="'w'"):
        run_and_compare(OnnxRuntime(source), {"onnxruntime": OnnxRuntime(lost)}, FeedSource(model=(source, lost)),
                        Tolerance())


@pytest.mark.parametrize("ir_version", [3, 7])
def test_a_kept_weight_is_validated_on_its_stored_value(ir_version: int) -> None:
    source = _matmul(ir_version)
    run = run_and_compare(OnnxRuntime(source), {"onnxruntime": OnnxRuntime(source)}, FeedSource(model=source),
                          Tolerance())
    assert set(run.feeds) == {"x"} and run.passed
    np.testing.assert_allclose(run.reference_outputs["y"], run.feeds["x"] @ W, rtol=1e-5, atol=1e-5)
