"""``convert --dataset``: the dataset's accuracy budget judges the written files too. A runtime whose outputs stay
within a loosened elementwise tolerance but flip the classifier's answer on the user's images fails the budget, and
every file it validated is listed with verdict "fail" - not "pass" from the elementwise check alone."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from support import make_model

from bridge import api
from bridge.errors import ValidationMismatch
from bridge.runtimes.onnxruntime import OnnxRuntime

Image = pytest.importorskip("PIL.Image")
CLASSES = 5
BIAS = 0.35  # what the leaning runtime adds to class 0's score: within --atol 0.5, enough to change some answers


class LeaningRuntime(OnnxRuntime):
    """onnxruntime, with class 0's score raised by BIAS: elementwise close, wrong on the images near class 0."""

    name = "leaning"

    def infer(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        out = super().infer(feeds)
        y = np.array(out["y"], copy=True)
        y[:, 0] += BIAS
        return {**out, "y": y}


@pytest.fixture
def leaning(monkeypatch: pytest.MonkeyPatch) -> None:
    from bridge import runtimes

    monkeypatch.setitem(runtimes._REGISTRY.entries, "leaning", f"{__name__}:LeaningRuntime")


@pytest.fixture
def classifier(tmp_path: Path) -> tuple[Path, Path]:
    """A nearest-colour classifier (x [N, 3, 8, 8] -> [N, 5]) and 40 noisy images of its 5 colours."""
    rng = np.random.default_rng(0)
    palette = rng.uniform(0, 255, (CLASSES, 3))
    w = (2 * palette.T / 255.0 - 0.0).astype(np.float32)
    b = (-(palette / 255.0) ** 2).sum(1).astype(np.float32)  # scores = -|x - p|^2 up to a per-image constant
    model = make_model(
        [helper.make_node("GlobalAveragePool", ["x"], ["p"]), helper.make_node("Flatten", ["p"], ["f"]),
         helper.make_node("Gemm", ["f", "w", "b"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", CLASSES])],
        opset=17, initializers=[numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    onnx.save(model, tmp_path / "classifier.onnx")
    folder = tmp_path / "images"
    folder.mkdir()
    for k in range(40):
        img = np.clip(palette[k % CLASSES] + rng.normal(0, 40, (8, 8, 3)), 0, 255).astype(np.uint8)
        Image.fromarray(img).save(folder / f"{k:03d}.png")
    return tmp_path / "classifier.onnx", folder


def test_a_file_outside_the_dataset_budget_is_listed_as_failing(leaning: None, classifier: tuple[Path, Path],
                                                                tmp_path: Path) -> None:
    model, images = classifier
    out = tmp_path / "out.onnx"
    with pytest.raises(ValidationMismatch) as err:
        api.convert(model, out, validate=["onnxruntime", "leaning"], isolated=False, atol=0.5, inputs=["x:8,3,8,8"], dynamic=["x:0=N"], dataset=images,
                    scale="1/255")
    result = err.value.result
    assert all(c.passed for c in result.validation)  # the loosened elementwise check lets it through ...
    assert result.dataset.candidate_passed("onnxruntime") and not result.dataset.candidate_passed("leaning")
    assert any(f.startswith("leaning: top1_agreement") for f in result.dataset.failures)  # ... the budget does not
    [onnx_file] = result.files
    assert onnx_file["validated_by"] == ["onnxruntime", "leaning"] and onnx_file["verdict"] == "fail"
    assert result.dataset.to_dict()["leaning"]["passed"] is False and not out.exists()


def test_files_pass_when_every_runtime_keeps_within_the_budget(classifier: tuple[Path, Path], tmp_path: Path) -> None:
    model, images = classifier
    result = api.convert(model, tmp_path / "out.onnx", isolated=False, inputs=["x:8,3,8,8"], dynamic=["x:0=N"], dataset=images,
                         scale="1/255")
    assert result.dataset.candidate_passed("onnxruntime") and result.dataset.to_dict()["onnxruntime"]["passed"]
    assert [f["verdict"] for f in result.files] == ["pass"] and result.written
