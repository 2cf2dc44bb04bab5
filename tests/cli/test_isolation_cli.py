"""A model that crashes onnxruntime's native code (SIGFPE on ConvTranspose group=0) is a reported problem,
not a dead `bridge` process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def test_inspect_survives_a_model_that_crashes_onnxruntime(tmp_path: Path) -> None:
    w = numpy_helper.from_array(np.ones((3, 2, 3, 3), np.float32), "w")
    graph = helper.make_graph([helper.make_node("ConvTranspose", ["x", "w"], ["y"], group=0, name="ct")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 10, 10])], initializer=[w])
    path = tmp_path / "ct.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    proc = subprocess.run([sys.executable, "-m", "bridge", "inspect", str(path), "--json"], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode >= 0, f"bridge died by signal {-proc.returncode}: {proc.stderr}"
    assert "killed by SIGFPE" in proc.stdout and "runtime-load" in proc.stdout
