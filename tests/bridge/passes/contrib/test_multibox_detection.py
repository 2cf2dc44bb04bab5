"""LowerMultiBoxDetectionPass against MXNet's MultiBoxDetection (batch 2, dynamic batch): the same valid
detections (class equal, IoU >= 0.999, score within 1e-5), the full [B, N, 6] rows, and the other output
formats agreeing with the mxnet format."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np
import pytest
from contrib_testlib import contrib_model, corner_anchors, lower, run_ort, separated_probs

from bridge.errors import NodeError, UsageError
from bridge.passes.contrib import LowerMultiBoxDetectionPass
from bridge.validation.detection.matching import compare_detections, from_indices, from_mxnet, from_padded

B, C, N = 2, 3, 60
DEFAULTS: dict[str, Any] = dict(clip=1, threshold=0.01, background_id=0, nms_threshold=0.5, force_suppress=0,
                                variances=[0.1, 0.1, 0.2, 0.2], nms_topk=-1)
CASES: list[dict[str, Any]] = [
    {},
    dict(force_suppress=1),
    dict(nms_topk=8),
    dict(nms_topk=8, force_suppress=1, threshold=0.3),
    dict(nms_threshold=0.3, threshold=0.5),
    dict(nms_threshold=0.7, clip=0, variances=[0.2, 0.2, 0.1, 0.1]),
    dict(nms_threshold=0.0),  # NMS disabled: valid rows in anchor order, unsorted
]


def _inputs(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"cls_prob": separated_probs(rng, B, C, N), "loc_pred": (rng.standard_normal((B, 4 * N)) * 0.5).astype(np.float32),
            "anchors": corner_anchors(rng, N)}


def _model(**attrs: Any) -> Any:
    a = {**DEFAULTS, **attrs}
    return contrib_model("MultiBoxDetection", {"cls_prob": ["batch", C + 1, N], "loc_pred": ["batch", 4 * N],
                                               "anchors": [1, N, 4]}, {"detections": ["batch", N, 6]}, **a)


def _mxnet(mx: ModuleType, feeds: dict[str, np.ndarray], **attrs: Any) -> np.ndarray:
    a = {**DEFAULTS, **attrs}
    a.pop("background_id")
    return mx.nd.contrib.MultiBoxDetection(*(mx.nd.array(feeds[k]) for k in ("cls_prob", "loc_pred", "anchors")),
                                           **a).asnumpy()


@pytest.mark.parametrize("attrs", CASES, ids=lambda a: ",".join(f"{k}={v}" for k, v in a.items()) or "defaults")
@pytest.mark.parametrize("seed", [0, 1])
def test_mxnet_format_matches_mxnet(mx: ModuleType, attrs: dict[str, Any], seed: int) -> None:
    feeds = _inputs(seed)
    (got,) = run_ort(lower(_model(**attrs), LowerMultiBoxDetectionPass()), feeds)
    ref = _mxnet(mx, feeds, **attrs)
    assert got.shape == ref.shape == (B, N, 6)
    cmp = compare_detections(from_mxnet(ref), from_mxnet(got), reference_name="mxnet", candidate_name="onnxruntime")
    assert cmp.passed and cmp.matched > 0, cmp.summary()
    for image in range(B):  # valid detections, row by row in MXNet's order
        rows = ref[image, :, 0] >= 0
        np.testing.assert_array_equal(got[image, rows, 0], ref[image, rows, 0])
        np.testing.assert_allclose(got[image, rows, 1:], ref[image, rows, 1:], rtol=0, atol=1e-6)
    # the whole tensor: -1 rows, suppressed rows (class -1, score and box in place), topk leftovers
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-6)


@pytest.mark.parametrize("attrs", [CASES[0], CASES[1], CASES[3], CASES[6]], ids=["default", "force", "topk", "no-nms"])
@pytest.mark.parametrize("max_det", [None, 5])
def test_other_formats_agree_with_the_mxnet_format(attrs: dict[str, Any], max_det: int | None) -> None:
    feeds = _inputs(3)
    (rows,) = run_ort(lower(_model(**attrs), LowerMultiBoxDetectionPass()), feeds)
    reference = from_mxnet(rows)
    if max_det is not None:  # the padded format keeps the best max_det per image
        reference = [type(d)(d.boxes[np.argsort(-d.scores, kind="stable")[:max_det]],
                             np.sort(d.scores)[::-1][:max_det], d.classes[np.argsort(-d.scores, kind="stable")[:max_det]])
                     for d in reference]
    padded = lower(_model(**attrs), LowerMultiBoxDetectionPass("boxes-scores-classes", max_detections=max_det))
    assert [o.name for o in padded.graph.output] == [f"detections_{s}" for s in ("boxes", "scores", "classes",
                                                                                   "num_detections")]
    boxes, scores, classes, num = run_ort(padded, feeds)
    assert boxes.shape == (B, max_det or N, 4) and classes.dtype == np.int64
    cmp = compare_detections(reference, from_padded(boxes, scores, classes, num))
    assert cmp.passed, cmp.summary()
    if max_det is None:
        indices = lower(_model(**attrs), LowerMultiBoxDetectionPass("indices"))
        selected, dec_boxes, probs = run_ort(indices, feeds)
        assert selected.shape[1] == 3 and dec_boxes.shape == (B, N, 4) and probs.shape == (B, C, N)
        cmp = compare_detections(reference, from_indices(selected, dec_boxes, probs))
        assert cmp.passed, cmp.summary()


def test_fixed_batch_and_opset_18_reduce_forms(mx: ModuleType) -> None:
    feeds = _inputs(5)
    model = contrib_model("MultiBoxDetection", {"cls_prob": [B, C + 1, N], "loc_pred": [B, 4 * N], "anchors": [1, N, 4]},
                          {"detections": [B, N, 6]}, opset=18, **DEFAULTS)
    lowered = lower(model, LowerMultiBoxDetectionPass("boxes-scores-classes", max_detections=10))
    boxes, scores, classes, num = run_ort(lowered, feeds)
    ref = [type(d)(d.boxes[:10], d.scores[:10], d.classes[:10]) for d in from_mxnet(_mxnet(mx, feeds))]
    assert compare_detections(ref, from_padded(boxes, scores, classes, num)).passed


def test_bad_arguments_and_consumed_outputs_are_refused() -> None:
    with pytest.raises(UsageError, match="unknown detection output format"):
        LowerMultiBoxDetectionPass("tf")
    with pytest.raises(UsageError, match="max_detections"):
        LowerMultiBoxDetectionPass("boxes-scores-classes", max_detections=0)
    model = _model()
    from onnx import helper

    model.graph.node.append(helper.make_node("Identity", ["detections"], ["copy"]))
    model.graph.output[0].name = "copy"
    import onnx_ir as ir

    with pytest.raises(NodeError, match="consumed by other nodes"):
        LowerMultiBoxDetectionPass("indices").call(ir.serde.deserialize_model(model))


# the deployed lowering (mxnet format, NMS on: ``build_multibox_rows``) at static batch sizes, bit for bit
ROW_CASES: list[dict[str, Any]] = [
    {},
    dict(force_suppress=1),
    dict(nms_topk=8),
    dict(nms_topk=8, force_suppress=1, clip=0),
    dict(nms_topk=100),  # >= N: every row is a candidate row
    dict(nms_topk=8, threshold=0.8),  # fewer valid anchors than K in some images
    dict(nms_topk=8, threshold=0.99),  # no valid anchor at all
    dict(nms_topk=8, threshold=-2.0),  # below -1: valid means "some class beat -1"
    dict(nms_topk=20, nms_threshold=0.3, variances=[0.1, 0.2, 0.3, 0.25]),  # per-axis variances
]


def _tied_inputs(seed: int, batch: int) -> dict[str, np.ndarray]:
    """Scores on a coarse grid (many equal per-anchor maxima and equal class maxima) and crowded anchors
    (equal-score boxes that overlap), so MXNet's stable order decides which box suppresses which."""
    rng = np.random.default_rng(seed)
    probs = np.round(rng.random((batch, C + 1, N)) * 4) / 4
    return {"cls_prob": probs.astype(np.float32),
            "loc_pred": (rng.standard_normal((batch, 4 * N)) * 0.3).astype(np.float32),
            "anchors": corner_anchors(rng, N, spread=0.3)}


@pytest.mark.parametrize("attrs", ROW_CASES, ids=lambda a: ",".join(f"{k}={v}" for k, v in a.items()) or "defaults")
@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("ties", [False, True], ids=["separated", "ties"])
def test_rows_are_mxnets_bit_for_bit(mx: ModuleType, attrs: dict[str, Any], batch: int, ties: bool) -> None:
    if ties:
        feeds = _tied_inputs(batch, batch)
    else:
        rng = np.random.default_rng(batch)
        feeds = {"cls_prob": separated_probs(rng, batch, C, N),
                 "loc_pred": (rng.standard_normal((batch, 4 * N)) * 0.5).astype(np.float32),
                 "anchors": corner_anchors(rng, N)}
    model = contrib_model("MultiBoxDetection", {"cls_prob": [batch, C + 1, N], "loc_pred": [batch, 4 * N],
                                                "anchors": [1, N, 4]}, {"detections": [batch, N, 6]},
                          **{**DEFAULTS, **attrs})
    (got,) = run_ort(lower(model, LowerMultiBoxDetectionPass()), feeds)
    ref = _mxnet(mx, feeds, **attrs)
    assert got.shape == ref.shape == (batch, N, 6)
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("nms_topk", [8, 100])
def test_rows_with_a_dynamic_anchor_count(mx: ModuleType, nms_topk: int) -> None:
    """N unknown at conversion: K = min(N, nms_topk) at run time, including N < nms_topk (no rows after K)."""
    model = contrib_model("MultiBoxDetection", {"cls_prob": ["batch", C + 1, "n"], "loc_pred": ["batch", "n4"],
                                                "anchors": [1, "n", 4]}, {"detections": ["batch", "n", 6]},
                          **{**DEFAULTS, "nms_topk": nms_topk})
    lowered = lower(model, LowerMultiBoxDetectionPass())
    for n, batch in [(60, 1), (60, 2), (200, 2)]:
        rng = np.random.default_rng(n + batch)
        feeds = {"cls_prob": separated_probs(rng, batch, C, n),
                 "loc_pred": (rng.standard_normal((batch, 4 * n)) * 0.5).astype(np.float32),
                 "anchors": corner_anchors(rng, n)}
        (got,) = run_ort(lowered, feeds)
        np.testing.assert_array_equal(got, _mxnet(mx, feeds, nms_topk=nms_topk))


@pytest.mark.parametrize("attrs", ROW_CASES, ids=lambda a: ",".join(f"{k}={v}" for k, v in a.items()) or "defaults")
@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("max_det", [None, 4, 200])
def test_padded_format_is_the_kept_mxnet_rows_in_order(mx: ModuleType, attrs: dict[str, Any], batch: int,
                                                       max_det: int | None) -> None:
    """boxes-scores-classes with NMS on (candidate-first): the rows of MXNet's output whose class is not -1, in
    MXNet's order, the first max_det of them (None: N rows), zero padded; tied scores included."""
    feeds = _tied_inputs(batch + 7, batch)
    model = contrib_model("MultiBoxDetection", {"cls_prob": [batch, C + 1, N], "loc_pred": [batch, 4 * N],
                                                "anchors": [1, N, 4]}, {"detections": [batch, N, 6]},
                          **{**DEFAULTS, **attrs})
    boxes, scores, classes, num = run_ort(lower(model, LowerMultiBoxDetectionPass("boxes-scores-classes", max_det)),
                                          feeds)
    rows = max_det if max_det is not None else N
    assert boxes.shape == (batch, rows, 4) and scores.shape == classes.shape == (batch, rows)
    ref = _mxnet(mx, feeds, **attrs)
    for image in range(batch):
        kept = ref[image][ref[image, :, 0] >= 0][:rows]
        k = len(kept)
        assert num[image] == k
        np.testing.assert_array_equal(classes[image, :k], kept[:, 0].astype(np.int64))
        np.testing.assert_array_equal(scores[image, :k], kept[:, 1])
        np.testing.assert_array_equal(boxes[image, :k], kept[:, 2:])
        assert not boxes[image, k:].any() and not scores[image, k:].any() and not classes[image, k:].any()
