"""``gluoncv_boxnms``: a GluonCV-style MXNet SSD (box_decode + softmax + MultiPerClassDecoder + box_nms), trained.

The deploy graph is bench/gluoncv_like.py's GluonCV head (``gluoncv_detector``: ``_contrib_box_decode`` of the
box predictions against the anchors, stds 0.1/0.1/0.2/0.2, ``softmax``, MultiPerClassDecoder (score > 0.01),
per-class [B, N*C, 6] rows, ``_contrib_box_nms`` IoU 0.45 topk 400 class-aware, first 100 rows split into
``ids`` [B, 100, 1] (-1 = none), ``scores`` [B, 100, 1], ``bboxes`` [B, 100, 4]) with anchors in input pixels as
GluonCV keeps them, so boxes are pixels. Backbone: conv+BN+relu blocks to 8 x 8 and 4 x 4 feature maps with
MultiBoxPrior anchors sized for the 10-20 px shapes. Training: the mxnet-ssd recipe of examples/mxnet_ssd/
train.py (``MultiBoxTarget`` overlap 0.5, hard negative mining 3:1, ``SoftmaxOutput`` + smooth-L1), Adam,
learning rate x0.1 at 60 % and 85 %. Saved as ``model-symbol.json`` + ``model-0000.params``; input ``data``,
RGB minus mean (123, 117, 104), NCHW.

Measured 2026-11-28 (pycocotools, 300 held-out images, seed 101): mAP@0.5 0.9970, mAP@[.5:.95] 0.8309;
3.36 detections over 0.5 per image (ground truth 4.0), their mean score 0.875; no near-tied scores (min gap
per image: median 0.011). Training 2,500 images x 10 epochs: 53-57 CPU s (one thread), final loss 0.311; build wall
time 549-567 s on the loaded shared machine. Convert + validate: README.md.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from trained_models.common import (
    DETECTION_OBJECTS,
    HELDOUT_SEED,
    HELDOUT_SIZE,
    REPO,
    TRAIN_SEED,
    Preprocessing,
    coco_map,
    make_shapes,
    preprocess,
    read_detections,
    score_separation,
    write_heldout,
)

FRAMEWORK = "mxnet"  # the source's framework (bridge --framework name: mxnet)
SEED = 0
DEPENDS = (REPO / "bench" / "gluoncv_like.py",)
EPOCHS = 10
N_TRAIN = 2500
BATCH = 32
LR = 3e-3
SIZE = 64
VARIANCES = (0.1, 0.1, 0.2, 0.2)
PREP = Preprocessing(size=(SIZE, SIZE), mean=(123.0, 117.0, 104.0))
SPEC = {"layout": "boxes-scores-labels",
        "outputs": {"labels": "ids_output", "scores": "scores_output", "boxes": "bboxes_output"}}


def _backbone(mx: Any, data: Any) -> list[Any]:
    """conv(3x3)+BN+relu blocks: 64 -> 32 -> 16 -> 8 (feature 1, 64 ch) -> 4 (feature 2, 96 ch)."""
    def block(x: Any, name: str, filters: int, stride: int) -> Any:
        x = mx.sym.Convolution(x, num_filter=filters, kernel=(3, 3), stride=(stride, stride), pad=(1, 1), no_bias=True,
                               name=f"{name}_conv")
        x = mx.sym.BatchNorm(x, fix_gamma=False, eps=1e-5, momentum=0.9, name=f"{name}_bn")
        return mx.sym.Activation(x, act_type="relu", name=f"{name}_relu")

    x = block(data, "stage1", 16, 2)
    x = block(x, "stage2a", 32, 1)
    x = block(x, "stage2b", 48, 2)
    x = block(x, "stage3a", 48, 1)
    x = block(x, "stage3b", 64, 2)
    feat1 = block(x, "feat1", 64, 1)
    return [feat1, block(feat1, "feat2", 96, 2)]


def spec() -> Any:
    from bench.ssd_models import Layer, SSDSpec

    return SSDSpec("gluoncv_trained", SIZE, 3, _backbone,
                   (Layer((0.15, 0.22), (1.0, 2.0, 0.5)), Layer((0.3, 0.4), (1.0, 2.0, 0.5))),
                   description="trained GluonCV-style SSD, 64 x 64, 3 classes")


def _training_symbol(mx: Any) -> Any:
    from bench.gluoncv_like import gluoncv_heads

    data, label = mx.sym.var("data"), mx.sym.var("label")
    cls_preds, box_preds, anchor = gluoncv_heads(mx, spec(), data)
    cls_preds = mx.sym.transpose(cls_preds, axes=(0, 2, 1))  # [B, C+1, N] as MultiBoxTarget takes it
    loc_preds = mx.sym.reshape(box_preds, shape=(0, -1))  # [B, 4N]
    loc_target, loc_mask, cls_target = mx.sym.contrib.MultiBoxTarget(
        anchor, label, cls_preds, overlap_threshold=0.5, ignore_label=-1, negative_mining_ratio=3,
        minimum_negative_samples=0, negative_mining_thresh=0.5, variances=VARIANCES)
    cls_prob = mx.sym.SoftmaxOutput(cls_preds, label=cls_target, ignore_label=-1, use_ignore=True,
                                    multi_output=True, normalization="valid", name="cls_prob")
    loc_loss = mx.sym.MakeLoss(mx.sym.smooth_l1(loc_mask * (loc_preds - loc_target), scalar=1.0),
                               normalization="valid", name="loc_loss")
    return mx.sym.Group([cls_prob, loc_loss, mx.sym.BlockGrad(cls_target, name="cls_label")])


def _labels(boxes: list[np.ndarray], classes: list[np.ndarray]) -> np.ndarray:
    """MultiBoxTarget labels [n, max objects, 5] (class, xmin, ymin, xmax, ymax normalised), padded with -1."""
    out = np.full((len(boxes), DETECTION_OBJECTS[1], 5), -1.0, np.float32)
    for i, (b, c) in enumerate(zip(boxes, classes, strict=True)):
        out[i, : len(c), 0] = c
        out[i, : len(c), 1:] = b
    return out


def build(out: Path) -> dict[str, Any]:
    if "bool" not in vars(np):
        np.bool = bool  # type: ignore[attr-defined]  # mxnet 1.9.1 still references numpy.bool
    import mxnet as mx

    from bench.gluoncv_like import gluoncv_symbol

    np.random.seed(SEED)
    mx.random.seed(SEED)
    train = make_shapes(N_TRAIN, TRAIN_SEED)
    t0, c0 = time.perf_counter(), time.process_time()
    it = mx.io.NDArrayIter(preprocess(train.images, PREP), _labels(train.boxes, train.classes), BATCH, shuffle=True,
                           last_batch_handle="discard", label_name="label")
    mod = mx.mod.Module(_training_symbol(mx), data_names=["data"], label_names=["label"], context=mx.cpu())
    mod.bind(data_shapes=it.provide_data, label_shapes=it.provide_label)
    mod.init_params(mx.init.Xavier(rnd_type="gaussian", factor_type="out", magnitude=2))
    steps = EPOCHS * (N_TRAIN // BATCH)
    schedule = mx.lr_scheduler.MultiFactorScheduler(step=[int(steps * 0.6), int(steps * 0.85)], factor=0.1, base_lr=LR)
    mod.init_optimizer(optimizer="adam", optimizer_params={"learning_rate": LR, "wd": 5e-4, "lr_scheduler": schedule})
    loss = float("nan")
    for epoch in range(EPOCHS):
        it.reset()
        total, batches = 0.0, 0
        for batch in it:
            mod.forward(batch, is_train=True)
            mod.backward()
            mod.update()
            cls_prob, loc_loss, cls_label = (o.asnumpy() for o in mod.get_outputs())
            valid = cls_label >= 0
            p = np.take_along_axis(cls_prob, np.where(valid, cls_label, 0).astype(np.int64)[:, None], axis=1)[:, 0]
            total += float(-np.log(np.maximum(p[valid], 1e-12)).mean())
            total += float(loc_loss.sum() / max(1, int((cls_label > 0).sum())))
            batches += 1
        loss = total / batches
        print(f"epoch {epoch + 1}/{EPOCHS}: loss {loss:.4f} ({time.perf_counter() - t0:.0f} s)", flush=True)
    train_seconds, train_cpu = time.perf_counter() - t0, time.process_time() - c0

    deploy = gluoncv_symbol(mx, spec(), anchor_scale=float(SIZE))
    args, aux = mod.get_params()
    args = {k: v for k, v in args.items() if k in deploy.list_arguments()}
    mx.model.save_checkpoint(str(out / "model"), 0, deploy, args, aux)

    held = make_shapes(HELDOUT_SIZE, HELDOUT_SEED)
    labels = write_heldout(out, held, PREP, "data", category_ids=(0, 1, 2))
    runner = mx.mod.Module(deploy, data_names=["data"], label_names=None, context=mx.cpu())
    runner.bind(data_shapes=[("data", (len(held), 3, SIZE, SIZE))], for_training=False)
    runner.set_params(args, aux)
    runner.forward(mx.io.DataBatch([mx.nd.array(preprocess(held.images, PREP))]), is_train=False)
    outputs = dict(zip(deploy.list_outputs(), (o.asnumpy() for o in runner.get_outputs()), strict=True))
    dets = read_detections(SPEC, outputs, len(held), "reference")
    confident = [d.scores[d.scores > 0.5] for d in dets]
    return {
        "framework": FRAMEWORK, "source": "{dir}/model-symbol.json", "convert_args": ["--input", f"data:8,3,{SIZE},{SIZE}"],
        "feeds": "feeds.npz", "layout": "boxes-scores-labels", "images": "images", "labels": "labels.json",
        "preprocessing": PREP.as_dict(), "detections": SPEC, "box_units": "pixels",
        "quality": {**coco_map(labels, dets), **score_separation(dets), "images": len(held),
                    "detections_per_image_over_0.5": round(sum(len(c) for c in confident) / len(dets), 2),
                    "mean_score_over_0.5": round(float(np.mean(np.concatenate(confident))), 4)},
        "training": {"final_loss": round(loss, 4), "train_seconds": round(train_seconds, 1),
                     "train_cpu_seconds": round(train_cpu, 1), "images": N_TRAIN,
                     "epochs": EPOCHS, "seed": SEED},
    }
