"""boxes-scores-classes without ``--max-detections`` (one row per anchor) declares its output dims when
lowered: the batch follows the input's dynamic axis and the row count is the anchor count N.

Before, both were anonymous after shape inference (NMS and TopK hide them), so every such conversion
ran the whole model twice in ``NameOutputDimsByProbePass`` (seconds on a full-size SSD) and the rows
still stayed anonymous. Differential check on varied SSDs (the bundled trained one, one built with
force_suppress and a small nms_topk, one with NMS off; dynamic and static batch): the model converted
without a cap is the model converted with ``--max-detections N`` - the same outputs at every batch
size and the same dim names - its declared dims are what runs at two batch sizes measure, and the
conversion validates against MXNet. Where shape inference cannot follow the row count (an anchor count
only known at run time), the dim is named after the output instead of being left unnamed (``unk__0``).
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from contrib_testlib import contrib_model, lower, tiny_ssd_symbol
from support import REPO

from bridge import api
from bridge.config import DynamicAxis, InputSpec
from bridge.passes.contrib import LowerMultiBoxDetectionPass
from bridge.validation.probe import probe_output_shapes

SSD = REPO / "examples" / "mxnet_ssd"


def _ssd(mx: ModuleType, tmp: Path, **detection: Any) -> Path:
    sym = tiny_ssd_symbol(mx, threshold=0.2, **detection)
    arg_shapes, _, _ = sym.infer_shape(data=(1, 3, 32, 32))
    rng = np.random.default_rng(0)
    params = {f"arg:{n}": mx.nd.array(rng.normal(0, 0.3, s).astype(np.float32))
              for n, s in zip(sym.list_arguments(), arg_shapes, strict=True) if n != "data"}
    sym.save(str(tmp / "ssd-symbol.json"))
    mx.nd.save(str(tmp / "ssd-0000.params"), params)
    return tmp / "ssd-symbol.json"


# model, its input side, dynamic batch?
CASES = [("bundled", 64, True), ("force_suppress", 32, True), ("nms_off", 32, False)]
DETECTION = {"force_suppress": {"force_suppress": True, "nms_threshold": 0.5, "nms_topk": 20},
             "nms_off": {"nms_threshold": -1.0}}


def _dims(model: onnx.ModelProto) -> dict[str, list[int | str]]:
    return {o.name: [d.dim_param or d.dim_value for d in o.type.tensor_type.shape.dim] for o in model.graph.output}


@pytest.mark.parametrize(("name", "side", "dynamic"), CASES)
def test_uncapped_rows_are_declared_like_a_cap_of_every_anchor(mx: ModuleType, tmp_path: Path, name: str, side: int,
                                                               dynamic: bool) -> None:
    source = SSD / "model-symbol.json" if name == "bundled" else _ssd(mx, tmp_path, **DETECTION[name])
    values: dict[str, Any] = {"inputs": [f"data:1,3,{side},{side}"], "detection_format": "boxes-scores-classes"}
    if name == "bundled":  # its sample images give real detections to validate
        values.update(inputs=[f"data:4,3,{side},{side}"], feeds=SSD / "sample_inputs.npz")
    if dynamic:
        values["dynamic"] = ["data:0=batch"]
    uncapped = api.convert(source, tmp_path / "uncapped.onnx", **values)
    assert uncapped.passed and (name != "bundled" or not uncapped.vacuous)  # validated against MXNet
    plain = onnx.load(tmp_path / "uncapped.onnx")
    dims = _dims(plain)
    rows = dims["detection_output_boxes"][1]
    assert isinstance(rows, int) and rows > 0, dims  # the anchor count, not an anonymous dim
    batch = "batch" if dynamic else 1
    sample = 4 if name == "bundled" else 1
    assert dims == {"detection_output_boxes": [batch, rows, 4], "detection_output_scores": [batch, rows],
                    "detection_output_classes": [batch, rows], "detection_output_num_detections": [batch]}
    probe = next(p for p in uncapped.passes if p.name == "NameOutputDimsByProbePass") if dynamic else None
    assert probe is None or not probe.modified  # nothing left for the probe to name

    api.convert(source, tmp_path / "capped.onnx", max_detections=rows, **values)
    capped = onnx.load(tmp_path / "capped.onnx")
    assert _dims(capped) == dims
    rng = np.random.default_rng(1)
    a, b = (ort.InferenceSession(str(tmp_path / f), providers=["CPUExecutionProvider"])
            for f in ("uncapped.onnx", "capped.onnx"))
    for n in (1, 3) if dynamic else (1,):
        feeds = {"data": rng.uniform(0, 1, (n, 3, side, side)).astype(np.float32)}
        for x, y, meta in zip(a.run(None, feeds), b.run(None, feeds), a.get_outputs(), strict=True):
            np.testing.assert_array_equal(x, y, err_msg=meta.name)
            assert x.shape[0] == n and (x.ndim == 1 or x.shape[1] == rows)
    if dynamic:  # the declared dims are what runs at two batch sizes measure
        runs = probe_output_shapes(plain, [DynamicAxis("data", 0, "batch")], [InputSpec("data", (sample, 3, side, side))])
        for sizes, shapes in runs:
            for out, declared in dims.items():
                assert list(shapes[out]) == [sizes["batch"] if d == "batch" else d for d in declared]

C = 3
ATTRS = dict(clip=1, threshold=0.01, background_id=0, nms_threshold=0.5, force_suppress=0,
             variances=[0.1, 0.1, 0.2, 0.2], nms_topk=-1)


@pytest.mark.parametrize(("output_format", "max_det"), [("boxes-scores-classes", None), ("boxes-scores-classes", 7),
                                                         ("indices", None)])
def test_lowered_outputs_have_no_unnamed_dims(output_format: str, max_det: int | None) -> None:
    model = contrib_model("MultiBoxDetection", {"cls_prob": ["batch", C + 1, None], "loc_pred": ["batch", None],
                                                "anchors": [1, None, 4]}, {"detections": ["batch", None, 6]}, **ATTRS)
    lowered = lower(model, LowerMultiBoxDetectionPass(output_format, max_detections=max_det))
    for out in lowered.graph.output:
        dims = out.type.tensor_type.shape.dim
        assert dims, f"{out.name} has no shape"
        for i, d in enumerate(dims):
            assert d.HasField("dim_value") or (d.dim_param and not d.dim_param.startswith("unk__")), \
                f"{out.name} dim {i} is unnamed: {dims}"
    if output_format == "boxes-scores-classes":
        rows = {o.type.tensor_type.shape.dim[1].dim_value or o.type.tensor_type.shape.dim[1].dim_param
                for o in lowered.graph.output[:3]}
        assert rows == ({max_det} if max_det else {"detections_rows"})
