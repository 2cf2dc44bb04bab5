"""Constant folding is bounded by the memory limit: a few hundred bytes of ONNX declaring a huge constant
(ConstantOfShape, Expand, Tile, Range) are never materialised by the folder."""

from __future__ import annotations

import tracemalloc

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

from bridge.limits import fold_output_elements, memory_limit
from bridge.passes.cleanup import FoldConstantsPass

N = 2**28  # 1 GiB of float32


def _model(nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto]) -> ir.Model:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    nodes = [*nodes, helper.make_node("Add", ["big", "x"], ["y"])]
    graph = helper.make_graph(nodes, "bomb", [x], [y], inits)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    assert len(proto.SerializeToString()) < 600
    return ir.serde.deserialize_model(proto)


def _i64(name: str, values: list[int]) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(values, np.int64), name)


CASES = {
    "ConstantOfShape": ([helper.make_node("ConstantOfShape", ["shape"], ["big"])], [_i64("shape", [N])]),
    "Expand": ([helper.make_node("Expand", ["one", "shape"], ["big"])],
               [numpy_helper.from_array(np.ones([1], np.float32), "one"), _i64("shape", [N])]),
    "Tile": ([helper.make_node("Tile", ["one", "reps"], ["big"])],
             [numpy_helper.from_array(np.ones([1], np.float32), "one"), _i64("reps", [N])]),
    "Range": ([helper.make_node("Range", ["start", "limit", "delta"], ["big"])],
              [numpy_helper.from_array(np.array(0, np.float32), "start"),
               numpy_helper.from_array(np.array(N, np.float32), "limit"),
               numpy_helper.from_array(np.array(1, np.float32), "delta")]),
}


@pytest.mark.parametrize("op", sorted(CASES))
def test_folding_never_allocates_past_the_memory_limit(op: str) -> None:
    model = _model(*CASES[op])
    node = next(n for n in model.graph if n.op_type == op)
    assert fold_output_elements(node) == N
    tracemalloc.start()
    try:
        with memory_limit("256M"):
            FoldConstantsPass()(model)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 2**20, f"folding {op} allocated {peak / 2**20:.0f} MiB"
    assert any(n.op_type == op for n in model.graph)  # left for the runtime
