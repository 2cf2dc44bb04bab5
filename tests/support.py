"""Test helpers shared across the suite (importable as `support`: pytest puts tests/ on sys.path)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import onnx
from onnx import helper

REPO = Path(__file__).resolve().parents[1]


def dims_of(vi: onnx.ValueInfoProto) -> list[int | str]:
    return [d.dim_value if d.HasField("dim_value") else d.dim_param for d in vi.type.tensor_type.shape.dim]


def all_value_infos(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    g = model.graph
    return [*g.input, *g.output, *g.value_info]


def run_cli(*args: str, cwd: Path = REPO, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the bridge CLI in a fresh interpreter (as a user would), capturing output."""
    return subprocess.run([sys.executable, "-m", "bridge", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)


def make_model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto],
               opset: int = 17, initializers: list[onnx.TensorProto] | None = None) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=initializers or [])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


