"""Training for the PyTorch trained test models (networks in torch_models.py): targets, losses, one loop.

Targets: ``common.grid_targets`` (the torchvision-style detector: every cell whose centre lies in the box;
the YOLO-style one: the centre cell only). Losses: the torchvision-style one sigmoid BCE per class against the
cells' soft quality targets (FCOS / GFL style: an object's cells get distinct scores below saturation) and
smooth L1 on the box encoding (centre offset / stride, log(size / 16)); the YOLO-style one objectness BCE (against the
centre cell's quality target, as YOLOv5's IoU target keeps objectness below 1), class cross-entropy and L1 on its sigmoid centre and log size. The classifier: cross-entropy.

Deterministic: torch's seed, one thread count, a seeded shuffle; Adam, learning rate x0.1 at 70 % and 90 %.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from trained_models import torch_models as tm
from trained_models.common import grid_targets


def _encode(boxes: torch.Tensor, centres: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Box centre offset from its cell centre in strides, and log(size / BOX_SIZE)."""
    xy = (boxes[..., :2] + boxes[..., 2:]) / 2
    wh = (boxes[..., 2:] - boxes[..., :2]).clamp(min=1.0)
    return (xy - centres) / tm.STRIDE, torch.log(wh / tm.BOX_SIZE)


def torchvision_loss(model: Any, images: torch.Tensor, classes: torch.Tensor, boxes: torch.Tensor,
                     quality: torch.Tensor) -> torch.Tensor:
    raw = model.raw(images)
    pos = classes >= 0
    npos = pos.sum().clamp(min=1)
    onehot = F.one_hot(classes.clamp(min=0), tm.NUM_CLASSES).float() * quality[..., None]  # soft (quality) targets
    cls_loss = F.binary_cross_entropy_with_logits(raw[..., 4:], onehot, reduction="sum") / npos
    dxy, dwh = _encode(boxes, model.centres)
    box_loss = F.smooth_l1_loss(raw[..., :4][pos], torch.cat([dxy, dwh], -1)[pos], reduction="sum", beta=0.1) / npos
    return cls_loss + box_loss


def yolo_loss(model: Any, images: torch.Tensor, classes: torch.Tensor, boxes: torch.Tensor,
              quality: torch.Tensor) -> torch.Tensor:
    raw = model.raw(images)
    pos = classes >= 0
    npos = pos.sum().clamp(min=1)
    # a soft objectness target (YOLOv5 takes the IoU; here the cell's quality target): no saturation at 1.0
    obj_loss = F.binary_cross_entropy_with_logits(raw[..., 4], quality, reduction="sum") / npos
    cls_loss = F.cross_entropy(raw[..., 5:][pos], classes[pos], reduction="sum") / npos
    dxy, dwh = _encode(boxes, model.centres)
    box_loss = (F.l1_loss(torch.sigmoid(raw[..., :2][pos]), (dxy[pos] + 0.5).clamp(0, 1), reduction="sum")
                + F.l1_loss(raw[..., 2:4][pos], dwh[pos], reduction="sum")) / npos
    return obj_loss + cls_loss + box_loss


def classifier_loss(model: Any, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(model(images), labels)


def fit(model: torch.nn.Module, loss_fn: Callable[..., torch.Tensor], inputs: np.ndarray,
        targets: Sequence[np.ndarray], *, epochs: int, batch: int = 32, lr: float = 3e-3, seed: int = 0,
        log: Callable[..., None] = print) -> dict[str, float]:
    """Adam over shuffled mini-batches (seeded); returns the final epoch's mean loss and the seconds taken."""
    torch.manual_seed(seed)
    torch.set_num_threads(1)  # one thread: several threads on small convolutions cost 4x the CPU on a busy machine
    order_rng = np.random.default_rng(seed)
    x = torch.from_numpy(inputs)
    ys = [torch.from_numpy(t) for t in targets]
    steps = epochs * (len(x) // batch)
    opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.MultiStepLR(opt, [int(steps * 0.7), int(steps * 0.9)], 0.1)
    t0, c0 = time.perf_counter(), time.process_time()
    model.train()
    loss_sum = 0.0
    for epoch in range(epochs):
        order = torch.from_numpy(order_rng.permutation(len(x)))
        loss_sum, count = 0.0, 0
        for start in range(0, len(x) - batch + 1, batch):
            idx = order[start:start + batch]
            loss = loss_fn(model, x[idx], *(y[idx] for y in ys))
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            loss_sum, count = loss_sum + float(loss.detach()), count + 1
        loss_sum /= max(count, 1)
        log(f"epoch {epoch + 1}/{epochs}: loss {loss_sum:.4f} ({time.perf_counter() - t0:.0f} s)", flush=True)
    model.eval()
    return {"final_loss": round(loss_sum, 4), "train_seconds": round(time.perf_counter() - t0, 1),
            "train_cpu_seconds": round(time.process_time() - c0, 1)}


def save_source(model: torch.nn.Module, out: Path) -> None:
    """``out/model.py`` (this package's torch_models.py: the networks) and ``out/weights.pt`` (state_dict)."""
    (out / "model.py").write_text(Path(tm.__file__).read_text())
    torch.save(model.state_dict(), out / "weights.pt")


# the torch detectors' preprocessing: RGB in [0, 1] (torchvision's ToTensor), NCHW
DETECTOR_PREP_ARGS: dict[str, Any] = {"size": (tm.IMAGE_SIZE, tm.IMAGE_SIZE), "mean": (0.0, 0.0, 0.0),
                                      "std": (255.0, 255.0, 255.0)}
FEED_INPUT = "images"


def build_detector(out: Path, *, model: torch.nn.Module, loss: Callable[..., torch.Tensor], centre_only: bool,
                   factory: str, spec: dict[str, Any], category_ids: Sequence[int], epochs: int, n_train: int,
                   seed: int) -> dict[str, Any]:
    """Train ``model`` on procedural shapes, write its source, held-out images, labels and feeds into ``out``,
    measure its held-out COCO mAP with its own eager forward; returns the manifest."""
    from trained_models.common import (
        HELDOUT_SEED,
        HELDOUT_SIZE,
        TRAIN_SEED,
        Preprocessing,
        coco_map,
        make_shapes,
        preprocess,
        read_detections,
        score_separation,
        write_heldout,
    )

    prep = Preprocessing(**DETECTOR_PREP_ARGS)
    train = make_shapes(n_train, TRAIN_SEED)
    targets = grid_targets(train, centre_only)
    training = fit(model, loss, preprocess(train.images, prep), list(targets), epochs=epochs, seed=seed)
    save_source(model, out)
    held = make_shapes(HELDOUT_SIZE, HELDOUT_SEED)
    labels = write_heldout(out, held, prep, FEED_INPUT, category_ids)
    x = torch.from_numpy(preprocess(held.images, prep))
    dets = []
    names = list(spec["outputs"].values())
    with torch.no_grad():
        for start in range(0, len(x), 50):
            outs = model(x[start:start + 50])
            outs = outs if isinstance(outs, tuple) else (outs,)
            dets += read_detections(spec, dict(zip(names, [o.numpy() for o in outs], strict=True)),
                                    len(x[start:start + 50]))
    return {
        "framework": "pytorch", "source": f"{{dir}}/model.py:{factory}",
        "convert_args": ["--weights", "{dir}/weights.pt", "--input", f"{FEED_INPUT}:8,3,64,64",
                         "--dynamic", f"{FEED_INPUT}:0=batch", "--exporter", "torchscript",
                         "--output-names", ",".join(names)],
        "feeds": "feeds.npz", "layout": spec["layout"], "images": "images", "labels": "labels.json",
        "preprocessing": prep.as_dict(), "detections": spec, "box_units": "pixels",
        "quality": {**coco_map(labels, dets), **score_separation(dets), "images": len(held),
                    "detections_per_image": round(sum(len(d) for d in dets) / len(dets), 2),
                    "mean_score": round(float(np.mean([s for d in dets for s in d.scores])), 4)},
        "training": {**training, "images": n_train, "epochs": epochs, "seed": seed},
    }
