"""`bridge debug`, `convert --localize`, `validate --localize` and `inspect --nodes` in-process (the same
`main()` and exit-code mapping as the installed command); BRIDGE_TEST_BREAK breaks the conversion for one
command and is undone afterwards."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from debug_models import foldable_model
from onnx import TensorProto, helper
from support import make_model

from bridge.cli.main import main
from bridge.passes.cleanup import FoldConstantsPass


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "m.onnx"
    onnx.save(foldable_model(), path)
    return path


def _json(text: str) -> dict:
    return json.loads(text[text.index("{"):])


@pytest.mark.parametrize(("hook", "code"), [("pass:FoldConstantsPass", 1), ("", 0)])
def test_debug_exit_code_and_verdict(source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str], hook: str, code: int) -> None:
    monkeypatch.setenv("BRIDGE_TEST_BREAK", hook)
    original = FoldConstantsPass.call
    report = tmp_path / "r.html"
    assert main(["debug", str(source), "--input", "x:2,4", "--report", str(report), "--json"]) == code
    data = _json(capsys.readouterr().out)
    assert FoldConstantsPass.call is original  # the hook is scoped to the command
    assert report.read_text().startswith("<!doctype html>")
    if code:
        assert data["culprit"]["pass"] == "FoldConstantsPass" and data["culprit"]["node"] == "scale"
        assert data["pass_localization"]["culprit"].startswith("FoldConstantsPass changed node 'scale' (Mul)")
    else:
        assert data["culprit"] is None and data["passed"]


def test_debug_renders_the_culprit(source: Path, monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("BRIDGE_TEST_BREAK", "pass:FoldConstantsPass*2")
    assert main(["debug", str(source), "--input", "x:2,4"]) == 1
    captured = capsys.readouterr()
    text = " ".join(captured.out.split())
    assert "culprit: node scale (op Mul)" in text and "rewritten by FoldConstantsPass" in text
    assert "BRIDGE_TEST_BREAK" in captured.err


def test_convert_localize(source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("BRIDGE_TEST_BREAK", "pass:FoldConstantsPass")
    out = tmp_path / "out.onnx"
    assert main(["convert", str(source), "--input", "x:2,4", "-o", str(out), "--localize"]) == 1
    text = " ".join(capsys.readouterr().out.split())
    assert not out.exists() and "culprit: node scale (op Mul)" in text


def test_validate_localize(source: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wrong = foldable_model()
    next(n for n in wrong.graph.node if n.name == "relu").op_type = "Sigmoid"
    model = tmp_path / "converted.onnx"
    onnx.save(wrong, model)
    assert main(["validate", str(model), "--source", str(source), "--input", "x:2,4", "--localize"]) == 1
    text = " ".join(capsys.readouterr().out.split())
    assert "culprit: node relu (op Relu)" in text  # the source's node, converted as a Sigmoid


def test_inspect_nodes_marks_where_inference_loses_a_dim(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"), helper.make_node("NonZero", ["r"], ["nz"], name="nz"),
             helper.make_node("Transpose", ["nz"], ["t"], name="tr")]
    model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                       [helper.make_tensor_value_info("t", TensorProto.INT64, ["n", 2])])
    path = tmp_path / "nz.onnx"
    onnx.save(model, path)
    assert main(["inspect", str(path), "--nodes", "--json"]) == 0
    data = _json(capsys.readouterr().out)
    by_name = {n["name"]: n for n in data["nodes"]}
    assert by_name["relu"]["outputs"][0]["shape"] == [2, 3] and not by_name["relu"]["loses"]
    assert "dim(s) 1 of 'nz'" in by_name["nz"]["loses"]
    assert not by_name["tr"]["loses"]  # it only carries the dim NonZero lost
    assert main(["inspect", str(path), "--nodes"]) == 0
    assert "inference first loses a dim at node 'nz' (NonZero)" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize(("suffix", "marker"), [(".json", '"culprit"'), (".md", "- culprit: first divergence"),
                                                (".html", 'id="culprit-node"')])
def test_debug_report_formats(source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, suffix: str,
                              marker: str) -> None:
    monkeypatch.setenv("BRIDGE_TEST_BREAK", "pass:FoldConstantsPass")
    report = tmp_path / f"r{suffix}"
    assert main(["debug", str(source), "--input", "x:2,4", "--report", str(report)]) == 1
    assert marker in report.read_text()
