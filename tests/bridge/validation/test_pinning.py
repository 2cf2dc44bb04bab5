"""The upstream tie proof (bridge.validation.pinning): a candidate that differs from its source only by a tiny
nudge on the scores before a top-N cut fails as measured and passes with the source's scores pinned, saying
so; a candidate also wrong after the cut, or nudged beyond the tolerance, keeps its failure; a passing
comparison does no pinning work."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import onnx
import pytest
from pinning_models import (
    BOXES,
    break_a_box,
    feeds,
    nudge_peak,
    nudge_scores,
    peak_feeds,
    peak_model,
    reversed_ties_topk_model,
    threshold_feeds,
    threshold_model,
    tied_feeds,
    topk_model,
)
from pinning_models import (
    _insert_add as insert_add,
)

from bridge.config import Tolerance
from bridge.runtimes.onnxruntime import OnnxRuntime
from bridge.validation.compare import compare_outputs
from bridge.validation.graph import OnnxTaps
from bridge.validation.pinning import (
    MAX_ROOT_CHANGE_SHARE,
    SOURCE_TIE_ULPS,
    STRICT_TIE_ULPS,
    UNPINNED_SUFFIX,
    _tie_orders,
    explain_by_pinning,
    graph_input_names,
    pinned_model,
    selection_points,
)

TOL = Tolerance(atol=1e-4, rtol=1e-3)


class OnnxSource:
    """The source ONNX model's own tensors (what bridge.conversion.sources.OnnxSourceTaps gives convert)."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self.taps = OnnxTaps(model)
        self.calls = 0

    def names(self) -> set[str]:
        self.calls += 1
        return set(self.taps.index.order)

    def values(self, feeds: Sequence[Mapping[str, np.ndarray]], names: Sequence[str]) -> list[dict[str, np.ndarray]]:
        self.calls += 1
        return [self.taps.run(f, names) for f in feeds]


def run(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    return OnnxRuntime(model).infer({k: v for k, v in feeds.items() if k in graph_input_names(model)})


def _candidate(delta: float, broken: bool = False) -> onnx.ModelProto:
    model = topk_model()
    nudge_scores(model, delta)
    if broken:
        break_a_box(model, "det_boxes")
    return model


def _judge(candidate: onnx.ModelProto, source: onnx.ModelProto | None = None) -> tuple:
    source = source or topk_model()
    ref = run(source, feeds())
    comparison = compare_outputs(ref, run(candidate, feeds()), TOL, reference_name="src", candidate_name="onnxruntime")
    taps = OnnxSource(source)
    result = explain_by_pinning(comparison, candidate, taps, run, [(feeds(), ref)], TOL)
    return comparison, result, taps


def test_the_nudge_swaps_the_cut_and_pinning_explains_it() -> None:
    ref = run(topk_model(), feeds())
    cand = run(_candidate(5e-7), feeds())
    assert set(np.flatnonzero(np.isin(BOXES, ref["det_boxes"]).all(axis=1))) == {0, 1, 2}
    assert set(np.flatnonzero(np.isin(BOXES, cand["det_boxes"]).all(axis=1))) == {0, 1, 3}  # swapped at the cut

    comparison, result, _ = _judge(_candidate(5e-7))
    assert result.explained and comparison.passed
    assert list(result.pins) == ["scores"] and 0 < result.pins["scores"]["max_abs"] < 1e-6
    topk = next(s for s in result.selections if s["op"] == "TopK")
    assert topk["changed"] == 1 and topk["selected"] == 3  # one index crossed the cut
    boxes = next(o for o in comparison.outputs if o.name == "det_boxes")
    assert boxes.passed and boxes.max_abs == 0.0
    assert "pinned at 1 selection input(s): scores" in boxes.note and "unpinned: " in boxes.note
    assert comparison.pinning is not None and comparison.pinning["explained"]
    assert "pinned" in comparison.summary() and comparison.summary().split(": ")[1].startswith("PASS")
    assert comparison.to_dict()["pinning"]["pins"]["scores"]["passed"]
    # what it excused: the swapped box's 4 coordinates (and its score), each among what the pinning changed
    rows = result.rows
    assert rows["det_boxes"].to_dict() == {"output": "det_boxes", "excused": 4, "changed": 4, "outside": 0,
                                           "unit": "elements", "tied": 0}
    assert "det_boxes: 4 elements excused, each among the 4 elements" in boxes.note


def test_wrong_after_the_cut_still_fails() -> None:
    comparison, result, _ = _judge(_candidate(5e-7, broken=True))
    assert not result.explained and not comparison.passed
    assert "still differ" in result.reason and "det_boxes" in result.reason
    assert "did not explain" in comparison.pinning["text"]  # type: ignore[index]
    assert "did not explain" in comparison.summary()


def test_a_nudge_beyond_the_tolerance_fails_the_upstream_proof() -> None:
    comparison, result, _ = _judge(_candidate(0.01))
    assert not result.explained and not comparison.passed
    assert "scores" in result.reason and "upstream of the selections" in result.reason
    assert result.pins["scores"]["passed"] is False and result.pins["scores"]["max_abs"] > 1e-3


def test_a_passing_comparison_does_no_pinning_work() -> None:
    ref = run(topk_model(), feeds())
    comparison = compare_outputs(ref, run(topk_model(), feeds()), TOL)
    taps = OnnxSource(topk_model())

    def never(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        raise AssertionError("a passing comparison ran the candidate again")

    result = explain_by_pinning(comparison, _candidate(5e-7), taps, never, [(feeds(), ref)], TOL)
    assert comparison.passed and not result.explained and taps.calls == 0 and comparison.pinning is None


def test_a_failure_at_more_sizes_than_pinning_can_rerun_stands() -> None:
    """A comparison measured at two input sizes is not turned into a pass by a pinned run at one of them."""
    source, cand = topk_model(), _candidate(5e-7)
    ref = run(source, feeds())
    comparison = compare_outputs(ref, run(cand, feeds()), TOL)
    comparison.sizes = [{"x": [1, 8]}, {"x": [1, 8]}]
    result = explain_by_pinning(comparison, cand, OnnxSource(source), run, [(feeds(), ref)], TOL)
    assert not result.explained and not comparison.passed and "2 input sizes" in result.reason


def test_a_selection_fed_only_by_graph_inputs_is_not_explained() -> None:
    """Nothing upstream of the cut that the source returns: no pin, the failure stands."""
    comparison, result, _ = _judge(_candidate(5e-7), source=_renamed_source())
    assert not result.explained and not comparison.passed and "no tensor upstream" in result.reason


def _renamed_source() -> onnx.ModelProto:
    """The source with its scores tensor under another name: nothing the candidate's TopK reads is in it."""
    model = topk_model()
    for node in model.graph.node:
        node.input[:] = ["s2" if i == "scores" else i for i in node.input]
        node.output[:] = ["s2" if o == "scores" else o for o in node.output]
    return model


def test_selection_points_walk_back_to_the_nearest_source_tensor() -> None:
    candidate = _candidate(5e-7)  # TopK reads "scores" = Add(scores__nudge, delta)
    (point,) = selection_points(candidate, {"scores", "top_scores"})
    assert point.op == "TopK" and point.pins == ("scores",) and point.indices == "top_idx"
    (point,) = selection_points(candidate, {"scores__nudge"})  # the source lacks "scores": walked back past the Add
    assert point.pins == ("scores__nudge",)


def test_the_pinned_model_cannot_compute_the_pinned_tensor() -> None:
    model = topk_model()
    pinned = pinned_model(model, {"scores": np.zeros((1, 8), np.float32)}, ["det_boxes", "top_scores"])
    ops = [n.op_type for n in pinned.graph.node]
    assert "Sigmoid" not in ops and graph_input_names(pinned) == {"scores", "boxes"}  # x only fed the pin
    onnx.checker.check_model(pinned)
    # a pinned output of a node whose other outputs are still needed: the node stays, that output renamed away
    pinned = pinned_model(model, {"top_scores": np.zeros((1, 3), np.float32)}, ["det_boxes", "top_scores"])
    topk = next(n for n in pinned.graph.node if n.op_type == "TopK")
    assert list(topk.output) == ["top_scores" + UNPINNED_SUFFIX, "top_idx"]
    onnx.checker.check_model(pinned)
    out = run(pinned, {**feeds(), "top_scores": np.full((1, 3), 7.0, np.float32)})
    assert (out["top_scores"] == 7.0).all()


@pytest.mark.parametrize("broken_there", [False, True])
def test_pinning_judges_every_size(broken_there: bool) -> None:
    """Each size compared is re-run pinned (the reference's outputs at the second one come from the source); a
    candidate wrong after the cut at the second size only keeps its failure."""
    source = topk_model()
    ref = run(source, feeds())
    cand = _candidate(5e-7)
    if broken_there:  # wrong where the second size's x[0, 0] is negative
        break_a_box(cand, "det_boxes", amount=0.0)
        gate = [onnx.helper.make_node("Slice", ["x", "s0", "s1"], ["x00"]),
                onnx.helper.make_node("Less", ["x00", "zero"], ["neg"]),
                onnx.helper.make_node("Cast", ["neg"], ["negf"], to=onnx.TensorProto.FLOAT),
                onnx.helper.make_node("Mul", ["negf", "half"], ["shift"]),
                onnx.helper.make_node("Add", ["broken_delta", "shift"], ["broken_gated"])]
        cand.graph.initializer.extend([onnx.numpy_helper.from_array(np.array([0, 0], np.int64), "s0"),
                                       onnx.numpy_helper.from_array(np.array([1, 1], np.int64), "s1"),
                                       onnx.numpy_helper.from_array(np.array(0, np.float32), "zero"),
                                       onnx.numpy_helper.from_array(np.array(0.5, np.float32), "half")])
        add = next(n for n in cand.graph.node if n.name == "broken_add")
        add.input[1] = "broken_gated"
        at = list(cand.graph.node).index(add)
        for k, node in enumerate(gate):
            cand.graph.node.insert(at + k, node)
    comparison = compare_outputs(ref, run(cand, feeds()), TOL)
    assert not comparison.passed
    other = {"x": LOGITS_2, "boxes": feeds()["boxes"]}
    result = explain_by_pinning(comparison, cand, OnnxSource(source), run, [(feeds(), ref), (other, None)], TOL)
    assert result.pinned_comparison is not None and len(result.pinned_comparison.sizes) == 2
    assert result.explained is not broken_there and comparison.passed is not broken_there


LOGITS_2 = np.array([[-4.0, 3.0, 1.0, 0.999999, 0.5, -1.0, -2.0, 2.0]], np.float32)


def test_argmax_and_nms_are_selection_points() -> None:
    """ArgMax picks by its input; NonMaxSuppression selects by its boxes and its scores: each is pinned upstream."""
    from onnx import TensorProto, helper
    from support import make_model

    nodes = [helper.make_node("Relu", ["logits"], ["act"], name="relu"),
             helper.make_node("ArgMax", ["act"], ["cls"], name="argmax", axis=1),
             helper.make_node("Identity", ["b"], ["boxes_id"], name="boxes_id"),
             helper.make_node("Sigmoid", ["s"], ["probs"], name="sig"),
             helper.make_node("NonMaxSuppression", ["boxes_id", "probs", "mo"], ["sel"], name="nms")]
    model = make_model(nodes, [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [2, 5]),
                               helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, 4, 4]),
                               helper.make_tensor_value_info("s", TensorProto.FLOAT, [1, 1, 4])],
                       [helper.make_tensor_value_info("cls", TensorProto.INT64, [2, 1]),
                        helper.make_tensor_value_info("sel", TensorProto.INT64, [None, 3])],
                       initializers=[onnx.numpy_helper.from_array(np.array([2], np.int64), "mo")])
    points = {p.op: p for p in selection_points(model, {"act", "boxes_id", "probs"})}
    assert points["ArgMax"].pins == ("act",) and points["ArgMax"].indices == "cls"
    assert set(points["NonMaxSuppression"].pins) == {"boxes_id", "probs"} and points["NonMaxSuppression"].indices == "sel"
    # the source returns neither: walked back to graph inputs only, so nothing to pin
    assert all(not p.pins for p in selection_points(model, set()))


def _judge_with(source: onnx.ModelProto, candidate: onnx.ModelProto, inputs: Mapping[str, np.ndarray],
                strict: bool = False) -> tuple:
    ref = run(source, inputs)
    comparison = compare_outputs(ref, run(candidate, inputs), TOL, reference_name="src", candidate_name="onnxruntime")
    before = comparison.passed
    result = explain_by_pinning(comparison, candidate, OnnxSource(source), run, [(inputs, ref)], TOL, strict=strict)
    return before, comparison, result


def _peak_candidate(delta: float, broken: bool = False) -> onnx.ModelProto:
    model = peak_model()
    nudge_peak(model, delta)
    if broken:
        break_a_box(model, "det_boxes")
    return model


def test_a_peak_mask_flipped_by_a_ulp_nudge_is_pinned_at_the_comparison_inputs() -> None:
    ref, cand = run(peak_model(), peak_feeds()), run(_peak_candidate(5e-7), peak_feeds())
    kept = [set(np.flatnonzero(np.isin(BOXES, o["det_boxes"]).all(axis=1))) for o in (ref, cand)]
    assert kept == [{2, 5, 7}, {3, 5, 7}]  # neighbours 2 and 3 swapped which one is the peak

    before, comparison, result = _judge_with(peak_model(), _peak_candidate(5e-7), peak_feeds())
    assert not before and result.explained and comparison.passed
    assert {"scores", "pooled"} <= set(result.pins) and all(p["max_abs"] < 1e-6 for n, p in result.pins.items()
                                                             if n != "flat")
    assert result.pins["flat"].get("judged_with_pinned")  # downstream of the mask: judged with the pins above it
    equal = next(s for s in result.selections if s["op"] == "Equal")
    assert equal["changed"] == 2 and equal["selected"] == 8  # both neighbours' mask entries flipped
    boxes = next(o for o in comparison.outputs if o.name == "det_boxes")
    assert boxes.passed and "Equal equal: 2 of 8 comparison results changed" in boxes.note


def test_a_peak_nudge_with_a_wrong_op_after_the_selection_still_fails() -> None:
    before, comparison, result = _judge_with(peak_model(), _peak_candidate(5e-7, broken=True), peak_feeds())
    assert not before and not result.explained and not comparison.passed
    assert "still differ" in result.reason


def test_a_peak_nudge_beyond_the_tolerance_fails_upstream() -> None:
    before, comparison, result = _judge_with(peak_model(), _peak_candidate(1e-2), peak_feeds())
    assert not before and not result.explained and not comparison.passed
    assert "upstream of the selections" in result.reason and "scores" in result.reason


def test_a_threshold_crossed_by_a_ulp_nudge_is_pinned() -> None:
    candidate = threshold_model()
    delta = np.zeros((1, 8), np.float32)
    delta[0, 1] = 1e-7  # sigmoid(0) = 0.5 exactly: not > 0.5 in the source, > 0.5 in the candidate
    insert_add(candidate, "scores", delta, "nudge")
    before, comparison, result = _judge_with(threshold_model(), candidate, threshold_feeds())
    assert not before and result.explained and comparison.passed
    assert list(result.pins) == ["scores"]
    greater = next(s for s in result.selections if s["op"] == "Greater")
    assert greater["changed"] == 1 and greater["selected"] == 8

    candidate.graph.initializer.append(onnx.numpy_helper.from_array(np.full((8, 4), 0.5, np.float32), "off"))
    out = next(n for n in candidate.graph.node if n.name == "mul")
    out.output[0] = "kept_boxes_raw"
    candidate.graph.node.append(onnx.helper.make_node("Add", ["kept_boxes_raw", "off"], ["kept_boxes"]))
    before, comparison, result = _judge_with(threshold_model(), candidate, threshold_feeds())
    assert not result.explained and not comparison.passed  # a wrong op after the threshold: not a tie


def test_comparisons_on_integer_shapes_or_constants_only_are_not_selection_points() -> None:
    nodes = [onnx.helper.make_node("Shape", ["x"], ["shape"]),
             onnx.helper.make_node("Equal", ["shape", "want"], ["same"], name="int_equal"),
             onnx.helper.make_node("Greater", ["half", "x"], ["lt"], name="x_vs_const"),
             onnx.helper.make_node("Relu", ["x"], ["r"], name="relu"),
             onnx.helper.make_node("Less", ["r", "half"], ["small"], name="r_vs_const")]
    model = onnx.helper.make_model(onnx.helper.make_graph(
        nodes, "g", [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4])],
        [onnx.helper.make_tensor_value_info(n, onnx.TensorProto.BOOL, None) for n in ("same", "lt", "small")],
        initializer=[onnx.numpy_helper.from_array(np.array([4], np.int64), "want"),
                     onnx.numpy_helper.from_array(np.array(0.5, np.float32), "half")]))
    points = selection_points(model, {"shape", "r", "same", "lt", "small"})
    # the integer Equal and the comparison straight on the graph input have nothing to pin; Less pins "r" only
    assert [(p.node, p.inputs, p.pins) for p in points] == [("r_vs_const", ("r",), ("r",))]


def test_exact_ties_ordered_otherwise_by_the_source_are_pinned_in_its_order() -> None:
    source, candidate = reversed_ties_topk_model(), topk_model()
    assert run(source, tied_feeds())["top_scores"].tobytes() == run(candidate, tied_feeds())["top_scores"].tobytes()
    before, comparison, result = _judge_with(source, candidate, tied_feeds())
    assert not before and result.explained and comparison.passed  # boxes 1 and 2 swapped: exact tie, source's order
    assert result.tie_orders == {"top_idx": 2}
    boxes = next(o for o in comparison.outputs if o.name == "det_boxes")
    assert "top_idx: 2 positions hold exactly equal scores in the source's order" in boxes.note

    broken = topk_model()
    break_a_box(broken, "det_boxes")  # also wrong after the cut: the tie order does not excuse it
    before, comparison, result = _judge_with(source, broken, tied_feeds())
    assert not result.explained and not comparison.passed


def test_an_order_that_picks_other_values_is_not_a_tie() -> None:
    model = topk_model()
    (point,) = selection_points(model, {"scores", "top_idx"})
    scores = np.array([[0.9, 0.8, 0.8, 0.7, 0.1, 0.1, 0.1, 0.1]], np.float32)
    ours = {"scores": scores, "top_idx": np.array([[0, 1, 2]], np.int64)}
    swapped_tie = {"top_idx": np.array([[0, 2, 1]], np.float32)}  # a float32 alias (an MXNet topk's indices)
    (value, count), = _tie_orders(model, [point], ours, swapped_tie, {"top_idx": "top_idx"}).values()
    assert count == 2 and value.dtype == np.int64 and value.tolist() == [[0, 2, 1]]
    for other in ([[0, 1, 3]], [[1, 0, 2]]):  # another element selected; a non-tied pair swapped
        assert _tie_orders(model, [point], ours, {"top_idx": np.array(other, np.int64)}, {"top_idx": "top_idx"}) == {}


def test_unchanged_comparisons_are_counted_not_listed() -> None:
    from bridge.validation.pinning import PinningResult

    result = PinningResult(True, pins={"s": {"max_abs": 1e-7, "passed": True}}, selections=[
        {"node": "eq", "op": "Equal", "compared": True, "selected": 8, "changed": 2, "comparison": True},
        *({"node": f"lt{k}", "op": "Less", "compared": True, "selected": 8, "changed": 0, "comparison": True}
          for k in range(3))])
    assert "Equal eq: 2 of 8 comparison results changed; 3 more comparison(s) unchanged" in result.text
    assert "lt0" not in result.text


def _identity_scores(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with its Sigmoid made an Identity: the input is the scores, to the ulp."""
    for node in model.graph.node:
        if node.op_type == "Sigmoid":
            node.op_type = "Identity"
    return model


def _ulps_apart(n: int, start: float = 0.5) -> np.ndarray:
    """``n`` descending float32 scores one ulp apart below ``start`` (ulps at 0.5 are 2**-24 below, 2**-23 above)."""
    x = [np.float32(start)]
    for _ in range(n - 1):
        x.append(np.nextafter(x[-1], np.float32(0)))
    return np.asarray(x, np.float32)[None]


@pytest.mark.parametrize(("delta_ulps", "strict_passes"), [(2, True), (80, False)])
def test_strict_excuses_rounding_ties_only(delta_ulps: int, strict_passes: bool) -> None:
    """Scores one ulp apart at the top-3 cut; a nudge of 2 ulps and one of 80 ulps (still far inside atol 1e-4)
    both swap the cut. By default both are near-ties the tolerance allows; under --strict only the rounding-sized
    one is (at most STRICT_TIE_ULPS ulps of the scores' magnitude at the choices that changed)."""
    scores = _ulps_apart(8)
    source = _identity_scores(topk_model())
    step = float(np.spacing(np.float32(scores.max())))
    candidate = _identity_scores(topk_model())
    nudge_scores(candidate, delta_ulps * step, element=3)
    inputs = {"x": scores, "boxes": BOXES.copy()}
    for strict in (False, True):
        before, comparison, result = _judge_with(source, candidate, inputs, strict=strict)
        assert not before  # the nudge swapped the cut
        topk = next(s for s in result.selections if s["op"] == "TopK")
        assert topk["root"] and topk["changed"] == 1 and abs(topk["ulps"] - delta_ulps) <= 1
        passes = not strict or strict_passes
        assert strict_passes is (delta_ulps <= STRICT_TIE_ULPS)
        assert result.explained is passes and comparison.passed is passes
        if not passes:
            assert "--strict" in result.reason and "float32 ulps" in result.reason


def test_a_root_selection_changing_more_than_its_share_is_not_a_tie() -> None:
    """Within-tolerance noise (up to 200 ulps, atol 1e-4 is ~1,700) on 200 scores one ulp apart reshuffles half of
    a top-100 cut: more choices than near-ties change, over MAX_ROOT_CHANGE_SHARE, so the failure stands."""
    n, k = 200, 100
    from support import make_model

    nodes = [onnx.helper.make_node("Identity", ["x"], ["scores"], name="scores"),
             onnx.helper.make_node("TopK", ["scores", "k"], ["top_scores", "top_idx"], name="topk", axis=-1)]
    source = make_model(nodes, [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, n])],
                        [onnx.helper.make_tensor_value_info("top_idx", onnx.TensorProto.INT64, [1, k])],
                        initializers=[onnx.numpy_helper.from_array(np.array([k], np.int64), "k")])
    candidate = onnx.ModelProto()
    candidate.CopyFrom(source)
    scores = _ulps_apart(n)
    noise = np.random.default_rng(0).integers(0, 200, n) * np.spacing(np.float32(0.5))
    insert_add(candidate, "scores", noise.astype(np.float32)[None], "noise")
    before, comparison, result = _judge_with(source, candidate, {"x": scores})
    assert not before and not result.explained and not comparison.passed
    topk = next(s for s in result.selections if s["op"] == "TopK")
    assert topk["root"] and topk["changed"] > MAX_ROOT_CHANGE_SHARE * k
    assert "more than the 5 (5%)" in result.reason



def _dense_tie_topk(noise_ulps: int) -> tuple[onnx.ModelProto, onnx.ModelProto, dict[str, np.ndarray], float]:
    """A top-400 cut of 3,000 scores at a hundred per ulp over 30 ulps (a random-weight SSD's softmax: hundreds of
    anchors 1/21 to the same ulp at its top-400 cut), and a candidate adding 0..``noise_ulps`` ulps of noise to each
    score (the ulps of the scores' magnitude)."""
    from support import make_model

    n, k = 3000, 400
    nodes = [onnx.helper.make_node("Identity", ["x"], ["scores"], name="scores"),
             onnx.helper.make_node("TopK", ["scores", "k"], ["top_scores", "top_idx"], name="topk", axis=-1)]
    source = make_model(nodes, [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, n])],
                        [onnx.helper.make_tensor_value_info("top_idx", onnx.TensorProto.INT64, [1, k])],
                        initializers=[onnx.numpy_helper.from_array(np.array([k], np.int64), "k")])
    candidate = onnx.ModelProto()
    candidate.CopyFrom(source)
    step = float(np.spacing(np.float32(0.75)))
    scores = (0.75 - step * (np.arange(n) // 100)).astype(np.float32)[None]
    noise = np.random.default_rng(1).integers(0, noise_ulps + 1, n) * step
    insert_add(candidate, "scores", noise.astype(np.float32)[None], "noise")
    return source, candidate, {"x": scores}, step


def test_a_dense_rounding_tie_may_change_more_than_the_share() -> None:
    """A hundred scores per ulp at the cut (no order the source itself can tell) and rounding-sized noise (<= 2
    ulps): more than MAX_ROOT_CHANGE_SHARE of the top-400 changes, every changed choice within SOURCE_TIE_ULPS of the
    source's cut in the source's own values - a rounding tie, so pinning explains it and says how."""
    source, candidate, inputs, _ = _dense_tie_topk(2)
    before, comparison, result = _judge_with(source, candidate, inputs)
    topk = next(s for s in result.selections if s["op"] == "TopK")
    assert not before and topk["root"] and topk["changed"] > MAX_ROOT_CHANGE_SHARE * 400
    assert result.explained and comparison.passed, result.reason
    assert topk["source_tie_ulps"] <= SOURCE_TIE_ULPS and topk["source_tie_band"] >= topk["changed"]
    assert "ties the source itself cannot order" in result.text


@pytest.mark.parametrize("noise_ulps", [30, 200])
def test_noise_past_rounding_on_a_dense_tie_still_fails(noise_ulps: int) -> None:
    """Mutants: the same dense cut with noise far inside the tolerance (atol 1e-4 is ~1,700 ulps here) but past
    rounding: choices come from farther than SOURCE_TIE_ULPS below the cut, so the share bound stands."""
    source, candidate, inputs, _ = _dense_tie_topk(noise_ulps)
    before, comparison, result = _judge_with(source, candidate, inputs)
    topk = next(s for s in result.selections if s["op"] == "TopK")
    assert not before and not result.explained and not comparison.passed
    assert topk["changed"] > MAX_ROOT_CHANGE_SHARE * 400 and topk["source_tie_ulps"] > SOURCE_TIE_ULPS
    assert "from the source's cut in the source's own values" in result.reason



@pytest.mark.parametrize(("spread_ulps", "noise_ulps", "tied"), [(1, 2, True), (20, 200, False)])
def test_an_argmax_over_its_share_is_a_tie_only_where_the_source_ties_the_picks(spread_ulps: int, noise_ulps: int,
                                                                                 tied: bool) -> None:
    """ArgMax over 4 classes at 200 positions (an untrained SSD's best class): class scores ``spread_ulps`` apart and
    a candidate adding 0..``noise_ulps`` ulps. Rounding noise on 1-ulp spreads changes more than the share, each
    change between picks the source scores within SOURCE_TIE_ULPS: explained. Noise of 200 ulps on 20-ulp spreads
    (far inside atol) changes picks the source tells apart: the failure stands (the mutant)."""
    from support import make_model

    c, n = 4, 200
    nodes = [onnx.helper.make_node("Identity", ["x"], ["scores"], name="scores"),
             onnx.helper.make_node("ArgMax", ["scores"], ["best"], name="argmax", axis=1, keepdims=0)]
    source = make_model(nodes, [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, c, n])],
                        [onnx.helper.make_tensor_value_info("best", onnx.TensorProto.INT64, [1, n])])
    candidate = onnx.ModelProto()
    candidate.CopyFrom(source)
    step = float(np.spacing(np.float32(0.75)))
    rng = np.random.default_rng(2)
    scores = (0.75 - step * spread_ulps * rng.permuted(np.tile(np.arange(c)[:, None], (1, n)), axis=0))[None]
    noise = rng.integers(0, noise_ulps + 1, (1, c, n)) * step
    insert_add(candidate, "scores", noise.astype(np.float32), "noise")
    before, comparison, result = _judge_with(source, candidate, {"x": scores.astype(np.float32)})
    argmax = next(s for s in result.selections if s["op"] == "ArgMax")
    assert not before and argmax["root"] and argmax["changed"] > MAX_ROOT_CHANGE_SHARE * n
    assert (argmax["source_tie_ulps"] <= SOURCE_TIE_ULPS) is tied
    assert result.explained is tied and comparison.passed is tied, result.reason


def _softmax_sources() -> tuple[onnx.ModelProto, onnx.ModelProto]:
    """A source computing class probabilities [1, 3, 8] as a channel softmax of transposed logits (node "probs"),
    and a conversion that computes them over the last axis of the logits instead (the Transpose moved away by a
    pass), as [1, 8, 3] under another name - its nodes standing for the source's "probs" (provenance) - with a
    few ulps of nudge, as another runtime's softmax has: the best-class scores of anchors 2 and 3 swap at the
    top-3 cut."""
    from onnx import TensorProto, helper
    from support import make_model

    from bridge import provenance

    k = [numpy_helper_array(np.array([3], np.int64), "k"), numpy_helper_array(np.array([0], np.int64), "axis0")]
    source = make_model(
        [helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 2, 1], name="xt"),
         helper.make_node("Softmax", ["xt"], ["probs"], axis=1, name="probs"),
         helper.make_node("ReduceMax", ["probs"], ["best"], axes=[1], keepdims=0, name="best"),
         helper.make_node("TopK", ["best", "k"], ["top_scores", "top_idx"], axis=-1, name="topk"),
         helper.make_node("Squeeze", ["top_idx", "axis0"], ["idx"], name="squeeze"),
         helper.make_node("Gather", ["boxes", "idx"], ["det_boxes"], axis=0, name="gather")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 3]),
         helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [8, 4])],
        [helper.make_tensor_value_info("det_boxes", TensorProto.FLOAT, [3, 4])], initializers=k)
    delta = np.zeros((1, 8, 3), np.float32)
    delta[0, 3, 0] = 2.4e-7  # 4 ulps at the scores' magnitude: anchor 3 passes anchor 2 (tied to 2 ulps)
    candidate = make_model(
        [helper.make_node("Softmax", ["x"], ["probs/softmax"], axis=2, name="probs/softmax"),
         helper.make_node("Add", ["probs/softmax", "delta"], ["probs/last_axis"], name="probs/nudge"),
         helper.make_node("ReduceMax", ["probs/last_axis"], ["best/last_axis"], axes=[2], keepdims=0, name="best"),
         helper.make_node("TopK", ["best/last_axis", "k"], ["top_scores", "top_idx"], axis=-1, name="topk"),
         helper.make_node("Squeeze", ["top_idx", "axis0"], ["idx"], name="squeeze"),
         helper.make_node("Gather", ["boxes", "idx"], ["det_boxes"], axis=0, name="gather")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 3]),
         helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [8, 4])],
        [helper.make_tensor_value_info("det_boxes", TensorProto.FLOAT, [3, 4])],
        initializers=[*k, numpy_helper_array(delta, "delta")])
    for node in candidate.graph.node[:2]:
        provenance.write(node, provenance.Provenance("onnx", "probs", "Softmax", "pass SoftmaxLastAxisPass"))
    return source, candidate


def numpy_helper_array(value: np.ndarray, name: str) -> onnx.TensorProto:
    return onnx.numpy_helper.from_array(value, name)


def test_a_source_tensor_in_another_layout_is_pinned_as_its_transpose() -> None:
    """issue 38.14's mechanism: the softmax feeding the cut exists in the conversion only transposed and renamed;
    pinned as the source's "probs" transposed (a layout alias, checked by value), the swap is proved a tie.
    Without its provenance nothing upstream of the cut is the source's, and the failure stands."""
    source, candidate = _softmax_sources()
    logits = np.zeros((1, 8, 3), np.float32)
    logits[0, :, 0] = [4.0, 3.0, 1.0, 1.0, 0.0, -1.0, -2.0, -3.0]
    logits[0, 3, 1] = 1e-7  # anchor 3's best class a hair less likely than anchor 2's (2 ulps)
    inputs = {"x": logits, "boxes": BOXES.copy()}
    before, comparison, result = _judge_with(source, candidate, inputs)
    assert not before and result.explained and comparison.passed, result.reason
    assert list(result.pins) == ["probs/last_axis"] and result.pins["probs/last_axis"]["max_abs"] < 1e-6
    for node in candidate.graph.node:
        del node.metadata_props[:]
    before, comparison, result = _judge_with(source, candidate, inputs)
    assert not before and not result.explained and "no tensor upstream" in result.reason


def test_a_failing_row_is_accounted_for_only_through_overlapping_changed_rows() -> None:
    """Greedy matching can push an unchanged row off its partner when a changed row of its class overlaps it (or
    overlaps one that overlaps it): such a row is accounted for; an unchanged failing row that no changed row
    reaches is not - pinning excuses only what it changed."""
    from bridge.validation.detection.matching import Detections
    from bridge.validation.pinning import _unreached

    boxes = np.array([[0, 0, 10, 10], [8, 0, 18, 10], [16, 0, 26, 10], [100, 100, 110, 110]], np.float64)
    unpinned = Detections(boxes, np.array([0.9, 0.8, 0.7, 0.6]), np.zeros(4))
    decided = Detections(boxes[[1, 2, 3]] + [[0, 0, 0, 0]] * 3, np.array([0.8, 0.7, 0.6]), np.zeros(3),
                         rows=np.array([1, 2, 3]))
    # row 0 changed by pinning; rows 1 and 2 (a chain from it) and row 3 (far away) unchanged but failing
    assert _unreached(unpinned, decided, {1, 2}, {0}, set()) == 0
    assert _unreached(unpinned, decided, {1, 2, 3}, {0}, set()) == 1
    other_class = Detections(boxes, np.array([0.9, 0.8, 0.7, 0.6]), np.array([1, 0, 0, 0]))
    assert _unreached(other_class, decided, {1, 2}, {0}, set()) == 2  # a changed row of another class: no chain
