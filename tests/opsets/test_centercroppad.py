"""CenterCropPad-18 taken to opset 17 (``opsets/version_adapters/centercroppad.py``): crops and pads by even and
odd differences, listed and default axes (negative ones too), static and dynamic input shapes, a constant and a
computed ``shape`` (int32 and int64), checked element for element against onnxruntime's CenterCropPad and onnx's
reference implementation."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx_ir as ir
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from opsets.conversion import convert_opset_with_report
from tests.opsets.test_adapters import Case, build, run

RNG = np.random.default_rng(0)
X = RNG.standard_normal((2, 3, 7, 6)).astype(np.float32)

# (input, axes attribute or None, target shape): odd and even crops and pads, mixed per axis, unchanged axes
CASES: dict[str, tuple[np.ndarray, list[int] | None, list[int]]] = {
    "crop-even-odd": (X, [2, 3], [3, 3]),
    "pad-even-odd": (X, [2, 3], [9, 9]),
    "crop-and-pad": (X, [2, 3], [4, 9]),
    "pad-and-crop-negative-axes": (X, [-1, -2], [1, 10]),
    "all-axes-default": (X, None, [1, 5, 7, 2]),
    "one-axis-unchanged": (X, [1], [3]),
    "1d-int64": (np.arange(11, dtype=np.int64), None, [4]),
    "3d-uint8-pad-by-one": (RNG.integers(0, 255, (2, 4, 5), dtype=np.uint8), [1, 2], [5, 6]),
    "bool-crop-by-one": (RNG.random((5, 4)) > 0.5, [0, 1], [4, 3]),
    "double-axis0": (RNG.standard_normal((6, 3)), [0], [9]),
}


def _case(x: np.ndarray, axes: list[int] | None, target: list[int], *, symbolic: bool, computed: str | None) -> Case:
    attrs: dict[str, Any] = {} if axes is None else {"axes": axes}
    node = helper.make_node("CenterCropPad", ["x", "s"], ["y"], name="centercroppad_node", **attrs)
    shape = np.asarray(target, np.int64 if computed != "int32" else np.int32)
    if computed is None:
        return Case(node, 18, 17, inputs={"x": x}, inits={"s": shape}, symbolic=symbolic)
    return Case(node, 18, 17, inputs={"x": x, "s": shape}, symbolic=symbolic)  # a runtime input


def _check(case: Case, target: int = 17) -> None:
    model = build(case)
    expected = ReferenceEvaluator(model).run(None, case.inputs)
    # onnxruntime's CenterCropPad (its function body) rejects an int32 shape: Max of int64 and int32
    ort_runs = case.inputs.get("s", case.inits.get("s")).dtype == np.int64  # type: ignore[union-attr]
    before = run(model, case.inputs) if ort_runs else expected
    converted, applied = convert_opset_with_report(ir.serde.deserialize_model(model), target)
    assert "centercroppad_18_17" in applied
    proto = ir.serde.serialize_model(converted)
    assert {op.domain: op.version for op in proto.opset_import}[""] == target
    assert all(node.op_type != "CenterCropPad" for node in proto.graph.node)
    after = run(proto, case.inputs)
    for ref, ort_out, ours in zip(expected, before, after, strict=True):
        assert ours.dtype == ref.dtype and ours.shape == ref.shape
        np.testing.assert_array_equal(ours, ref)
        np.testing.assert_array_equal(ours, ort_out)


@pytest.mark.parametrize("computed", [None, "int64", "int32"], ids=["const-shape", "runtime-shape-i64", "runtime-shape-i32"])
@pytest.mark.parametrize("symbolic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_centercroppad_matches_reference(name: str, symbolic: bool, computed: str | None) -> None:
    x, axes, target = CASES[name]
    _check(_case(x, axes, target, symbolic=symbolic, computed=computed))


@pytest.mark.parametrize("name", ["crop-and-pad", "all-axes-default"])
def test_centercroppad_goes_on_down_to_opset_11(name: str) -> None:
    """The later hops take the lowered form further (int64 Max/Min do not exist before opset 12)."""
    x, axes, target = CASES[name]
    _check(_case(x, axes, target, symbolic=True, computed="int64"), target=11)
