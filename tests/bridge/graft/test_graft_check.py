"""Never write a detector that cannot detect: a single score class is not a background class unless asked (and
asking is refused: it would remove the only class), and the grafted model is run once - when its scores pass the
threshold but it returns no detection, the graft FAILs saying why and writes nothing."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from support import make_model, run_cli

from bridge.errors import UsageError, ValidationMismatch
from bridge.graft import graft_nms, plan_graft
from bridge.graft.check import check_detects

N = 16


def _one_class_head(tmp_path: Path) -> Path:
    """Boxes [1, N, 4] and one score logit per box [1, N, 1] (a face detector's head), outputs = inputs."""
    model = make_model([helper.make_node("Identity", ["b"], ["boxes"]), helper.make_node("Identity", ["s"], ["scores"])],
                       [helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, N, 4]),
                        helper.make_tensor_value_info("s", TensorProto.FLOAT, [1, N, 1])],
                       [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, N, 4]),
                        helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, N, 1])])
    path = tmp_path / "head.onnx"
    onnx.save(model, str(path))
    return path


def _feeds(tmp_path: Path) -> tuple[dict[str, np.ndarray], Path]:
    rng = np.random.default_rng(0)
    xy = rng.uniform(0, 0.7, (1, N, 2))
    feeds = {"b": np.concatenate([xy, xy + 0.25], -1).astype(np.float32),
             "s": rng.uniform(-4, 4, (1, N, 1)).astype(np.float32)}
    path = tmp_path / "feeds.npz"
    np.savez(path, **feeds)
    return feeds, path


def test_one_score_class_is_detected_by_default(tmp_path: Path) -> None:
    feeds, _ = _feeds(tmp_path)
    feeds["s"] = 1 / (1 + np.exp(-feeds["s"]))  # probabilities: the options graft-nms always had
    grafted = graft_nms(_one_class_head(tmp_path), boxes="boxes", scores="scores", score=0.5)
    num = ort.InferenceSession(grafted.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        ["num_detections"], feeds)[0]
    assert num[0] > 0  # before: background class 0 removed the only class, and nothing was ever detected


def test_asking_to_remove_the_only_class_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="removes the only score class"):
        graft_nms(_one_class_head(tmp_path), boxes="boxes", scores="scores", background_class=0)


def test_a_grafted_head_that_cannot_detect_fails_the_check(tmp_path: Path) -> None:
    _, feeds = _feeds(tmp_path)
    head = onnx.load(str(_one_class_head(tmp_path)))
    plan = plan_graft(head, boxes="boxes", scores="scores", score_activation="sigmoid", score=0.5)
    assert plan.background is None
    assert check_detects(head, plan, feeds=feeds, isolated=False).detections > 0
    broken = dataclasses.replace(plan, background=0)  # what graft-nms built before, past the option checks
    with pytest.raises(ValidationMismatch) as err:
        check_detects(head, broken, feeds=feeds, isolated=False)
    assert "returns no detection" in str(err.value) and "pass --score 0.5" in str(err.value)
    assert "column 0 (the only score class), which --background-class 0 removes" in str(err.value)


def test_the_check_from_the_command_line(tmp_path: Path) -> None:
    head = _one_class_head(tmp_path)
    _, feeds = _feeds(tmp_path)
    out = tmp_path / "det.onnx"
    base = ["graft-nms", str(head), "--boxes", "boxes", "--scores", "scores", "--score-activation", "sigmoid",
            "--score", "0.5"]
    result = run_cli(*base, "--feeds", str(feeds), "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert f"detection check on --feeds {feeds}: " in result.stdout and out.is_file()
    refused = run_cli(*base, "--background-class", "0", "-o", str(tmp_path / "x.onnx"))
    assert refused.returncode == 2 and not (tmp_path / "x.onnx").exists()
    generated = run_cli(*base, "--score", "0.9999", "-o", str(tmp_path / "y.onnx"))
    assert generated.returncode == 0, generated.stderr
    assert "generated inputs" in generated.stdout and "nothing to detect on these inputs" in generated.stdout
