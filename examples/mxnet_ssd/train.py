"""Train the small legacy-format (mxnet-ssd layout) SSD shipped in examples/mxnet_ssd/.

Builds the network with ``mxnet.sym`` the way zhreshold/mxnet-ssd does: a small conv+BN+relu
backbone with stride-2 downsampling, two feature layers (8x8 and 4x4 for a 64x64 input), per layer a
3x3 loc and cls conv (-> transpose(0,2,3,1) -> Flatten) and a ``MultiBoxPrior`` (-> Flatten), joined
into the named cut points ``multibox_loc_pred`` [B,4N], ``multibox_cls_pred`` [B,C+1,N] and
``multibox_anchors`` [1,N,4]. The training graph adds ``MultiBoxTarget`` + ``SoftmaxOutput`` +
smooth-L1 ``MakeLoss``; the deploy graph adds ``SoftmaxActivation(mode=channel)`` ->
``_contrib_MultiBoxDetection`` (output ``detection_output`` [B,N,6]) and is what gets saved, as
``model-symbol.json`` + ``model-0000.params`` (``save_checkpoint`` format), next to this file.

Data: ``shapes.make_dataset`` (procedural coloured squares/circles/triangles, deterministic by seed).
Preprocessing: RGB uint8 NCHW -> float32 minus mean (123, 117, 104), no scaling (mxnet-ssd's).

Run:  python examples/mxnet_ssd/train.py     (about 5 minutes on 2 CPU cores; deterministic seeds)
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from metrics import mean_average_precision  # noqa: E402
from shapes import CLASS_NAMES, TRAIN_SEED, make_dataset, make_validation_set, preprocess  # noqa: E402

os.environ.setdefault("OMP_NUM_THREADS", "2")
if "bool" not in vars(np):
    np.bool = bool  # type: ignore[attr-defined]  # mxnet 1.9.1 still references numpy.bool

import mxnet as mx  # noqa: E402

IMAGE_SIZE = 64
NUM_CLASSES = len(CLASS_NAMES)
MAX_OBJECTS = 3
# (feature layer, sizes, ratios) -- sizes are fractions of the image side.
PRIOR_SIZES = ((0.2, 0.3), (0.4, 0.55))
PRIOR_RATIOS = ((1.0, 2.0, 0.5), (1.0, 2.0, 0.5))
VARIANCES = (0.1, 0.1, 0.2, 0.2)
DETECTION = {"threshold": 0.01, "nms_threshold": 0.45, "force_suppress": False, "nms_topk": 100,
             "clip": True, "variances": VARIANCES}
PREFIX = HERE / "model"


def _conv_bn_relu(data: mx.sym.Symbol, name: str, filters: int, stride: int) -> mx.sym.Symbol:
    conv = mx.sym.Convolution(data, num_filter=filters, kernel=(3, 3), stride=(stride, stride),
                              pad=(1, 1), no_bias=True, name=f"{name}_conv")
    bn = mx.sym.BatchNorm(conv, fix_gamma=False, eps=1e-5, momentum=0.9, name=f"{name}_bn")
    return mx.sym.Activation(bn, act_type="relu", name=f"{name}_relu")


def multibox_heads(data: mx.sym.Symbol) -> tuple[mx.sym.Symbol, mx.sym.Symbol, mx.sym.Symbol]:
    """Backbone + heads up to the three named cut points (loc_preds, cls_preds, anchors)."""
    x = _conv_bn_relu(data, "stage1", 16, 2)   # 32x32
    x = _conv_bn_relu(x, "stage2a", 32, 1)
    x = _conv_bn_relu(x, "stage2b", 48, 2)     # 16x16
    x = _conv_bn_relu(x, "stage3a", 48, 1)
    x = _conv_bn_relu(x, "stage3b", 64, 2)     # 8x8
    feat1 = _conv_bn_relu(x, "multi_feat_1", 64, 1)
    feat2 = _conv_bn_relu(feat1, "multi_feat_2", 96, 2)   # 4x4
    loc_layers, cls_layers, anchor_layers = [], [], []
    for i, (feat, sizes, ratios) in enumerate(zip((feat1, feat2), PRIOR_SIZES, PRIOR_RATIOS, strict=True)):
        name = f"multi_feat_{i + 1}"
        num_anchors = len(sizes) + len(ratios) - 1
        loc = mx.sym.Convolution(feat, num_filter=4 * num_anchors, kernel=(3, 3), pad=(1, 1),
                                 name=f"{name}_loc_pred_conv")
        loc = mx.sym.transpose(loc, axes=(0, 2, 3, 1))
        loc_layers.append(mx.sym.Flatten(loc))
        cls = mx.sym.Convolution(feat, num_filter=(NUM_CLASSES + 1) * num_anchors, kernel=(3, 3),
                                 pad=(1, 1), name=f"{name}_cls_pred_conv")
        cls = mx.sym.transpose(cls, axes=(0, 2, 3, 1))
        cls_layers.append(mx.sym.Flatten(cls))
        anchors = mx.sym.contrib.MultiBoxPrior(feat, sizes=sizes, ratios=ratios, clip=False,
                                               name=f"{name}_anchors")
        anchor_layers.append(mx.sym.Flatten(anchors))
    loc_preds = mx.sym.Concat(*loc_layers, num_args=len(loc_layers), dim=1, name="multibox_loc_pred")
    cls_preds = mx.sym.Concat(*cls_layers, num_args=len(cls_layers), dim=1)
    cls_preds = mx.sym.Reshape(cls_preds, shape=(0, -1, NUM_CLASSES + 1))
    cls_preds = mx.sym.transpose(cls_preds, axes=(0, 2, 1), name="multibox_cls_pred")
    anchors = mx.sym.Concat(*anchor_layers, num_args=len(anchor_layers), dim=1)
    anchors = mx.sym.Reshape(anchors, shape=(0, -1, 4), name="multibox_anchors")
    return loc_preds, cls_preds, anchors


def training_symbol() -> mx.sym.Symbol:
    """mxnet-ssd training graph: outputs (cls_prob, loc_loss, cls_label)."""
    data, label = mx.sym.Variable("data"), mx.sym.Variable("label")
    loc_preds, cls_preds, anchors = multibox_heads(data)
    loc_target, loc_mask, cls_target = mx.sym.contrib.MultiBoxTarget(
        anchors, label, cls_preds, overlap_threshold=0.5, ignore_label=-1, negative_mining_ratio=3,
        minimum_negative_samples=0, negative_mining_thresh=0.5, variances=VARIANCES,
        name="multibox_target")
    cls_prob = mx.sym.SoftmaxOutput(cls_preds, label=cls_target, ignore_label=-1, use_ignore=True,
                                    grad_scale=1.0, multi_output=True, normalization="valid",
                                    name="cls_prob")
    loc_loss_ = mx.sym.smooth_l1(loc_mask * (loc_preds - loc_target), scalar=1.0, name="loc_loss_")
    loc_loss = mx.sym.MakeLoss(loc_loss_, grad_scale=1.0, normalization="valid", name="loc_loss")
    cls_label = mx.sym.MakeLoss(cls_target, grad_scale=0, name="cls_label")
    return mx.sym.Group([cls_prob, loc_loss, cls_label])


def deploy_symbol() -> mx.sym.Symbol:
    """mxnet-ssd deploy graph: ... -> SoftmaxActivation(channel) -> MultiBoxDetection [B,N,6]."""
    loc_preds, cls_preds, anchors = multibox_heads(mx.sym.Variable("data"))
    cls_prob = mx.sym.SoftmaxActivation(cls_preds, mode="channel", name="cls_prob")
    return mx.sym.contrib.MultiBoxDetection(cls_prob, loc_preds, anchors, name="detection", **DETECTION)


def pad_labels(boxes: list[np.ndarray], classes: list[np.ndarray]) -> np.ndarray:
    """MultiBoxTarget labels [n, MAX_OBJECTS, 5] (class, xmin, ymin, xmax, ymax), padded with -1."""
    out = np.full((len(boxes), MAX_OBJECTS, 5), -1.0, dtype=np.float32)
    for i, (b, c) in enumerate(zip(boxes, classes, strict=True)):
        out[i, : len(c), 0] = c
        out[i, : len(c), 1:] = b
    return out


def detect(sym: mx.sym.Symbol, arg_params: dict, aux_params: dict, images: np.ndarray,
           batch_size: int = 100) -> np.ndarray:
    """Run the deploy graph over uint8 images; returns [n, N, 6] detections."""
    mod = mx.mod.Module(sym, data_names=["data"], label_names=None, context=mx.cpu())
    mod.bind(data_shapes=[("data", (batch_size, 3, images.shape[2], images.shape[3]))], for_training=False)
    mod.set_params(arg_params, aux_params)
    outs = []
    for start in range(0, len(images), batch_size):
        chunk = preprocess(images[start: start + batch_size])
        n = len(chunk)
        if n < batch_size:
            chunk = np.concatenate([chunk, np.zeros((batch_size - n, *chunk.shape[1:]), np.float32)])
        mod.forward(mx.io.DataBatch([mx.nd.array(chunk)]), is_train=False)
        outs.append(mod.get_outputs()[0].asnumpy()[:n])
    return np.concatenate(outs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-train", type=int, default=4000)
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--no-save", action="store_true")
    args = parser.parse_args()

    np.random.seed(args.seed)
    mx.random.seed(args.seed)
    t0 = time.time()
    images, boxes, classes = make_dataset(args.n_train, TRAIN_SEED, IMAGE_SIZE)
    train_iter = mx.io.NDArrayIter(preprocess(images), pad_labels(boxes, classes), args.batch_size,
                                   shuffle=True, last_batch_handle="discard", label_name="label")
    mod = mx.mod.Module(training_symbol(), data_names=["data"], label_names=["label"], context=mx.cpu())
    mod.bind(data_shapes=train_iter.provide_data, label_shapes=train_iter.provide_label)
    mod.init_params(mx.init.Xavier(rnd_type="gaussian", factor_type="out", magnitude=2))
    steps = args.epochs * (args.n_train // args.batch_size)
    schedule = mx.lr_scheduler.MultiFactorScheduler(step=[int(steps * 0.6), int(steps * 0.85)], factor=0.1,
                                                    base_lr=args.lr)
    mod.init_optimizer(optimizer="adam", optimizer_params={
        "learning_rate": args.lr, "wd": 5e-4, "lr_scheduler": schedule, "rescale_grad": 1.0})
    loss = float("nan")
    for epoch in range(args.epochs):
        train_iter.reset()
        cls_sum = loc_sum = 0.0
        nbatch = 0
        for batch in train_iter:
            mod.forward(batch, is_train=True)
            mod.backward()
            mod.update()
            cls_prob, loc_loss, cls_label = (o.asnumpy() for o in mod.get_outputs())
            valid = cls_label >= 0
            lab = np.where(valid, cls_label, 0).astype(np.int64)
            p = np.take_along_axis(cls_prob, lab[:, None, :], axis=1)[:, 0]
            cls_sum += float(-np.log(np.maximum(p[valid], 1e-12)).mean())
            loc_sum += float(loc_loss.sum() / max(1, int((cls_label > 0).sum())))
            nbatch += 1
        loss = (cls_sum + loc_sum) / nbatch
        print(f"epoch {epoch + 1}/{args.epochs}: cls {cls_sum / nbatch:.4f} loc {loc_sum / nbatch:.4f} "
              f"total {loss:.4f} ({time.time() - t0:.0f}s)", flush=True)
    train_time = time.time() - t0

    arg_params, aux_params = mod.get_params()
    deploy = deploy_symbol()
    arg_params = {k: v for k, v in arg_params.items() if k in deploy.list_arguments()}
    val_images, val_boxes, val_classes = make_validation_set(IMAGE_SIZE)
    dets = detect(deploy, arg_params, aux_params, val_images)
    val_map = mean_average_precision(dets, val_boxes, val_classes, NUM_CLASSES)
    if not args.no_save:
        mx.model.save_checkpoint(str(PREFIX), 0, deploy, arg_params, aux_params)
    print(f"training time {train_time:.1f}s, final loss {loss:.4f}, validation mAP@0.5 {val_map:.4f}")


if __name__ == "__main__":
    main()
