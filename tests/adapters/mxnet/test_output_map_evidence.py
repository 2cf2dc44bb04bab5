"""The MXNet reference reads an ONNX output under the MXNet tensor the model's output map names
(``OUTPUT_MAP_KEY``, written by the conversion for renamed outputs and cut points). In ``bridge validate`` that map
is read from the file under test, so it must not choose what the file is compared with: an entry naming a tensor
that is not an output of the source (a head of its symbol, or a cut point the source's ``outputs`` option names)
is not used (``adapters.mxnet.adapter.source_outputs_only``).

Here the source's output is ``s = sigmoid(relu(data))``; the candidate computes only ``relu`` and maps its output
onto MXNet's ``r_output`` - exactly what a conversion cut at ``r`` records. Validated against the source it
passed (compared with ``r``); it now fails (compared with ``s``), and passes again where the user names the cut."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from mxnet_testlib import try_mxnet

from adapters.mxnet import MXNetAdapter
from adapters.mxnet.adapter import OUTPUT_MAP_KEY, source_outputs_only
from bridge import api
from bridge.config import ExportSpec, InputSpec, Source
from bridge.errors import ValidationMismatch


def _one_head(folder: Path) -> Path:
    """data -> relu (r) -> sigmoid (s); only s is the symbol's output."""
    nodes = [{"op": "null", "name": "data", "inputs": []},
             {"op": "Activation", "name": "r", "attrs": {"act_type": "relu"}, "inputs": [[0, 0, 0]]},
             {"op": "Activation", "name": "s", "attrs": {"act_type": "sigmoid"}, "inputs": [[1, 0, 0]]}]
    path = folder / "one-symbol.json"
    path.write_text(json.dumps({"nodes": nodes, "arg_nodes": [0], "heads": [[2, 0, 0]]}))
    return path


def _early_layer(symbol: Path, folder: Path) -> Path:
    """The model cut at r, its output named as the source's output, the map saying r_output."""
    result = MXNetAdapter().export(Source(location=str(symbol), options={"outputs": "r"}),
                                   ExportSpec(inputs=(InputSpec.parse("data:2,3"),), output_names=("s_output",)))
    mapping = json.loads(next(p.value for p in result.model.metadata_props if p.key == OUTPUT_MAP_KEY))
    assert mapping == {"s_output": "r_output"}
    path = folder / "early.onnx"
    onnx.save(result.model, path)
    return path


def test_an_output_map_naming_an_inner_tensor_is_not_used(tmp_path: Path) -> None:
    symbol = _one_head(tmp_path)
    source = Source(location=str(symbol))
    assert source_outputs_only(source, {"s_output": "r_output", "x": "s_output"}) == {"x": "s_output"}
    cut = Source(location=str(symbol), options={"outputs": "r"})
    assert source_outputs_only(cut, {"s_output": "r_output"}) == {"s_output": "r_output"}


def test_a_model_of_an_early_layer_mapped_onto_it_fails_validation(tmp_path: Path) -> None:
    if try_mxnet() is None:
        pytest.skip("mxnet is not importable here: the MXNet reference cannot run")
    symbol = _one_head(tmp_path)
    early = _early_layer(symbol, tmp_path)
    with pytest.raises(ValidationMismatch) as caught:
        api.validate(early, source=symbol, inputs=["data:2,3"], isolated=False)
    (comparison,) = caught.value.result.comparisons
    assert [o.name for o in comparison.failures] == ["s_output"]
    # the user says the source is cut at r: then r is what the model is compared with
    assert api.validate(early, source=symbol, inputs=["data:2,3"], isolated=False, options={"outputs": "r"}).passed
