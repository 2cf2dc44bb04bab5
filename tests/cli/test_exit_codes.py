"""One exit code per kind of problem, the same in every command (``bridge.errors.EXIT_CODES``): the README's
table and ``bridge --help`` list it, and a missing extra - a framework or runtime not installed here - is 4 in
every command that can need one (it was 3 in convert / validate and 2 in bench), its message naming the install.

"Not installed" is made real for each run: a ``sitecustomize`` refuses the framework's import in the command and in
every child process it starts (``support.env_without``)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from support import REPO, env_without

from bridge.errors import EXIT_CODES, EXIT_NOT_INSTALLED

SSD = str(REPO / "examples" / "mxnet_ssd" / "model-symbol.json")


def test_the_readme_table_is_the_one_the_code_uses() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    table = readme.split("<!-- exit-codes:start -->", 1)[1].split("<!-- exit-codes:end -->", 1)[0]
    rows = dict(re.findall(r"^\| `(\d+)` \| (.*) \|$", table, re.M))
    assert {int(k): v for k, v in rows.items()} == EXIT_CODES


def test_bridge_help_lists_every_exit_code() -> None:
    proc = subprocess.run([sys.executable, "-m", "bridge", "--help"], capture_output=True, text=True, timeout=120,
                          env={"COLUMNS": "200", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr
    for code, text in EXIT_CODES.items():
        assert re.search(rf"^\s+{code}\s+{re.escape(text)}$", proc.stdout, re.M), (code, proc.stdout)


def _relu(path: Path) -> Path:
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


FACTORY = "import torch\n\n\ndef build():\n    return torch.nn.ReLU()\n"


@pytest.mark.parametrize(("command", "blocked", "named"), [
    (["convert", "net.py:build", "--input", "x:1,4", "-o", "out.onnx"], "torch", "PyTorch"),
    (["convert", "relu.onnx", "--to", "openvino", "-o", "out.onnx"], "openvino", "OpenVINO"),
    (["validate", "relu.onnx", "--source", "net.py:build"], "torch", "PyTorch"),
    (["bench", "relu.onnx", "--runtime", "openvino", "--iterations", "1", "--rounds", "1"], "openvino", "OpenVINO"),
    (["debug", "net.py:build", "--input", "x:1,4"], "torch", "PyTorch"),
    (["migrate", "manifest.yaml", "--executor", "dask://127.0.0.1:9", "--out", "mig"], "distributed",
     "Dask distributed"),
], ids=["convert", "convert-target", "validate", "bench", "debug", "migrate"])
def test_a_missing_extra_is_exit_4_in_every_command(tmp_path: Path, command: list[str], blocked: str,
                                                     named: str) -> None:
    (tmp_path / "net.py").write_text(FACTORY, encoding="utf-8")
    _relu(tmp_path / "relu.onnx")
    (tmp_path / "manifest.yaml").write_text("version: 1\nmodels:\n  - {name: relu, source: relu.onnx}\n",
                                            encoding="utf-8")
    env = {**env_without(tmp_path / "site", blocked), "COLUMNS": "200"}
    proc = subprocess.run([sys.executable, "-m", "bridge", *command], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == EXIT_NOT_INSTALLED, proc.stdout + proc.stderr
    assert f"{named} is not installed" in proc.stderr and "pip install" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
