"""Float32IslandsPass: float64 islands become float32, within the error bound its docstring states."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from deploy_models import decode_model, feeds, onnxruntime_outputs
from onnx import TensorProto, helper
from support import make_model

from bridge.passes.contrib.float32_islands import EXP_ULPS, Float32IslandsPass


def _rewrite(model: onnx.ModelProto) -> tuple[onnx.ModelProto, bool]:
    work = ir.from_proto(onnx.shape_inference.infer_shapes(model))  # the pass needs the dtypes
    modified = Float32IslandsPass()(work).modified
    return ir.to_proto(work), modified


def _doubles(model: onnx.ModelProto) -> list[str]:
    inferred = onnx.shape_inference.infer_shapes(model)
    g = inferred.graph
    return [vi.name for vi in (*g.value_info, *g.output) if vi.type.tensor_type.elem_type == TensorProto.DOUBLE]


@pytest.mark.parametrize("batch", [1, 3])
def test_decode_runs_in_float32_within_the_stated_bound(batch: int) -> None:
    model = decode_model()
    rewritten, modified = _rewrite(model)
    assert modified
    assert _doubles(model) and not _doubles(rewritten)
    assert [n.op_type for n in rewritten.graph.node].count("Cast") == 0
    x = feeds(batch)
    exact, f32 = onnxruntime_outputs(model, x), onnxruntime_outputs(rewritten, x)
    np.testing.assert_array_equal(exact["feat:0"], f32["feat:0"])
    # the bound: EXP_ULPS units in the last place of the float64-rounded exp, times the anchor size (one more
    # rounding of the Mul: half an ulp of the product)
    bound = (EXP_ULPS + 0.5) * np.spacing(np.abs(exact["boxes"]))
    assert np.all(np.abs(f32["boxes"] - exact["boxes"]) <= bound)


def test_float32_exp_error_bound_on_a_wide_range() -> None:
    """The kernel bound itself, on 200k values over the decode's range: onnxruntime's float32 Exp is within
    EXP_ULPS ulp of the correctly rounded exp (float64 rounded once)."""
    t = np.random.default_rng(1).normal(0, 1.5, 200_000).astype(np.float32)
    model = make_model([helper.make_node("Cast", ["t"], ["t64"], to=TensorProto.DOUBLE),
                        helper.make_node("Exp", ["t64"], ["e64"]),
                        helper.make_node("Cast", ["e64"], ["e"], to=TensorProto.FLOAT),
                        helper.make_node("Identity", ["e"], ["y"])],
                       [helper.make_tensor_value_info("t", TensorProto.FLOAT, [None])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None])])
    rewritten, modified = _rewrite(model)
    assert modified
    exact = onnxruntime_outputs(model, {"t": t})["y"]
    fast = onnxruntime_outputs(rewritten, {"t": t})["y"]
    ulps = np.abs(fast.astype(np.float64) - exact) / np.spacing(exact)
    assert ulps.max() <= EXP_ULPS


def test_islands_feeding_a_graph_output_or_float64_consumers_are_handled() -> None:
    """A down-cast that is itself a graph output keeps the output's name; an Exp whose float64 result is also
    used in float64 is left alone (the float64 consumer needs it)."""
    f32, f64 = TensorProto.FLOAT, TensorProto.DOUBLE
    model = make_model([helper.make_node("Cast", ["x"], ["x64"], to=f64),
                        helper.make_node("Exp", ["x64"], ["e64"]),
                        helper.make_node("Cast", ["e64"], ["y"], to=f32),
                        helper.make_node("Cast", ["x"], ["z64"], to=f64),
                        helper.make_node("Exp", ["z64"], ["ez"]),
                        helper.make_node("Cast", ["ez"], ["z"], to=f32),
                        helper.make_node("Add", ["ez", "ez"], ["w"])],
                       [helper.make_tensor_value_info("x", f32, [2])],
                       [helper.make_tensor_value_info("y", f32, [2]), helper.make_tensor_value_info("z", f32, [2]),
                        helper.make_tensor_value_info("w", f64, [2])])
    rewritten, modified = _rewrite(model)
    assert modified
    assert [o.name for o in rewritten.graph.output] == ["y", "z", "w"]
    assert [n.op_type for n in rewritten.graph.node].count("Exp") == 2
    assert [n.op_type for n in rewritten.graph.node].count("Cast") == 2  # the second island is kept whole
    x = np.array([0.5, -1.25], np.float32)
    out = onnxruntime_outputs(rewritten, {"x": x})
    np.testing.assert_allclose(out["y"], np.exp(x), rtol=1e-6)
    np.testing.assert_allclose(out["w"], 2 * np.exp(x.astype(np.float64)), rtol=1e-6)
