"""Feed coverage (bridge.validation.coverage): thin feeds are measured, more image-like inputs of the same shape
are compared when the given ones exercise a detector too little, and a check thin on every input set is said in
the verdict (vacuous: --strict fails it). The bundled trained SSD's sample images (8 detections on 4 images)
are thin; the mosaics bridge makes of them are not."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import pytest
from support import REPO, mxnet_available

from bridge.config import InputSpec, Tolerance
from bridge.runtimes.base import TensorMeta
from bridge.validation.coverage import MIN_DETECTIONS, THIN, measure, more_inputs
from bridge.validation.detection.layouts import DetectionSpec
from bridge.validation.run import FeedSource, run_and_compare

SPEC = DetectionSpec("boxes-scores-labels", {"boxes": "boxes", "scores": "scores", "labels": "labels"},
                     nms_iou=0.45, score_threshold=0.05)


def _outputs(n: int, batch: int = 2) -> dict[str, np.ndarray]:
    """``n`` detections per image of a GluonCV-like output: boxes 10 apart (IoU 0), scores spread over [0.05, 1)."""
    boxes = np.stack([[[20.0 * i, 0, 20.0 * i + 10, 10] for i in range(n)]] * batch).astype(np.float32)
    scores = np.stack([np.linspace(0.99, 0.06, n)] * batch).astype(np.float32)[..., None]
    labels = np.stack([np.arange(n) % 3] * batch).astype(np.float32)[..., None]
    return {"boxes": boxes, "scores": scores, "labels": labels}


def test_few_detections_are_thin_and_untouched_thresholds_are_stated() -> None:
    few = measure(SPEC, _outputs(2), "the validation inputs")
    assert few.thin and few.detections == 4 and few.images == 2 and few.classes == 2
    assert any(f"fewer than {MIN_DETECTIONS}" in r for r in few.thin_reasons)
    assert any("NMS threshold" in r for r in few.near_reasons)  # no two boxes overlap at all: stated
    assert not any("NMS threshold" in r for r in few.thin_reasons)  # ... but not thin for that alone
    many = _outputs(30)
    many["labels"][:] = 0
    shift = 10 * (1 - 0.43) / (1 + 0.43)  # each odd box over its left one at IoU 0.43: both kept, near 0.45
    many["boxes"][:, 1::2, 0] = many["boxes"][:, 0:-1:2, 0] + shift
    many["boxes"][:, 1::2, 2] = many["boxes"][:, 1::2, 0] + 10.0
    cov = measure(SPEC, many, "the validation inputs")
    assert cov.near_iou == 30 and cov.near_score >= 3 and not cov.thin and not cov.near_reasons, cov.thin_reasons
    assert "60 detections on 2 images" in cov.text and "30 box pairs near the NMS threshold 0.45" in cov.text


def test_more_inputs_keep_shapes_and_change_only_images() -> None:
    rng = np.random.default_rng(0)
    feeds = {"data": rng.uniform(0, 1, (4, 3, 16, 16)).astype(np.float32), "im_info": np.ones((4, 3), np.float32)}
    made = more_inputs(feeds)
    assert len(made) == 4
    for _label, more in made:
        assert {k: (v.shape, v.dtype) for k, v in more.items()} == {k: (v.shape, v.dtype) for k, v in feeds.items()}
        assert not np.array_equal(more["data"], feeds["data"]) and more["im_info"] is feeds["im_info"]
    mosaic = made[0][1]["data"][0]  # top-left quarter: image 0 at half size
    assert np.allclose(mosaic[:, :8, :8], feeds["data"][0].reshape(3, 8, 2, 8, 2).mean(axis=(2, 4)))
    assert more_inputs({"tokens": np.ones((2, 7), np.int64)}) == []  # not images: nothing to make


def test_channels_last_images_get_the_same_inputs_made() -> None:
    """Keras and TFLite detectors take [B, H, W, C]: the same mosaics, blends and echoes, channels kept last."""
    rng = np.random.default_rng(0)
    nchw = rng.uniform(-1, 1, (4, 3, 16, 24)).astype(np.float32)
    nhwc = np.ascontiguousarray(nchw.transpose(0, 2, 3, 1))
    first, last = more_inputs({"images": nchw}), more_inputs({"images": nhwc})
    assert [label for label, _ in first] == [label for label, _ in last] and len(last) == 4
    for (_, a), (_, b) in zip(first, last, strict=True):
        assert b["images"].shape == nhwc.shape and b["images"].dtype == np.float32
        np.testing.assert_allclose(b["images"], a["images"].transpose(0, 2, 3, 1), atol=1e-6)  # sum order


class Detector:
    """A Runtime reporting one detection per bright 4x4 patch of its [B, 3, H, W] input (boxes in pixels)."""

    name = "toy"

    def activate(self) -> None: ...

    def deactivate(self) -> None: ...

    def input_metadata(self) -> Sequence[TensorMeta]:
        return [TensorMeta("data", (4, 3, 32, 32), "float32")]

    def infer(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        x = np.asarray(feeds["data"]).mean(axis=1)
        b, h, w = x.shape
        cells = x.reshape(b, h // 4, 4, w // 4, 4).mean(axis=(2, 4))
        k = 40
        boxes, scores, labels = np.zeros((b, k, 4), np.float32), np.zeros((b, k, 1), np.float32), -np.ones((b, k, 1), np.float32)
        for i in range(b):
            ys, xs = np.nonzero(cells[i] > 0.3)
            for j, (y, xx) in enumerate(list(zip(ys, xs, strict=True))[:k]):
                boxes[i, j] = [4 * xx, 4 * y, 4 * xx + 4, 4 * y + 4]
                scores[i, j] = cells[i, y, xx]
                labels[i, j] = 0
        return {"boxes": boxes, "scores": scores, "labels": labels}


def _feeds(tmp: Path, patches: int) -> Path:
    data = np.zeros((4, 3, 32, 32), np.float32)
    for i in range(4):
        for p in range(patches):
            data[i, :, 4 * p:4 * p + 4, 4 * i:4 * i + 4] = 0.9
    np.savez(tmp / "feeds.npz", data=data)
    return tmp / "feeds.npz"


@pytest.mark.parametrize("patches", [1, 8])
def test_thin_feeds_get_more_inputs_and_a_check_thin_on_all_is_said(patches: int, tmp_path: Path) -> None:
    """One bright patch per image (4 detections): thin, so mosaics, blends and echoes are compared too - and they
    do not reach 20 detections either: the verdict passes, marked vacuous with the measurement. Eight patches
    per image (32 detections) are not thin: no such input is added. No score threshold is read from the toy, so
    both also get the two sets bracketing where the source's detections start (``boundary_inputs``)."""
    spec = DetectionSpec("boxes-scores-labels", {"boxes": "boxes", "scores": "scores", "labels": "labels"})
    feeds = FeedSource(_feeds(tmp_path, patches), [InputSpec("data", (4, 3, 32, 32))])
    run = run_and_compare(Detector(), {"toy": Detector()}, feeds, Tolerance(), detections=[spec])
    (comp,) = run.comparisons
    assert comp.passed and comp.coverage
    boundary = [c["inputs"] for c in comp.coverage if "contrast searched" in c["inputs"]]
    assert len(boundary) == 2
    if patches == 1:
        assert len(run.extra_inputs) == 6 and len(comp.sizes) == 7 and "on 7 input sets" in comp.summary()
        assert comp.vacuous and any(THIN in r for r in comp.vacuous_reasons)
        assert all(c["thin"] for c in comp.coverage)
    else:
        assert len(run.extra_inputs) == 2 and len(comp.sizes) == 3 and not comp.vacuous
        assert comp.coverage[0]["detections"] == 32


def test_a_candidate_wrong_only_on_the_added_inputs_fails(tmp_path: Path) -> None:
    """The candidate agrees on the thin given inputs and drops detections on crowded ones: it fails there."""

    class Dropping(Detector):
        def infer(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
            out = super().infer(feeds)
            if (out["labels"][:, :, 0] >= 0).sum(axis=1).max() > 1:  # more than one per image: keep the first
                out["labels"][:, 1:] = -1
            return out

    spec = DetectionSpec("boxes-scores-labels", {"boxes": "boxes", "scores": "scores", "labels": "labels"})
    feeds = FeedSource(_feeds(tmp_path, 1), [InputSpec("data", (4, 3, 32, 32))])
    run = run_and_compare(Detector(), {"toy": Dropping()}, feeds, Tolerance(), detections=[spec])
    (comp,) = run.comparisons
    note = comp.outputs[0].note
    assert not comp.passed and any(f"at {kind}" in note for kind in ("2x2 mosaics", "blends", "each validation image"))


@pytest.mark.skipif(not mxnet_available(), reason="MXNet is not installed (pip install 'bridge[mxnet]')")
def test_the_bundled_ssd_sample_images_are_thin_and_bridge_adds_mosaics(tmp_path: Path) -> None:
    from bridge import api

    ssd = REPO / "examples" / "mxnet_ssd"
    result = api.convert(ssd / "model-symbol.json", tmp_path / "out.onnx", inputs=["data:4,3,64,64"],
                         feeds=ssd / "sample_inputs.npz")
    (comp,) = result.validation
    first = comp.coverage[0]
    assert first["inputs"] == "the validation inputs" and first["detections"] == 8 and first["thin"]
    assert first["nms_iou"] == pytest.approx(0.45, abs=1e-6) and first["score_threshold"] == pytest.approx(0.01)
    assert len(comp.coverage) == 5 and not all(c["thin"] for c in comp.coverage)  # the mosaics were not thin
    assert result.passed and not comp.vacuous


def test_flat_boxes_are_thin_and_low_contrast_copies_are_made() -> None:
    """A saturated decode clips most boxes flat (2e-7 wide): a moved box changes nothing there, so the check is
    thin, and the inputs made include each image at a tenth of its contrast (weaker activations)."""
    rng = np.random.default_rng(0)
    boxes = rng.uniform(0, 0.5, (1, 40, 4)).astype(np.float32)
    boxes[..., 2:] += boxes[..., :2] + 0.1
    rows = np.concatenate([np.zeros((1, 40, 1)), np.full((1, 40, 1), 0.9), boxes], axis=2).astype(np.float32)
    spec = DetectionSpec("mxnet", {"detections": "d"})
    assert not any("flat" in r for r in measure(spec, {"d": rows}, "x").thin_reasons)
    rows[0, :30, 4] = rows[0, :30, 2] + 2.4e-7  # 30 of 40 flat
    cov = measure(spec, {"d": rows}, "x")
    assert cov.flat == 30 and any("30 of 40 boxes flat" in r for r in cov.thin_reasons) and "30 flat boxes" in cov.text
    x = rng.uniform(-120, 150, (2, 3, 16, 16)).astype(np.float32)
    label, dim = more_inputs({"data": x})[-1]
    assert "contrast" in label
    mean = x.mean(axis=(1, 2, 3), keepdims=True)
    np.testing.assert_allclose(dim["data"] - mean, 0.1 * (x - mean), atol=1e-4)


def _toy_detector(threshold: float) -> Callable[[Mapping[str, np.ndarray]], dict[str, np.ndarray]]:
    """One candidate box per image scoring sigmoid(8 * (contrast - 0.5)) (the image's spread, a smooth score), kept
    when over ``threshold`` (boxes-scores-labels, one row per image: a dropped one has score 0, label -1)."""
    def infer(feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        x = np.asarray(feeds["data"], np.float64)
        spread = x.std(axis=(1, 2, 3)) / 0.25
        score = 1 / (1 + np.exp(-8 * (spread - 0.5)))
        kept = score > threshold
        return {"boxes": np.tile(np.float32([[[0, 0, 10, 10]]]), (len(x), 1, 1)),
                "scores": np.where(kept, score, 0).astype(np.float32)[:, None, None],
                "labels": np.where(kept, 0, -1).astype(np.float32)[:, None, None]}
    return infer


def test_the_boundary_inputs_bracket_the_sources_score_threshold() -> None:
    """The contrast where each image's detection starts is searched on the source: the set above it keeps the
    detection scoring just over the threshold (a candidate with a higher one drops it), the set below keeps
    nothing (a candidate with a lower one keeps it); the source's threshold is never read."""
    from bridge.validation.coverage import SCORE_MARGIN, boundary_inputs

    rng = np.random.default_rng(0)
    feeds = {"data": (0.5 + rng.uniform(-0.5, 0.5, (3, 3, 16, 16))).astype(np.float32)}
    source = _toy_detector(0.5)
    spec = DetectionSpec("boxes-scores-labels", {"boxes": "boxes", "scores": "scores", "labels": "labels"},
                         score_threshold=0.5)
    found = boundary_inputs(source, feeds, source(feeds), [spec], lambda _m: None)
    assert ["just above" in found[0][0], "just below" in found[1][0]] == [True, True]
    (_, above, above_out), (_, below, below_out) = found
    scores = _toy_detector(-1.0)  # every image's score, kept or not
    up, down = scores(above)["scores"].ravel(), scores(below)["scores"].ravel()
    assert np.all((up > 0.5) & (up < 0.5 + 4 * SCORE_MARGIN)), up
    assert np.all((down < 0.5) & (down > 0.5 - 4 * SCORE_MARGIN)), down
    assert np.all(above_out["scores"] > 0) and np.all(below_out["scores"] == 0)
    for moved in (0.51, 0.49):  # a threshold moved by 0.01 either way changes what one of the sets keeps
        other = _toy_detector(moved)
        assert not np.array_equal(other(above)["scores"], above_out["scores"]) or \
            not np.array_equal(other(below)["scores"], below_out["scores"])


def test_no_boundary_without_a_detection_to_bracket() -> None:
    from bridge.validation.coverage import boundary_inputs

    feeds = {"data": np.full((2, 3, 16, 16), 0.5, np.float32)}  # flat images: no detection at any contrast
    spec = DetectionSpec("boxes-scores-labels", {"boxes": "boxes", "scores": "scores", "labels": "labels"})
    source = _toy_detector(0.5)
    assert boundary_inputs(source, feeds, source(feeds), [spec], lambda _m: None) == []
