"""A dataset run in shards merges into exactly the run over every image: each shard runs its range of images,
is saved as its state (.npz) and read back, and the merged figures - AP against the labels and against the
source, matched / missed / extra counts, keypoint PCK and pixel error, top-1 / top-5, mIoU - the worst images,
the notes and the verdict equal one run's to the last bit (only times differ)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from dataset_models import colour_classifier, colour_segmenter, colour_weights, shifted_keypoints_model

from bridge.runtimes.base import TensorMeta
from bridge.runtimes.onnxruntime import OnnxRuntime
from bridge.validation.dataset.labels import write_coco
from bridge.validation.dataset.preprocess import Preprocessing
from bridge.validation.dataset.run import DatasetResult, validate_on_dataset
from bridge.validation.dataset.shards import load_shard, merge_shards, save_shard, shard_ranges
from bridge.validation.dataset.sources import DatasetSpec
from bridge.validation.detection.layouts import detect_detection_outputs

TIMES = ("seconds", "images_per_s", "metric_seconds")


def _without_times(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_times(v) for k, v in value.items() if k not in TIMES}
    if isinstance(value, list):
        return [_without_times(v) for v in value]
    return value


def _sharded(run: Any, spec: DatasetSpec, size: int, tmp_path: Path) -> DatasetResult:
    """``run`` on each shard of ``spec``, saved and read back, merged."""
    from bridge.validation.dataset.sources import Dataset

    parts = []
    for k, (start, stop) in enumerate(shard_ranges(len(Dataset(spec)), size, spec.batch_size)):
        path = tmp_path / f"shard-{k}.npz"
        save_shard(run(DatasetSpec(spec.path, spec.labels, stop, spec.batch_size, spec.classes, start=start)), path,
                   "key")
        key, part = load_shard(path)
        assert key == "key" and part.spec.start == start
        parts.append(part)
    assert len(parts) > 2
    return merge_shards(parts, spec)


def _same(whole: DatasetResult, merged: DatasetResult) -> None:
    assert _without_times(merged.to_dict()) == _without_times(whole.to_dict())
    assert _without_times(merged.run_dict()) == _without_times(whole.run_dict())
    assert merged.images == whole.images and merged.passed == whole.passed


def test_shard_ranges_are_whole_batches() -> None:
    assert shard_ranges(20, 7, 4) == [(0, 8), (8, 16), (16, 20)]
    assert shard_ranges(5, 100, 8) == [(0, 5)]
    assert shard_ranges(9, 1, 4) == [(0, 4), (4, 8), (8, 9)]


@pytest.mark.parametrize("kind", ["classifier", "segmenter"])
def test_sharded_classifier_and_segmenter_equal_one_run(images: tuple[Path, Path], kind: str,
                                                        tmp_path: Path) -> None:
    folder, labels = images
    w = colour_weights() if kind == "classifier" else np.random.default_rng(2).normal(0, 1, (4, 3, 1, 1))
    build = colour_classifier if kind == "classifier" else colour_segmenter
    model, other = build(w), build(w + np.random.default_rng(1).normal(0, 0.5, w.shape))
    metas = [TensorMeta.from_value_info(v) for v in model.graph.input]
    outs = [TensorMeta.from_value_info(v) for v in model.graph.output]

    def run(spec: DatasetSpec) -> DatasetResult:
        return validate_on_dataset(OnnxRuntime(model), {"same": OnnxRuntime(model), "other": OnnxRuntime(other)}, spec,
                                   Preprocessing(scale="1/255"), inputs=metas, outputs=outs)

    spec = DatasetSpec(folder, labels if kind == "classifier" else None, batch_size=4, classes="id")
    whole = run(spec)
    assert not whole.passed and whole.worst  # "other" disagrees somewhere: worst images and failures to merge
    _same(whole, _sharded(run, spec, 12, tmp_path))


def test_sharded_detector_with_keypoints_equals_one_run(faces: tuple[onnx.ModelProto, Path],
                                                        tmp_path: Path) -> None:
    import blazeface_models

    grafted, folder = faces
    _batch, truth = blazeface_models.face_batch(seed=7, count=24)  # the faces' own labels, for mAP
    labels = tmp_path / "labels.json"
    size = blazeface_models.SIZE
    write_coco(labels, [f"{k:02d}.png" for k in range(24)], [(size, size)] * 24,
               [np.array([f["box"] for f in t]) * size for t in truth], [np.zeros(len(t), np.int64) for t in truth],
               ["face"])
    [spec_group] = detect_detection_outputs(grafted)
    shifted = shifted_keypoints_model(grafted, 0.1)

    def run(spec: DatasetSpec) -> DatasetResult:
        return validate_on_dataset(
            OnnxRuntime(grafted), {"onnxruntime": OnnxRuntime(grafted), "shifted": OnnxRuntime(shifted)}, spec,
            Preprocessing(scale="1/127.5", mean="1,1,1"),
            inputs=[TensorMeta.from_value_info(v) for v in grafted.graph.input],
            outputs=[TensorMeta.from_value_info(v) for v in grafted.graph.output], detections=[spec_group])

    spec = DatasetSpec(folder, labels, batch_size=1, classes="index")
    whole = run(spec)
    figures = whole.to_dict()
    assert figures["source"]["map50"] > 0.5 and figures["shifted"]["keypoint_pck"] == 0.0 and whole.worst
    _same(whole, _sharded(run, spec, 7, tmp_path))
