"""The dataset run for classifiers and segmenters (models built in code, run in onnxruntime): the same model
agrees fully; a candidate with perturbed weights loses agreement and fails the budget; accuracy against
labels; an .npz of ready inputs; what a model that is none of the known kinds gets."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from dataset_models import CLASSES, colour_classifier, colour_segmenter, colour_weights
from onnx import TensorProto, helper
from support import make_model, run_in_own_interpreter

from bridge.errors import UsageError
from bridge.runtimes.base import TensorMeta
from bridge.runtimes.onnxruntime import OnnxRuntime
from bridge.validation.dataset.preprocess import Preprocessing
from bridge.validation.dataset.run import AccuracyBudget, validate_on_dataset
from bridge.validation.dataset.sources import DatasetSpec

Image = pytest.importorskip("PIL.Image")
pytest.importorskip("pycocotools")


def _run(model: onnx.ModelProto, candidate: onnx.ModelProto, spec: DatasetSpec, **kw: object) -> object:
    metas = [TensorMeta.from_value_info(v) for v in model.graph.input]
    outs = [TensorMeta.from_value_info(v) for v in model.graph.output]
    return validate_on_dataset(OnnxRuntime(model), {"onnxruntime": OnnxRuntime(candidate)}, spec,
                               Preprocessing(scale="1/255"), inputs=metas, outputs=outs, **kw)  # type: ignore[arg-type]


def test_a_classifier_agrees_with_itself_and_scores_against_labels(images: tuple[Path, Path]) -> None:
    folder, labels = images
    model = colour_classifier(colour_weights())
    result = _run(model, model, DatasetSpec(folder, labels, classes="id"))
    assert result.kind == "classification" and result.passed  # type: ignore[attr-defined]
    entries = result.to_dict()  # type: ignore[attr-defined]
    assert entries["onnxruntime"]["top1_agreement"] == 1.0 and entries["onnxruntime"]["top5_agreement"] == 1.0
    assert entries["source"]["top1_accuracy"] == entries["onnxruntime"]["top1_accuracy"] > 0.2


def test_a_perturbed_classifier_fails_the_budget(images: tuple[Path, Path]) -> None:
    folder, labels = images
    w = colour_weights()
    bad = colour_classifier(w + np.random.default_rng(1).normal(0, 0.6, w.shape))
    result = _run(colour_classifier(w), bad, DatasetSpec(folder, labels, classes="id"))
    entry = result.to_dict()["onnxruntime"]  # type: ignore[attr-defined]
    assert entry["top1_agreement"] < 0.99 and not result.passed  # type: ignore[attr-defined]
    assert any("top1_agreement" in f for f in result.failures)  # type: ignore[attr-defined]
    assert result.run_dict()["worst"]  # type: ignore[attr-defined]


def test_a_segmenter_is_judged_by_miou(images: tuple[Path, Path], tmp_path: Path) -> None:
    folder, _labels = images
    w = np.random.default_rng(2).normal(0, 1, (4, 3, 1, 1))
    same = _run(colour_segmenter(w), colour_segmenter(w), DatasetSpec(folder))
    assert same.kind == "segmentation" and same.to_dict()["onnxruntime"]["miou"] == 1.0  # type: ignore[attr-defined]
    perturbed = w + np.random.default_rng(5).normal(0, 0.7, w.shape)  # per class: the argmax changes
    off = _run(colour_segmenter(w), colour_segmenter(perturbed), DatasetSpec(folder), budget=AccuracyBudget(min_agreement=0.99))
    assert off.to_dict()["onnxruntime"]["miou"] < 0.99 and not off.passed  # type: ignore[attr-defined]


def test_ready_inputs_from_an_npz(tmp_path: Path) -> None:
    x = np.random.default_rng(3).uniform(0, 1, (11, 3, 8, 8)).astype(np.float32)
    np.savez(tmp_path / "ready.npz", x=x)
    model = colour_classifier(np.random.default_rng(4).normal(0, 1, (3, CLASSES)))
    result = _run(model, model, DatasetSpec(tmp_path / "ready.npz", batch_size=4))
    assert result.images == 11 and result.to_dict()["onnxruntime"]["top1_agreement"] == 1.0  # type: ignore[attr-defined]


def test_a_model_of_no_known_kind_is_a_usage_error(images: tuple[Path, Path]) -> None:
    folder, _labels = images
    model = make_model([helper.make_node("Identity", ["x"], ["y"])],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3, 8])], opset=17)
    with pytest.raises(UsageError, match="not a detector"):
        _run(model, model, DatasetSpec(folder))


_CTRL_C_IN_A_CANDIDATE = """
import os, signal, sys, tempfile
from pathlib import Path
from dataset_models import colour_classifier, colour_weights, write_colour_images
from bridge.runtimes.base import TensorMeta
from bridge.runtimes.onnxruntime import OnnxRuntime
from bridge.validation.dataset.preprocess import Preprocessing
from bridge.validation.dataset.run import DatasetCancelled, validate_on_dataset
from bridge.validation.dataset.sources import DatasetSpec


class Interrupting(OnnxRuntime):
    calls = 0

    def infer(self, feeds):
        out = super().infer(feeds)
        self.calls += 1
        if self.calls == 2:  # what Ctrl-C does: the handler sets the stop event; the run ends between batches
            os.kill(os.getpid(), signal.SIGINT)
        return out


folder, labels = write_colour_images(Path(tempfile.mkdtemp()))
model = colour_classifier(colour_weights())
metas = [TensorMeta.from_value_info(v) for v in model.graph.input]
outs = [TensorMeta.from_value_info(v) for v in model.graph.output]
try:
    validate_on_dataset(OnnxRuntime(model), {"onnxruntime": Interrupting(model)},
                        DatasetSpec(folder, labels, batch_size=8, classes="id"), Preprocessing(scale="1/255"),
                        inputs=metas, outputs=outs)
except DatasetCancelled as err:
    result = err.result
    assert result.cancelled == {"runtime": "onnxruntime", "images": 16, "of": 40}, result.cancelled
    assert err.exit_code == 130
    assert result.to_dict()["source"]["images"] == 40 and result.to_dict()["onnxruntime"]["images"] == 16
    sys.exit(42)
sys.exit(0)
"""


def test_ctrl_c_in_a_candidate_keeps_what_was_measured() -> None:
    """Ctrl-C during a candidate's batch stops the run between batches and keeps what was measured. In an
    interpreter of its own (``support.run_in_own_interpreter``): the SIGINT is the whole process's."""
    proc = run_in_own_interpreter(_CTRL_C_IN_A_CANDIDATE)
    assert proc.returncode == 42, proc.stderr[-2000:]
