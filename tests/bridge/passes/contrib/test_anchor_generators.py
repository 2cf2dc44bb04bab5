"""The anchor generators: MediaPipe's SsdAnchorsCalculator against a loop-by-loop reimplementation of its C++
(mediapipe_reference.ssd_anchors) and against the anchor counts of the detectors MediaPipe ships; MultiBoxPrior
per feature map; the YOLO grid in both orders."""

from __future__ import annotations

from typing import Any

import mediapipe_reference as mp
import numpy as np
import pytest

from bridge.errors import UsageError
from bridge.passes.contrib.anchor_generators import multibox_prior_anchors, ssd_anchors, yolo_anchors
from bridge.passes.contrib.anchors import multibox_prior

# (name, options, anchor count, per layer): the configurations of MediaPipe's graphs and TF's SSD MobileNet v1
KNOWN: list[tuple[str, dict[str, Any], int, list[int]]] = [
    ("face_detection_short_range", dict(num_layers=4, input_size=(128, 128), min_scale=0.1484375, max_scale=0.75,
                                        strides=[8, 16, 16, 16], aspect_ratios=[1.0], fixed_anchor_size=True),
     896, [512, 384]),
    ("face_detection_full_range", dict(num_layers=1, input_size=(192, 192), min_scale=0.1484375, max_scale=0.75,
                                       strides=[4], aspect_ratios=[1.0], fixed_anchor_size=True,
                                       interpolated_scale_aspect_ratio=0.0), 2304, [2304]),
    ("palm_detection", dict(num_layers=4, input_size=(192, 192), min_scale=0.1484375, max_scale=0.75,
                            strides=[8, 16, 16, 16], aspect_ratios=[1.0], fixed_anchor_size=True), 2016, [1152, 864]),
    ("pose_detection", dict(num_layers=5, input_size=(224, 224), min_scale=0.1484375, max_scale=0.75,
                            strides=[8, 16, 32, 32, 32], aspect_ratios=[1.0], fixed_anchor_size=True),
     2254, [1568, 392, 294]),
    ("ssd_mobilenet_v1", dict(num_layers=6, input_size=(300, 300), min_scale=0.2, max_scale=0.95,
                              strides=[16, 32, 64, 128, 256, 512], aspect_ratios=[1.0, 2.0, 0.5, 3.0, 0.3333],
                              reduce_boxes_in_lowest_layer=True), 1917, [1083, 600, 150, 54, 24, 6]),
]


@pytest.mark.parametrize(("name", "options", "count", "layers"), KNOWN, ids=[k[0] for k in KNOWN])
def test_ssd_anchors_match_mediapipe(name: str, options: dict[str, Any], count: int, layers: list[int]) -> None:
    got = ssd_anchors(**options)
    assert got.count == count and [n for _, n in got.layers] == layers
    want = mp.ssd_anchors(num_layers=options["num_layers"], min_scale=options["min_scale"],
                          max_scale=options["max_scale"], input_h=options["input_size"][0],
                          input_w=options["input_size"][1], strides=options["strides"],
                          aspect_ratios=options["aspect_ratios"],
                          interpolated_scale_aspect_ratio=options.get("interpolated_scale_aspect_ratio", 1.0),
                          fixed_anchor_size=options.get("fixed_anchor_size", False),
                          reduce_boxes_in_lowest_layer=options.get("reduce_boxes_in_lowest_layer", False))
    np.testing.assert_allclose(got.boxes, want, rtol=1e-6, atol=1e-7)


def test_ssd_anchors_take_feature_maps_and_offsets() -> None:
    got = ssd_anchors(num_layers=2, input_size=(64, 96), min_scale=0.2, max_scale=0.6, strides=[8, 16],
                      feature_maps=[(5, 7), (3, 3)], aspect_ratios=[1.0, 2.0], anchor_offset=(0.25, 0.75))
    assert [n for _, n in got.layers] == [5 * 7 * 3, 3 * 3 * 3]
    first = got.boxes[:3]
    np.testing.assert_allclose(first[:, :2], [[0.25 / 7, 0.75 / 5]] * 3, rtol=1e-6)
    np.testing.assert_allclose(first[:, 2:], [[0.2, 0.2], [0.2 * np.sqrt(2), 0.2 / np.sqrt(2)],
                                              [np.sqrt(0.2 * 0.6), np.sqrt(0.2 * 0.6)]], rtol=1e-6)


@pytest.mark.parametrize(("options", "message"), [
    (dict(strides=[8, 16]), "2 strides for num_layers 4"),
    (dict(aspect_ratios=[], interpolated_scale_aspect_ratio=0.0), "no anchor per cell"),
    (dict(aspect_ratios=[-1.0]), "must be positive"),
    (dict(feature_maps=[(4, 4)]), "1 feature_maps for num_layers 4"),
])
def test_ssd_anchor_options_that_cannot_work_are_usage_errors(options: dict[str, Any], message: str) -> None:
    base: dict[str, Any] = dict(num_layers=4, input_size=(128, 128), min_scale=0.15, max_scale=0.75,
                                strides=[8, 16, 16, 16], aspect_ratios=[1.0])
    with pytest.raises(UsageError, match=message):
        ssd_anchors(**{**base, **options})


def test_multibox_prior_anchors_are_mxnet_priors_as_centres() -> None:
    got = multibox_prior_anchors([(4, 5), (2, 2)], [[0.2, 0.4], [0.6]], [[1.0, 2.0], [1.0, 0.5]],
                                 [(-1.0, -1.0), (0.5, 0.5)], [(0.5, 0.5), (0.25, 0.25)], clip=False)
    assert [n for _, n in got.layers] == [4 * 5 * 3, 2 * 2 * 2]
    first = multibox_prior(4, 5, [0.2, 0.4], [1.0, 2.0], False, [-1.0, -1.0], [0.5, 0.5])[0]
    centre = (first[:, :2] + first[:, 2:]) / 2
    np.testing.assert_allclose(got.boxes[:60, :2], centre, rtol=1e-6)
    np.testing.assert_allclose(got.boxes[:60, 2:], first[:, 2:] - first[:, :2], rtol=1e-6)
    # MXNet: w = size * H / W * sqrt(ratio) / 2 (half extent), so the full width of anchor 0 is 0.2 * 4 / 5
    assert got.boxes[0, 2] == pytest.approx(0.2 * 4 / 5) and got.boxes[0, 3] == pytest.approx(0.2)
    assert got.boxes[60, :2] == pytest.approx([0.25 * 0.5, 0.25 * 0.5])  # second layer: step 0.5, offset 0.25


@pytest.mark.parametrize("order", ["cell-major", "prior-major"])
def test_yolo_anchors_are_cell_centres_with_strides(order: str) -> None:
    got = yolo_anchors(input_size=(32, 64), strides=[16, 32], priors=[[(10, 13), (16, 30)], [(33, 23)]], order=order)
    assert [n for _, n in got.layers] == [2 * 4 * 2, 1 * 2 * 1]
    assert got.strides is not None and (got.strides[:16] == 16).all() and (got.strides[16:] == 32).all()
    level = got.boxes[:16].reshape(2, 4, 2, 4) if order == "cell-major" else \
        got.boxes[:16].reshape(2, 2, 4, 4).transpose(1, 2, 0, 3)  # -> [row, column, prior, 4]
    np.testing.assert_array_equal(level[1, 3, 1], [(3 + 0.5) * 16, (1 + 0.5) * 16, 16, 30])
    np.testing.assert_array_equal(got.boxes[17], [(1 + 0.5) * 32, 16, 33, 23])
