"""The bundled trained MXNet SSD (examples/mxnet_ssd) and a deliberately wrong copy of it, for dataset tests.

``wrong_anchors_symbol`` writes the SSD with every anchor corner scaled by ``factor`` (a ``_mul_scalar`` node
between ``multibox_anchors`` and ``MultiBoxDetection``): converted, it is the "anchors x1.01" candidate a
dataset validation against the real SSD must fail. ``procedural_dataset`` writes the example's procedural
images with COCO labels (``examples/mxnet_ssd/make_dataset.py``).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
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


def procedural_dataset(folder: Path, count: int = 300, seed: int = 1) -> tuple[Path, Path]:
    """(images folder, COCO labels) of ``count`` procedural images (300 at seed 1: the example's validation set)."""
    sys.path.insert(0, str(SSD))
    try:
        from make_dataset import write_dataset
    finally:
        sys.path.remove(str(SSD))
    return write_dataset(folder, count, seed)
