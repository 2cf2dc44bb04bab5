"""``--to tflite --tflite-outputs detection-postprocess``: an SSD's detections in the four outputs of TFLite's
TFLite_Detection_PostProcess layout, from bridge's own decode + NMS, validated detection by detection against
MXNet in LiteRT; refused (exit 2) without a lowered MultiBoxDetection output or without --max-detections."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from deploy_models import SSD_ARGS, SSD_FEEDS, SSD_SYMBOL, decode_model, deploy_source, require_litert, save

import bridge
from bridge.errors import BridgeError, UsageError
from bridge.passes.contrib.tflite_layout import OUTPUTS

require_litert()

K = 7


def test_bundled_ssd_validates_in_litert_with_the_four_postprocess_outputs(tmp_path: Path) -> None:
    from ai_edge_litert.interpreter import Interpreter

    source, args, _ = deploy_source("bundled_ssd", tmp_path)  # skips without MXNet (the reference)
    result = bridge.convert(source, output=tmp_path / "out" / "ssd.onnx", to="tflite",  # type: ignore[arg-type]
                            tflite_outputs="detection-postprocess", max_detections=K, **args)
    assert result.passed and result.written
    (verdict,) = [c for c in result.validation if c.candidate == "litert"]
    assert verdict.passed and not verdict.vacuous
    (detection,) = [o.detection for o in verdict.outputs if o.detection is not None]
    assert detection["reference_count"] > 0 and detection["mismatched"] == 0
    assert detection["matched"] + detection["tie_ambiguous"] // 2 >= min(detection["reference_count"], K), detection

    # the written .tflite: exactly the four outputs, named, typed and shaped as detection apps read them
    interpreter = Interpreter(model_path=str(tmp_path / "out" / "ssd.tflite"))
    runner = interpreter.get_signature_runner()
    data = np.load(SSD_FEEDS)["data"]
    got = runner(**{k: data for k in interpreter.get_signature_list()["serving_default"]["inputs"]})
    batch = data.shape[0]
    assert sorted(got) == sorted(OUTPUTS)
    assert {k: (v.dtype, v.shape) for k, v in got.items()} == {
        "detection_boxes": (np.float32, (batch, K, 4)), "detection_classes": (np.float32, (batch, K)),
        "detection_scores": (np.float32, (batch, K)), "num_detections": (np.float32, (batch,))}
    # ymin, xmin, ymax, xmax: corners ordered, normalized; classes 0-based; rows past num are zero padding
    num = got["num_detections"].astype(int)
    assert num.max() > 0
    for i, n in enumerate(num):
        boxes = got["detection_boxes"][i, :n]
        assert np.all(boxes[:, 2] >= boxes[:, 0]) and np.all(boxes[:, 3] >= boxes[:, 1])
        assert np.all((boxes >= 0) & (boxes <= 1))
        assert np.all(got["detection_classes"][i, :n] >= 0) and np.all(got["detection_scores"][i, :n] > 0)
        assert not got["detection_scores"][i, n:].any()
    # the written .onnx carries the same layout (validated in onnxruntime too)
    written = onnx.load(tmp_path / "out" / "ssd.onnx", load_external_data=False)
    assert [o.name for o in written.graph.output] == list(OUTPUTS)


def test_refused_without_a_lowered_ssd_detection_output(tmp_path: Path) -> None:
    source = save(decode_model(), tmp_path / "decode.onnx")
    with pytest.raises(BridgeError, match="no lowered SSD detection output") as caught:
        bridge.convert(source, output=tmp_path / "out" / "m.onnx", to="tflite", inputs=["input.1:2,3,8,8"],
                       tflite_outputs="detection-postprocess", max_detections=K)
    assert caught.value.exit_code == 2
    assert not (tmp_path / "out" / "m.tflite").exists()


def test_refused_without_max_detections(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="needs --max-detections") as caught:
        bridge.convert(SSD_SYMBOL, output=tmp_path / "ssd.onnx", to="tflite",  # type: ignore[arg-type]
                       tflite_outputs="detection-postprocess", **SSD_ARGS)
    assert caught.value.exit_code == 2
    with pytest.raises(UsageError, match="--detection-format"):
        bridge.convert(SSD_SYMBOL, output=tmp_path / "ssd.onnx", to="tflite",  # type: ignore[arg-type]
                       tflite_outputs="detection-postprocess", max_detections=K, detection_format="indices", **SSD_ARGS)
