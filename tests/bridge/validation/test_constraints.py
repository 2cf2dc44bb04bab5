"""Generated inputs that feed indices, axes, shapes, scales or counts are valid for their consumer.

Each model below has one graph input read by a consumer that rejects most values (a Gather's indices,
a Reshape's shape, ...). The generated feeds must run in onnxruntime, and the same holds when the
value reaches the consumer through a value-preserving op (Cast). Where no valid value exists the
error names the input and asks for --feeds.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper
from support import make_model

from bridge.errors import UsageError
from bridge.runtimes.base import TensorMeta
from bridge.validation.inputs import make_inputs

F, I64 = T.FLOAT, T.INT64


def vi(name: str, elem: int, shape: list[int]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def const(name: str, values: list[int] | list[float], elem: int = I64) -> onnx.TensorProto:
    return helper.make_tensor(name, elem, [len(values)], values)


# (id, nodes, graph inputs, initializers, opset); the output is always "y"
CASES = [
    ("gather", [helper.make_node("Gather", ["x", "i"], ["y"], axis=1)],
     [vi("x", F, [2, 3]), vi("i", I64, [7])], [], 17),
    ("gather_through_cast", [helper.make_node("Cast", ["i"], ["c"], to=I64),
                             helper.make_node("Gather", ["x", "c"], ["y"], axis=0)],
     [vi("x", F, [2, 3]), vi("i", T.INT32, [5])], [], 17),
    ("gather_elements", [helper.make_node("GatherElements", ["x", "i"], ["y"], axis=1)],
     [vi("x", F, [2, 3]), vi("i", I64, [2, 6])], [], 17),
    ("scatter_elements", [helper.make_node("ScatterElements", ["x", "i", "u"], ["y"], axis=0)],
     [vi("x", F, [3, 3]), vi("i", I64, [2, 3]), vi("u", F, [2, 3])], [], 17),
    ("gather_nd", [helper.make_node("GatherND", ["x", "i"], ["y"])],
     [vi("x", F, [2, 3, 4]), vi("i", I64, [5, 2])], [], 17),
    ("scatter_nd", [helper.make_node("ScatterND", ["x", "i", "u"], ["y"])],
     [vi("x", F, [4, 3]), vi("i", I64, [2, 1]), vi("u", F, [2, 3])], [], 17),
    ("reshape", [helper.make_node("Reshape", ["x", "s"], ["y"])],
     [vi("x", F, [2, 3, 4]), vi("s", I64, [2])], [], 17),
    ("reshape_more_dims", [helper.make_node("Reshape", ["x", "s"], ["y"])],
     [vi("x", F, [2, 3]), vi("s", I64, [4])], [], 17),
    ("expand", [helper.make_node("Expand", ["x", "s"], ["y"])],
     [vi("x", F, [3, 1]), vi("s", I64, [3])], [], 17),
    ("tile", [helper.make_node("Tile", ["x", "r"], ["y"])], [vi("x", F, [2, 3]), vi("r", I64, [2])], [], 17),
    ("resize_scales", [helper.make_node("Resize", ["x", "", "s"], ["y"], mode="nearest")],
     [vi("x", F, [1, 1, 2, 2]), vi("s", F, [4])], [], 17),
    ("resize_sizes", [helper.make_node("Resize", ["x", "", "", "z"], ["y"], mode="linear")],
     [vi("x", F, [1, 1, 2, 3]), vi("z", I64, [4])], [], 17),
    ("resize_roi", [helper.make_node("Resize", ["x", "r", "s"], ["y"], mode="linear",
                                     coordinate_transformation_mode="tf_crop_and_resize")],
     [vi("x", F, [1, 1, 4, 4]), vi("r", F, [8])], [const("s", [1.0, 1.0, 0.5, 0.5], F)], 17),
    ("upsample", [helper.make_node("Upsample", ["x", "s"], ["y"], mode="nearest")],
     [vi("x", F, [1, 1, 2, 2]), vi("s", F, [4])], [], 9),
    ("reduce_axes", [helper.make_node("ReduceSum", ["x", "a"], ["y"])],
     [vi("x", F, [2, 3, 4]), vi("a", I64, [2])], [], 17),
    ("reduce_mean_axes_18", [helper.make_node("ReduceMean", ["x", "a"], ["y"])],
     [vi("x", F, [2, 3, 4]), vi("a", I64, [3])], [], 18),
    ("squeeze_axes", [helper.make_node("Squeeze", ["x", "a"], ["y"])],
     [vi("x", F, [2, 1, 3, 1]), vi("a", I64, [2])], [], 17),
    ("unsqueeze_axes", [helper.make_node("Unsqueeze", ["x", "a"], ["y"])],
     [vi("x", F, [2, 3]), vi("a", I64, [2])], [], 17),
    ("topk", [helper.make_node("TopK", ["x", "k"], ["y", "idx"], axis=1)],
     [vi("x", F, [2, 5]), vi("k", I64, [1])], [], 17),
    ("slice_all_inputs", [helper.make_node("Slice", ["x", "b", "e", "a", "s"], ["y"])],
     [vi("x", F, [4, 5, 6]), vi("b", I64, [2]), vi("e", I64, [2]), vi("a", I64, [2]), vi("s", I64, [2])], [], 17),
    ("slice_starts_ends", [helper.make_node("Slice", ["x", "b", "e"], ["y"])],
     [vi("x", F, [4, 5]), vi("b", I64, [2]), vi("e", I64, [2])], [], 17),
    ("split", [helper.make_node("Split", ["x", "s"], ["y", "y2", "y3"], axis=1)],
     [vi("x", F, [2, 7]), vi("s", I64, [3])], [], 17),
    ("cumsum_axis", [helper.make_node("CumSum", ["x", "a"], ["y"])],
     [vi("x", F, [2, 3]), vi("a", I64, [])], [], 17),
    ("constant_of_shape", [helper.make_node("ConstantOfShape", ["s"], ["y"])], [vi("s", I64, [3])], [], 17),
    ("int_div", [helper.make_node("Div", ["a", "b"], ["y"])],
     [vi("a", T.INT32, [64]), vi("b", T.INT32, [64])], [], 17),
    ("onehot", [helper.make_node("OneHot", ["i", "d", "v"], ["y"])],
     [vi("i", I64, [6]), vi("d", I64, [])], [const("v", [0.0, 1.0], F)], 17),
    ("range", [helper.make_node("Range", ["a", "b", "c"], ["y"])],
     [vi("a", F, []), vi("b", F, []), vi("c", F, [])], [], 17),
    ("nms_thresholds", [helper.make_node("NonMaxSuppression", ["b", "s", "m", "iou", "st"], ["y"])],
     [vi("b", F, [1, 4, 4]), vi("s", F, [1, 1, 4]), vi("m", I64, [1]), vi("iou", F, [1]), vi("st", F, [1])], [], 17),
    ("reverse_sequence", [helper.make_node("ReverseSequence", ["x", "l"], ["y"], batch_axis=1, time_axis=0)],
     [vi("x", F, [4, 3]), vi("l", I64, [3])], [], 17),
    ("gather_elements_through_unsqueeze", [helper.make_node("Unsqueeze", ["t", "one"], ["u"]),
                                           helper.make_node("GatherElements", ["x", "u"], ["y"], axis=1)],
     [vi("x", F, [3, 5]), vi("t", I64, [3])], [const("one", [1])], 17),
    ("mel_weight_matrix", [helper.make_node("MelWeightMatrix", ["n", "d", "s", "lo", "hi"], ["y"])],
     [vi("n", I64, []), vi("d", I64, []), vi("s", I64, []), vi("lo", F, []), vi("hi", F, [])], [], 17),
    ("pad_axes", [helper.make_node("Pad", ["x", "p", "", "a"], ["y"])],
     [vi("x", F, [2, 3]), vi("a", I64, [1])], [const("p", [1, 1])], 18),
]


@pytest.mark.parametrize(("nodes", "inputs", "inits", "opset"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_generated_values_are_valid_for_the_consumer(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto],
                                                     inits: list[onnx.TensorProto], opset: int) -> None:
    outputs = [helper.make_value_info(o, onnx.TypeProto()) for o in nodes[-1].output]
    model = make_model(nodes, inputs, outputs, opset=opset, initializers=inits)
    metas = [TensorMeta.from_value_info(v) for v in inputs]
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for seed in range(5):  # a lucky draw must not hide an invalid rule
        feeds = make_inputs(metas, seed=seed, model=model)
        assert {k: v.shape for k, v in feeds.items()} == {m.name: m.shape for m in metas}
        sess.run(None, feeds)


def test_same_seed_same_constrained_values() -> None:
    model = make_model([helper.make_node("Gather", ["x", "i"], ["y"], axis=0)],
                       [vi("x", F, [9, 2]), vi("i", I64, [20])], [vi("y", F, [20, 2])])
    metas = [TensorMeta.from_value_info(v) for v in model.graph.input]
    a, b = make_inputs(metas, seed=3, model=model), make_inputs(metas, seed=3, model=model)
    assert np.array_equal(a["i"], b["i"]) and a["i"].max() < 9 and a["i"].min() >= 0


def test_generic_values_without_the_model_are_unchanged() -> None:
    metas = [TensorMeta("i", (50,), "int64")]
    feeds = make_inputs(metas, seed=0)
    assert feeds["i"].min() >= 0 and feeds["i"].max() <= 9


@pytest.mark.parametrize(("nodes", "inputs", "needle"), [
    ([helper.make_node("Gather", ["x", "i"], ["y"], axis=1)], [vi("x", F, [2, 0]), vi("i", I64, [3])], "empty axis"),
    ([helper.make_node("Squeeze", ["x", "a"], ["y"])], [vi("x", F, [2, 3]), vi("a", I64, [1])], "distinct axes"),
    ([helper.make_node("Reshape", ["x", "s"], ["y"])], [vi("x", F, [2, 3]), vi("s", I64, [0])], "rank-0"),
])
def test_impossible_values_name_the_input_and_ask_for_feeds(nodes: list[onnx.NodeProto],
                                                             inputs: list[onnx.ValueInfoProto], needle: str) -> None:
    model = make_model(nodes, inputs, [helper.make_value_info("y", onnx.TypeProto())])
    metas = [TensorMeta.from_value_info(v) for v in inputs]
    with pytest.raises(UsageError, match=f"input '{inputs[1].name}' feeds input 1 of {nodes[0].op_type}.*{needle}") as err:
        make_inputs(metas, model=model)
    assert "--feeds" in str(err.value)


def test_the_source_graph_constrains_inputs_the_converted_graph_no_longer_reads() -> None:
    """Passes may drop a consumer (an inference-time Dropout): the source still runs it."""
    source = make_model([helper.make_node("Dropout", ["x", "r"], ["y"])], [vi("x", F, [2, 3]), vi("r", F, [])],
                        [vi("y", F, [2, 3])])
    converted = make_model([helper.make_node("Identity", ["x"], ["y"])], [vi("x", F, [2, 3]), vi("r", F, [])],
                           [vi("y", F, [2, 3])])
    metas = [TensorMeta.from_value_info(v) for v in source.graph.input]
    sess = ort.InferenceSession(source.SerializeToString(), providers=["CPUExecutionProvider"])
    for seed in range(5):
        feeds = make_inputs(metas, seed=seed, model=(source, converted))
        assert 0 <= float(feeds["r"]) < 1
        sess.run(None, feeds)
