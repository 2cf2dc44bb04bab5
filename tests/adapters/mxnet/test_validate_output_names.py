"""In ``bridge validate MODEL --source SYMBOL.json`` the MXNet reference can return any internal tensor of the symbol
by name (``relu1_output``), so MODEL's output *names* must not choose what it is compared with: without a cut the
user gave (``--outputs``), every output of MODEL must be an output of the source symbol (a head; or what the model's
output map, verified by ``source_outputs_only``, says it stands for). A model of an early layer only, its output
named after that layer's MXNet tensor, used to PASS against the whole source (compared with that inner tensor); it
now FAILs, naming the output and the ``--outputs`` that validates a cut. The cut validated as a cut still passes,
and so does the whole model, and ``convert --outputs`` validates its own delivery."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx.utils
import pytest
from mxnet_testlib import need_mxnet
from support import run_cli

from adapters.mxnet.adapter import OUTPUT_MAP_KEY
from bridge import api
from bridge.errors import ValidationMismatch

INPUTS = ["data:2,3,8,8"]
LAYERS = ("conv1", "relu1", "conv2", "relu2", "fc", "prob")


@pytest.fixture(scope="module")
def convnet(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """conv1 -> relu1 -> conv2 -> relu2 -> fc -> softmax (prob), seeded weights; and its conversion by bridge."""
    mx = need_mxnet()
    folder = tmp_path_factory.mktemp("convnet")
    x = mx.sym.var("data")
    x = mx.sym.Convolution(x, num_filter=4, kernel=(3, 3), pad=(1, 1), name="conv1")
    x = mx.sym.Activation(x, act_type="relu", name="relu1")
    x = mx.sym.Convolution(x, num_filter=4, kernel=(3, 3), pad=(1, 1), name="conv2")
    x = mx.sym.Activation(x, act_type="relu", name="relu2")
    x = mx.sym.FullyConnected(x, num_hidden=5, name="fc")
    sym = mx.sym.softmax(x, name="prob")
    shapes, _, _ = sym.infer_shape(data=(2, 3, 8, 8))
    rng = np.random.default_rng(0)
    params = {f"arg:{n}": mx.nd.array(rng.standard_normal(s).astype(np.float32) * 0.3)
              for n, s in zip(sym.list_arguments(), shapes, strict=True) if n != "data"}
    sym.save(str(folder / "net-symbol.json"))
    mx.nd.save(str(folder / "net-0000.params"), params)
    full = folder / "full.onnx"
    assert api.convert(folder / "net-symbol.json", full, inputs=INPUTS, isolated=False).passed
    return folder / "net-symbol.json", full


def _early(full: Path, layer: str, folder: Path) -> Path:
    """The converted model cut at ``layer``: it computes that layer only, its output named as MXNet names the
    layer's tensor (``<layer>_output``), and it carries no output map of its own."""
    model = onnx.load(full)
    tensor = f"{layer}_output"
    assert tensor in {o for n in model.graph.node for o in n.output}, tensor
    early = onnx.utils.Extractor(model).extract_model(["data"], [tensor])
    del early.metadata_props[:]
    path = folder / f"{layer}.onnx"
    onnx.save(early, path)
    return path


@pytest.mark.parametrize("layer", ["relu1", "conv2", "fc"])
def test_a_model_of_an_early_layer_named_after_it_fails(layer: str, convnet: tuple[Path, Path],
                                                         tmp_path: Path) -> None:
    symbol, full = convnet
    early = _early(full, layer, tmp_path)
    with pytest.raises(ValidationMismatch) as caught:
        api.validate(early, source=symbol, inputs=INPUTS, isolated=False)
    message = str(caught.value)
    assert f"'{layer}_output'" in message and "not an output of the source" in message, message
    assert f"--outputs {layer}" in message and "prob_output" in message, message
    # the user says the source is cut there: then that layer is what the model is compared with, and it agrees
    assert api.validate(early, source=symbol, inputs=INPUTS, isolated=False, outputs=layer).passed


def test_a_name_the_symbol_does_not_have_fails_too(convnet: tuple[Path, Path], tmp_path: Path) -> None:
    """An output under a name that is no tensor of the symbol at all is not one of its outputs either."""
    symbol, full = convnet
    model = onnx.load(full)
    (out,) = model.graph.output
    model.graph.node.append(onnx.helper.make_node("Identity", [out.name], ["scores"], name="scores"))
    out.name = "scores"
    del model.metadata_props[:]
    onnx.save(model, tmp_path / "renamed.onnx")
    with pytest.raises(ValidationMismatch, match="'scores'"):
        api.validate(tmp_path / "renamed.onnx", source=symbol, inputs=INPUTS, isolated=False)


def test_the_whole_model_still_passes_isolated(convnet: tuple[Path, Path]) -> None:
    """The same check where the reference runs in its child process (the default)."""
    symbol, full = convnet
    assert api.validate(full, source=symbol, inputs=INPUTS).passed


def test_the_early_layer_fails_isolated(convnet: tuple[Path, Path], tmp_path: Path) -> None:
    symbol, full = convnet
    with pytest.raises(ValidationMismatch, match=r"output 'relu1_output' of the model is not an output of the source"):
        api.validate(_early(full, "relu1", tmp_path), source=symbol, inputs=INPUTS)


def test_convert_with_a_cut_validates_its_delivery(convnet: tuple[Path, Path], tmp_path: Path) -> None:
    """As a user runs it: ``bridge convert --outputs relu2`` passes the cut to its own check and writes the file;
    ``bridge validate`` of that file with the same ``--outputs`` passes, and without it (a part of the source,
    compared with the whole) exits 1 saying which ``--outputs`` validates the cut."""
    symbol, _ = convnet
    out = tmp_path / "cut.onnx"
    proc = run_cli("convert", str(symbol), "--input", INPUTS[0], "--outputs", "relu2", "-o", str(out), "--no-isolate")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    model = onnx.load(out)
    assert [o.name for o in model.graph.output] == ["relu2_output"]
    assert any(p.key == OUTPUT_MAP_KEY for p in model.metadata_props)
    check = ("validate", str(out), "--source", str(symbol), "--input", INPUTS[0], "--no-isolate")
    proc = run_cli(*check, "--outputs", "relu2")
    assert proc.returncode == 0 and "PASS" in proc.stdout, proc.stdout + proc.stderr
    proc = run_cli(*check)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "output 'relu2_output' of the model is not an output of the source" in proc.stderr + proc.stdout
    assert "--outputs relu2" in proc.stderr + proc.stdout


def test_source_outputs_are_heads_and_cuts_by_output_index(tmp_path: Path) -> None:
    """Which internal names stand for an output of the source, read from the symbol file (no MXNet): a head's own
    output index only (a split whose head is its second output is not its first), a node named twice by its
    occurrence (``name#k``), a variable head by its name, and a cut the user gave."""
    import json

    from adapters.mxnet.adapter import SourceOutputs
    from bridge.config import Source

    nodes = [{"op": "null", "name": "data", "inputs": []},
             {"op": "SliceChannel", "name": "split", "attrs": {"num_outputs": "2"}, "inputs": [[0, 0, 0]]},
             {"op": "Activation", "name": "act", "attrs": {"act_type": "relu"}, "inputs": [[1, 0, 0]]},
             {"op": "Activation", "name": "act", "attrs": {"act_type": "relu"}, "inputs": [[2, 0, 0]]}]
    symbol = tmp_path / "two-symbol.json"
    symbol.write_text(json.dumps({"nodes": nodes, "arg_nodes": [0], "heads": [[1, 1, 0], [3, 0, 0], [0, 0, 0]]}))
    outputs = SourceOutputs.of(Source(location=str(symbol)))
    assert sorted(outputs.names()) == ["act_output", "data", "split_output1"]
    assert [outputs.holds(n) for n in ("split_output1", "split_output0", "split_output", "act_output#1",
                                       "act_output#0", "act_output", "data", "nothing_output")] == [
        True, False, False, True, False, False, True, False]
    cut = SourceOutputs.of(Source(location=str(symbol), options={"outputs": "split_output0"}))
    assert cut.holds("split_output0") and cut.holds("split_output1") and not cut.holds("act_output")
