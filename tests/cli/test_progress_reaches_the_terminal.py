"""Progress reaches the user's stderr while a framework's output is captured (a PyTorch export runs inside
``bridge.chatter.quiet``, which swaps ``sys.stderr``), and ``bridge validate`` shows its stages as convert does."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from support import make_model, run_cli

from bridge import api
from bridge.cli import render
from bridge.progress import stage

torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install 'bridge[torch]')")


WATCH: dict[str, Any] = {}  # module level: the adapter may work on a copy of the model


class SlowToExport(torch.nn.Module):
    """A convolution whose capture takes a second (a big model's export, in small), spent inside torch.export,
    where bridge captures torch's prints; it notes what the user's stderr held by the end of that second."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.compiler.is_exporting():
            time.sleep(1.0)
            WATCH.setdefault("seen", []).append(WATCH["stderr"].getvalue())
        return torch.relu(self.conv(x))


def test_the_heartbeat_reaches_stderr_during_a_torch_export(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    WATCH.clear()
    WATCH["stderr"] = sys.stderr  # capsys's stream: what the user's terminal would show
    with render.progress("converting m", heartbeat=0.25) as progress:
        api.convert(SlowToExport().eval(), tmp_path / "m.onnx", inputs=["x:1,3,8,8"], exporter="dynamo",
                    validate=[], progress=progress)
    assert WATCH.get("seen"), "torch.export did not run the model"
    beats = [line for line in WATCH["seen"][0].splitlines()
             if line.startswith("converting m: still exporting with the torch adapter (")]
    assert len(beats) >= 2, beats  # about one per 0.25 s of the 1 s spent in torch.export


def test_any_layer_reaches_the_open_display(capsys: pytest.CaptureFixture[str]) -> None:
    """``bridge.progress.stage`` names the stage from inside a step (an adapter) without a callback; with no
    display open (a library call) it does nothing."""
    stage("nobody listens")
    with render.progress("converting m", heartbeat=0.05):
        stage("tracing the model")
        time.sleep(0.3)
    assert "converting m: still tracing the model (" in capsys.readouterr().err


def _scaled(n: str | int) -> onnx.ModelProto:
    return make_model([helper.make_node("Mul", ["x", "two"], ["y"], name="mul")],
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, 4])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, 4])],
                      initializers=[onnx.numpy_helper.from_array(np.array(2, np.float32), "two")])


def test_validate_shows_its_stages(tmp_path: Path) -> None:
    onnx.save(_scaled("N"), tmp_path / "m.onnx")
    proc = run_cli("-v", "validate", str(tmp_path / "m.onnx"), "--source", str(tmp_path / "m.onnx"),
                   "--input", "x:2,4", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    stages = [line.split(": ", 2)[-1] for line in proc.stderr.splitlines()
              if line.startswith(f"INFO bridge.cli: validating {tmp_path / 'm.onnx'}: ")]
    assert stages[0] == f"loading {tmp_path / 'm.onnx'}", stages
    assert any(re.fullmatch(r"running the \w+ reference at x\[2, 4\]", s) for s in stages), stages
    assert "running onnxruntime" in stages and "running onnxruntime at a second size" in stages, stages
