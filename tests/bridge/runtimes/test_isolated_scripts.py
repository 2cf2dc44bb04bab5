"""The Python API from every way a user runs Python: a flat script (no ``__main__`` guard), code on stdin,
``python -c`` and a notebook-like ``__main__`` without ``__file__``. Isolated children are fresh
interpreters, so the caller's top level runs once and a child's start-up failure is bridge's, not the
model's."""

from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import bridge
from bridge.runtimes.isolated import IsolatedRuntime, WorkerStartError, _why_not_portable

REPO = Path(__file__).resolve().parents[3]

SCRIPT = """\
import bridge
print("TOP LEVEL RAN")
result = bridge.validate("model.onnx", reference="ref.npz")
print("PASSED", result.passed)
"""

NOTEBOOK = """\
import __main__, sys
if hasattr(__main__, "__file__"):
    del __main__.__file__
""" + SCRIPT


def _tiny_model(folder: Path) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["h"]), helper.make_node("Neg", ["h"], ["y"])],
                              "tiny", [x], [y])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), folder / "model.onnx")
    bridge.validate(folder / "model.onnx", source=folder / "model.onnx", save_reference=folder / "ref.npz")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("script")
    _tiny_model(folder)
    (folder / "flat.py").write_text(SCRIPT)
    return folder


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO)}


@pytest.mark.parametrize("style", ["file", "stdin", "dash-c", "notebook"])
def test_the_api_works_from_any_kind_of_script_and_runs_its_top_level_once(workdir: Path, style: str) -> None:
    argv, stdin = {
        "file": ([sys.executable, "flat.py"], None),
        "stdin": ([sys.executable, "-"], SCRIPT),
        "dash-c": ([sys.executable, "-c", SCRIPT], None),
        "notebook": ([sys.executable, "-"], NOTEBOOK),
    }[style]
    proc = subprocess.run(argv, input=stdin, cwd=workdir, env=_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("TOP LEVEL RAN") == 1, proc.stdout
    assert "PASSED True" in proc.stdout
    assert "bootstrapping" not in proc.stderr


def test_factories_defined_in_main_run_in_process() -> None:
    def local() -> None:  # pragma: no cover - never called
        pass

    local.__module__ = "__main__"
    local.__qualname__ = "build_runtime"
    assert _why_not_portable(local) == "build_runtime is defined in __main__"
    assert _why_not_portable(np.zeros) is None


def test_a_child_that_cannot_start_is_bridges_error_not_the_models() -> None:
    module = types.ModuleType("bridge_only_in_this_process")
    exec("def factory():\n    raise AssertionError('never built')\n", module.__dict__)
    sys.modules[module.__name__] = module
    try:
        runtime = IsolatedRuntime(module.factory, name="ghost", stage="the ghost reference")
        with pytest.raises(WorkerStartError, match="not the model's") as err:
            runtime.activate()
        assert "bridge_only_in_this_process" in str(err.value)
    finally:
        del sys.modules[module.__name__]
