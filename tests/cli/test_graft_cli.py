"""`bridge graft-nms` in a fresh interpreter: exit 0 and a checker-clean model that onnxruntime runs;
exit 2 for bad arguments."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from support import make_model, run_cli


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(*args)


@pytest.fixture
def headless(tmp_path: Path) -> Path:
    """A 'detector' whose outputs are its inputs: boxes [B, N, 4], scores [B, N, 3]."""
    model = make_model([helper.make_node("Identity", ["b"], ["boxes"]), helper.make_node("Identity", ["s"], ["scores"])],
                       [helper.make_tensor_value_info("b", TensorProto.FLOAT, ["batch", 20, 4]),
                        helper.make_tensor_value_info("s", TensorProto.FLOAT, ["batch", 20, 3])],
                       [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, ["batch", 20, 4]),
                        helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["batch", 20, 3])])
    path = tmp_path / "headless.onnx"
    onnx.save(model, str(path))
    return path


def test_graft_nms_writes_a_runnable_model(headless: Path, tmp_path: Path) -> None:
    out = tmp_path / "out" / "grafted.onnx"
    result = _cli("graft-nms", str(headless), "--boxes", "boxes", "--scores", "scores", "--max-det", "7",
                  "--iou", "0.5", "--score", "0.1", "--background-class", "none", "-o", str(out))
    assert result.returncode == 0, result.stderr
    model = onnx.load(str(out))
    onnx.checker.check_model(model, full_check=True)
    rng = np.random.default_rng(0)
    xy = rng.random((2, 20, 2)).astype(np.float32)
    feeds = {"b": np.concatenate([xy, xy + 0.2], -1), "s": rng.random((2, 20, 3)).astype(np.float32)}
    boxes, _scores, _classes, num = ort.InferenceSession(out.read_bytes(), providers=["CPUExecutionProvider"]).run(None, feeds)
    assert boxes.shape == (2, 7, 4) and (num <= 7).all() and (num > 0).all()
    assert not list(tmp_path.glob("out/.*.tmp"))  # atomic write left no temp file


@pytest.mark.parametrize("extra", [
    ["--box-format", "xywh"],
    ["--variances", "0.1,0.2"],
    ["--variances", "0.1,0.1,0.2,0.2"],  # without --anchors
    ["--background-class", "first"],
    ["--boxes", "missing"],
    ["--max-det", "zero"],
])
def test_bad_arguments_exit_2(headless: Path, tmp_path: Path, extra: list[str]) -> None:
    args = ["graft-nms", str(headless), "--boxes", "boxes", "--scores", "scores", "-o", str(tmp_path / "x.onnx")]
    if extra[0] == "--boxes":
        args[3] = extra[1]
    else:
        args += extra
    result = _cli(*args)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert not (tmp_path / "x.onnx").exists()
