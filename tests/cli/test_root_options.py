"""Root options: ``--version``, and ``-v``/``-vv`` accepted after the command as the README lists them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper
from support import make_model, run_cli

from bridge.cli.main import hoist_verbosity
from bridge.version import __version__

MODEL = "relu.onnx"  # written by each test into its working directory


def test_version() -> None:
    done = run_cli("--version")
    assert done.returncode == 0 and done.stdout.strip() == f"bridge {__version__}", done.stdout + done.stderr


@pytest.mark.parametrize(("args", "level"), [
    (["inspect", MODEL], "WARNING"),
    (["-v", "inspect", MODEL], "INFO"),
    (["inspect", MODEL, "-v"], "INFO"),
    (["inspect", "-vv", MODEL], "DEBUG"),
    (["inspect", MODEL, "--verbose", "--verbose"], "DEBUG"),
])
def test_verbosity_before_or_after_the_command(tmp_path: Path, args: list[str], level: str) -> None:
    onnx.save(make_model([helper.make_node("Relu", ["x"], ["y"])],
                         [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                         [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])]), tmp_path / MODEL)
    code = (f"import logging, sys\nfrom bridge.cli.main import main\nrc = main({args!r})\n"
            "print(rc, logging.getLevelName(logging.getLogger().level))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.stdout.split()[-2:] == ["0", level], done.stdout + done.stderr


def test_only_flags_before_the_separator_move() -> None:
    assert hoist_verbosity(["convert", "m.onnx", "-o", "x.onnx", "-vv", "--", "-v"]) == \
        ["-vv", "convert", "m.onnx", "-o", "x.onnx", "--", "-v"]
