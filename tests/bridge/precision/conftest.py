"""The images the precision tests judge and calibrate on: the example SSD's procedural shapes with COCO labels
(300 at seed 1, the example's validation set) and 64 other images (seed 3) for calibration, and 8 feeds."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from dataset_models import SSD, procedural_dataset


@pytest.fixture(scope="session")
def shapes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("shapes")
    images, labels = procedural_dataset(folder / "judge")
    calibration, _ = procedural_dataset(folder / "calibration", 64, seed=3)
    import sys

    sys.path.insert(0, str(SSD))
    try:
        from shapes import make_dataset, preprocess
    finally:
        sys.path.remove(str(SSD))
    np.savez(folder / "feeds.npz", data=preprocess(make_dataset(8, 1, 64)[0]))
    return {"images": images, "labels": labels, "calibration": calibration, "feeds": folder / "feeds.npz"}
