"""The bundled trained legacy SSD end to end: `bridge convert` gives plain ONNX (no bridge.contrib op,
full checker) whose mAP@0.5 on the held-back generated validation set equals MXNet's to 3 decimals,
and whose detections match MXNet's detection by detection."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import numpy as np
import onnx
import pytest
from support import REPO

from bridge import api
from bridge.runtimes import activated, get_runtime
from bridge.validation.detection.matching import compare_detections, from_mxnet, mean_average_precision

EXAMPLE = REPO / "examples" / "mxnet_ssd"


def _example_module(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"mxnet_ssd_{name}", EXAMPLE / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def mx() -> ModuleType:
    from adapters.mxnet.reference import import_mxnet
    from bridge.errors import AdapterUnavailableError

    try:
        return import_mxnet()
    except AdapterUnavailableError:
        pytest.skip("mxnet not installed (pip install 'bridge[mxnet]')")


@pytest.fixture(scope="module")
def validation_set() -> tuple[np.ndarray, list[np.ndarray]]:
    shapes = _example_module("shapes")
    images, boxes, classes = shapes.make_validation_set()
    truth = [np.concatenate([c.reshape(-1, 1).astype(np.float32), b.astype(np.float32)], axis=1)
             for b, c in zip(boxes, classes, strict=True)]
    return shapes.preprocess(images), truth


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ssd") / "ssd.onnx"
    result = api.convert(EXAMPLE / "model-symbol.json", out, inputs=["data:4,3,64,64"], dynamic=["data:0=batch"],
                         feeds=EXAMPLE / "sample_inputs.npz")
    assert result.passed and result.validation and result.validation[0].outputs[0].note.startswith("detection-aware")
    return out


def test_result_is_plain_onnx(converted: Path) -> None:
    model = onnx.load(converted)
    assert not [n for n in model.graph.node if n.domain not in ("", "ai.onnx")]
    # the batch label survives the NMS subgraph, where onnx shape inference loses it
    assert [d.dim_param or d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim] == ["batch", 320, 6]
    assert {o.domain for o in model.opset_import} <= {"", "ai.onnx"}
    onnx.checker.check_model(model, full_check=True)
    assert "NonMaxSuppression" in {n.op_type for n in model.graph.node}
    assert api.inspect(converted).problems == []


def test_map_identical_to_mxnet_and_detections_match(
        converted: Path, mx: ModuleType, validation_set: tuple[np.ndarray, list[np.ndarray]]) -> None:
    data, truth = validation_set
    with activated(get_runtime("onnxruntime", onnx.load(converted))) as rt:
        onnx_dets = np.concatenate([rt.infer({"data": data[i:i + 50]})["detection_output"]
                                    for i in range(0, len(data), 50)])
    sym, args, aux = mx.model.load_checkpoint(str(EXAMPLE / "model"), 0)
    mod = mx.mod.Module(sym, data_names=["data"], label_names=None, context=mx.cpu())
    mod.bind(data_shapes=[("data", (50, 3, 64, 64))], for_training=False)
    mod.set_params(args, aux)
    mx_dets = []
    for i in range(0, len(data), 50):
        mod.forward(mx.io.DataBatch([mx.nd.array(data[i:i + 50])]), is_train=False)
        mx_dets.append(mod.get_outputs()[0].asnumpy())
    mxnet_dets = np.concatenate(mx_dets)

    map_onnx = mean_average_precision(onnx_dets, truth).map
    map_mxnet = mean_average_precision(mxnet_dets, truth).map
    assert round(map_onnx, 3) == round(map_mxnet, 3)
    assert map_mxnet > 0.9  # a trained model: the comparison is about real detections
    det = compare_detections(from_mxnet(mxnet_dets), from_mxnet(onnx_dets))
    assert det.passed, det.summary()
    assert det.matched >= len(data)
