"""Names from a model file are shown, never obeyed: terminal control sequences in model, node, tensor and
producer names reach the terminal escaped, from every command that prints them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from bridge.chatter import printable

REPO = Path(__file__).resolve().parents[2]
RED, TITLE, CLEAR, BIDI = "\x1b[31m", "\x1b]0;pwned\x07", "\x1b[2J", "\u202e"


def escaping_model(path: Path) -> None:
    x = helper.make_tensor_value_info(f"x{RED}", TensorProto.FLOAT, [1, 2])
    y = helper.make_tensor_value_info(f"y{TITLE}", TensorProto.FLOAT, [1, 2])
    node = helper.make_node("Relu", [f"x{RED}"], [f"y{TITLE}"], name=f"n{CLEAR}{BIDI}")
    graph = helper.make_graph([node], f"g{CLEAR}", [x], [y])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8,
                                producer_name=f"p{RED}"), path)


def test_printable_escapes_controls_and_keeps_text() -> None:
    assert printable(f"a{RED}b\tc\nd{BIDI}") == "a\\x1b[31mb\tc\nd\\u202e"
    assert printable("plain ünïcode") == "plain ünïcode"


@pytest.mark.parametrize("command", [["inspect", "{m}"], ["inspect", "{m}", "--nodes"], ["convert", "{m}", "-o", "{o}"]])
def test_no_control_sequence_from_a_model_reaches_the_terminal(tmp_path: Path, command: list[str]) -> None:
    escaping_model(tmp_path / "esc.onnx")
    argv = [a.format(m=tmp_path / "esc.onnx", o=tmp_path / "out.onnx") for a in command]
    proc = subprocess.run([sys.executable, "-m", "bridge", *argv], capture_output=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO), "TERM": "dumb", "NO_COLOR": "1"})
    shown = proc.stdout + proc.stderr
    assert proc.returncode in (0, 1), shown
    assert b"\x1b" not in shown and BIDI.encode() not in shown
    assert b"\\x1b[31m" in shown  # the name is still shown, escaped
