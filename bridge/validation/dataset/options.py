"""The dataset options, declared once as one group (``DATASET_OPTIONS``): ``convert`` takes them with its own
options (``bridge.conversion.options.convert_options`` adds the group), ``validate`` derives its flags from
the same declarations, and a migrate manifest holds them under ``dataset:`` (``manifest="dataset"``).

``dataset_settings`` turns the option values (API keywords) into the ``DatasetSpec``, the preprocessing
overrides and the ``AccuracyBudget``; ``Settings.preprocessing`` lays the overrides over the defaults of
the source's framework (its adapter's ``dataset_preprocessing``), so the report states where each value
came from.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from bridge.config import Option
from bridge.validation.dataset.preprocess import CHANNEL_ORDERS, LAYOUTS, RESIZE_MODES, Preprocessing
from bridge.validation.dataset.run import AccuracyBudget
from bridge.validation.dataset.sources import DatasetSpec

GROUP = "dataset"
_BUDGET = AccuracyBudget()

DATASET_OPTIONS: tuple[Option, ...] = (
    Option("dataset", Path | None, None, "validate on these images too: a folder (jpg/png, recursively, sorted), "
           "an image-list file or an .npz of ready inputs; reports agreement with the source and mAP per runtime",
           metavar="IMAGES"),
    Option("labels", Path | None, None, "ground truth of --dataset: a COCO json or a folder of VOC xml "
           "(mAP / accuracy against it)", metavar="LABELS"),
    Option("dataset_limit", int | None, None, "use the first N images of --dataset", metavar="N"),
    Option("dataset_batch", int, 8, "images per inference on --dataset (a model's fixed batch size wins)",
           metavar="N"),
    Option("resize", str | None, None, "--dataset images to the input size: stretch (default) | letterbox | "
           "shorter (shorter side, then a centre crop) | none", choices=lambda: RESIZE_MODES, metavar="MODE"),
    Option("channel_order", str | None, None, "--dataset pixel order: RGB (default) | BGR",
           choices=lambda: CHANNEL_ORDERS, metavar="ORDER"),
    Option("layout", str | None, None, "--dataset input layout: NCHW | NHWC (default: from the input's shape)",
           choices=lambda: LAYOUTS, metavar="LAYOUT"),
    Option("dataset_dtype", str | None, None, "--dataset input dtype (default: the input's)", metavar="DTYPE"),
    Option("mean", str | None, None, "--dataset: subtract per channel, e.g. 123,117,104 (after --scale)",
           metavar="R,G,B"),
    Option("std", str | None, None, "--dataset: then divide per channel, e.g. 58.4,57.1,57.4", metavar="R,G,B"),
    Option("scale", str | None, None, "--dataset: multiply pixels (0..255) first, e.g. 1/255", metavar="FACTOR"),
    Option("classes", str, "index", "how the model's class ids name --labels' categories: index (class k = the "
           "k-th category, COCO by id, VOC by name) | id (= COCO category id) | names in class order",
           metavar="RULE"),
    Option("agreement_score", float, 0.5, "--dataset: the source's detections at or above this score are the "
           "ground truth of agreement", metavar="SCORE"),
    Option("min_agreement", float, _BUDGET.min_agreement, "--dataset budget: a candidate agreeing less with the "
           "source (AP@0.5 of its detections; top-1 agreement; mIoU) fails", metavar="X"),
    Option("max_map_drop", float, _BUDGET.max_map_drop, "--dataset budget: a candidate whose mAP@0.5 or "
           "mAP@[.5:.95] (top-1 accuracy) is lower than the source's by more fails", metavar="X"),
    Option("min_agreement_ap50_95", float, _BUDGET.min_agreement_ap50_95, "--dataset budget, detectors: a "
           "candidate whose AP@[.5:.95] against the source's detections is lower fails (a box shifted by 5 percent "
           "of its size scores at most 0.9)", metavar="X"),
    Option("min_keypoint_agreement", float, _BUDGET.min_keypoint_agreement, "--dataset budget, detectors with "
           "keypoints: a candidate with a lower share of keypoints within 5 percent of the box size of the source's "
           "(PCK) fails", metavar="X"),
)
# a migrate manifest holds the group under dataset: (bridge.migrate.manifest); bridge debug does not take it
DATASET_OPTIONS = tuple(replace(o, group=GROUP, manifest=GROUP, debug=False) for o in DATASET_OPTIONS)
OPTION_NAMES = tuple(o.name for o in DATASET_OPTIONS)
_PREPROCESSING = {"resize": "resize", "channel_order": "channel_order", "layout": "layout",
                  "dataset_dtype": "dtype", "mean": "mean", "std": "std", "scale": "scale"}


@dataclass(frozen=True)
class Settings:
    """A dataset run as the options asked for it."""

    spec: DatasetSpec
    budget: AccuracyBudget
    overrides: dict[str, Any] = field(default_factory=dict)  # Preprocessing fields the user set

    def preprocessing(self, defaults: Mapping[str, Any] | None = None, framework: str = "") -> Preprocessing:
        """The framework's defaults (its adapter's ``dataset_preprocessing``) under the user's values."""
        base = dict(defaults or {})
        why = base.pop("why", "")
        origin = (f"defaults for {framework} sources" + (f" ({why})" if why else "")) if defaults else \
            "bridge's defaults"
        return Preprocessing.from_dict(base, origin=origin).with_overrides("given", **self.overrides)

    def to_dict(self) -> dict[str, Any]:
        return {"dataset": self.spec.to_dict(), "budget": self.budget.to_dict(), "preprocessing": self.overrides}


def dataset_settings(values: Mapping[str, Any]) -> Settings | None:
    """The settings from option values (missing ones at their defaults); None without ``dataset``.
    UsageError for a value that cannot work (a missing path, a budget outside [0, 1], a dataset option
    given without --dataset)."""
    from bridge.errors import UsageError

    v = {o.name: values.get(o.name, o.default) for o in DATASET_OPTIONS}
    if v["dataset"] is None:
        given = [o.cli_flags[0] for o in DATASET_OPTIONS if o.name != "dataset" and v[o.name] not in (None, o.default)]
        if given:
            raise UsageError(f"{', '.join(given)} {'needs' if len(given) == 1 else 'need'} --dataset IMAGES")
        return None
    for o in DATASET_OPTIONS:
        o.check_choice(v[o.name])
    spec = DatasetSpec(Path(v["dataset"]), Path(v["labels"]) if v["labels"] else None, v["dataset_limit"],
                       int(v["dataset_batch"]), str(v["classes"]), float(v["agreement_score"]))
    overrides = {field_name: v[name] for name, field_name in _PREPROCESSING.items() if v[name] is not None}
    Preprocessing(**overrides)  # a bad value is a usage error now, before anything runs
    budget = AccuracyBudget(float(v["min_agreement"]), float(v["max_map_drop"]), float(v["min_agreement_ap50_95"]),
                            float(v["min_keypoint_agreement"]))
    return Settings(spec, budget, overrides)


def validate_with_settings(settings: Settings, reference: Any, candidates: Mapping[str, Any], model: Any,
                           detections: Any, *, framework: str = "", defaults: Mapping[str, Any] | None = None,
                           sample_shapes: Mapping[str, Any] | None = None, progress: Any = None) -> Any:
    """``validate_on_dataset`` for an ONNX ``model`` (its graph's inputs and outputs) with ``settings``, the
    preprocessing defaults of the source's framework under the user's values: what convert and validate call."""
    from bridge.runtimes.base import TensorMeta
    from bridge.validation.dataset.run import validate_on_dataset

    weights = {i.name for i in model.graph.initializer}
    inputs = [TensorMeta.from_value_info(vi) for vi in model.graph.input if vi.name not in weights]
    outputs = [TensorMeta.from_value_info(vi) for vi in model.graph.output]
    return validate_on_dataset(reference, candidates, settings.spec, settings.preprocessing(defaults, framework),
                               inputs=inputs, outputs=outputs, detections=list(detections),
                               budget=settings.budget, sample_shapes=sample_shapes, progress=progress)


def first_batch(settings: Settings, model: Any, path: Path, *, framework: str = "",
                defaults: Mapping[str, Any] | None = None, sample_shapes: Mapping[str, Any] | None = None) -> Path:
    """The dataset's first batch, preprocessed as the dataset run will, saved as an .npz of inputs at ``path``:
    the elementwise check's inputs when no --feeds is given (real images instead of noise, and a batch size
    for a model whose batch axis is dynamic)."""
    import numpy as np

    from bridge.runtimes.base import TensorMeta
    from bridge.validation.dataset.run import image_input
    from bridge.validation.dataset.sources import Dataset

    weights = {i.name for i in model.graph.initializer}
    inputs = [TensorMeta.from_value_info(vi) for vi in model.graph.input if vi.name not in weights]
    data = Dataset(replace(settings.spec, limit=settings.spec.batch_size))
    pre = settings.preprocessing(defaults, framework)
    target = image_input(data, inputs, pre, sample_shapes)
    size = target.batch if target is not None and target.batch else min(settings.spec.batch_size, len(data))
    batch = next(data.batches(pre, target, size))
    np.savez(path, **batch.feeds)
    return path


__all__ = ["DATASET_OPTIONS", "GROUP", "OPTION_NAMES", "Settings", "dataset_settings", "first_batch",
           "validate_with_settings"]
