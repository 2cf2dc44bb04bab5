"""Trained test models: tiny detectors and a classifier trained in code on procedural shapes, built once and cached.

Random weights make thousands of equal scores, so validation needed tie and pinning excuses that real models
never need; these models give well-separated, confident detections (2-6 shapes of 3 classes per image) as
trained models do. ``trained_model(name)`` returns a ``TrainedModel``: the source ``bridge convert`` takes
and its arguments, realistic preprocessed feeds, held-out png images with COCO labels, the preprocessing as
data and the measured quality. The first call trains it (seeded, in a child process, CPU) into
``tests/.cache/trained/<name>-<hash of its code and seed>/`` (see ``cache.py``); later calls and other
processes reuse it. Figures per model: README.md beside this file and each builder module's docstring.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trained_models.cache import CACHE, COMPLETE, build_once, code_key

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
# name -> builder module (each has FRAMEWORK, SEED, DEPENDS and build(out) -> manifest); the only list of the models
BUILDERS: dict[str, str] = {
    "mxnet_ssd": "trained_models.mxnet_ssd",
    "gluoncv_boxnms": "trained_models.gluoncv_boxnms",
    "torchvision_det": "trained_models.torchvision_det",
    "keras_combined_nms": "trained_models.keras_combined_nms",
    "yolo_rows": "trained_models.yolo_rows",
    "classifier": "trained_models.classifier",
}
TRAINED_MODELS: tuple[str, ...] = tuple(BUILDERS)
SHARED_CODE = (HERE / "common.py", REPO / "examples" / "mxnet_ssd" / "shapes.py")


@dataclass(frozen=True)
class TrainedModel:
    name: str  # one of TRAINED_MODELS
    framework: str  # "mxnet" | "pytorch" | "tensorflow" | "onnx"
    source: Path  # what `bridge convert` / `--source` takes (a PyTorch source is "path/model.py:factory")
    convert_args: tuple[str, ...]  # the CLI args for `bridge convert` besides SOURCE and -o (inputs, dynamic axes, ...)
    feeds: Path  # .npz of realistic, already preprocessed validation inputs keyed by input name
    layout: str  # the detection layout (bridge.validation.detection.layouts) or "classifier"
    images: Path  # folder of procedural images (png) for dataset validation
    labels: Path  # COCO-format json of those images' ground truth (image-level categories for the classifier)
    preprocessing: dict[str, Any]  # {"resize", "size", "channel_order", "layout", "dtype", "mean", "std"}
    # beyond the agreed interface: how to read the outputs and what was measured
    detections: dict[str, Any] | None = None  # DetectionSpec.to_dict() of the source's outputs (None: classifier)
    box_units: str = "pixels"  # "pixels" of the input image or "normalized" ([0, 1])
    quality: dict[str, Any] = field(default_factory=dict)  # held-out metrics: map50, map50_95 | top1
    training: dict[str, Any] = field(default_factory=dict)  # seconds, final loss, images, epochs, ...
    folder: Path = Path()  # the cache folder holding it


def builder(name: str) -> Any:
    """Model ``name``'s builder module (FRAMEWORK, SEED, DEPENDS, build)."""
    if name not in BUILDERS:
        raise KeyError(f"no trained model '{name}'; choose one of {', '.join(TRAINED_MODELS)}")
    return importlib.import_module(BUILDERS[name])


def model_folder(name: str) -> Path:
    """Where model ``name`` is (or will be) cached: its name and the hash of its builder's code and seed."""
    module = builder(name)
    files = [Path(module.__file__), *SHARED_CODE, *module.DEPENDS]
    return CACHE / f"{name}-{code_key(files, module.SEED)}"


def _build_in_child(name: str) -> Any:
    def build(tmp: Path) -> None:
        # a child process: each framework (MXNet, TensorFlow, torch) trains in an interpreter of its own, and
        # this worktree's code is the one imported (tests/ and the repo root first on the path)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests")]),
               "OMP_NUM_THREADS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}
        proc = subprocess.run([sys.executable, "-m", "trained_models.build", name, str(tmp)], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=1800)
        (tmp / "build.log").write_text(proc.stdout + proc.stderr)
        if proc.returncode != 0:
            raise RuntimeError(f"building trained model {name} failed (exit {proc.returncode}):\n"
                               + (proc.stdout + proc.stderr)[-4000:])
    return build


def trained_model(name: str) -> TrainedModel:
    """Model ``name``, trained on first use (seeded, in a child process) and cached under tests/.cache/trained/."""
    folder = build_once(model_folder(name), _build_in_child(name))
    return load(folder)


def load(folder: Path) -> TrainedModel:
    """The TrainedModel described by ``folder/model.json`` (paths there are relative to the folder)."""
    data = json.loads((folder / COMPLETE).read_text())

    def path(text: str) -> Path:
        return Path(text.format(dir=folder, repo=REPO))

    return TrainedModel(
        name=data["name"], framework=data["framework"], source=path(data["source"]),
        convert_args=tuple(a.format(dir=folder, repo=REPO) for a in data["convert_args"]),
        feeds=folder / data["feeds"], layout=data["layout"], images=folder / data["images"],
        labels=folder / data["labels"], preprocessing=data["preprocessing"], detections=data.get("detections"),
        box_units=data.get("box_units", "pixels"), quality=data.get("quality", {}),
        training=data.get("training", {}), folder=folder)


__all__ = ["BUILDERS", "TRAINED_MODELS", "TrainedModel", "builder", "load", "model_folder", "trained_model"]
