"""FoldConstantsPass: folds shape arithmetic on static shapes, drops dead nodes, leaves contrib ops and
legalised integer Clip forms alone, and reports `modified` honestly."""

import numpy as np
import onnx
import onnx_ir as ir
from onnx import TensorProto, helper
from support import make_model

from bridge.passes.cleanup import FoldConstantsPass
from bridge.runtimes import activated, get_runtime


def _fold(proto: onnx.ModelProto) -> tuple[onnx.ModelProto, bool]:
    model = ir.serde.deserialize_model(proto)
    result = FoldConstantsPass()(model)
    return ir.serde.serialize_model(result.model), result.modified


def test_shape_chain_on_static_input_folds_and_dead_nodes_go() -> None:
    proto = make_model(
        [helper.make_node("Shape", ["x"], ["s"]),
         helper.make_node("Reshape", ["x", "s"], ["y"], name="reshape"),
         helper.make_node("Neg", ["x"], ["unused"], name="dead")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    folded, modified = _fold(proto)
    assert modified
    ops = [n.op_type for n in folded.graph.node]
    assert "Shape" not in ops and "Neg" not in ops and len(ops) == 1  # a same-shape Reshape even becomes Identity
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    with activated(get_runtime("onnxruntime", folded)) as rt:
        np.testing.assert_array_equal(rt.infer({"x": x})["y"], x)


def test_nothing_to_do_is_not_modified(relu_model: onnx.ModelProto) -> None:
    _, modified = _fold(relu_model)
    assert not modified


def test_contrib_nodes_and_integer_max_min_survive() -> None:
    lo = onnx.numpy_helper.from_array(np.array(0.0), "lo")
    proto = make_model(
        [helper.make_node("Cast", ["x"], ["xd"], to=TensorProto.DOUBLE),
         helper.make_node("Max", ["xd", "lo"], ["m"]),
         helper.make_node("Cast", ["m"], ["y"], to=TensorProto.INT64),
         helper.make_node("Anchors", ["x"], ["a"], domain="bridge.contrib", name="anchors")],
        [helper.make_tensor_value_info("x", TensorProto.INT64, [4])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, [4]),
         helper.make_tensor_value_info("a", TensorProto.FLOAT, [1])],
        opset=11, initializers=[lo],
    )
    proto.opset_import.append(helper.make_opsetid("bridge.contrib", 1))
    folded, _ = _fold(proto)
    assert [n.op_type for n in folded.graph.node] == ["Cast", "Max", "Cast", "Anchors"]
