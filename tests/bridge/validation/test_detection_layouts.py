"""DetectionSpec: every detector layout read from numpy outputs and compared order-insensitively through
compare_outputs; the --detections spec language; JSON (new and old metadata form)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bridge.config import Tolerance
from bridge.errors import UsageError
from bridge.validation.compare import compare_outputs
from bridge.validation.detection.layouts import (
    DetectionSpec,
    as_detection_specs,
    dump_detection_specs,
    load_detection_specs,
)

# two images; image 0 has three detections, image 1 two; boxes xyxy, distinct scores
IMAGES = [
    (np.array([[0.0, 0, 10, 10], [20, 20, 30, 30], [40, 0, 50, 10]]), np.array([0.9, 0.8, 0.7]), np.array([1, 2, 1])),
    (np.array([[5.0, 5, 15, 15], [30, 30, 45, 45]]), np.array([0.95, 0.6]), np.array([3, 1])),
]


def _perm(k: int) -> np.ndarray:
    return np.roll(np.arange(k), 1)  # a different row order on the candidate side


def _layout_outputs(layout: str, reorder: bool, score_shift: float = 0.0) -> tuple[DetectionSpec, dict[str, np.ndarray]]:
    """The same detections in ``layout``, rows optionally reordered, scores optionally shifted."""
    imgs = []
    for boxes, scores, labels in IMAGES:
        order = _perm(len(scores)) if reorder else np.arange(len(scores))
        imgs.append((boxes[order], scores[order] + score_shift, labels[order]))
    if layout == "torchvision":  # one image: boxes [K, 4], scores [K], labels [K] int64, masks [K, 1, 4, 4]
        b, s, lab = imgs[0]
        masks = np.stack([np.full((1, 4, 4), v, np.float32) for v in b[:, 0]])  # each mask tells its detection apart
        out = {"boxes": b.astype(np.float32), "scores": s.astype(np.float32), "labels": lab.astype(np.int64),
               "masks": masks}
        return DetectionSpec.parse("boxes=boxes,scores=scores,labels=labels,masks=masks"), out
    if layout == "batch-index":  # flat: boxes [K, 4] with a batch index column of its own
        out = {"boxes": np.concatenate([i[0] for i in imgs]).astype(np.float32),
               "scores": np.concatenate([i[1] for i in imgs]).astype(np.float32),
               "labels": np.concatenate([i[2] for i in imgs]).astype(np.int64),
               "batch": np.concatenate([np.full(len(i[1]), k) for k, i in enumerate(imgs)]).astype(np.int64)}
        return DetectionSpec.parse("boxes=boxes,scores=scores,labels=labels,batch_index=batch"), out
    if layout == "tf-combined":  # padded [B, K, 4] yxyx, [B, K], float classes [B, K], num [B] int32
        k = 4
        boxes = np.zeros((2, k, 4), np.float32)
        scores, classes = np.zeros((2, k), np.float32), np.zeros((2, k), np.float32)
        for n, (b, s, lab) in enumerate(imgs):
            boxes[n, :len(s)] = b[:, [1, 0, 3, 2]]
            scores[n, :len(s)], classes[n, :len(s)] = s, lab
        out = {"nmsed_boxes": boxes, "nmsed_scores": scores, "nmsed_classes": classes,
               "valid_detections": np.array([3, 2], np.int32)}
        return DetectionSpec.parse("boxes=nmsed_boxes,scores=nmsed_scores,classes=nmsed_classes,"
                                   "num=valid_detections,box_format=yxyx"), out
    if layout == "yolo":  # [N, 7] batch_index, x1, y1, x2, y2, score, class
        rows = [np.c_[np.full(len(s), n), b, s, lab] for n, (b, s, lab) in enumerate(imgs)]
        all_rows = np.concatenate(rows).astype(np.float32)
        return DetectionSpec.parse("detections=output0,layout=yolo"), {"output0": all_rows[::-1] if reorder else all_rows}
    if layout == "gluoncv":  # ids [B, N, 1] (-1 padding), scores [B, N, 1], bboxes [B, N, 4]
        n = 5
        ids, scores, bboxes = np.full((2, n, 1), -1, np.float32), np.full((2, n, 1), -1, np.float32), \
            np.full((2, n, 4), -1, np.float32)
        for m, (b, s, lab) in enumerate(imgs):
            ids[m, :len(s), 0], scores[m, :len(s), 0], bboxes[m, :len(s)] = lab, s, b
        return (DetectionSpec.parse("ids=ids,scores=scores,bboxes=bboxes,layout=gluoncv"),
                {"ids": ids, "scores": scores, "bboxes": bboxes})
    if layout == "mxnet":  # [B, N, 6] class, score, box; class -1 padding
        mx = np.full((2, 4, 6), -1, np.float32)
        for m, (b, s, lab) in enumerate(imgs):
            mx[m, :len(s)] = np.c_[lab, s, b]
        return DetectionSpec.parse("detections=dets,layout=mxnet"), {"dets": mx}
    raise AssertionError(layout)


LAYOUT_CASES = ["torchvision", "batch-index", "tf-combined", "yolo", "gluoncv", "mxnet"]


@pytest.mark.parametrize("layout", LAYOUT_CASES)
def test_reordered_rows_pass_in_every_layout(layout: str) -> None:
    spec, ref = _layout_outputs(layout, reorder=False)
    _, cand = _layout_outputs(layout, reorder=True, score_shift=3e-5)  # fasterrcnn: row order + 3e-5
    comp = compare_outputs(ref, cand, detection_outputs=[spec])
    assert comp.passed, comp.outputs
    assert len(comp.outputs) == 1  # the group stands for all of its outputs (masks included)
    o = comp.outputs[0]
    assert o.note.startswith(f"detection-aware ({spec.layout})") and " 0 only in reference" in o.note
    assert o.detection is not None and o.detection["matched"] == (3 if layout == "torchvision" else 5)
    assert set(o.covers) == set(spec.candidate_names())


@pytest.mark.parametrize("layout", LAYOUT_CASES)
def test_a_real_score_difference_fails_in_every_layout(layout: str) -> None:
    spec, ref = _layout_outputs(layout, reorder=False)
    _, cand = _layout_outputs(layout, reorder=True, score_shift=0.01)
    comp = compare_outputs(ref, cand, Tolerance(atol=1e-4, rtol=0), detection_outputs=[spec])
    assert not comp.passed and comp.outputs[0].max_abs == pytest.approx(0.01, rel=1e-3)


def test_masks_are_compared_between_matched_detections() -> None:
    spec, ref = _layout_outputs("torchvision", reorder=False)
    _, cand = _layout_outputs("torchvision", reorder=True)
    assert compare_outputs(ref, cand, detection_outputs=[spec]).passed  # masks travel with their rows
    cand["masks"] = cand["masks"].copy()
    cand["masks"][0, 0, 2, 2] += 0.5
    comp = compare_outputs(ref, cand, detection_outputs=[spec])
    assert not comp.passed and comp.outputs[0].detection is not None
    assert comp.outputs[0].detection["max_mask_diff"] == pytest.approx(0.5) and "mask" in comp.outputs[0].note


def test_elementwise_comparison_of_reordered_detections_fails() -> None:
    """Why the layouts exist: compared elementwise, the same detections in another order fail."""
    _, ref = _layout_outputs("torchvision", reorder=False)
    _, cand = _layout_outputs("torchvision", reorder=True)
    assert not compare_outputs(ref, cand).passed


def test_indices_layout_and_the_legacy_mapping() -> None:
    """The lowered MultiBoxDetection: reference in MXNet rows, candidate in indices format (old metadata)."""
    boxes, scores, labels = IMAGES[0]
    rows = np.full((1, 4, 6), -1, np.float32)
    rows[0, :3] = np.c_[labels, scores, boxes]
    probs = np.zeros((1, 4, 3), np.float32)
    probs[0, labels, np.arange(3)] = scores
    cand = {"det_selected_indices": np.array([[0, 2, 1], [0, 1, 0], [0, 1, 2]]), "det_boxes": boxes[None],
            "det_scores": probs}
    legacy = {"det": "indices"}
    comp = compare_outputs({"det": rows}, cand, detection_outputs=legacy)
    assert comp.passed and [o.name for o in comp.outputs] == ["det"]
    assert comp.outputs[0].note.startswith("detection-aware (indices)")
    specs = load_detection_specs(json.dumps(legacy))
    assert compare_outputs({"det": rows}, cand, detection_outputs=specs).passed


def test_empty_detections_on_both_sides_are_vacuous() -> None:
    spec = DetectionSpec.parse("boxes=b,scores=s,labels=l")
    empty: dict[str, np.ndarray] = {"b": np.zeros((0, 4), np.float32), "s": np.zeros(0, np.float32),
                                    "l": np.zeros(0, np.int64)}
    comp = compare_outputs(empty, dict(empty), detection_outputs=[spec])
    assert comp.passed and comp.vacuous and "no detections" in comp.vacuous_reasons[0]
    assert " 0 matched, 0 only in reference, 0 only in candidate" in comp.outputs[0].note


@pytest.mark.parametrize(("cand_change", "fragment"), [
    ({"s": None}, "missing"),
    ({"b": np.zeros((3, 5), np.float32)}, "do not fit"),
])
def test_unreadable_groups_fail_with_a_note(cand_change: dict[str, np.ndarray | None], fragment: str) -> None:
    spec = DetectionSpec.parse("boxes=b,scores=s,labels=l")
    ref: dict[str, np.ndarray] = {"b": np.zeros((3, 4), np.float32), "s": np.ones(3, np.float32),
                                  "l": np.zeros(3, np.int64)}
    cand: dict[str, np.ndarray] = {k: v for k, v in {**ref, **cand_change}.items() if v is not None}
    comp = compare_outputs(ref, cand, detection_outputs=[spec])
    assert not comp.passed and fragment in comp.outputs[0].note


def test_scores_use_the_per_output_tolerance_of_the_group() -> None:
    spec, ref = _layout_outputs("torchvision", reorder=False)
    _, cand = _layout_outputs("torchvision", reorder=True, score_shift=0.01)
    assert not compare_outputs(ref, cand, detection_outputs=[spec]).passed
    loose = Tolerance(per_output={"scores": (0.02, 0.0)})
    assert compare_outputs(ref, cand, loose, detection_outputs=[spec]).passed


@pytest.mark.parametrize(("text", "layout", "roles"), [
    ("boxes=B,scores=S,labels=L", "boxes-scores-labels", {"boxes": "B", "scores": "S", "labels": "L"}),
    ("boxes=B,scores=S,labels=L,batch_index=I", "boxes-scores-labels",
     {"boxes": "B", "scores": "S", "labels": "L", "batch_index": "I"}),
    ("boxes=B, scores=S, classes=C, num=N", "boxes-scores-classes", {"boxes": "B", "scores": "S", "labels": "C", "num": "N"}),
    ("selected_indices=K,boxes=B,scores=S", "indices", {"selected_indices": "K", "boxes": "B", "scores": "S"}),
    ("detections=onnx::Concat_7,layout=yolo", "yolo", {"detections": "onnx::Concat_7"}),
    ("ids=i,scores=s,bboxes=b,layout=gluoncv", "boxes-scores-labels", {"labels": "i", "scores": "s", "boxes": "b"}),
])
def test_spec_parses(text: str, layout: str, roles: dict[str, str]) -> None:
    spec = DetectionSpec.parse(text)
    assert spec.layout == layout and dict(spec.outputs) == roles and spec.ref_outputs == spec.outputs


@pytest.mark.parametrize(("text", "fragment"), [
    ("", "ROLE=OUTPUT"),
    ("boxes", "ROLE=OUTPUT"),
    ("boxes=", "ROLE=OUTPUT"),
    ("boxes=B,scores=S,colour=C", "unknown role 'colour'"),
    ("boxes=B,boxes=C,scores=S", "given twice"),
    ("boxes=B", "needs scores"),
    ("detections=D", "layout=mxnet"),
    ("boxes=B,scores=S,layout=retina", "unknown detection layout"),
    ("boxes=B,scores=S,labels=L,num=N,batch_index=I", "has no role batch_index"),
    ("boxes=B,scores=B", "two roles"),
    ("boxes=B,scores=S,box_format=polar", "box_format"),
])
def test_bad_specs_are_usage_errors(text: str, fragment: str) -> None:
    with pytest.raises(UsageError, match=fragment) as info:
        DetectionSpec.parse(text)
    assert info.value.exit_code == 2 and "--detections" in str(info.value)


def test_json_round_trip_and_old_form() -> None:
    specs = [DetectionSpec.parse("boxes=B,scores=S,labels=L,box_format=yxyx"),
             DetectionSpec.from_legacy("det", "boxes-scores-classes")]
    text = dump_detection_specs(specs)
    assert isinstance(json.loads(text), list)
    assert load_detection_specs(text) == specs
    assert DetectionSpec.from_json(specs[1].to_json()) == specs[1]
    old = load_detection_specs('{"det": "boxes-scores-classes"}')
    assert old == [specs[1]]
    assert old[0].ref_layout == "mxnet" and old[0].reference_names() == ["det"]
    assert old[0].candidate_names() == ["det_boxes", "det_scores", "det_classes", "det_num_detections"]
    assert load_detection_specs(None) == [] and as_detection_specs(None) == []
    with pytest.raises(UsageError):
        load_detection_specs("{not json")
    with pytest.raises(UsageError):
        load_detection_specs('{"det": "polygons"}')


def test_candidate_shaped_unlike_the_reference_is_not_blamed_on_the_layout() -> None:
    """One mask for 21 boxes (a broken Loop) on the candidate side: the outputs differ, the layout is fine."""
    from bridge.validation.compare import compare_outputs
    from bridge.validation.detection.layouts import DetectionSpec

    rng = np.random.default_rng(0)
    boxes = np.sort(rng.random((21, 4), dtype=np.float32), axis=1)
    reference = {"boxes": boxes, "scores": rng.random(21, dtype=np.float32),
                 "labels": np.arange(21, dtype=np.int64) % 3, "masks": rng.random((21, 1, 8, 8), dtype=np.float32)}
    candidate = dict(reference, masks=reference["masks"][:1])
    spec = DetectionSpec("boxes-scores-labels", {"boxes": "boxes", "scores": "scores", "labels": "labels",
                                                 "masks": "masks"})
    item = compare_outputs(reference, candidate, detection_outputs=[spec]).outputs[0]
    assert not item.passed
    assert "masks [1, 1, 8, 8] vs [21, 1, 8, 8]" in item.note and "computes something else" in item.note
    assert "do not fit the boxes-scores-labels layout" not in item.note


@pytest.mark.parametrize("layout", LAYOUT_CASES)
def test_a_group_line_shows_the_shape_of_the_output_it_is_named_after(layout: str) -> None:
    # GluonCV lists ids and scores ([B, N, 1]) before the boxes the line is named after: the line showed [2, 5, 1]
    spec, ref = _layout_outputs(layout, reorder=False)
    [o] = compare_outputs(ref, ref, detection_outputs=[spec]).outputs
    assert o.name == spec.label
    assert o.cand_shape == o.ref_shape == list(ref[spec.label].shape)
