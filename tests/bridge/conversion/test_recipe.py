"""One recipe: ``bridge debug`` and ``bridge convert`` reach the same verdict on the same inputs (they export,
generate feeds and pick detection groups the same way), and ``validate --localize`` takes the input shapes
from the candidate model when none are given."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from support import REPO, make_model, mxnet_available, run_cli

from bridge import api
from bridge.errors import ValidationMismatch

SSD = REPO / "examples" / "mxnet_ssd"
TINY = REPO / "examples" / "tiny_detector"


def _gather(path: Path) -> Path:
    """data[50,4] (a weight) indexed by an int64 input: random int64 feeds would go out of bounds."""
    data = numpy_helper.from_array(np.arange(200, dtype=np.float32).reshape(50, 4), "data")
    model = make_model([helper.make_node("Gather", ["data", "idx"], ["y"], name="gather")],
                       [helper.make_tensor_value_info("idx", TensorProto.INT64, [3])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])], initializers=[data])
    onnx.save(model, path)
    return path


def _verdict(fn: Any) -> bool:
    try:
        return bool(fn().passed)
    except ValidationMismatch:
        return False


CASES = {
    "gather-int64-index": lambda tmp: (_gather(tmp / "g.onnx"), {}),
    "examples/mxnet_ssd": lambda tmp: (SSD / "model-symbol.json",
                                       {"weights": SSD / "model-0000.params", "feeds": SSD / "sample_inputs.npz",
                                        "inputs": ["data:4,3,64,64"]}),
    "examples/tiny_detector": lambda tmp: (f"{TINY / 'model.py'}:build", {"weights": TINY / "weights.pt",
                                                                          "inputs": ["images:1,3,64,64"]}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_debug_and_convert_agree(case: str, tmp_path: Path) -> None:
    if case == "examples/mxnet_ssd" and not mxnet_available():
        pytest.skip("MXNet is not installed (the reference of the bundled SSD)")
    if case == "examples/tiny_detector":
        pytest.importorskip("torch")
    source, options = CASES[case](tmp_path)
    converted = _verdict(lambda: api.convert(source, tmp_path / "out.onnx", isolated=False, **options))
    debugged = _verdict(lambda: api.debug(source, **options))
    assert converted and debugged, (converted, debugged)


@pytest.mark.skipif(not mxnet_available(), reason="MXNet is not installed (the source of the tampered model)")
def test_validate_localize_without_input_names_the_culprit(tmp_path: Path) -> None:
    out = tmp_path / "ssd.onnx"
    api.convert(SSD / "model-symbol.json", out, weights=SSD / "model-0000.params", inputs=["data:1,3,64,64"],
                validate=[])
    model = onnx.load(out)
    relu = next(n for n in model.graph.node if n.op_type == "Relu")
    relu.op_type = "Sigmoid"  # the tampering: one node computes something else
    onnx.save(model, tmp_path / "tampered.onnx")
    proc = run_cli("validate", str(tmp_path / "tampered.onnx"), "--source", str(SSD / "model-symbol.json"),
                   "--params", str(SSD / "model-0000.params"), "--no-isolate", "--localize")
    assert proc.returncode == 1, proc.stderr
    assert "culprit" in proc.stdout and relu.name.split("_fwd")[0].split(":")[0][:8] in proc.stdout, proc.stdout


@pytest.mark.parametrize("opset", [5, 29, 99])
@pytest.mark.parametrize("source", ["mxnet", "onnx"])
def test_opset_out_of_range_is_a_usage_error_naming_the_range(tmp_path: Path, relu: Path, source: str,
                                                             opset: int) -> None:
    """Checked before any adapter exports at it (the MXNet adapter failed inside with exit 70)."""
    args = ([str(SSD / "model-symbol.json"), "--input", "data:1,3,64,64"] if source == "mxnet" else [str(relu)])
    done = run_cli("convert", *args, "--opset", str(opset), "--validate", "none", "-o", str(tmp_path / "o.onnx"))
    assert done.returncode == 2, done.stdout + done.stderr
    assert re.search(rf"--opset {opset}: bridge converts between opsets 7 and \d+", done.stderr), done.stderr
    assert not (tmp_path / "o.onnx").exists()
