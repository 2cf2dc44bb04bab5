"""Verdicts that prove little are flagged, and --strict fails them; NaN tolerances are usage errors."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from bridge.cli.main import main


@pytest.fixture()
def all_nan_model(tmp_path: Path) -> Path:
    # y = sqrt(-|x| - 1): NaN for every input, in the source and in the converted model alike
    graph = helper.make_graph(
        [helper.make_node("Abs", ["x"], ["a"]), helper.make_node("Neg", ["a"], ["n"]),
         helper.make_node("Sub", ["n", "one"], ["m"]), helper.make_node("Sqrt", ["m"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        initializer=[helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])])
    path = tmp_path / "nan.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return path


def test_a_vacuous_verdict_is_a_warning_and_strict_fails_it(all_nan_model: Path, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out.onnx"
    assert main(["convert", str(all_nan_model), "-o", str(out), "--no-isolate"]) == 0
    assert out.exists() and "proves little" in capsys.readouterr().out.replace("\n", " ")
    strict_out = tmp_path / "strict.onnx"
    assert main(["convert", str(all_nan_model), "-o", str(strict_out), "--strict", "--no-isolate"]) == 1
    assert not strict_out.exists()
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("onnx: ")]
    assert lines and all(ln.endswith("not written") for ln in lines), lines  # no "- pass" for a file not written


@pytest.mark.parametrize("option", [["--atol", "nan"], ["--rtol", "-1"], ["--tolerance", "y=nan,0"]])
def test_nan_or_negative_tolerances_are_usage_errors(all_nan_model: Path, tmp_path: Path, option: list[str]) -> None:
    assert main(["convert", str(all_nan_model), "-o", str(tmp_path / "o.onnx"), *option]) == 2
    assert not (tmp_path / "o.onnx").exists()


def test_max_memory_bounds_what_validation_allocates(tmp_path: Path) -> None:
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["a", "b"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b"])])
    path = tmp_path / "relu.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    out = tmp_path / "o.onnx"
    args = ["convert", str(path), "-o", str(out), "--input", "x:1000,1000", "--dynamic", "x:0=a", "--dynamic", "x:1=b",
            "--no-isolate"]
    assert main([*args, "--max-memory", "1M"]) == 3 and not out.exists()
    assert main([*args, "--max-memory", "1G"]) == 0 and out.exists()
