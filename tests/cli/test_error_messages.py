"""Errors name the real thing: `inspect` on another framework's file says what it is and how to convert it;
a FAIL verdict says how to find the culprit node (--localize, or bridge debug)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx import numpy_helper as nh
from support import make_model

SYMBOL = {"nodes": [{"op": "null", "name": "data", "inputs": []},
                    {"op": "Activation", "name": "relu", "attrs": {"act_type": "relu"}, "inputs": [[0, 0, 0]]}],
          "arg_nodes": [0], "heads": [[1, 0, 0]]}


@pytest.mark.parametrize("name", ["net-symbol.json", "exported.json"])
def test_inspect_on_an_mxnet_symbol_says_what_it_is(tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]) -> None:
    from bridge.cli.main import main

    path = tmp_path / name
    path.write_text(json.dumps(SYMBOL))
    capsys.readouterr()
    assert main(["inspect", str(path)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "not an ONNX file" in err and "--framework mxnet" in err and f"bridge convert {path} -o model.onnx" in err, err
    assert "ModelProto" not in err and "has no field" not in err


def test_inspect_on_a_broken_onnx_file_still_says_it_is_unreadable(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from bridge.cli.main import main

    path = tmp_path / "bad.onnx"
    path.write_bytes(b"\x08\x07not a model \xff\xff")
    capsys.readouterr()
    assert main(["inspect", str(path)]) == 3
    assert "not a readable ONNX model" in capsys.readouterr().err


def _foldable(path: Path) -> Path:
    """y = x + c1 * c2: FoldConstantsPass folds c1 * c2 into one constant (which the test hook then breaks)."""
    c1 = nh.from_array(np.full((4,), 2.0, np.float32), "c1")
    c2 = nh.from_array(np.full((4,), 3.0, np.float32), "c2")
    model = make_model([helper.make_node("Mul", ["c1", "c2"], ["c"], name="mul"),
                        helper.make_node("Add", ["x", "c"], ["y"], name="add")],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], initializers=[c1, c2])
    onnx.save(model, path)
    return path


def test_a_failed_conversion_suggests_localize(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    from bridge.cli.main import main

    source = _foldable(tmp_path / "m.onnx")
    monkeypatch.setenv("BRIDGE_TEST_BREAK", "pass:FoldConstantsPass*2")
    capsys.readouterr()
    assert main(["convert", str(source), "-o", str(tmp_path / "out.onnx")]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "hint: add --localize" in err and f"bridge debug {source}" in err, err


def test_a_failed_validation_suggests_how_to_find_the_node(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from bridge.cli.main import main

    source = _foldable(tmp_path / "m.onnx")
    changed = onnx.load(source)
    changed.graph.initializer[1].CopyFrom(nh.from_array(np.full((4,), 3.5, np.float32), "c2"))
    onnx.save(changed, tmp_path / "changed.onnx")
    capsys.readouterr()
    assert main(["validate", str(tmp_path / "changed.onnx"), "--source", str(source)]) == 1
    captured = capsys.readouterr()
    assert "FAIL" in captured.out + captured.err and "hint: add --localize" in " ".join(captured.err.split())
    ref = tmp_path / "ref.npz"
    assert main(["validate", str(source), "--source", str(source), "--save-reference", str(ref)]) == 0
    capsys.readouterr()
    assert main(["validate", str(tmp_path / "changed.onnx"), "--reference", str(ref)]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "--source SOURCE --localize" in err and "bridge debug SOURCE --model" in err, err
