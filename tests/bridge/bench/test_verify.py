"""``bridge bench --verify``: before timing, the benchmarked model is checked as ``bridge validate`` checks it
(against ``--source`` run now, or a saved ``--reference``); a model that computes something else exits 1 and
nothing is timed (no figures, no report), one that passes is timed with the verdict recorded."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from support import make_model, run_cli


def _model(scale: float) -> onnx.ModelProto:
    return make_model([helper.make_node("Mul", ["x", "s"], ["m"]), helper.make_node("Relu", ["m"], ["y"])],
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
                      initializers=[numpy_helper.from_array(np.float32(scale), "s")])


def test_a_model_that_fails_its_check_is_not_timed(tmp_path: Path) -> None:
    onnx.save(_model(2.0), tmp_path / "source.onnx")
    onnx.save(_model(2.5), tmp_path / "wrong.onnx")
    done = run_cli("bench", str(tmp_path / "wrong.onnx"), "--verify", "--source", str(tmp_path / "source.onnx"),
                   "--runtime", "onnxruntime", "--iterations", "3", "--rounds", "1", "--report",
                   str(tmp_path / "bench.json"))
    assert done.returncode == 1, done.stderr
    assert "does not match" in done.stderr or "FAIL" in done.stderr + done.stdout
    assert "p50" not in done.stdout and not (tmp_path / "bench.json").exists()


def test_a_verified_model_is_timed_with_its_verdict(tmp_path: Path) -> None:
    onnx.save(_model(2.0), tmp_path / "source.onnx")
    onnx.save(_model(2.0), tmp_path / "model.onnx")
    saved = run_cli("validate", str(tmp_path / "model.onnx"), "--source", str(tmp_path / "source.onnx"),
                    "--save-reference", str(tmp_path / "ref.npz"))
    assert saved.returncode == 0, saved.stderr
    done = run_cli("bench", str(tmp_path / "model.onnx"), "--verify", "--reference", str(tmp_path / "ref.npz"),
                   "--runtime", "onnxruntime", "--iterations", "3", "--rounds", "1", "--report",
                   str(tmp_path / "bench.json"))
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "bench.json").read_text())
    assert report["verification"]["passed"] and "ref.npz" in report["verification"]["reference"]
    assert report["results"] and all(r.get("latency") for r in report["results"]), report["results"]
    assert "verified against" in done.stdout
