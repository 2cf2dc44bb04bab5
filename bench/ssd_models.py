"""SSD graphs for the benchmarks, built in code with ``mx.sym`` (random weights, nothing downloaded).

Every model is written as an MXNet checkpoint pair (``<name>-symbol.json`` + ``<name>-0000.params``)
into a cache folder (``bench/.cache`` by default, gitignored), with the zhreshold/mxnet-ssd deploy
layout the bundled example uses: per feature layer a 3x3 loc and cls conv -> transpose(0,2,3,1) ->
Flatten, a MultiBoxPrior -> Flatten, concatenated into the cut points ``multibox_loc_pred`` [B, 4N],
``multibox_cls_pred`` [B, C+1, N] and ``multibox_anchors`` [1, N, 4], then SoftmaxActivation(channel)
and MultiBoxDetection (``detection_output`` [B, N, 6]).

Models (name -> what it stands for):
  vgg_like_300      VGG-like SSD 300x300, 5 feature maps, 34,030 anchors x 20 classes (the 35k-anchor row)
  mobilenet_like_256  depthwise-separable SSD 256x256, 24,512 anchors x 20 classes, force_suppress
  resnet_like_192   residual SSD 192x192, 13,752 anchors, nms_topk=-1 (all survive into NMS)
  vgg16_ssd300      the legacy VGG16-reduced SSD300 (26.3M parameters, 8,732 anchors, 21 classes)
  mobilenet_ssd512  legacy MobileNet-v1 SSD512 (5.5M parameters, 21 classes)
  tiny              a few hundred anchors at 64x64 (the quick mode)
  mobilenet_like_256_untrained  mobilenet_like_256 as MXNet's ``mx.init.Normal(0.01)`` leaves it before training
                    (weights N(0, 0.01), zero biases, identity BatchNorm): every class probability is 1/21 to a few
                    float32 ulps, so the top-400 cut and the NMS order are decided by rounding (issue 38.14)

Weights: He-normal convolutions (activations keep their scale through VGG16's 15 layers) with small
biases, BatchNorm statistics drawn near 1, so scores are spread and many boxes pass the 0.01 threshold.
Building needs MXNet; ``mxnet_import()`` sets its thread environment first.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

CACHE = Path(__file__).resolve().parent / ".cache"


def mxnet_import(threads: int) -> Any:
    """Import mxnet with ``threads`` OpenMP / engine worker threads (must run before the first import)."""
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    os.environ.setdefault("MXNET_CPU_WORKER_NTHREADS", str(threads))
    os.environ.setdefault("MXNET_ENGINE_TYPE", "NaiveEngine")  # synchronous: timings include the work
    # idle OpenMP workers sleep instead of spinning (as onnxruntime's pool does here with spinning off): on
    # a loaded 2-core machine spinning workers cost MXNet up to ~50x on small ops
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    if "bool" not in vars(np):
        np.bool = bool  # type: ignore[attr-defined]  # mxnet 1.9.1 still references numpy.bool
    import mxnet as mx

    return mx


@dataclass(frozen=True)
class Layer:
    """One SSD feature layer: the feature symbol builder's output index, prior sizes and ratios."""

    sizes: tuple[float, ...]
    ratios: tuple[float, ...]


@dataclass(frozen=True)
class SSDSpec:
    name: str
    size: int  # input side
    num_classes: int  # without background
    backbone: Callable[[Any, Any], list[Any]]  # (mx, data) -> feature symbols
    layers: tuple[Layer, ...]
    detection: dict[str, Any] = field(default_factory=dict)
    description: str = ""
    init: str = "he"  # "he": the weights in the module docstring; "untrained": mx.init.Normal(0.01), zero biases


def _conv(mx: Any, x: Any, name: str, filters: int, *, kernel: int = 3, stride: int = 1, pad: int | None = None,
          group: int = 1, dilate: int = 1, bn: bool = False, relu: bool = True) -> Any:
    p = (kernel // 2) * dilate if pad is None else pad
    y = mx.sym.Convolution(x, kernel=(kernel, kernel), pad=(p, p), stride=(stride, stride), dilate=(dilate, dilate),
                           num_filter=filters, num_group=group, no_bias=bn, name=name)
    if bn:
        y = mx.sym.BatchNorm(y, fix_gamma=False, eps=1e-5, name=f"{name}_bn")
    return mx.sym.Activation(y, act_type="relu", name=f"{name}_relu") if relu else y


def _pool(mx: Any, x: Any, name: str, kernel: int = 2, stride: int = 2, pad: int = 0, full: bool = False) -> Any:
    return mx.sym.Pooling(x, kernel=(kernel, kernel), stride=(stride, stride), pad=(pad, pad), pool_type="max",
                          pooling_convention="full" if full else "valid", name=name)


def _l2norm_scaled(mx: Any, x: Any, channels: int, name: str) -> Any:
    norm = mx.sym.L2Normalization(x, mode="channel", name=f"{name}_norm")
    scale = mx.sym.var(f"{name}_scale", shape=(1, channels, 1, 1), init=mx.init.Constant(20))
    return mx.sym.broadcast_mul(norm, scale, name=f"{name}_scaled")


def _extras(mx: Any, x: Any, specs: list[tuple[int, int, int, int]], bn: bool = False) -> list[Any]:
    """mxnet-ssd multi_feat layers: 1x1 conv (c1) then 3x3 conv (c2) with stride s, pad p."""
    feats = []
    for i, (c1, c2, stride, pad) in enumerate(specs):
        x = _conv(mx, x, f"multi_feat_{i + 2}_conv_1x1", c1, kernel=1, bn=bn)
        x = _conv(mx, x, f"multi_feat_{i + 2}_conv_3x3", c2, stride=stride, pad=pad, bn=bn)
        feats.append(x)
    return feats


def vgg_like(mx: Any, data: Any) -> list[Any]:
    x = _conv(mx, data, "conv1", 16, stride=2)  # 150
    x = _conv(mx, x, "conv2", 32, stride=2)  # 75
    f1 = _l2norm_scaled(mx, _conv(mx, x, "conv4_3", 32), 32, "relu4_3")
    x = _conv(mx, x, "fc7", 48, stride=2)  # 38
    return [f1, x, *_extras(mx, x, [(32, 64, 2, 1), (32, 64, 2, 1), (32, 64, 2, 1)])]  # 19, 10, 5


def mobilenet_like(mx: Any, data: Any) -> list[Any]:
    x = _conv(mx, data, "conv0", 16, stride=2, bn=True)  # 128
    x = _conv(mx, x, "conv1_dw", 16, group=16, stride=2, bn=True)  # 64
    f1 = _conv(mx, x, "conv1_pw", 32, kernel=1, bn=True)
    x = _conv(mx, f1, "conv2_dw", 32, group=32, stride=2, bn=True)  # 32
    f2 = _conv(mx, x, "conv2_pw", 64, kernel=1, bn=True)
    return [f1, f2, *_extras(mx, f2, [(32, 64, 2, 1), (32, 64, 2, 1), (32, 64, 2, 1)], bn=True)]  # 16, 8, 4


def resnet_like(mx: Any, data: Any) -> list[Any]:
    x = _conv(mx, data, "stem", 16, stride=4, bn=True)  # 48
    y = _conv(mx, x, "res1_a", 16, bn=True)
    y = _conv(mx, y, "res1_b", 16, bn=True, relu=False)
    x = mx.sym.Activation(mx.sym.elemwise_add(x, y, name="res1_add"), act_type="relu", name="res1_relu")
    f2 = _conv(mx, x, "res2", 32, stride=2, bn=True)  # 24
    return [x, f2, *_extras(mx, f2, [(32, 64, 2, 1), (32, 64, 2, 1)], bn=True)]  # 12, 6


def vgg16_reduced(mx: Any, data: Any) -> list[Any]:
    """zhreshold/mxnet-ssd symbol/vgg16_reduced.py + legacy_vgg16_ssd_300.py feature layers."""
    x = data
    for block, (n, ch) in enumerate([(2, 64), (2, 128), (3, 256), (3, 512), (3, 512)], start=1):
        for i in range(n):
            x = _conv(mx, x, f"conv{block}_{i + 1}", ch)
        if block == 4:
            relu4_3 = x
        if block < 5:
            x = _pool(mx, x, f"pool{block}", full=block == 3)
    x = _pool(mx, x, "pool5", kernel=3, stride=1, pad=1)
    x = _conv(mx, x, "fc6", 1024, dilate=6)
    fc7 = _conv(mx, x, "fc7", 1024, kernel=1)
    extras = _extras(mx, fc7, [(256, 512, 2, 1), (128, 256, 2, 1), (128, 256, 1, 0), (128, 256, 1, 0)])
    return [_l2norm_scaled(mx, relu4_3, 512, "relu4_3"), fc7, *extras]  # 38, 19, 10, 5, 3, 1


def mobilenet_v1(mx: Any, data: Any) -> list[Any]:
    """MobileNet v1 (alpha 1) with SSD512 extras, as mxnet-ssd's symbol/mobilenet.py + ssd512 layers."""
    x = _conv(mx, data, "conv1", 32, stride=2, bn=True)
    plan = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), (512, 1), (512, 1), (512, 1), (512, 1),
            (512, 1), (1024, 2), (1024, 1)]
    cin, feats = 32, []
    for i, (cout, stride) in enumerate(plan, start=2):
        x = _conv(mx, x, f"conv{i}_dw", cin, group=cin, stride=stride, bn=True)
        x = _conv(mx, x, f"conv{i}_pw", cout, kernel=1, bn=True)
        cin = cout
        if i in (12, 14):
            feats.append(x)  # 32x32 (conv12), 16x16 (conv14) at 512
    return [*feats, *_extras(mx, x, [(256, 512, 2, 1), (128, 256, 2, 1), (128, 256, 2, 1), (128, 256, 2, 1)],
                             bn=True)]  # 8, 4, 2, 1


def tiny(mx: Any, data: Any) -> list[Any]:
    x = _conv(mx, data, "conv1", 8, stride=4)  # 16
    return [x, _conv(mx, x, "conv2", 8, stride=2)]  # 8


_S = ((0.1, 0.141), (0.2, 0.272), (0.37, 0.447), (0.54, 0.619), (0.71, 0.79), (0.88, 0.961))
_R4, _R6 = (1.0, 2.0, 0.5), (1.0, 2.0, 0.5, 3.0, 1.0 / 3)
_DET = {"threshold": 0.01, "nms_threshold": 0.45, "force_suppress": False, "nms_topk": 400, "clip": True,
        "variances": (0.1, 0.1, 0.2, 0.2)}

MODELS: dict[str, SSDSpec] = {s.name: s for s in [
    SSDSpec("vgg_like_300", 300, 20, vgg_like,
            (Layer(_S[0], _R4), Layer(_S[1], _R6), Layer(_S[2], _R6), Layer(_S[3], _R6), Layer(_S[4], _R4)),
            dict(_DET), "VGG-like SSD 300x300, 34,030 anchors x 20 classes"),
    SSDSpec("mobilenet_like_256", 256, 20, mobilenet_like,
            (Layer(_S[0], _R4), Layer(_S[1], _R6), Layer(_S[2], _R6), Layer(_S[3], _R6), Layer(_S[4], _R4)),
            {**_DET, "force_suppress": True}, "MobileNet-like SSD 256x256, 24,512 anchors, force_suppress"),
    SSDSpec("resnet_like_192", 192, 20, resnet_like,
            (Layer(_S[0], _R4), Layer(_S[1], _R6), Layer(_S[2], _R6), Layer(_S[3], _R6)),
            {**_DET, "nms_topk": -1}, "ResNet-like SSD 192x192, 13,752 anchors, nms_topk=-1"),
    SSDSpec("vgg16_ssd300", 300, 20, vgg16_reduced,
            (Layer(_S[0], _R4), Layer(_S[1], _R6), Layer(_S[2], _R6), Layer(_S[3], _R6), Layer(_S[4], _R4),
             Layer(_S[5], _R4)),
            dict(_DET), "legacy VGG16-reduced SSD300, 8,732 anchors, 21 classes"),
    SSDSpec("mobilenet_ssd512", 512, 20, mobilenet_v1,
            (Layer(_S[0], _R4), Layer(_S[1], _R6), Layer(_S[2], _R6), Layer(_S[3], _R6), Layer(_S[4], _R4),
             Layer(_S[5], _R4)),
            dict(_DET), "legacy MobileNet-v1 SSD512, 21 classes"),
    SSDSpec("mobilenet_like_256_untrained", 256, 20, mobilenet_like,
            (Layer(_S[0], _R4), Layer(_S[1], _R6), Layer(_S[2], _R6), Layer(_S[3], _R6), Layer(_S[4], _R4)),
            {**_DET, "force_suppress": True}, "mobilenet_like_256 untrained: N(0, 0.01) weights, near-tied scores",
            init="untrained"),
    SSDSpec("tiny", 64, 3, tiny, (Layer((0.2, 0.3), _R4), Layer((0.4, 0.55), _R4)), {**_DET, "nms_topk": 100},
            "tiny SSD 64x64, 1,280 anchors (quick mode)"),
]}


def ssd_symbol(mx: Any, spec: SSDSpec) -> Any:
    """The deploy symbol: backbone, heads, cut points, SoftmaxActivation, MultiBoxDetection."""
    data = mx.sym.var("data")
    feats = spec.backbone(mx, data)
    assert len(feats) == len(spec.layers), (spec.name, len(feats))
    loc_layers, cls_layers, anchor_layers = [], [], []
    for i, (feat, layer) in enumerate(zip(feats, spec.layers, strict=True)):
        a = len(layer.sizes) + len(layer.ratios) - 1
        loc = mx.sym.Convolution(feat, kernel=(3, 3), pad=(1, 1), num_filter=4 * a, name=f"f{i}_loc_pred_conv")
        loc_layers.append(mx.sym.Flatten(mx.sym.transpose(loc, axes=(0, 2, 3, 1))))
        cls = mx.sym.Convolution(feat, kernel=(3, 3), pad=(1, 1), num_filter=a * (spec.num_classes + 1),
                                 name=f"f{i}_cls_pred_conv")
        cls_layers.append(mx.sym.Flatten(mx.sym.transpose(cls, axes=(0, 2, 3, 1))))
        anchors = mx.sym.contrib.MultiBoxPrior(feat, sizes=layer.sizes, ratios=layer.ratios, clip=False,
                                               name=f"f{i}_anchors")
        anchor_layers.append(mx.sym.Flatten(anchors))
    loc_preds = mx.sym.Concat(*loc_layers, num_args=len(loc_layers), dim=1, name="multibox_loc_pred")
    cls_preds = mx.sym.Concat(*cls_layers, num_args=len(cls_layers), dim=1)
    cls_preds = mx.sym.Reshape(cls_preds, shape=(0, -1, spec.num_classes + 1))
    cls_preds = mx.sym.transpose(cls_preds, axes=(0, 2, 1), name="multibox_cls_pred")
    anchor_boxes = mx.sym.Concat(*anchor_layers, num_args=len(anchor_layers), dim=1)
    anchor_boxes = mx.sym.Reshape(anchor_boxes, shape=(0, -1, 4), name="multibox_anchors")
    cls_prob = mx.sym.SoftmaxActivation(cls_preds, mode="channel", name="cls_prob")
    return mx.sym.contrib.MultiBoxDetection(cls_prob, loc_preds, anchor_boxes, name="detection", **spec.detection)


@dataclass(frozen=True)
class Built:
    spec: SSDSpec
    symbol: Path
    params: Path
    num_anchors: int
    num_params: int
    weight_bytes: int


BUNDLED = "bundled_ssd"  # the repository's trained examples/mxnet_ssd, as it ships
_EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "mxnet_ssd"


def _bundled() -> Built:
    """examples/mxnet_ssd (64x64 input, 320 anchors x 3 classes, trained): read as it is, nothing generated."""
    import json

    symbol, params = _EXAMPLE / "model-symbol.json", _EXAMPLE / "model-0000.params"
    nodes = json.loads(symbol.read_text())["nodes"]
    det = next(n for n in nodes if n["op"] == "_contrib_MultiBoxDetection")
    raw = det.get("attrs", det.get("attr", {}))
    attrs: dict[str, Any] = {k: (v == "True") if v in ("True", "False") else
                             tuple(float(x) for x in v.strip("()").split(",")) if v.startswith("(") else
                             float(v) if "." in v else int(v) for k, v in raw.items()}

    def no_backbone(mx: Any, data: Any) -> list[Any]:
        raise RuntimeError("the bundled SSD is read from its checkpoint, not built")

    spec = SSDSpec(BUNDLED, 64, 3, no_backbone, (), attrs, "the bundled examples/mxnet_ssd (trained), 320 anchors x 3")
    return Built(spec, symbol, params, 320, params.stat().st_size // 4, params.stat().st_size)


def build(mx: Any, name: str, cache: Path = CACHE) -> Built:
    """Write (or reuse) the checkpoint of model ``name`` in ``cache``; returns its paths and sizes
    (``bundled_ssd``: the repository's example checkpoint as it is)."""
    if name == BUNDLED:
        return _bundled()
    spec = MODELS[name]
    cache.mkdir(parents=True, exist_ok=True)
    prefix = cache / name
    symbol, params = Path(f"{prefix}-symbol.json"), Path(f"{prefix}-0000.params")
    sym = ssd_symbol(mx, spec)
    shape = (1, 3, spec.size, spec.size)
    arg_shapes, out_shapes, aux_shapes = sym.infer_shape(data=shape)
    if not (symbol.exists() and params.exists()):
        rng = np.random.default_rng(0)
        args: dict[str, Any] = {}
        untrained = spec.init == "untrained"
        for arg, shp in zip(sym.list_arguments(), arg_shapes, strict=True):
            if arg == "data":
                continue
            if untrained:  # mx.init.Normal(0.01) for weights, zeros for biases / beta, ones for gamma
                arr = (rng.standard_normal(shp) * 0.01 if arg.endswith("_weight") else
                       np.ones(shp) if arg.endswith("gamma") else np.zeros(shp)).astype(np.float32)
            elif arg.endswith("_weight"):
                fan_in = int(np.prod(shp[1:]))
                arr = rng.standard_normal(shp, dtype=np.float32) * np.float32(np.sqrt(2.0 / fan_in))
            elif arg.endswith("_scale"):
                arr = np.full(shp, 20, np.float32)
            elif arg.endswith("gamma"):
                arr = rng.uniform(0.8, 1.2, shp).astype(np.float32)
            else:  # biases, beta
                arr = (rng.standard_normal(shp) * 0.05).astype(np.float32)
            args[arg] = mx.nd.array(arr)
        aux = {a: mx.nd.array(np.full(s, float(a.endswith("var")), np.float32) if untrained  # mean 0, var 1
                              else rng.uniform(0.8, 1.2, s).astype(np.float32) if a.endswith("var")
                              else (rng.standard_normal(s) * 0.05).astype(np.float32))
               for a, s in zip(sym.list_auxiliary_states(), aux_shapes, strict=True)}
        tmp_sym = Path(f"{prefix}.tmp-symbol.json")
        tmp_par = Path(f"{prefix}.tmp-0000.params")
        sym.save(str(tmp_sym))
        mx.nd.save(str(tmp_par), {**{f"arg:{k}": v for k, v in args.items()},
                                  **{f"aux:{k}": v for k, v in aux.items()}})
        os.replace(tmp_sym, symbol)
        os.replace(tmp_par, params)
    n_params = sum(int(np.prod(s)) for a, s in zip(sym.list_arguments(), arg_shapes, strict=True) if a != "data")
    n_params += sum(int(np.prod(s)) for s in aux_shapes)
    return Built(spec, symbol, params, int(out_shapes[0][1]), n_params, params.stat().st_size)
