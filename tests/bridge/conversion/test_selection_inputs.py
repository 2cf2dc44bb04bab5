"""The selection inputs of a passing check judged on every row (bridge.conversion.selection_inputs).

A detector with 64 anchors keeps 3 boxes (NonMaxSuppression); a candidate with one anchor moved that no input ever
selects (its score is pinned far below every other's) computes the same outputs on every feed, so only the
selection inputs can show it: ``validate`` FAILs it, naming the decoded boxes, while the same check without the
proof PASSes it (the test asserts both, so it fails if the proof stops running). The correct candidate PASSes with
the statement; a candidate wrong after the selection is still the output comparison's FAIL; an MXNet source (its
internal tensors) gets the same proof through its held reference process.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from bridge import api
from bridge.errors import ValidationMismatch

ANCHORS = 64
NEVER = 50  # the anchor whose score sits far below every other's: never among the 3 kept


def _detector(anchors: np.ndarray) -> onnx.ModelProto:
    """deltas [1, N, 4] -> boxes = anchors + 0.1 * deltas; scores = sigmoid(sum(deltas) + bias) -> NMS(3) ->
    the kept boxes [K, 4]."""
    bias = np.zeros((1, ANCHORS), np.float32)
    bias[0, NEVER] = -30.0
    inits = [numpy_helper.from_array(anchors, "anchors"), numpy_helper.from_array(np.float32([0.1]), "step"),
             numpy_helper.from_array(bias, "bias"), numpy_helper.from_array(np.int64([-1]), "last"),
             numpy_helper.from_array(np.int64([3]), "max_out"), numpy_helper.from_array(np.float32([0.5]), "iou"),
             numpy_helper.from_array(np.int64([2]), "col"), numpy_helper.from_array(np.int64([0]), "zero")]
    nodes = [
        helper.make_node("Mul", ["deltas", "step"], ["scaled"], name="scale"),
        helper.make_node("Add", ["anchors", "scaled"], ["boxes"], name="decode"),
        helper.make_node("ReduceSum", ["deltas", "last"], ["logit0"], keepdims=0, name="sum"),
        helper.make_node("Add", ["logit0", "bias"], ["logit"], name="bias_add"),
        helper.make_node("Sigmoid", ["logit"], ["prob"], name="sigmoid"),
        helper.make_node("Unsqueeze", ["prob", "zero"], ["scores"], name="classes"),
        helper.make_node("NonMaxSuppression", ["boxes", "scores", "max_out", "iou"], ["selected"], name="nms"),
        helper.make_node("Gather", ["selected", "col"], ["picked2"], axis=1, name="anchor_col"),
        helper.make_node("Squeeze", ["picked2", "col_axis"], ["picked"], name="flat"),
        helper.make_node("Squeeze", ["boxes", "zero"], ["boxes2d"], name="batch"),
        helper.make_node("Gather", ["boxes2d", "picked"], ["kept"], axis=0, name="keep"),
    ]
    inits.append(numpy_helper.from_array(np.int64([1]), "col_axis"))
    graph = helper.make_graph(nodes, "detector", [helper.make_tensor_value_info("deltas", TensorProto.FLOAT,
                                                                                [1, ANCHORS, 4])],
                              [helper.make_tensor_value_info("kept", TensorProto.FLOAT, ["k", 4])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def _anchors() -> np.ndarray:
    rng = np.random.default_rng(3)
    xy = rng.uniform(0, 0.8, size=(1, ANCHORS, 2)).astype(np.float32)
    return np.concatenate([xy, xy + 0.2], axis=-1)


def _write(tmp: Path, anchors: np.ndarray) -> tuple[Path, Path, Path]:
    onnx.save(_detector(_anchors()), tmp / "source.onnx")
    onnx.save(_detector(anchors), tmp / "candidate.onnx")
    np.savez(tmp / "feeds.npz", deltas=np.random.default_rng(1).normal(size=(1, ANCHORS, 4)).astype(np.float32))
    return tmp / "source.onnx", tmp / "candidate.onnx", tmp / "feeds.npz"


def _moved(anchors: np.ndarray, delta: float) -> np.ndarray:
    moved = anchors.copy()
    moved[0, NEVER] += delta
    return moved


def test_an_anchor_no_input_selects_fails_by_its_decoded_box(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source, candidate, feeds = _write(tmp_path, _moved(_anchors(), 0.05))
    with pytest.raises(ValidationMismatch, match=r"selection input.*boxes.* though the outputs matched"):
        api.validate(candidate, source=source, feeds=feeds, isolated=False)
    # the outputs alone cannot show it: without the proof the same check passes (what made this a survivor)
    from bridge.conversion import check

    monkeypatch.setattr(check, "prove_passing", lambda *a, **k: None)
    assert api.validate(candidate, source=source, feeds=feeds, isolated=False).passed


def test_the_correct_candidate_passes_with_the_statement(tmp_path: Path) -> None:
    source, candidate, feeds = _write(tmp_path, _anchors())
    result = api.validate(candidate, source=source, feeds=feeds, isolated=False)
    (comp,) = result.comparisons
    assert comp.passed and comp.selection_inputs is not None and comp.selection_inputs["passed"]
    assert {"boxes", "scores"} <= set(comp.selection_inputs["pins"])
    assert comp.selection_inputs["text"].startswith("selection inputs agree with the source's on every row")


def test_a_difference_within_the_tolerance_passes(tmp_path: Path) -> None:
    """Float rounding of the anchors (1e-7) is no finding: the proof judges with the check's tolerance."""
    source, candidate, feeds = _write(tmp_path, _moved(_anchors(), 1e-7))
    assert api.validate(candidate, source=source, feeds=feeds, isolated=False).passed


def test_isolated_run_gives_the_same_verdict(tmp_path: Path) -> None:
    """Through the child processes users get (the source's tensors, the candidate with extra outputs)."""
    source, candidate, feeds = _write(tmp_path, _moved(_anchors(), 0.05))
    with pytest.raises(ValidationMismatch, match="selection input"):
        api.validate(candidate, source=source, feeds=feeds)


def _relaid(anchors: np.ndarray) -> onnx.ModelProto:
    """The detector with its decoded boxes computed as [1, 4, N] under the source's name ``boxes``, transposed
    back before the NMS (what a foreign exporter's layout choice looks like by name)."""
    model = _detector(anchors)
    nodes = list(model.graph.node)
    decode = next(n for n in nodes if n.name == "decode")
    decode.output[0] = "boxes_nn"
    k = nodes.index(decode)
    extra = [helper.make_node("Transpose", ["boxes_nn"], ["boxes"], perm=[0, 2, 1], name="to_channels"),
             helper.make_node("Transpose", ["boxes"], ["boxes_back"], perm=[0, 2, 1], name="from_channels")]
    for n in nodes:
        if n.name in ("nms", "batch"):
            n.input[0] = "boxes_back"
    del model.graph.node[:]
    model.graph.node.extend([*nodes[:k + 1], *extra, *nodes[k + 1:]])
    return model


def test_a_source_name_in_another_layout_is_not_compared_and_said(tmp_path: Path) -> None:
    """A tensor named like the source's but transposed is no evidence either way: it is left out and said (a
    correct candidate is not failed for it)."""
    source, _, feeds = _write(tmp_path, _anchors())
    onnx.save(_relaid(_anchors()), tmp_path / "relaid.onnx")
    result = api.validate(tmp_path / "relaid.onnx", source=source, feeds=feeds, isolated=False)
    (comp,) = result.comparisons
    assert comp.passed
    assert comp.selection_inputs is not None and "another axis order than the source's: boxes" in \
        comp.selection_inputs["text"]


def test_the_rows_a_selection_reads_are_judged_past_a_relaid_input(tmp_path: Path) -> None:
    """The relaid candidate with an anchor no input selects moved: its NMS input is no evidence (another axis order),
    but the boxes the NMS indices are gathered from (``boxes2d``, every anchor's) are the source's layout and show
    it (``gathered_rows``); before, the outputs alone judged it and could not see it."""
    source, _, feeds = _write(tmp_path, _anchors())
    onnx.save(_relaid(_moved(_anchors(), 0.05)), tmp_path / "relaid.onnx")
    with pytest.raises(ValidationMismatch, match=r"selection input\(s\) boxes2d differ from the source's"):
        api.validate(tmp_path / "relaid.onnx", source=source, feeds=feeds, isolated=False)


def _padded() -> onnx.ModelProto:
    """The detector with one anchor more than the source's (its deltas padded with a zero row, its score far below
    every other's): the kept boxes are the same on every input, the decoded boxes are [1, N + 1, 4]."""
    model = _detector(np.concatenate([_anchors(), _anchors()[:, :1]], axis=1))
    for init in model.graph.initializer:
        if init.name == "bias":
            bias = numpy_helper.to_array(init)
            init.CopyFrom(numpy_helper.from_array(np.concatenate([bias, np.float32([[-30.0]])], axis=1), "bias"))
    model.graph.initializer.append(numpy_helper.from_array(np.zeros((1, 1, 4), np.float32), "pad_row"))
    nodes = list(model.graph.node)
    for n in nodes:
        for k, name in enumerate(n.input):
            if name == "deltas":
                n.input[k] = "deltas_padded"
    del model.graph.node[:]
    model.graph.node.extend([helper.make_node("Concat", ["deltas", "pad_row"], ["deltas_padded"], axis=1,
                                              name="pad"), *nodes])
    return model


def test_a_selection_input_with_a_row_more_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another shape that is not a transpose (an anchor added) is judged, and fails; the outputs cannot show it."""
    source, _, feeds = _write(tmp_path, _anchors())
    onnx.save(_padded(), tmp_path / "padded.onnx")
    with pytest.raises(ValidationMismatch, match=r"selection input.*boxes"):
        api.validate(tmp_path / "padded.onnx", source=source, feeds=feeds, isolated=False)
    from bridge.conversion import check

    monkeypatch.setattr(check, "prove_passing", lambda *a, **k: None)
    assert api.validate(tmp_path / "padded.onnx", source=source, feeds=feeds, isolated=False).passed
