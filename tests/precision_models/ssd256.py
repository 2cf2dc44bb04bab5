"""``ssd256``: an MXNet SSD for 256 x 256 images, about 1.03 GMAC per image, trained briefly on procedural shapes.

Network (mxnet-ssd deploy layout, as examples/mxnet_ssd): 10 conv(3x3, no bias) + BatchNorm + relu blocks
(32 s2, 32, 64 s2, 64, 64, 128 s2, 128, 128, 128 s2, 128: 256 -> 16 x 16), feature layers at 16 x 16 (the
last block), 8 x 8 (192) and 4 x 4 (256), per layer 3x3 loc and cls convs -> transpose -> Flatten and a
MultiBoxPrior (ratios 1, 2, 0.5; 4 anchors per cell; 1,344 anchors), SoftmaxActivation(channel) and
MultiBoxDetection (threshold 0.01, nms 0.45, nms_topk 100, clip). 1.031 GMAC (convolutions) per image.

Images: 1-3 (training) or 2-5 (held-out) coloured squares, circles and triangles of 24-64 px on noisy tinted
backgrounds (``examples/mxnet_ssd/shapes.py``'s drawing). Training is fully convolutional at 128 x 128
(a quarter of the cost) with the same objects in pixels: the training symbol's MultiBoxPrior sizes are twice
the deploy ones (anchor sizes are fractions of the image), so every anchor has the same size in pixels in
training and at 256 x 256; the weights do not depend on the image size.

Training: the mxnet-ssd recipe (MultiBoxTarget overlap 0.5, hard negatives 3:1, SoftmaxOutput + smooth-L1),
Adam lr 2e-3 (x0.1 at 70% and 90% of the steps), wd 5e-4, batch 16, seed 0, one OpenMP thread per core.
Preprocessing mxnet-ssd's: RGB, minus mean (123, 117, 104), no std, NCHW, input ``data``.

Measured figures: README.md beside this file (written from ``model.json`` of a build).

Run (what ``precision_model("ssd256")`` does in a child process):  python -m precision_models.ssd256 OUT_DIR
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]
SEED = 0
SIZE = 256
TRAIN_SIZE = 128
CHANNELS = ((32, 2), (32, 1), (64, 2), (64, 1), (64, 1), (128, 2), (128, 1), (128, 1), (128, 2), (128, 1))
EXTRA = (192, 256)  # the 8 x 8 and 4 x 4 feature layers (stride 2 each)
DEPLOY_SIZES = ((0.09, 0.13), (0.17, 0.22), (0.27, 0.34))  # MultiBoxPrior sizes at 256 px (23-87 px anchors)
RATIOS = (1.0, 2.0, 0.5)
CLASS_NAMES = ("square", "circle", "triangle")
OBJECT_PX = (24, 64)
VARIANCES = (0.1, 0.1, 0.2, 0.2)
DETECTION = {"threshold": 0.01, "nms_threshold": 0.45, "force_suppress": False, "nms_topk": 100, "clip": True,
             "variances": VARIANCES}
MEAN = (123.0, 117.0, 104.0)
MAX_OBJECTS = 5
TRAIN_IMAGES, TRAIN_SEED = 3000, 1000
HELDOUT_IMAGES, HELDOUT_SEED = 400, 1001
CALIBRATION_IMAGES, CALIBRATION_SEED = 128, 1002
STEPS, BATCH, LR = 900, 16, 2e-3


def _shapes() -> Any:
    spec = importlib.util.spec_from_file_location("precision_shapes", REPO / "examples" / "mxnet_ssd" / "shapes.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_images(n: int, seed: int, size: int, objects: tuple[int, int]) -> tuple[np.ndarray, list[np.ndarray],
                                                                                list[np.ndarray]]:
    """``n`` images uint8 [n, 3, size, size] with ``objects`` (min, max) shapes of OBJECT_PX pixels each;
    normalised xyxy boxes and class ids per image (shapes.py's drawing, sizes in pixels)."""
    shapes = _shapes()
    rng = np.random.default_rng(seed)
    images = np.empty((n, 3, size, size), np.uint8)
    all_boxes, all_classes = [], []
    yy, xx = np.mgrid[0:size, 0:size] / size
    for i in range(n):
        bg = rng.uniform(0, 255, size=3)
        grad = rng.uniform(-40, 40, size=(3, 2))
        img = bg[:, None, None] + grad[:, 0, None, None] * (xx - 0.5) + grad[:, 1, None, None] * (yy - 0.5)
        placed: list[tuple[int, int, int, int]] = []
        boxes, classes = [], []
        for _ in range(int(rng.integers(objects[0], objects[1] + 1))):
            kind = int(rng.integers(0, 3))
            for _attempt in range(20):
                w = int(rng.integers(OBJECT_PX[0], OBJECT_PX[1] + 1))
                h = w if kind < 2 else int(np.clip(round(w * rng.uniform(0.8, 1.25)), 4, size))
                x0, y0 = int(rng.integers(0, size - w + 1)), int(rng.integers(0, size - h + 1))
                mask = shapes._shape_mask(kind, x0, y0, w, h, size)
                ys, xs = np.nonzero(mask)
                box = (int(xs.min()), int(ys.min()), int(xs.max()), int(ys.max()))
                if not shapes._overlaps(box, placed):
                    break
            else:
                continue
            while True:
                col = rng.uniform(0, 255, size=3)
                if np.linalg.norm(col - bg) > 100:
                    break
            img[:, mask] = col[:, None]
            placed.append(box)
            boxes.append([box[0] / size, box[1] / size, (box[2] + 1) / size, (box[3] + 1) / size])
            classes.append(kind)
        img = img + rng.normal(0, 12, size=img.shape)
        images[i] = np.clip(np.rint(img), 0, 255).astype(np.uint8)
        all_boxes.append(np.asarray(boxes, np.float32).reshape(-1, 4))
        all_classes.append(np.asarray(classes, np.int64))
    return images, all_boxes, all_classes


def preprocess(images: np.ndarray) -> np.ndarray:
    return images.astype(np.float32) - np.asarray(MEAN, np.float32).reshape(1, 3, 1, 1)


def heads(mx: Any, data: Any, sizes: tuple[tuple[float, float], ...]) -> tuple[Any, Any, Any]:
    """Backbone and heads up to the cut points (loc_preds, cls_preds, anchors) with MultiBoxPrior ``sizes``."""
    def block(x: Any, name: str, filters: int, stride: int) -> Any:
        x = mx.sym.Convolution(x, num_filter=filters, kernel=(3, 3), stride=(stride, stride), pad=(1, 1),
                               no_bias=True, name=f"{name}_conv")
        x = mx.sym.BatchNorm(x, fix_gamma=False, eps=1e-5, momentum=0.9, name=f"{name}_bn")
        return mx.sym.Activation(x, act_type="relu", name=f"{name}_relu")

    x = data
    for k, (filters, stride) in enumerate(CHANNELS):
        x = block(x, f"stage{k + 1}", filters, stride)
    features = [x]
    for k, filters in enumerate(EXTRA):
        features.append(block(features[-1], f"multi_feat_{k + 2}", filters, 2))
    locs, clss, anchors = [], [], []
    classes = len(CLASS_NAMES) + 1
    for k, (feat, layer_sizes) in enumerate(zip(features, sizes, strict=True)):
        name = f"multi_feat_{k + 1}"
        per_cell = len(layer_sizes) + len(RATIOS) - 1
        loc = mx.sym.Convolution(feat, num_filter=4 * per_cell, kernel=(3, 3), pad=(1, 1), name=f"{name}_loc_pred_conv")
        locs.append(mx.sym.Flatten(mx.sym.transpose(loc, axes=(0, 2, 3, 1))))
        cls = mx.sym.Convolution(feat, num_filter=classes * per_cell, kernel=(3, 3), pad=(1, 1),
                                 name=f"{name}_cls_pred_conv")
        clss.append(mx.sym.Flatten(mx.sym.transpose(cls, axes=(0, 2, 3, 1))))
        anchors.append(mx.sym.Flatten(mx.sym.contrib.MultiBoxPrior(feat, sizes=layer_sizes, ratios=RATIOS, clip=False,
                                                                    name=f"{name}_anchors")))
    loc_preds = mx.sym.Concat(*locs, num_args=len(locs), dim=1, name="multibox_loc_pred")
    cls_preds = mx.sym.Reshape(mx.sym.Concat(*clss, num_args=len(clss), dim=1), shape=(0, -1, classes))
    cls_preds = mx.sym.transpose(cls_preds, axes=(0, 2, 1), name="multibox_cls_pred")
    anchor_all = mx.sym.Reshape(mx.sym.Concat(*anchors, num_args=len(anchors), dim=1), shape=(0, -1, 4),
                                name="multibox_anchors")
    return loc_preds, cls_preds, anchor_all


def training_symbol(mx: Any) -> Any:
    sizes = tuple((2 * a, 2 * b) for a, b in DEPLOY_SIZES)  # same pixels at 128 px as DEPLOY_SIZES at 256
    loc_preds, cls_preds, anchors = heads(mx, mx.sym.Variable("data"), sizes)
    loc_target, loc_mask, cls_target = mx.sym.contrib.MultiBoxTarget(
        anchors, mx.sym.Variable("label"), cls_preds, overlap_threshold=0.5, ignore_label=-1, negative_mining_ratio=3,
        minimum_negative_samples=0, negative_mining_thresh=0.5, variances=VARIANCES, name="multibox_target")
    cls_prob = mx.sym.SoftmaxOutput(cls_preds, label=cls_target, ignore_label=-1, use_ignore=True, grad_scale=1.0,
                                    multi_output=True, normalization="valid", name="cls_prob")
    loc_loss = mx.sym.MakeLoss(mx.sym.smooth_l1(loc_mask * (loc_preds - loc_target), scalar=1.0), grad_scale=1.0,
                               normalization="valid", name="loc_loss")
    return mx.sym.Group([cls_prob, loc_loss, mx.sym.MakeLoss(cls_target, grad_scale=0, name="cls_label")])


def deploy_symbol(mx: Any) -> Any:
    loc_preds, cls_preds, anchors = heads(mx, mx.sym.Variable("data"), DEPLOY_SIZES)
    cls_prob = mx.sym.SoftmaxActivation(cls_preds, mode="channel", name="cls_prob")
    return mx.sym.contrib.MultiBoxDetection(cls_prob, loc_preds, anchors, name="detection", **DETECTION)


def conv_macs(mx: Any, sym: Any, size: int) -> int:
    """Multiply-accumulates of every Convolution at input size x size."""
    internals = sym.get_internals()
    _, shapes, _ = internals.infer_shape(data=(1, 3, size, size))
    out_shape = dict(zip(internals.list_outputs(), shapes, strict=True))
    graph = json.loads(sym.tojson())
    total = 0
    for node in graph["nodes"]:
        if node["op"] != "Convolution":
            continue
        src = graph["nodes"][node["inputs"][0][0]]
        cin = 3 if src["op"] == "null" else out_shape[src["name"] + "_output"][1]
        o = out_shape[node["name"] + "_output"]
        total += o[1] * o[2] * o[3] * cin * 9
    return total


def _labels(boxes: list[np.ndarray], classes: list[np.ndarray]) -> np.ndarray:
    out = np.full((len(boxes), MAX_OBJECTS, 5), -1.0, np.float32)
    for i, (b, c) in enumerate(zip(boxes, classes, strict=True)):
        out[i, : len(c), 0] = c
        out[i, : len(c), 1:] = b
    return out


def detect(mx: Any, sym: Any, args: dict[str, Any], aux: dict[str, Any], images: np.ndarray, batch: int = 50
           ) -> np.ndarray:
    mod = mx.mod.Module(sym, data_names=["data"], label_names=None, context=mx.cpu())
    mod.bind(data_shapes=[("data", (batch, 3, images.shape[2], images.shape[3]))], for_training=False)
    mod.set_params(args, aux)
    outs = []
    for start in range(0, len(images), batch):
        chunk = preprocess(images[start:start + batch])
        n = len(chunk)
        if n < batch:
            chunk = np.concatenate([chunk, np.repeat(chunk[-1:], batch - n, axis=0)])
        mod.forward(mx.io.DataBatch([mx.nd.array(chunk)]), is_train=False)
        outs.append(mod.get_outputs()[0].asnumpy()[:n])
    return np.concatenate(outs)


def coco_map(labels_path: Path, rows: np.ndarray, size: int) -> dict[str, float]:
    """pycocotools mAP of MultiBoxDetection rows (class, score, normalised xyxy) against the COCO labels."""
    import contextlib
    import io

    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    results = []
    for image, r in enumerate(rows):
        for cls, score, x1, y1, x2, y2 in r[r[:, 0] >= 0]:
            results.append({"image_id": image + 1, "category_id": int(cls) + 1, "score": float(score),
                            "bbox": [float(x1 * size), float(y1 * size), float((x2 - x1) * size),
                                     float((y2 - y1) * size)]})
    with contextlib.redirect_stdout(io.StringIO()):
        truth = COCO(str(labels_path))
        evaluation = COCOeval(truth, truth.loadRes(results), "bbox")
        evaluation.evaluate()
        evaluation.accumulate()
        evaluation.summarize()
    return {"map50": round(float(evaluation.stats[1]), 4), "map50_95": round(float(evaluation.stats[0]), 4)}


def write_images(folder: Path, images: np.ndarray) -> list[str]:
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    names = []
    for k, image in enumerate(images):
        names.append(f"{k:04d}.png")
        Image.fromarray(np.transpose(image, (1, 2, 0))).save(folder / names[-1])
    return names


def build(out: Path) -> dict[str, Any]:
    os.environ.setdefault("OMP_NUM_THREADS", str(len(os.sched_getaffinity(0))))
    if "bool" not in vars(np):
        np.bool = bool  # type: ignore[attr-defined]  # mxnet 1.9.1 still references numpy.bool
    import mxnet as mx

    from bridge.validation.dataset.labels import write_coco

    np.random.seed(SEED)
    mx.random.seed(SEED)
    started = time.time()
    train_images, train_boxes, train_classes = make_images(TRAIN_IMAGES, TRAIN_SEED, TRAIN_SIZE, (1, 3))
    train_labels = _labels(train_boxes, train_classes)
    mod = mx.mod.Module(training_symbol(mx), data_names=["data"], label_names=["label"], context=mx.cpu())
    mod.bind(data_shapes=[("data", (BATCH, 3, TRAIN_SIZE, TRAIN_SIZE))], label_shapes=[("label", (BATCH, MAX_OBJECTS, 5))])
    mod.init_params(mx.init.Xavier(rnd_type="gaussian", factor_type="out", magnitude=2))
    schedule = mx.lr_scheduler.MultiFactorScheduler(step=[int(STEPS * 0.7), int(STEPS * 0.9)], factor=0.1, base_lr=LR)
    mod.init_optimizer(optimizer="adam", optimizer_params={"learning_rate": LR, "wd": 5e-4, "lr_scheduler": schedule})
    rng = np.random.default_rng(SEED)
    order = rng.permutation(TRAIN_IMAGES)
    cursor, losses, cpu0 = 0, [], time.process_time()
    for step in range(STEPS):
        if cursor + BATCH > TRAIN_IMAGES:
            order, cursor = rng.permutation(TRAIN_IMAGES), 0
        idx = order[cursor:cursor + BATCH]
        cursor += BATCH
        batch = mx.io.DataBatch([mx.nd.array(preprocess(train_images[idx]))], [mx.nd.array(train_labels[idx])])
        mod.forward(batch, is_train=True)
        mod.backward()
        mod.update()
        if step % 50 == 0 or step == STEPS - 1:
            cls_prob, loc_loss, cls_label = (o.asnumpy() for o in mod.get_outputs())
            valid = cls_label >= 0
            picked = np.take_along_axis(cls_prob, np.where(valid, cls_label, 0).astype(np.int64)[:, None, :], axis=1)[:, 0]
            loss = float(-np.log(np.maximum(picked[valid], 1e-12)).mean()) + float(
                loc_loss.sum() / max(1, int((cls_label > 0).sum())))
            losses.append(round(loss, 4))
            print(f"step {step + 1}/{STEPS}: loss {loss:.4f} ({time.time() - started:.0f} s)", flush=True)
    train_seconds = time.time() - started
    args, aux = mod.get_params()
    deploy = deploy_symbol(mx)
    args = {k: v for k, v in args.items() if k in deploy.list_arguments()}
    mx.model.save_checkpoint(str(out / "model"), 0, deploy, args, aux)

    held, held_boxes, held_classes = make_images(HELDOUT_IMAGES, HELDOUT_SEED, SIZE, (2, 5))
    names = write_images(out / "images", held)
    write_coco(out / "labels.json", names, [(SIZE, SIZE)] * len(names),
               [b * SIZE for b in held_boxes], held_classes, CLASS_NAMES)
    calib, _b, _c = make_images(CALIBRATION_IMAGES, CALIBRATION_SEED, SIZE, (2, 5))
    write_images(out / "calibration", calib)
    np.savez_compressed(out / "feeds.npz", data=preprocess(held[:8]))
    rows = detect(mx, deploy, args, aux, held)
    quality = {**coco_map(out / "labels.json", rows, SIZE), "images": len(held),
               "detections_over_0.5_per_image": round(float((rows[:, :, 1] >= 0.5).sum()) / len(held), 2),
               "objects_per_image": round(sum(len(c) for c in held_classes) / len(held), 2)}
    manifest = {
        "framework": "mxnet", "source": "model-symbol.json",
        "convert_args": ["--input", f"data:1,3,{SIZE},{SIZE}", "--dynamic", "data:0=batch"],
        "feeds": "feeds.npz", "images": "images", "labels": "labels.json", "calibration": "calibration",
        "preprocessing": {"resize": "stretch", "channel_order": "RGB", "layout": "NCHW", "mean": list(MEAN)},
        "quality": quality,
        "training": {"steps": STEPS, "batch": BATCH, "images": TRAIN_IMAGES, "size": TRAIN_SIZE,
                     "cpu_seconds": round(time.process_time() - cpu0, 1), "wall_seconds": round(train_seconds, 1),
                     "losses_every_50_steps": losses, "gmac_per_image": round(conv_macs(mx, deploy, SIZE) / 1e9, 3),
                     "threads": os.environ.get("OMP_NUM_THREADS")},
    }
    (out / "model.json").write_text(json.dumps(manifest, indent=1))
    print(json.dumps(manifest["quality"]), json.dumps(manifest["training"]), flush=True)
    return manifest


if __name__ == "__main__":
    build(Path(sys.argv[1]))
