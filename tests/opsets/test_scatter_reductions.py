"""ScatterElements / ScatterND 18 -> 16 with reduction max/min (``opsets/version_adapters/scatter.py``) for every
numeric type onnxruntime scatters: many updates aimed at the same targets, compared element for element with
onnxruntime's own reduction (onnx's reference where onnxruntime has no kernel), plus the uint64 refusal."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from opsets.conversion import convert_opset_with_report
from opsets.errors import OpsetConversionError
from tests.opsets.test_adapters import Case, build, run

TYPES = ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "float16", "float32", "float64"]


def _values(dtype: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    if np.issubdtype(np.dtype(dtype), np.floating):
        return rng.standard_normal(shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=np.dtype(dtype))  # type: ignore[call-overload,no-any-return]


def _case(op: str, dtype: str, reduction: str) -> Case:
    rng = np.random.default_rng(abs(hash((op, dtype, reduction))) % 2**32)
    x, u = _values(dtype, (4, 3), rng), _values(dtype, (6, 3) if op == "ScatterND" else (4, 3), rng)
    if op == "ScatterElements":
        node = helper.make_node(op, ["x", "i", "u"], ["y"], name="scatter_node", reduction=reduction, axis=0)
        index = rng.integers(-4, 4, (4, 3))  # duplicates and negative indices
    else:
        node = helper.make_node(op, ["x", "i", "u"], ["y"], name="scatter_node", reduction=reduction)
        index = np.asarray([[1], [3], [1], [1], [0], [3]])
    return Case(node, 18, 17, inputs={"x": x, "u": u}, inits={"i": index.astype(np.int64)})


@pytest.mark.parametrize("reduction", ["max", "min"])
@pytest.mark.parametrize("dtype", TYPES)
@pytest.mark.parametrize("op", ["ScatterElements", "ScatterND"])
def test_scatter_reduction_exact(op: str, dtype: str, reduction: str) -> None:
    case = _case(op, dtype, reduction)
    model = build(case)
    try:
        expected = run(model, case.inputs)[0]
    except Exception:  # e.g. no float16 ScatterND min/max kernel in onnxruntime: onnx's reference instead
        (output,) = ReferenceEvaluator(model).run(None, case.inputs)
        expected = np.asarray(output)
    converted, applied = convert_opset_with_report(ir.serde.deserialize_model(model), 17)
    assert f"{op.lower()}_18_16" in applied
    y = run(ir.serde.serialize_model(converted), case.inputs)[0]
    assert y.dtype == expected.dtype
    np.testing.assert_array_equal(y, expected)


def test_scatter_reduction_refuses_uint64() -> None:
    case = _case("ScatterElements", "int64", "max")
    case.inputs = {k: v.astype(np.uint64) for k, v in case.inputs.items()}
    with pytest.raises(OpsetConversionError, match=r"ScatterElements node 'scatter_node'.*UINT64"):
        convert_opset_with_report(ir.serde.deserialize_model(build(case)), 17)


@pytest.mark.parametrize("op", ["ScatterElements", "ScatterND"])
def test_scatter_reduction_int64_below_2_to_33(op: str) -> None:
    """int64 values in [0, 2^33), many partners per target: where onnxruntime 1.31's ReduceMax over a non-leading
    axis went wrong (the adapter reduces over the leading one)."""
    case = _case(op, "int64", "max")
    rng = np.random.default_rng(7)
    case.inputs = {k: rng.integers(0, 2**33, v.shape).astype(np.int64) for k, v in case.inputs.items()}
    model = build(case)
    expected = run(model, case.inputs)[0]
    converted, _ = convert_opset_with_report(ir.serde.deserialize_model(model), 17)
    np.testing.assert_array_equal(run(ir.serde.serialize_model(converted), case.inputs)[0], expected)
