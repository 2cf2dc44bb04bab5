"""Validation on the user's own images: agreement with the source and mAP (or accuracy) per runtime.

``--dataset`` (a folder of images, an image list or an .npz of ready inputs) and ``--labels`` (COCO json
or VOC xml) feed the source and every candidate through one declared ``Preprocessing``; the images
stream in batches (``sources``), detections are read through the detection layouts and mapped back to
the images' pixels, and pycocotools scores them chunk by chunk (``metrics``); ``run.validate_on_dataset``
is the entry, ``options`` the option group and ``validate_with_settings`` what the commands call.
"""

from bridge.validation.dataset.options import (
    DATASET_OPTIONS,
    Settings,
    dataset_settings,
    validate_with_settings,
)
from bridge.validation.dataset.preprocess import Preprocessing
from bridge.validation.dataset.run import (
    AccuracyBudget,
    DatasetCancelled,
    DatasetResult,
    validate_on_dataset,
)
from bridge.validation.dataset.sources import DatasetSpec

__all__ = ["DATASET_OPTIONS", "AccuracyBudget", "DatasetCancelled", "DatasetResult", "DatasetSpec", "Preprocessing",
           "Settings", "dataset_settings", "validate_on_dataset", "validate_with_settings"]
