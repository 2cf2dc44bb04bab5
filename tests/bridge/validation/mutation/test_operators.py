"""The mutation operators themselves, on small graphs built here: each finds its sites generically (by op, by what
feeds a NonMaxSuppression), says why when it finds none, and makes the edit it claims - checked by running the
mutant in onnxruntime and reading its detections as validation does, in every detection layout."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np
import onnx
import pytest
from mutation_graph import Editor
from mutation_judge import equivalence, run_onnx
from mutation_operators import OPERATORS, Base, NoSite, mutants
from mutation_rows import MOVE, Rows
from onnx import TensorProto, helper, numpy_helper
from support import make_model

from bridge.validation.detection.layouts import DetectionSpec
from bridge.validation.detection.matching import Detections

N = 6


# -- a tiny detector: anchors + deltas * 0.1 -> NMS -> per-image boxes / scores / labels ------------------------

ANCHORS = np.array([[0.1, 0.1, 0.3, 0.3], [0.12, 0.1, 0.32, 0.3], [0.5, 0.5, 0.8, 0.8], [0.52, 0.5, 0.82, 0.8],
                    [0.1, 0.6, 0.3, 0.9], [0.6, 0.1, 0.9, 0.3]], np.float32)[None]


def tiny_detector() -> onnx.ModelProto:
    nodes = [helper.make_node("Mul", ["deltas", "variance"], ["scaled"], name="decode_scale"),
             helper.make_node("Add", ["anchors", "scaled"], ["decoded"], name="decode"),
             helper.make_node("Sigmoid", ["logits"], ["probs"], name="sigmoid"),
             helper.make_node("NonMaxSuppression", ["decoded", "probs", "max_out", "iou", "score_thr"], ["selected"],
                              name="nms"),
             helper.make_node("Gather", ["selected", "col2"], ["box_idx"], name="box_idx", axis=1),
             helper.make_node("Gather", ["selected", "col1"], ["labels"], name="class_idx", axis=1),
             helper.make_node("Squeeze", ["decoded", "axis0"], ["decoded2d"], name="squeeze"),
             helper.make_node("Gather", ["decoded2d", "box_idx"], ["boxes"], name="gather_boxes", axis=0),
             helper.make_node("Squeeze", ["probs", "axis0"], ["probs2d"], name="squeeze_probs"),
             helper.make_node("Squeeze", ["probs2d", "axis0"], ["probs1d"], name="squeeze_probs1"),
             helper.make_node("Gather", ["probs1d", "box_idx"], ["scores"], name="gather_scores", axis=0)]
    inits = [numpy_helper.from_array(ANCHORS, "anchors"), numpy_helper.from_array(np.float32(0.1), "variance"),
             numpy_helper.from_array(np.array([10], np.int64), "max_out"),
             numpy_helper.from_array(np.array([0.5], np.float32), "iou"),
             numpy_helper.from_array(np.array([0.2], np.float32), "score_thr"),
             numpy_helper.from_array(np.array(2, np.int64), "col2"), numpy_helper.from_array(np.array(1, np.int64), "col1"),
             numpy_helper.from_array(np.array([0], np.int64), "axis0")]
    return make_model(nodes, [helper.make_tensor_value_info("deltas", TensorProto.FLOAT, [1, N, 4]),
                              helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 1, N])],
                      [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, ["K", 4]),
                       helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["K"]),
                       helper.make_tensor_value_info("labels", TensorProto.INT64, ["K"])], opset=17, initializers=inits)


def detector_inputs(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"deltas": rng.normal(0, 0.05, (1, N, 4)).astype(np.float32),
            "logits": rng.normal(0, 2, (1, 1, N)).astype(np.float32)}


TV_SPEC = DetectionSpec("boxes-scores-labels", {"boxes": "boxes", "scores": "scores", "labels": "labels"})


def detector_base() -> Base:
    probe = [detector_inputs(s) for s in range(4)]
    return Base("tiny_detector", tiny_detector(), [TV_SPEC], detector_inputs(9), probe, run_onnx)


def classifier_base() -> Base:
    w = numpy_helper.from_array(np.random.default_rng(0).normal(0, 1, (4, 3, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Softmax", ["r"], ["y"], name="softmax", axis=1)]
    model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 4, 4])], opset=17, initializers=[w])
    feeds = {"x": np.random.default_rng(1).normal(0, 1, (1, 3, 4, 4)).astype(np.float32)}
    return Base("classifier", model, [], feeds, [feeds], run_onnx)


def test_sites_are_found_by_what_feeds_the_nms_not_by_names() -> None:
    base = detector_base()
    [anchor_all, _] = mutants(base, "anchor_scale")
    assert "anchors" in anchor_all.site and "x1.0005" in anchor_all.site
    scaled = numpy_helper.to_array(next(i for i in anchor_all.model.graph.initializer if i.name == "anchors"))
    np.testing.assert_allclose(scaled, ANCHORS * 1.0005, rtol=1e-6)
    [variance] = mutants(base, "decode_variance")  # 0.1 is read by the Mul on the way to the boxes
    assert "0.1" in variance.site
    iou = mutants(base, "nms_iou")
    assert [m.site.split("-> ")[1] for m in iou] == ["0.51", "0.35"]
    assert len(mutants(base, "score_threshold")) == 1  # the NMS's own 0.2


def test_an_operator_without_a_site_says_why() -> None:
    base = classifier_base()
    for op, reason in [("anchor_scale", "no NonMaxSuppression and no detection group"), ("nms_iou", "NonMaxSuppression"),
                       ("resize_mode", "no Resize"), ("rows", "no detection group"), ("topk", "no TopK")]:
        with pytest.raises(NoSite, match=reason):
            mutants(base, op)
    assert mutants(base, "softmax_axis")[0].site.endswith("axis 1 -> 2")
    assert mutants(base, "relu_leaky")


@pytest.mark.parametrize("op", sorted(OPERATORS))
def test_every_operator_makes_valid_models_or_says_why(op: str) -> None:
    for base in (detector_base(), classifier_base()):
        try:
            made = mutants(base, op)
        except NoSite as exc:
            assert str(exc)
            continue
        for m in made:
            onnx.checker.check_model(m.model)
            assert m.model is not base.model
            run_onnx(m.model, base.probe[:1])  # it runs


def test_anchor_shift_picks_an_element_that_shows_on_the_probe() -> None:
    base = detector_base()
    one = [m for m in mutants(base, "anchor_shift") if "element" in m.site]
    assert one
    eq = equivalence(run_onnx(base.model, base.probe), one[0].model, base.probe, base.specs)
    assert not eq.equivalent, eq.why


def test_constant_outputs_ignore_the_input() -> None:
    base = detector_base()
    [m] = mutants(base, "constant_outputs")
    assert not [n for n in m.model.graph.node if n.op_type != "Constant"]
    a, b = run_onnx(m.model, [detector_inputs(1), detector_inputs(2)])
    assert all(np.array_equal(a[k], b[k]) for k in a)
    [sample] = run_onnx(base.model, [base.feeds])
    assert all(np.array_equal(a[k], sample[k]) for k in a)


def test_equivalence_is_decided_by_running() -> None:
    base = detector_base()
    inputs = [detector_inputs(s) for s in range(6)]
    outputs = run_onnx(base.model, inputs)
    assert equivalence(outputs, Editor(base.model).finish(), inputs, base.specs).equivalent

    def reorder(ed: Editor) -> None:  # the same detections in reverse row order: detection-identical
        rows = Rows(ed, TV_SPEC)
        rev = {}
        for role, name in rows.src.items():  # Slice with step -1 (onnxruntime 1.31's full optimisation empties a
            # Gather of Range(n - 1, -1, -1))
            rev[role] = ed.op("Slice", name, ed.const(np.asarray([-1], np.int64)), ed.const(np.asarray([-2**62], np.int64)),
                              ed.const(np.asarray([0], np.int64)), ed.const(np.asarray([-1], np.int64)))
        rows.out.update(rev)
        rows.close()

    ed = Editor(base.model)
    reorder(ed)
    assert equivalence(outputs, ed.finish(), inputs, base.specs).equivalent
    [moved] = [m for m in mutants(base, "rows") if "top-ranked box moved" in m.site]
    eq = equivalence(outputs, moved.model, inputs, base.specs)
    assert not eq.equivalent and "delta" in eq.why


# -- row edits in every layout, on identity models fed crafted detections -------------------------------------

def _identity(arrays: dict[str, np.ndarray], spec_roles: dict[str, str]) -> onnx.ModelProto:
    """Outputs named after the roles, each the Identity of an input ``<name>_in``."""
    elem = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int64): TensorProto.INT64,
            np.dtype(np.int32): TensorProto.INT32}
    nodes, ins, outs = [], [], []
    for name, value in arrays.items():
        nodes.append(helper.make_node("Identity", [f"{name}_in"], [name], name=f"id_{name}"))
        ins.append(helper.make_tensor_value_info(f"{name}_in", elem[value.dtype], list(value.shape)))
        outs.append(helper.make_tensor_value_info(name, elem[value.dtype], [None] * value.ndim))
    return make_model(nodes, ins, outs, opset=17)


def _case_mxnet() -> tuple[DetectionSpec, dict[str, np.ndarray]]:
    d = np.full((2, 5, 6), -1, np.float32)
    d[0, :4] = [[0, 0.9, 0.1, 0.1, 0.3, 0.4], [1, 0.5, 0.5, 0.5, 0.9, 0.7], [-1, 0.95, 0, 0, 1, 1],
                [2, 0.7, 0.2, 0.6, 0.3, 0.9]]
    d[1, 0] = [1, 0.6, 0.4, 0.4, 0.6, 0.6]
    return DetectionSpec("mxnet", {"detections": "det"}), {"det": d}


def _case_yolo() -> tuple[DetectionSpec, dict[str, np.ndarray]]:
    rows = np.array([[0, 0.1, 0.1, 0.3, 0.4, 0.9, 0], [1, 0.4, 0.4, 0.6, 0.6, 0.6, 1], [0, 0.5, 0.5, 0.9, 0.7, 0.5, 1],
                     [0, 0.2, 0.6, 0.3, 0.9, 0.7, 2], [1, 0.1, 0.1, 0.2, 0.2, 0.3, 2]], np.float32)
    return DetectionSpec("yolo", {"detections": "rows"}), {"rows": rows}


def _case_padded() -> tuple[DetectionSpec, dict[str, np.ndarray]]:
    boxes = np.zeros((2, 4, 4), np.float32)
    boxes[0, :3] = [[0.1, 0.1, 0.3, 0.4], [0.5, 0.5, 0.9, 0.7], [0.2, 0.6, 0.3, 0.9]]
    boxes[1, :1] = [[0.4, 0.4, 0.6, 0.6]]
    scores = np.array([[0.9, 0.7, 0.5, 0], [0.6, 0, 0, 0]], np.float32)
    labels = np.array([[0, 2, 1, 0], [1, 0, 0, 0]], np.float32)
    return (DetectionSpec("boxes-scores-classes", {"boxes": "b", "scores": "s", "labels": "l", "num": "n"}),
            {"b": boxes, "s": scores, "l": labels, "n": np.array([3, 1], np.int32)})


def _case_gluoncv() -> tuple[DetectionSpec, dict[str, np.ndarray]]:
    ids = np.array([[[0], [2], [1], [-1], [-1]]], np.float32)
    scores = np.array([[[0.9], [0.7], [0.5], [-1], [-1]]], np.float32)
    boxes = np.array([[[0.1, 0.1, 0.3, 0.4], [0.2, 0.6, 0.3, 0.9], [0.5, 0.5, 0.9, 0.7], [-1] * 4, [-1] * 4]], np.float32)
    return (DetectionSpec("boxes-scores-labels", {"labels": "ids", "scores": "sc", "boxes": "bb"}),
            {"ids": ids, "sc": scores, "bb": boxes})


def _case_torchvision() -> tuple[DetectionSpec, dict[str, np.ndarray]]:
    return (TV_SPEC, {"boxes": np.array([[0.5, 0.5, 0.9, 0.7], [0.1, 0.1, 0.3, 0.4], [0.2, 0.6, 0.3, 0.9]], np.float32),
                      "scores": np.array([0.5, 0.9, 0.7], np.float32), "labels": np.array([1, 0, 2], np.int64)})


CASES = {"mxnet": _case_mxnet, "yolo": _case_yolo, "padded": _case_padded, "gluoncv": _case_gluoncv,
         "torchvision": _case_torchvision}


def _expected(dets: list[Detections], change: Callable[[Detections, int], Detections], rank: str) -> list[Detections]:
    out = []
    for d in dets:
        if len(d) == 0:
            out.append(d)
            continue
        order = np.argsort(-np.asarray(d.scores), kind="stable")
        pick = {"top": order[0], "middle": order[len(order) // 2], "lowest": order[-1]}[rank]
        out.append(change(d, int(pick)))
    return out


def _drop(d: Detections, k: int) -> Detections:
    return d.take(np.array([i for i in range(len(d)) if i != k], np.int64))


def _move(d: Detections, k: int) -> Detections:
    boxes = np.asarray(d.boxes, np.float64).copy()
    width = boxes[k, 2] - boxes[k, 0]
    boxes[k, [0, 2]] += MOVE * width
    return replace(d, boxes=boxes)


def _same(a: list[Detections], b: list[Detections]) -> bool:
    from mutation_judge import _sorted

    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        (bx, sx, lx), (by, sy, ly) = _sorted(x), _sorted(y)
        if not (len(sx) == len(sy) and np.allclose(bx, by, atol=1e-6) and np.allclose(sx, sy) and np.array_equal(lx, ly)):
            return False
    return True


def _edited(case: str, edit: Callable[[Rows], None]) -> tuple[list[Detections], list[Detections]]:
    spec, arrays = CASES[case]()
    model = _identity(arrays, dict(spec.outputs))
    feeds = {f"{k}_in": v for k, v in arrays.items()}
    ed = Editor(model)
    rows = Rows(ed, spec)
    edit(rows)
    rows.close()
    [before] = run_onnx(model, [feeds])
    [after] = run_onnx(ed.finish(), [feeds])
    return spec.read(before, "candidate"), spec.read(after, "candidate")


@pytest.mark.parametrize("rank", ["top", "middle", "lowest"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_rows_are_dropped_and_moved_at_their_rank_in_every_layout(case: str, rank: str) -> None:
    before, after = _edited(case, lambda r: r.drop(rank))
    assert _same(after, _expected(before, _drop, rank)), (before, after)
    before, after = _edited(case, lambda r: r.move(rank))
    assert _same(after, _expected(before, _move, rank)), (before, after)


@pytest.mark.parametrize("case", sorted(CASES))
def test_swap_labels_and_clip_in_every_layout(case: str) -> None:
    before, after = _edited(case, Rows.swap_xy)
    assert _same(after, [replace(d, boxes=d.boxes[:, [1, 0, 3, 2]]) for d in before])
    before, after = _edited(case, Rows.labels_plus_one)
    assert _same(after, [replace(d, classes=d.classes + 1) for d in before])
    before, after = _edited(case, lambda r: r.clip_scores(0.8))
    assert _same(after, [replace(d, scores=np.minimum(d.scores, 0.8)) for d in before])


# -- the scale rule's operators, on a conv output reaching ~1e3 ----------------------------------------------

def large_base() -> Base:
    """A Conv whose output [1, 5, 8, 8] reaches ~1e3 (weights x300), as segmentation logits do."""
    rng = np.random.default_rng(3)
    w = numpy_helper.from_array((rng.normal(0, 1, (5, 3, 3, 3)) * 300).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], name="conv", pads=[1, 1, 1, 1])]
    model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5, 8, 8])], opset=17, initializers=[w])
    probe = [{"x": rng.normal(0, 1, (1, 3, 8, 8)).astype(np.float32)} for _ in range(3)]
    return Base("large", model, [], {"x": rng.normal(0, 1, (1, 3, 8, 8)).astype(np.float32)}, probe, run_onnx)


def test_the_scale_rule_operators_make_the_edits_they_claim_and_each_fails_the_rule() -> None:
    from bridge.validation.compare import compare_outputs

    base = large_base()
    [ref] = run_onnx(base.model, [base.feeds])
    y = ref["y"].astype(np.float64)
    scale = np.abs(y).max()
    assert scale > 300
    got = {op: run_onnx(mutants(base, op)[0].model, [base.feeds])[0]["y"].astype(np.float64)
           for op in ("large_output_scale", "large_output_channel_bias", "large_output_one_element",
                      "large_output_near_zero_sign")}
    np.testing.assert_allclose(got["large_output_scale"], y * 1.003, rtol=1e-4, atol=1e-3)  # onnxruntime may fold it
    bias = got["large_output_channel_bias"] - y
    quiet = int(np.argmin(np.abs(y).max(axis=(0, 2, 3))))  # the channel with the smallest values (axis 1: 5 < 8)
    assert np.allclose(bias[:, quiet], 0.005 * scale, rtol=1e-3) and np.allclose(np.delete(bias, quiet, axis=1), 0,
                                                                                   atol=1e-3)
    one = got["large_output_one_element"] - y
    assert np.count_nonzero(np.abs(one) > 1e-3) == 1 and one.flat[np.argmin(np.abs(y))] == pytest.approx(0.01 * scale,
                                                                                                         rel=1e-3)
    near = np.abs(y) < 0.01 * scale
    assert near.any() and np.allclose(got["large_output_near_zero_sign"], np.where(near, -y, y), atol=1e-3)
    for op, values in got.items():
        assert not compare_outputs({"y": y.astype(np.float32)}, {"y": values.astype(np.float32)}).passed, op


def test_the_scale_rule_operators_have_no_site_on_small_or_grouped_outputs() -> None:
    with pytest.raises(NoSite, match="where the scale rule widens the tolerance"):
        mutants(detector_base(), "large_output_scale")  # its outputs are a detection group
    small = classifier_base()
    small.feeds = {"x": small.feeds["x"] * 1e-6}  # a softmax of near-constant logits: ~0.25 everywhere, still > 0.1
    assert mutants(small, "large_output_one_element")
