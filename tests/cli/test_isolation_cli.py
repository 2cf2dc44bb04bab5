"""A model that crashes onnxruntime's native code (SIGFPE on ConvTranspose group=0) is a reported problem,
not a dead `bridge` process; `inspect` names the attribute before any runtime would crash on it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from bridge.inspection import runtime_problems


def _crashing_model() -> onnx.ModelProto:
    w = numpy_helper.from_array(np.ones((3, 2, 3, 3), np.float32), "w")
    graph = helper.make_graph([helper.make_node("ConvTranspose", ["x", "w"], ["y"], group=0, name="ct")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 10, 10])], initializer=[w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_inspect_names_the_attribute_that_would_crash_onnxruntime(tmp_path: Path) -> None:
    path = tmp_path / "ct.onnx"
    onnx.save(_crashing_model(), path)
    proc = subprocess.run([sys.executable, "-m", "bridge", "inspect", str(path), "--json"], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode >= 0, f"bridge died by signal {-proc.returncode}: {proc.stderr}"
    problems = json.loads(proc.stdout)["problems"]
    assert [p["kind"] for p in problems if p["kind"] in ("attribute", "runtime-load")] == ["attribute"], problems
    assert any("node 'ct' (ConvTranspose): attribute 'group' is 0" in p["message"] for p in problems), problems


def test_a_runtime_crash_while_loading_is_a_problem_not_a_dead_process() -> None:
    """The load itself still runs in a child: its SIGFPE is reported, this process goes on."""
    (problem,) = runtime_problems(_crashing_model())
    assert problem.kind == "runtime-load" and "killed by SIGFPE" in problem.message
