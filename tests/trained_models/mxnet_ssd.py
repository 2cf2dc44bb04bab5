"""``mxnet_ssd``: the legacy-format MXNet SSD shipped in examples/mxnet_ssd/ (trained there; its checkpoint is the model).

Nothing is trained here: the build writes held-out images of the example's generator with 2-4 shapes each
(0.18-0.36 of the side, inside the distribution it was trained on: 1-3 shapes of 0.18-0.45), their COCO
labels (pixels; category ids 0..2 as MultiBoxDetection emits them), the feeds, and measures the held-out mAP
with MXNet. Outputs: ``detection_output`` [B, 320, 6] rows (class, score, x1, y1, x2, y2), boxes normalised
to [0, 1]; preprocessing mxnet-ssd's (RGB, minus mean 123, 117, 104, no std), NCHW, input ``data``.

Measured 2026-11-28 (pycocotools, 300 held-out images, seed 101): mAP@0.5 0.9905, mAP@[.5:.95] 0.8262;
2.71 detections over 0.5 per image (ground truth 3.0), mean top score 0.995; 17 near-tied score pairs (scores
saturated near 1.0, between different objects). Build (no training) 32-42 s. Convert + validate: README.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from trained_models.common import (
    HELDOUT_SEED,
    HELDOUT_SIZE,
    REPO,
    Preprocessing,
    coco_map,
    make_shapes,
    preprocess,
    read_detections,
    score_separation,
    write_heldout,
)

EXAMPLE = REPO / "examples" / "mxnet_ssd"
FRAMEWORK = "mxnet"  # the source's framework (bridge --framework name: mxnet)
SEED = 0  # nothing random here but the held-out images (HELDOUT_SEED)
DEPENDS = (EXAMPLE / "model-symbol.json", EXAMPLE / "model-0000.params")
OBJECTS = (2, 4)
EXTENT = (0.18, 0.36)
PREP = Preprocessing(size=(64, 64), mean=(123.0, 117.0, 104.0))
SPEC = {"layout": "mxnet", "outputs": {"detections": "detection_output"}}


def build(out: Path) -> dict[str, Any]:
    if "bool" not in vars(np):
        np.bool = bool  # type: ignore[attr-defined]  # mxnet 1.9.1 still references numpy.bool
    import mxnet as mx

    held = make_shapes(HELDOUT_SIZE, HELDOUT_SEED, objects=OBJECTS, extent=EXTENT)
    labels = write_heldout(out, held, PREP, "data", category_ids=(0, 1, 2))
    sym, args, aux = mx.model.load_checkpoint(str(EXAMPLE / "model"), 0)
    mod = mx.mod.Module(sym, data_names=["data"], label_names=None, context=mx.cpu())
    mod.bind(data_shapes=[("data", (len(held), 3, 64, 64))], for_training=False)
    mod.set_params(args, aux)
    mod.forward(mx.io.DataBatch([mx.nd.array(preprocess(held.images, PREP))]), is_train=False)
    rows = mod.get_outputs()[0].asnumpy()
    dets = read_detections(SPEC, {"detection_output": rows}, len(held), "reference", box_scale=64.0)
    return {
        "framework": FRAMEWORK, "source": "{repo}/examples/mxnet_ssd/model-symbol.json",
        "convert_args": ["--input", "data:8,3,64,64"],
        "feeds": "feeds.npz", "layout": "mxnet", "images": "images", "labels": "labels.json",
        "preprocessing": PREP.as_dict(), "detections": SPEC, "box_units": "normalized",
        "quality": {**coco_map(labels, dets), **score_separation(dets), "images": len(held),
                    "detections_per_image": round(sum(int((d.scores > 0.5).sum()) for d in dets) / len(dets), 2),
                    "mean_top_score": round(float(np.mean([d.scores.max() for d in dets if len(d)])), 4)},
        "training": {"note": "trained by examples/mxnet_ssd/train.py (75 s on 2 cores, README there)"},
    }
