"""``--output-names`` renames an MXNet symbol's outputs as it does a PyTorch or TensorFlow model's (it was accepted
and ignored): the ONNX outputs carry the given names, the reference runner still reads each under its MXNet
tensor name, and a count, a repeat or a name another tensor already carries is a usage error naming the option."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from mxnet_testlib import run_onnx, try_mxnet

from adapters.mxnet import MXNetAdapter
from adapters.mxnet.adapter import OUTPUT_MAP_KEY
from bridge.config import ExportSpec, InputSpec, Source
from bridge.errors import UsageError


def _two_heads(folder: Path) -> Path:
    """data -> relu (r) -> sigmoid (s); both r and s are heads (r is also consumed: renaming must follow it)."""
    nodes = [{"op": "null", "name": "data", "inputs": []},
             {"op": "Activation", "name": "r", "attrs": {"act_type": "relu"}, "inputs": [[0, 0, 0]]},
             {"op": "Activation", "name": "s", "attrs": {"act_type": "sigmoid"}, "inputs": [[1, 0, 0]]}]
    path = folder / "two-symbol.json"
    path.write_text(json.dumps({"nodes": nodes, "arg_nodes": [0], "heads": [[1, 0, 0], [2, 0, 0]]}))
    return path


def _export(symbol: Path, names: tuple[str, ...], cut: str | None = None) -> tuple[onnx.ModelProto, tuple[str, ...]]:
    source = Source(location=str(symbol), options={"outputs": cut} if cut else {})
    result = MXNetAdapter().export(source, ExportSpec(inputs=(InputSpec.parse("data:2,3"),), output_names=names))
    return result.model, result.output_names


@pytest.mark.parametrize("names", [("relu", "sig"), ("s_output", "r_output")])  # plain, and the two names swapped
def test_outputs_take_the_given_names_and_keep_their_values(tmp_path: Path, names: tuple[str, str]) -> None:
    model, declared = _export(_two_heads(tmp_path), names)
    assert [o.name for o in model.graph.output] == list(names) and declared == names
    onnx.checker.check_model(model, full_check=True)
    x = np.linspace(-2, 2, 6, dtype=np.float32).reshape(2, 3)
    got = run_onnx(model, {"data": x})
    np.testing.assert_allclose(got[names[0]], np.maximum(x, 0))
    np.testing.assert_allclose(got[names[1]], 1 / (1 + np.exp(-np.maximum(x, 0))), rtol=1e-6)
    mapping = json.loads(next(p.value for p in model.metadata_props if p.key == OUTPUT_MAP_KEY))
    assert mapping == {names[0]: "r_output", names[1]: "s_output"}  # what the MXNet reference reads


def test_a_cut_point_can_be_renamed(tmp_path: Path) -> None:
    model, _ = _export(_two_heads(tmp_path), ("features",), cut="r")
    assert [o.name for o in model.graph.output] == ["features"]
    mapping = json.loads(next(p.value for p in model.metadata_props if p.key == OUTPUT_MAP_KEY))
    assert mapping == {"features": "r_output"}


@pytest.mark.parametrize(("names", "words"), [
    (("a",), "gives 1 names; the model returns 2 tensors (r_output, s_output)"),
    (("a", "b", "c"), "gives 3 names"),
    (("a", "a"), "'a' is given twice"),
    (("data", "b"), "already has a tensor named data"),
])
def test_names_that_cannot_work_are_usage_errors(tmp_path: Path, names: tuple[str, ...], words: str) -> None:
    with pytest.raises(UsageError) as err:
        _export(_two_heads(tmp_path), names)
    assert "--output-names" in str(err.value) and words in str(err.value)


def test_renamed_outputs_validate_against_mxnet(tmp_path: Path) -> None:
    """The whole conversion: validation pairs each renamed output with MXNet's tensor of the same role."""
    if try_mxnet() is None:
        pytest.skip("mxnet is not importable here: the MXNet reference cannot run")
    from bridge import api

    result = api.convert(_two_heads(tmp_path), tmp_path / "m.onnx", inputs=["data:2,3"],
                         output_names=["relu", "sig"], isolated=False)
    assert result.passed and result.written and result.validation
    compared = {o.name for c in result.validation for o in c.outputs}
    assert compared == {"relu", "sig"}
