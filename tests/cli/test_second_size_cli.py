"""The second size of a dynamic axis on the command line: ``validate --save-reference`` / ``--reference``
carry it to another environment, ``debug`` fails a model wrong only at another batch as ``convert`` does,
and a source that does not run at the second size is stated on its own line (``--strict`` fails it)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from support import make_model

from bridge.cli.main import main

RNG = np.random.default_rng(0)


def _doubling(path: Path, *, baked_batch: int | None = None, fixed_inside: bool = False) -> Path:
    """``y = 2 x`` over a dynamic batch ``N``; ``baked_batch``: plus ``N - baked_batch`` (right at that batch
    only); ``fixed_inside``: reshaped to [2, 4], so the model runs at batch 2 only, though it calls N dynamic."""
    nodes = [helper.make_node("Mul", ["x", "two"], ["m" if baked_batch or fixed_inside else "y"], name="mul")]
    inits = [onnx.numpy_helper.from_array(np.array(2, np.float32), "two")]
    if fixed_inside:
        nodes.append(helper.make_node("Reshape", ["m", "shape"], ["y"], name="reshape"))
        inits.append(onnx.numpy_helper.from_array(np.array([2, 4], np.int64), "shape"))
    if baked_batch:
        nodes += [helper.make_node("Shape", ["x"], ["s"], name="shape", start=0, end=1),
                  helper.make_node("Cast", ["s"], ["n"], to=TensorProto.FLOAT, name="cast"),
                  helper.make_node("Sub", ["n", "baked"], ["off"], name="sub"),
                  helper.make_node("Add", ["m", "off"], ["y"], name="add")]
        inits.append(onnx.numpy_helper.from_array(np.array(baked_batch, np.float32), "baked"))
    onnx.save(make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                         [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2 if fixed_inside else "N", 4])],
                         initializers=inits), path)
    return path


@pytest.fixture
def feeds(tmp_path: Path) -> Path:
    np.savez(tmp_path / "feeds.npz", x=RNG.standard_normal((2, 4)).astype(np.float32))
    return tmp_path / "feeds.npz"


def test_a_saved_reference_checks_both_sizes_in_another_run(tmp_path: Path, feeds: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    source, good = _doubling(tmp_path / "source.onnx"), _doubling(tmp_path / "good.onnx")
    bad = _doubling(tmp_path / "bad.onnx", baked_batch=2)
    ref = tmp_path / "ref.npz"
    assert main(["validate", str(good), "--source", str(source), "--feeds", str(feeds), "--save-reference", str(ref),
                 "--no-isolate"]) == 0
    capsys.readouterr()
    assert main(["validate", str(good), "--reference", str(ref), "--no-isolate"]) == 0
    assert "validated at: x[2, 4] and x[3, 4]" in capsys.readouterr().out
    assert main(["validate", str(bad), "--reference", str(ref), "--no-isolate"]) == 1
    printed = capsys.readouterr()
    assert "x[3, 4]" in printed.out + printed.err


def test_debug_fails_a_model_wrong_only_at_another_batch(tmp_path: Path, feeds: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    source = _doubling(tmp_path / "source.onnx")
    bad = _doubling(tmp_path / "bad.onnx", baked_batch=2)
    args = ["--input", "x:2,4", "--dynamic", "x:0=N", "--feeds", str(feeds)]
    assert main(["validate", str(bad), "--source", str(source), "--feeds", str(feeds), "--no-isolate"]) == 1
    capsys.readouterr()
    assert main(["debug", str(source), "--model", str(bad), *args]) == 1
    out = capsys.readouterr().out.replace("\n", " ")
    assert "validated at: x[2, 4] and x[3, 4]" in out and "goes wrong at another size" in out


@pytest.mark.parametrize(("strict", "code"), [(False, 0), (True, 1)], ids=["default", "strict"])
@pytest.mark.parametrize("command", ["convert", "validate"])
def test_a_source_failing_at_the_second_size_is_said_and_strict_fails_it(
        command: str, strict: bool, code: int, tmp_path: Path, feeds: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    source = _doubling(tmp_path / "source.onnx", fixed_inside=True)
    out = tmp_path / "out.onnx"
    args = (["convert", str(source), "-o", str(out), "--input", "x:2,4", "--dynamic", "x:0=N"] if command == "convert"
            else ["validate", str(source), "--source", str(source)])
    assert main([*args, "--feeds", str(feeds), "--no-isolate", *(["--strict"] if strict else [])]) == code
    printed = capsys.readouterr()
    text = (printed.out + printed.err).replace("\n", " ")
    assert "dynamic axes not proved" in text if not strict else "one size" in text
    if command == "convert":
        assert out.exists() is not strict
