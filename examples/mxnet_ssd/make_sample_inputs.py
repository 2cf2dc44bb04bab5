"""Write examples/mxnet_ssd/sample_inputs.npz: four preprocessed validation images as model feeds.

`bridge convert ... --feeds sample_inputs.npz` validates on these instead of random noise, so the
detection-aware comparison sees real, confident detections (noise makes the SSD predict background
everywhere, and an empty-vs-empty comparison proves nothing).
Run: python examples/mxnet_ssd/make_sample_inputs.py   (deterministic; the file is committed)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from shapes import make_validation_set, preprocess  # type: ignore[import-not-found]  # run as a script

COUNT = 4


def main() -> None:
    images, _, _ = make_validation_set()
    np.savez_compressed(Path(__file__).with_name("sample_inputs.npz"), data=preprocess(images[:COUNT]))


if __name__ == "__main__":
    main()
