"""The bundled trained MXNet SSD (examples/mxnet_ssd) and a deliberately wrong copy of it, for dataset tests.

``wrong_anchors_symbol`` writes the SSD with every anchor corner scaled by ``factor`` (a ``_mul_scalar`` node
between ``multibox_anchors`` and ``MultiBoxDetection``): converted, it is the "anchors x1.01" candidate a
dataset validation against the real SSD must fail. ``shifted_boxes_model`` moves every box of a converted
SSD (its [B, N, 6] MXNet rows) right by a fraction of its width: at 5% the boxes keep IoU 0.905 with the
true ones, so AP@0.5 agreement stays 1.0 and only AP@[.5:.95] sees it.

Small ONNX models built in code for the other output kinds: ``colour_classifier`` (x [N, 3, 8, 8] -> [N, 5]
scores; ``colour_weights`` make it a nearest-colour classifier of the colour images the dataset tests write)
and ``colour_segmenter`` ([N, 4, 8, 8] per pixel); ``shifted_keypoints_model`` moves the keypoints of a
``graft-nms`` model (``detection_keypoints``) right by a fraction of each box's width. ``procedural_dataset`` writes the example's procedural
images with COCO labels (``examples/mxnet_ssd/make_dataset.py``).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from support import make_model

ROOT = Path(__file__).resolve().parents[1]
CLASSES = 5  # of the colour classifier
SSD = ROOT / "examples" / "mxnet_ssd"
SYMBOL = SSD / "model-symbol.json"


def wrong_anchors_symbol(folder: Path, factor: float = 1.01) -> Path:
    """``folder``/wrong-symbol.json (+ its params): the SSD with its anchors multiplied by ``factor``."""
    graph = json.loads(SYMBOL.read_text())
    nodes = graph["nodes"]
    anchors = next(i for i, n in enumerate(nodes) if n["name"] == "multibox_anchors")
    detection = next(i for i, n in enumerate(nodes) if n["op"] == "_contrib_MultiBoxDetection")
    assert detection == anchors + 1, "the SSD's detection node follows its anchors"
    scaled = {"op": "_mul_scalar", "name": "anchors_scaled", "attrs": {"scalar": repr(factor)},
              "inputs": [[anchors, 0, 0]]}
    shift = lambda ref: [ref[0] + 1 if ref[0] > anchors else ref[0], *ref[1:]]  # noqa: E731
    moved = [dict(n, inputs=[shift(r) for r in n["inputs"]]) for n in nodes[anchors + 1:]]
    moved[0]["inputs"][2] = [anchors + 1, 0, 0]
    graph["nodes"] = [*nodes[: anchors + 1], scaled, *moved]
    graph["heads"] = [shift(h) for h in graph["heads"]]
    graph.pop("node_row_ptr", None)
    graph["arg_nodes"] = [i + 1 if i > anchors else i for i in graph["arg_nodes"]]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "wrong-symbol.json").write_text(json.dumps(graph))
    shutil.copy(SSD / "model-0000.params", folder / "wrong-0000.params")
    return folder / "wrong-symbol.json"


def shifted_boxes_model(model: Path, out: Path, fraction: float = 0.05, output: str = "detection_output") -> Path:
    """``model`` (a converted SSD whose ``output`` holds MXNet rows class, score, x1, y1, x2, y2) with every box
    moved right by ``fraction`` of its width, written to ``out``."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    proto = onnx.load(model)
    graph = proto.graph
    raw = f"{output}_unshifted"
    for node in graph.node:
        node.output[:] = [raw if o == output else o for o in node.output]
    consts = {"sh_s0": [0], "sh_e2": [2], "sh_s2": [2], "sh_e3": [3], "sh_s4": [4], "sh_e5": [5], "sh_s3": [3],
              "sh_e4": [4], "sh_s5": [5], "sh_e6": [6], "sh_axis": [2]}
    graph.initializer.extend(numpy_helper.from_array(np.array(v, np.int64), k) for k, v in consts.items())
    graph.initializer.append(numpy_helper.from_array(np.array(fraction, np.float32), "sh_fraction"))
    cut = [("sh_head", "sh_s0", "sh_e2"), ("sh_x1", "sh_s2", "sh_e3"), ("sh_y1", "sh_s3", "sh_e4"),
           ("sh_x2", "sh_s4", "sh_e5"), ("sh_y2", "sh_s5", "sh_e6")]
    graph.node.extend(helper.make_node("Slice", [raw, a, b, "sh_axis"], [name]) for name, a, b in cut)
    graph.node.extend([
        helper.make_node("Sub", ["sh_x2", "sh_x1"], ["sh_w"]), helper.make_node("Mul", ["sh_w", "sh_fraction"], ["sh_dx"]),
        helper.make_node("Add", ["sh_x1", "sh_dx"], ["sh_x1s"]), helper.make_node("Add", ["sh_x2", "sh_dx"], ["sh_x2s"]),
        helper.make_node("Concat", ["sh_head", "sh_x1s", "sh_y1", "sh_x2s", "sh_y2"], [output], axis=2)])
    onnx.save(proto, out)
    return out


def procedural_dataset(folder: Path, count: int = 300, seed: int = 1) -> tuple[Path, Path]:
    """(images folder, COCO labels) of ``count`` procedural images (300 at seed 1: the example's validation set)."""
    sys.path.insert(0, str(SSD))
    try:
        from make_dataset import write_dataset
    finally:
        sys.path.remove(str(SSD))
    return write_dataset(folder, count, seed)


def colour_classifier(weights: np.ndarray) -> onnx.ModelProto:
    """x [N, 3, 8, 8] -> mean colour -> [N, 5] scores."""
    return make_model(
        [helper.make_node("GlobalAveragePool", ["x"], ["p"]), helper.make_node("Flatten", ["p"], ["f"]),
         helper.make_node("Gemm", ["f", "w"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", CLASSES])],
        opset=17, initializers=[numpy_helper.from_array(weights.astype(np.float32), "w")])


def colour_segmenter(weights: np.ndarray) -> onnx.ModelProto:
    """x [N, 3, 8, 8] -> a 1x1 convolution -> [N, 4, 8, 8] class scores per pixel."""
    return make_model(
        [helper.make_node("Conv", ["x", "w"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, 8, 8])],
        opset=17, initializers=[numpy_helper.from_array(weights.astype(np.float32), "w")])


def colour_weights() -> np.ndarray:
    """A nearest-colour classifier's weights (scores = -distance^2 up to a per-image constant)."""
    rng = np.random.default_rng(0)
    palette = rng.uniform(0, 255, (CLASSES, 3)) / 255.0
    return 2 * palette.T  # [3, 5]: x . 2p - |p|^2 (the constant |p|^2 is left out: the bias of a Gemm)




def shifted_keypoints_model(model: onnx.ModelProto, fraction: float) -> onnx.ModelProto:
    """``model`` with every detection's keypoints moved right by ``fraction`` of its box's width."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    for node in g.node:
        node.output[:] = ["kp_raw" if o == "detection_keypoints" else o for o in node.output]
    g.initializer.extend([numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
                          (("kp_s0", [0]), ("kp_s2", [2]), ("kp_e1", [1]), ("kp_e3", [3]), ("kp_ax", [2]),
                           ("kp_unsq", [2]))])
    g.initializer.append(numpy_helper.from_array(np.array([fraction, 0.0], np.float32), "kp_dir"))
    g.node.extend([
        helper.make_node("Slice", ["detection_boxes", "kp_s0", "kp_e1", "kp_ax"], ["kp_x1"]),
        helper.make_node("Slice", ["detection_boxes", "kp_s2", "kp_e3", "kp_ax"], ["kp_x2"]),
        helper.make_node("Sub", ["kp_x2", "kp_x1"], ["kp_w"]),  # [B, K, 1]
        helper.make_node("Unsqueeze", ["kp_w", "kp_unsq"], ["kp_w4"]),  # [B, K, 1, 1]
        helper.make_node("Mul", ["kp_w4", "kp_dir"], ["kp_shift"]),  # [B, K, 1, 2]
        helper.make_node("Add", ["kp_raw", "kp_shift"], ["detection_keypoints"])])
    return out


def write_colour_images(folder: Path, count: int = 40) -> tuple[Path, Path]:
    """``count`` noisy 8x8 single-colour PNGs in ``folder`` (image k has colour k % CLASSES of the palette
    ``colour_weights`` classify) and their COCO labels beside the folder (category id = colour)."""
    from PIL import Image

    from bridge.validation.dataset.labels import write_coco

    rng = np.random.default_rng(0)
    palette = rng.uniform(0, 255, (CLASSES, 3))
    folder.mkdir(parents=True, exist_ok=True)
    names, classes = [], []
    for k in range(count):
        c = k % CLASSES
        img = np.clip(palette[c] + rng.normal(0, 20, (8, 8, 3)), 0, 255).astype(np.uint8)
        Image.fromarray(img).save(folder / f"{k:03d}.png")
        names.append(f"{k:03d}.png")
        classes.append(np.array([c]))
    labels = folder.parent / (folder.name + "-labels.json")
    write_coco(labels, names, [(8, 8)] * len(names), [np.array([[0, 0, 8, 8.0]])] * len(names), classes,
               [f"colour{c}" for c in range(CLASSES)], first_id=0)
    return folder, labels
