"""``ModelContainer.to_proto(reuse=...)`` writes the final model into the exporter's ModelProto around the
weight tensors the IR still holds from it: the same bytes as a plain ``to_proto()`` after the IR was
changed (initializers renamed, dropped, replaced, added; subgraph and attribute tensors; tensor
metadata), with the kept weights the very same proto messages, not copies."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

from bridge.model import ModelContainer


def _proto() -> onnx.ModelProto:
    rng = np.random.default_rng(0)

    def w(name: str, *shape: int) -> TensorProto:
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    sub = helper.make_graph([helper.make_node("Add", ["h", "s"], ["z_sub"])], "sub", [],
                            [helper.make_tensor_value_info("z_sub", TensorProto.FLOAT, [2, 8])], initializer=[w("s", 2, 8)])
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["a"]), helper.make_node("Add", ["a", "b1"], ["b"]),
             helper.make_node("MatMul", ["b", "w2"], ["c"]), helper.make_node("Add", ["c", "gone"], ["h"]),
             helper.make_node("Constant", [], ["k"], value=w("k_value", 8)),
             helper.make_node("If", ["cond"], ["z"], then_branch=sub, else_branch=sub),
             helper.make_node("Mul", ["z", "k"], ["y"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16]),
                     helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])],
        initializer=[w("w1", 16, 32), w("b1", 32), w("w2", 32, 8), w("gone", 8), w("meta", 4)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], doc_string="exported")
    model.metadata_props.add(key="exporter.key", value="kept")
    return model


def _edit(model: ir.Model) -> None:
    """What passes do: rename, drop, replace and add initializers; give one tensor metadata."""
    inits = model.graph.initializers
    inits["w1"].name = "w1_renamed"
    gone = inits["gone"]
    add = next(n for n in model.graph if n.op_type == "Add" and n.inputs[1] is gone)
    folded = ir.Value(name="folded", const_value=ir.tensor(np.full(8, 0.5, np.float32), name="folded"))
    model.graph.register_initializer(folded)
    add.replace_input_with(1, folded)
    model.graph.initializers.pop("gone")
    inits["b1"].const_value = ir.tensor(np.arange(32, dtype=np.float32), name="b1")
    inits["meta"].const_value.metadata_props["note"] = "from a pass"  # type: ignore[union-attr]


@pytest.mark.parametrize("edit", [False, True])
def test_reusing_the_exporters_proto_gives_the_same_model(edit: bool) -> None:
    plain = ModelContainer.from_proto(_proto(), source_framework="f", exporter="e")
    exporter_model = _proto()
    reused = ModelContainer.from_proto(exporter_model, source_framework="f", exporter="e")
    weights = {t.name: t for t in exporter_model.graph.initializer}  # the exporter's own tensor messages
    if edit:
        _edit(plain.model)
        _edit(reused.model)
    want = plain.to_proto().SerializeToString()
    got = reused.to_proto(reuse=exporter_model)
    assert got is exporter_model
    assert got.SerializeToString() == want
    onnx.checker.check_model(got, full_check=True)
    # the weights the IR kept from the exporter are its messages, not copies
    kept = {"w2", "w1"} if edit else {"w1", "b1", "w2", "gone", "meta"}
    for t in got.graph.initializer:
        source_name = "w1" if t.name == "w1_renamed" else t.name
        assert (t is weights.get(source_name)) == (source_name in kept), t.name


def test_a_proto_the_ir_did_not_come_from_is_only_rewritten_not_mixed_in() -> None:
    container = ModelContainer.from_proto(_proto(), source_framework="f", exporter="e")
    want = container.to_proto().SerializeToString()
    other = _proto()  # same content, different messages: nothing to keep, every tensor serialised anew
    assert container.to_proto(reuse=other).SerializeToString() == want
