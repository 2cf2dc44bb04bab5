"""Build the small legacy models the example migration manifest converts (into ``models/``, gitignored).

    .venv/bin/python examples/migration/build_models.py [--out DIR]

Writes, deterministically (seeded weights, a few hundred KB in all):
- ``zoo/cls_small/`` and ``zoo/cls_wide/``: MXNet ``save_checkpoint`` classifiers (symbol JSON +
  ``-0000.params``), matched by the manifest's glob ``models/zoo/*/model-symbol.json``;
- ``gluon_nms/``: a GluonCV-style detection tail (``box_decode`` -> concat with class ids and scores
  -> ``box_nms`` -> top rows), MXNet symbol + params;
- ``keras_cnn.keras``: a small Keras CNN (TensorFlow source);
- ``old_upsample.onnx``: an opset-9 ONNX file with ``Upsample`` (needs up-conversion to Resize);
- ``broken/model-symbol.json``: an MXNet graph with an op no translator handles (the deliberately
  broken model: the migration reports it with the op and node names and goes on).

The bundled MXNet SSD (``examples/mxnet_ssd``) and PyTorch detector (``examples/tiny_detector``) are
used where they are. Models whose framework is not installed are skipped with a note (their manifest
entries then fail with "not installed"). Re-running rebuilds only what is missing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # the checkout, for adapters.mxnet.reference.import_mxnet


def _mxnet():  # type: ignore[no-untyped-def]
    """MXNet 1.9.1 imported through bridge's shim (it reads numpy.bool, gone from numpy 1.24+)."""
    from adapters.mxnet.reference import import_mxnet

    return import_mxnet()


def _atomic(path: Path, write: object) -> None:
    """Call ``write(tmp_path)`` then rename onto ``path``: a killed build never leaves a partial model."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{path.suffix}")
    write(tmp)  # type: ignore[operator]
    os.replace(tmp, path)


def mxnet_classifier(folder: Path, width: int, seed: int) -> None:
    """conv3x3+BN+relu -> conv3x3 stride 2 + relu -> global avg pool -> FC(5) -> softmax; data [B,3,16,16]."""
    mx = _mxnet()

    data = mx.sym.var("data")
    x = mx.sym.Convolution(data, num_filter=width, kernel=(3, 3), pad=(1, 1), no_bias=True, name="conv0")
    x = mx.sym.Activation(mx.sym.BatchNorm(x, name="bn0", fix_gamma=False), act_type="relu", name="relu0")
    x = mx.sym.Convolution(x, num_filter=width * 2, kernel=(3, 3), stride=(2, 2), pad=(1, 1), name="conv1")
    x = mx.sym.Activation(x, act_type="relu", name="relu1")
    x = mx.sym.Pooling(x, global_pool=True, pool_type="avg", kernel=(1, 1), name="pool")
    x = mx.sym.FullyConnected(mx.sym.Flatten(x), num_hidden=5, name="fc")
    net = mx.sym.softmax(x, name="prob")
    rng = np.random.default_rng(seed)
    arg_shapes, _, aux_shapes = net.infer_shape(data=(1, 3, 16, 16))
    params = {f"arg:{n}": mx.nd.array(rng.normal(0, 0.3, s).astype(np.float32))
              for n, s in zip(net.list_arguments(), arg_shapes, strict=True) if n != "data"}
    params.update({f"aux:{n}": mx.nd.array((rng.uniform(0.5, 1.5, s) if "var" in n else rng.normal(0, 0.1, s))
                                           .astype(np.float32))
                   for n, s in zip(net.list_auxiliary_states(), aux_shapes, strict=True)})
    _atomic(folder / "model-0000.params", lambda p: mx.nd.save(str(p), params))
    _atomic(folder / "model-symbol.json", lambda p: net.save(str(p)))


def gluon_nms(folder: Path) -> None:
    """GluonCV-style post-processing: decode box deltas against anchors, attach class id and score, box_nms.

    Inputs ``loc`` [1, 32, 4] (deltas) and ``cls`` [1, 32, 3] (logits); anchors are a parameter."""
    mx = _mxnet()

    loc, cls = mx.sym.var("loc"), mx.sym.var("cls")
    anchors = mx.sym.var("anchors", shape=(1, 32, 4))
    boxes = mx.sym.contrib.box_decode(loc, anchors, std0=0.1, std1=0.1, std2=0.2, std3=0.2, format="center",
                                      name="decode")
    prob = mx.sym.softmax(cls, axis=-1, name="prob")
    score = mx.sym.max(prob, axis=-1, keepdims=True, name="score")
    cid = mx.sym.argmax(prob, axis=-1, keepdims=True, name="cid")
    dets = mx.sym.concat(cid, score, boxes, dim=-1, name="dets")
    out = mx.sym.contrib.box_nms(dets, overlap_thresh=0.45, valid_thresh=0.01, topk=20, coord_start=2,
                                 score_index=1, id_index=0, force_suppress=False, name="nms")
    # the top 20 rows, as GluonCV's detectors slice after box_nms (box_nms keeps topk but returns all rows)
    out = mx.sym.slice_axis(out, axis=1, begin=0, end=20, name="top")
    rng = np.random.default_rng(3)
    centers = rng.uniform(0.2, 0.8, (1, 32, 2))
    sizes = rng.uniform(0.1, 0.4, (1, 32, 2))
    params = {"arg:anchors": mx.nd.array(np.concatenate([centers, sizes], -1).astype(np.float32))}
    _atomic(folder / "model-0000.params", lambda p: mx.nd.save(str(p), params))
    _atomic(folder / "model-symbol.json", lambda p: out.save(str(p)))


def keras_cnn(path: Path) -> None:
    """Conv -> pool -> dense softmax on img [B, 32, 32, 3]."""
    import keras

    keras.utils.set_random_seed(0)
    model = keras.Sequential([
        keras.Input((32, 32, 3), name="img"),
        keras.layers.Conv2D(8, 3, activation="relu", padding="same"),
        keras.layers.MaxPooling2D(),
        keras.layers.Conv2D(16, 3, activation="relu", padding="same"),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(4, activation="softmax"),
    ])
    _atomic(path, lambda p: model.save(str(p)))


def old_upsample_onnx(path: Path) -> None:
    """Opset 9: Conv -> Upsample(nearest, x2) -> Relu; x [1, 3, 8, 8] -> y [1, 4, 16, 16]."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(1)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
         helper.make_node("Upsample", ["c", "scales"], ["u"], mode="nearest", name="up"),
         helper.make_node("Relu", ["u"], ["y"], name="relu")],
        "old_upsample",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 16, 16])],
        initializer=[numpy_helper.from_array(rng.normal(0, 0.5, (4, 3, 3, 3)).astype(np.float32), "w"),
                     numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)], producer_name="legacy-exporter")
    model.ir_version = 4
    _atomic(path, lambda p: onnx.save(model, str(p)))


def broken(folder: Path) -> None:
    """An MXNet graph with ops no translator handles (``_contrib_Proposal``-style custom layers)."""
    nodes = [
        {"op": "null", "name": "data", "inputs": []},
        {"op": "Activation", "name": "relu0", "attrs": {"act_type": "relu"}, "inputs": [[0, 0, 0]]},
        {"op": "_contrib_Proposal", "name": "rpn_proposal", "attrs": {"feature_stride": "16"}, "inputs": [[1, 0, 0]]},
        {"op": "_contrib_PSROIPooling", "name": "psroipool", "attrs": {"spatial_scale": "0.0625"},
         "inputs": [[2, 0, 0]]},
    ]
    text = json.dumps({"nodes": nodes, "arg_nodes": [0], "heads": [[3, 0, 0]], "attrs": {"mxnet_version": ["int", 10901]}})
    _atomic(folder / "model-symbol.json", lambda p: p.write_text(text))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE / "models", help="where to write (default: models/)")
    parser.add_argument("--force", action="store_true", help="rebuild models that exist already")
    args = parser.parse_args(argv)
    out: Path = args.out
    builds = [
        ("zoo/cls_small/model-symbol.json", "mxnet", lambda: mxnet_classifier(out / "zoo/cls_small", 4, 0)),
        ("zoo/cls_wide/model-symbol.json", "mxnet", lambda: mxnet_classifier(out / "zoo/cls_wide", 8, 1)),
        ("gluon_nms/model-symbol.json", "mxnet", lambda: gluon_nms(out / "gluon_nms")),
        ("keras_cnn.keras", "keras", lambda: keras_cnn(out / "keras_cnn.keras")),
        ("old_upsample.onnx", "onnx", lambda: old_upsample_onnx(out / "old_upsample.onnx")),
        ("broken/model-symbol.json", None, lambda: broken(out / "broken")),
    ]
    for rel, needs, build in builds:
        if (out / rel).exists() and not args.force:
            continue
        if needs is not None:
            try:
                _mxnet() if needs == "mxnet" else __import__(needs)
            except Exception:
                print(f"skipped {rel}: {needs} is not installed", file=sys.stderr)
                continue
        build()
        print(f"built {out / rel}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
