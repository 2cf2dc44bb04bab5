"""A detector whose random weights saturate (exp overflowing to inf boxes, sigmoid scores of exactly 1, as
GluonCV's YOLOv3 does in MXNet itself): the converted model overflows at the same places, and validation counts
rows with inf/NaN at equal positions (finite parts equal within float32 noise) as agreement, not a difference."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from mxnet_testlib import need_mxnet

import bridge
from bridge.errors import ValidationMismatch


def _yolo_like(mx: Any, gain: float) -> Any:
    data = mx.sym.var("data")
    raw = data * gain
    xy = mx.sym.slice_axis(raw, axis=-1, begin=0, end=2)
    wh = mx.sym.exp(mx.sym.slice_axis(raw, axis=-1, begin=2, end=4))
    score = mx.sym.sigmoid(mx.sym.slice_axis(raw, axis=-1, begin=4, end=5))
    cid = mx.sym.floor(mx.sym.abs(mx.sym.slice_axis(data, axis=-1, begin=5, end=6)) * 3)
    dets = mx.sym.concat(cid, score, xy - wh / 2, xy + wh / 2, dim=-1)
    return mx.sym.contrib.box_nms(dets, overlap_thresh=0.45, valid_thresh=0.01, topk=400, id_index=0,
                                  score_index=1, coord_start=2, name="nms")


@pytest.mark.parametrize("gain", [60.0, 200.0])
def test_saturated_detector_validates_against_mxnet(gain: float, tmp_path: Path) -> None:
    mx = need_mxnet()
    sym_path = tmp_path / "yolo-symbol.json"
    _yolo_like(mx, gain).save(str(sym_path))
    x = np.random.default_rng(0).standard_normal((1, 50, 6)).astype(np.float32)
    reference = sym_path.parent.joinpath("feeds.npz")
    np.savez(reference, data=x)
    ran = mx.sym.load(str(sym_path)).bind(mx.cpu(), {"data": mx.nd.array(x)}).forward()[0].asnumpy()
    assert not np.isfinite(ran[ran[:, :, 0] >= 0]).all(), "the test input must saturate MXNet"
    result = bridge.convert(str(sym_path), tmp_path / "yolo.onnx", inputs=["data:1,50,6"], feeds=reference,
                            validate=["onnxruntime"])
    assert result.passed
    # the saturated decode leaves nearly every box flat: moving one changes nothing, so coverage says the check
    # proves little (and --strict refuses it) - the inf values themselves compare equal
    (det,) = [o for c in result.validation for o in c.outputs if o.detection is not None]
    assert det.vacuous and "flat" in det.vacuous_reason, det.vacuous_reason
    with pytest.raises(ValidationMismatch, match=r"only checked vacuously.*flat"):
        bridge.convert(str(sym_path), tmp_path / "strict.onnx", inputs=["data:1,50,6"], feeds=reference,
                       validate=["onnxruntime"], strict=True)
