"""Toy selection models for the pinning tests: scores -> TopK (a top-3 cut) -> the kept boxes, and the candidate
edits that make a conversion differ from its source only by a tiny nudge before the cut (or also after it)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from support import make_model

N, K = 8, 3
# sigmoid(1.0) and sigmoid(0.999999) differ by ~2e-7 (a few float32 ulps): elements 2 and 3 are near-tied at the cut
LOGITS = np.array([[4.0, 3.0, 1.0, 0.999999, 0.0, -1.0, -2.0, -3.0]], np.float32)
BOXES = np.arange(N * 4, dtype=np.float32).reshape(N, 4) * 1.5


def feeds() -> dict[str, np.ndarray]:
    return {"x": LOGITS.copy(), "boxes": BOXES.copy()}


def topk_model() -> onnx.ModelProto:
    """x[1,8] -> Sigmoid -> scores -> TopK(3) -> top_scores[1,3]; the kept boxes det_boxes[3,4] (Gather)."""
    nodes = [helper.make_node("Sigmoid", ["x"], ["scores"], name="sigmoid"),
             helper.make_node("TopK", ["scores", "k"], ["top_scores", "top_idx"], name="topk", axis=-1),
             helper.make_node("Squeeze", ["top_idx", "axis0"], ["idx"], name="squeeze"),
             helper.make_node("Gather", ["boxes", "idx"], ["det_boxes"], name="gather", axis=0)]
    inits = [numpy_helper.from_array(np.array([K], np.int64), "k"),
             numpy_helper.from_array(np.array([0], np.int64), "axis0")]
    return make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, N]),
                              helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [N, 4])],
                      [helper.make_tensor_value_info("top_scores", TensorProto.FLOAT, [1, K]),
                       helper.make_tensor_value_info("det_boxes", TensorProto.FLOAT, [K, 4])], initializers=inits)


def _insert_add(proto: onnx.ModelProto, tensor: str, delta: np.ndarray, tag: str) -> None:
    """``tensor`` becomes its producer's value plus ``delta`` (the Add placed right after the producer)."""
    g = proto.graph
    at = next(k for k, n in enumerate(g.node) if tensor in n.output)
    node = g.node[at]
    node.output[:] = [f"{tensor}__{tag}" if o == tensor else o for o in node.output]
    g.initializer.append(numpy_helper.from_array(delta, f"{tag}_delta"))
    g.node.insert(at + 1, helper.make_node("Add", [f"{tensor}__{tag}", f"{tag}_delta"], [tensor], name=f"{tag}_add"))


def nudge_scores(proto: onnx.ModelProto, delta: float, element: int = 3) -> None:
    """Add ``delta`` to one element of the first TopK's input: elements 2 and 3 swap at the cut for a delta of a
    few ulps (what another runtime's Sigmoid does), and the kept boxes differ."""
    topk = next(n for n in proto.graph.node if n.op_type == "TopK")
    d = np.zeros((1, N), np.float32)
    d[0, element] = delta
    _insert_add(proto, topk.input[0], d, "nudge")


def break_a_box(proto: onnx.ModelProto, tensor: str, amount: float = 0.5) -> None:
    """A conversion also wrong after the cut: one coordinate of the kept boxes shifted by ``amount``."""
    d = np.zeros((K, 4), np.float32)
    d[2, 1] = amount
    _insert_add(proto, tensor, d, "broken")


# peaks: sigmoid(1.0) at 2 and sigmoid(0.999999) at 3 are neighbours ~2e-7 apart; 2 is the peak of its window
PEAK_LOGITS = np.array([0.0, -1.0, 1.0, 0.999999, -2.0, 3.0, -3.0, 2.0], np.float32)


def peak_feeds() -> dict[str, np.ndarray]:
    return {"x": PEAK_LOGITS.reshape(1, 1, 1, N).copy(), "boxes": BOXES.copy()}


def peak_model() -> onnx.ModelProto:
    """CenterNet's decoder in 1-D: x[1,1,1,8] -> Sigmoid -> scores; peaks = scores * (MaxPool3(scores) == scores)
    -> flat[1,8] -> TopK(3) -> top_scores[1,3] and the kept boxes det_boxes[3,4]."""
    nodes = [helper.make_node("Sigmoid", ["x"], ["scores"], name="sigmoid"),
             helper.make_node("MaxPool", ["scores"], ["pooled"], name="pool", kernel_shape=[1, 3], pads=[0, 1, 0, 1]),
             helper.make_node("Equal", ["pooled", "scores"], ["is_peak"], name="equal"),
             helper.make_node("Cast", ["is_peak"], ["peak_mask"], name="cast", to=TensorProto.FLOAT),
             helper.make_node("Mul", ["scores", "peak_mask"], ["peaks"], name="mul"),
             helper.make_node("Reshape", ["peaks", "flat_shape"], ["flat"], name="flatten"),
             helper.make_node("TopK", ["flat", "k"], ["top_scores", "top_idx"], name="topk", axis=-1),
             helper.make_node("Squeeze", ["top_idx", "axis0"], ["idx"], name="squeeze"),
             helper.make_node("Gather", ["boxes", "idx"], ["det_boxes"], name="gather", axis=0)]
    inits = [numpy_helper.from_array(np.array([K], np.int64), "k"),
             numpy_helper.from_array(np.array([0], np.int64), "axis0"),
             numpy_helper.from_array(np.array([1, N], np.int64), "flat_shape")]
    return make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 1, N]),
                              helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [N, 4])],
                      [helper.make_tensor_value_info("top_scores", TensorProto.FLOAT, [1, K]),
                       helper.make_tensor_value_info("det_boxes", TensorProto.FLOAT, [K, 4])], initializers=inits)


def nudge_peak(proto: onnx.ModelProto, delta: float, element: int = 3, tensor: str = "scores") -> None:
    """Add ``delta`` to one element of the scores the peak mask compares: for a few ulps at element 3 it becomes
    the peak of its window instead of element 2 (both masks flip), and the kept boxes differ."""
    d = np.zeros((1, 1, 1, N), np.float32)
    d[0, 0, 0, element] = delta
    _insert_add(proto, tensor, d, "nudge")


# a threshold: sigmoid(0.0) is exactly 0.5, at the threshold (not kept); a few ulps up it is kept
THRESHOLD_LOGITS = np.array([[3.0, 0.0, -1.0, 2.0, -2.0, 1.0, -3.0, 0.5]], np.float32)


def threshold_feeds() -> dict[str, np.ndarray]:
    return {"x": THRESHOLD_LOGITS.copy(), "boxes": BOXES.copy()}


def threshold_model() -> onnx.ModelProto:
    """x[1,8] -> Sigmoid -> scores; kept = Greater(scores, 0.5); the boxes of kept scores stay, the others are
    zeroed: kept_boxes[8,4] = boxes * kept (the comparison is the only selection)."""
    nodes = [helper.make_node("Sigmoid", ["x"], ["scores"], name="sigmoid"),
             helper.make_node("Greater", ["scores", "threshold"], ["kept"], name="greater"),
             helper.make_node("Cast", ["kept"], ["kept_f"], name="cast", to=TensorProto.FLOAT),
             helper.make_node("Reshape", ["kept_f", "col_shape"], ["kept_col"], name="column"),
             helper.make_node("Mul", ["boxes", "kept_col"], ["kept_boxes"], name="mul")]
    inits = [numpy_helper.from_array(np.array(0.5, np.float32), "threshold"),
             numpy_helper.from_array(np.array([N, 1], np.int64), "col_shape")]
    return make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, N]),
                              helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [N, 4])],
                      [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, N]),
                       helper.make_tensor_value_info("kept_boxes", TensorProto.FLOAT, [N, 4])], initializers=inits)


# sigmoid(3.0) twice: elements 1 and 2 tie exactly (bit for bit) inside the top-3
TIED_LOGITS = np.array([[4.0, 3.0, 3.0, 1.0, 0.0, -1.0, -2.0, -3.0]], np.float32)


def tied_feeds() -> dict[str, np.ndarray]:
    return {"x": TIED_LOGITS.copy(), "boxes": BOXES.copy()}


def reversed_ties_topk_model() -> onnx.ModelProto:
    """``topk_model`` as a source that orders exact ties by the higher index first (as MXNet's topk can): the TopK
    runs on the reversed scores and its indices are mapped back; same tensor names (scores, top_idx, det_boxes)."""
    nodes = [helper.make_node("Sigmoid", ["x"], ["scores"], name="sigmoid"),
             helper.make_node("Slice", ["scores", "rs", "re", "ra", "rstep"], ["rev"], name="reverse"),
             helper.make_node("TopK", ["rev", "k"], ["top_scores", "rev_idx"], name="topk", axis=-1),
             helper.make_node("Sub", ["last", "rev_idx"], ["top_idx"], name="unreverse"),
             helper.make_node("Squeeze", ["top_idx", "axis0"], ["idx"], name="squeeze"),
             helper.make_node("Gather", ["boxes", "idx"], ["det_boxes"], name="gather", axis=0)]
    inits = [numpy_helper.from_array(np.array([K], np.int64), "k"),
             numpy_helper.from_array(np.array([0], np.int64), "axis0"),
             numpy_helper.from_array(np.array([N - 1], np.int64), "rs"),
             numpy_helper.from_array(np.array([-N - 1], np.int64), "re"),
             numpy_helper.from_array(np.array([1], np.int64), "ra"),
             numpy_helper.from_array(np.array([-1], np.int64), "rstep"),
             numpy_helper.from_array(np.array(N - 1, np.int64), "last")]
    return make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, N]),
                              helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [N, 4])],
                      [helper.make_tensor_value_info("top_scores", TensorProto.FLOAT, [1, K]),
                       helper.make_tensor_value_info("det_boxes", TensorProto.FLOAT, [K, 4])], initializers=inits)
