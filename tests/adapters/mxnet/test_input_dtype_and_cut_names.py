"""The MXNet reader says what is wrong before converting: a float input dtype other than the parameters' is
refused naming --input (not a Conv shape-inference error), and --outputs cut points that come back under
MXNet's tensor names (``<node>_output``) are reported in the notes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from mxnet_testlib import write_params

from bridge.config import ExportSpec, InputSpec, Source
from bridge.errors import UsageError


def _conv_relu(folder: Path, dtype: str = "float32") -> Path:
    def var(name: str) -> dict[str, object]:
        return {"op": "null", "name": name, "inputs": []}

    nodes = [var("data"), var("c_weight"),
             {"op": "Convolution", "name": "c", "attrs": {"kernel": "(3, 3)", "num_filter": "4", "no_bias": "True"},
              "inputs": [[0, 0, 0], [1, 0, 0]]},
             {"op": "Activation", "name": "r", "attrs": {"act_type": "relu"}, "inputs": [[2, 0, 0]]}]
    symbol = folder / "net-symbol.json"
    symbol.write_text(json.dumps({"nodes": nodes, "arg_nodes": [0, 1], "heads": [[3, 0, 0]]}))
    write_params(folder / "net-0000.params", {"arg:c_weight": np.ones((4, 3, 3, 3), dtype)})
    return symbol


@pytest.mark.parametrize(("params", "asked"), [("float32", "float16"), ("float32", "float64"), ("float16", "float32")])
def test_a_float_input_dtype_other_than_the_parameters_is_refused(tmp_path: Path, params: str, asked: str) -> None:
    from adapters.mxnet import MXNetAdapter

    symbol = _conv_relu(tmp_path, params)
    spec = ExportSpec(inputs=(InputSpec.parse(f"data:1,3,8,8:{asked}"),))
    with pytest.raises(UsageError) as err:
        MXNetAdapter().export(Source(location=str(symbol)), spec)
    text = str(err.value)
    assert f"--input data:1,3,8,8:{asked}" in text and f"are {params}" in text and "--input data:1,3,8,8)" in text
    assert "shape inference" not in text


@pytest.mark.parametrize("given", ["data:1,3,8,8", "data:1,3,8,8:float32"])
def test_the_parameters_dtype_or_none_converts(tmp_path: Path, given: str) -> None:
    from adapters.mxnet import MXNetAdapter

    result = MXNetAdapter().export(Source(location=str(_conv_relu(tmp_path))), ExportSpec(inputs=(InputSpec.parse(given),)))
    assert [o.name for o in result.model.graph.output] == ["r_output"]


@pytest.mark.parametrize(("cut", "named"), [("c", "c_output"), ("c_output", None), ("c,r", "c_output")])
def test_cut_points_under_mxnet_names_are_noted(tmp_path: Path, cut: str, named: str | None) -> None:
    from adapters.mxnet import MXNetAdapter

    source = Source(location=str(_conv_relu(tmp_path)), options={"outputs": cut})
    result = MXNetAdapter().export(source, ExportSpec(inputs=(InputSpec.parse("data:1,3,8,8"),)))
    outputs = [o.name for o in result.model.graph.output]
    noted = [n for n in result.notes if n.startswith("--outputs")]
    if named is None:
        assert outputs == [cut] and not noted
    else:
        asked = cut.split(",")
        assert outputs == [f"{a}_output" for a in asked]
        assert len(noted) == 1 and all(f"{a} -> {a}_output" in noted[0] for a in asked), result.notes
