"""TflitePostprocessLayoutPass: the boxes-scores-classes outputs of a lowered MultiBoxDetection become the four
TFLite_Detection_PostProcess outputs (boxes as ymin, xmin, ymax, xmax; classes and count as float32), the
same detections, and the metadata names them for detection-aware validation; no lowered output is refused."""

from __future__ import annotations

import numpy as np
import pytest
from contrib_testlib import contrib_model, corner_anchors, lower, run_ort, separated_probs

from bridge.errors import UsageError
from bridge.passes.contrib import LowerMultiBoxDetectionPass
from bridge.passes.contrib.tflite_layout import OUTPUTS, TflitePostprocessLayoutPass
from bridge.validation.run import saved_detection_outputs

B, C, N, K = 2, 3, 40, 6
ATTRS = dict(clip=1, threshold=0.01, background_id=0, nms_threshold=0.5, force_suppress=0,
             variances=[0.1, 0.1, 0.2, 0.2], nms_topk=-1)


@pytest.mark.parametrize("batch", [B, "batch"])
def test_the_four_outputs_hold_the_lowered_detections(batch: int | str) -> None:
    model = contrib_model("MultiBoxDetection", {"cls_prob": [batch, C + 1, N], "loc_pred": [batch, N * 4],
                                                "anchors": [1, N, 4]}, {"detections": [batch, N, 6]}, **ATTRS)
    plain = lower(model, LowerMultiBoxDetectionPass("boxes-scores-classes", max_detections=K))
    tflite = lower(model, LowerMultiBoxDetectionPass("boxes-scores-classes", max_detections=K),
                   TflitePostprocessLayoutPass())
    assert [o.name for o in tflite.graph.output] == list(OUTPUTS)
    rng = np.random.default_rng(0)
    feeds = {"cls_prob": separated_probs(rng, B, C, N), "loc_pred": rng.normal(0, 0.1, (B, N * 4)).astype(np.float32),
             "anchors": corner_anchors(rng, N)}
    boxes, scores, classes, num = run_ort(plain, feeds)
    got = dict(zip(OUTPUTS, run_ort(tflite, feeds), strict=True))
    assert all(v.dtype == np.float32 for v in got.values())
    assert num.min() > 0
    np.testing.assert_array_equal(got["detection_boxes"], boxes[..., [1, 0, 3, 2]])
    np.testing.assert_array_equal(got["detection_scores"], scores)
    np.testing.assert_array_equal(got["detection_classes"], classes.astype(np.float32))
    np.testing.assert_array_equal(got["num_detections"], num.astype(np.float32))
    (spec,) = saved_detection_outputs(tflite)
    assert spec.box_format == "yxyx" and spec.ref_box_format == "xyxy" and spec.ref_layout == "mxnet"
    assert dict(spec.ref_outputs) == {"detections": "detections"}
    (read,) = spec.read(got)[:1]  # read back as corner boxes: the lowering's own
    np.testing.assert_array_equal(read.boxes, boxes[0, : int(num[0])])


def test_a_model_without_a_lowered_detection_output_is_refused() -> None:
    model = contrib_model("MultiBoxDetection", {"cls_prob": [B, C + 1, N], "loc_pred": [B, N * 4],
                                                "anchors": [1, N, 4]}, {"detections": [B, N, 6]}, **ATTRS)
    with pytest.raises(UsageError, match="no lowered SSD detection output"):  # the mxnet format: nothing to reorder
        lower(model, LowerMultiBoxDetectionPass("mxnet"), TflitePostprocessLayoutPass())
