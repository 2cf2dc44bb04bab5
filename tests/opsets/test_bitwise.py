"""BitwiseAnd / Or / Xor / Not-18 taken to opset 17 (``opsets/version_adapters/bitwise.py``): for every integer
type of the schema, on random values over the type's whole range plus its extremes (0, 1, -1, min, max, every
pair of them for the binary ops), the lowered model must give exactly what onnxruntime's bitwise kernels and
numpy give. Also broadcasting operands and dynamic shapes."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import helper

from opsets.conversion import convert_opset_with_report
from tests.opsets.test_adapters import Case, build, run

TYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {"BitwiseAnd": np.bitwise_and, "BitwiseOr": np.bitwise_or, "BitwiseXor": np.bitwise_xor}


def _values(dtype: str, count: int, seed: int) -> np.ndarray:
    info = np.iinfo(dtype)
    rng = np.random.default_rng(seed)
    random = rng.integers(info.min, info.max, size=count, dtype=np.dtype(dtype), endpoint=True)  # type: ignore[call-overload]
    return np.concatenate([_extremes(dtype), random])


def _extremes(dtype: str) -> np.ndarray:
    info = np.iinfo(dtype)
    values = {0, 1, 2, info.max, info.max - 1, info.min, info.min + 1, info.max // 2, info.max // 2 + 1}
    if info.min < 0:
        values |= {-1, -2, info.min // 2}
    return np.asarray(sorted(values), dtype=dtype)


def _lower(case: Case, name: str, target: int = 17) -> list[np.ndarray]:
    """The case's outputs at opset 18 (onnxruntime) and after conversion to ``target``, which must have run ``name``."""
    model = build(case)
    before = run(model, case.inputs)
    converted, applied = convert_opset_with_report(ir.serde.deserialize_model(model), target)
    assert name in applied
    proto = ir.serde.serialize_model(converted)
    assert {op.domain: op.version for op in proto.opset_import}[""] == target
    assert not any(node.op_type.startswith("Bitwise") for node in proto.graph.node)
    after = run(proto, case.inputs)
    for a, b in zip(before, after, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(b, a)
    return after


def _node(op: str, inputs: list[str]) -> onnx.NodeProto:
    return helper.make_node(op, inputs, ["y"], name=f"{op.lower()}_node")


@pytest.mark.parametrize("dtype", TYPES)
@pytest.mark.parametrize("op", sorted(BINARY))
def test_binary_exact_on_extremes_and_random(op: str, dtype: str) -> None:
    extremes = _extremes(dtype)
    pairs = np.asarray(list(itertools.product(extremes, extremes)), dtype=dtype)  # every pair of extremes
    a = np.concatenate([pairs[:, 0], _values(dtype, 300, 1)])
    c = np.concatenate([pairs[:, 1], _values(dtype, 300, 2)])
    case = Case(_node(op, ["a", "c"]), 18, 17, inputs={"a": a, "c": c})
    (y,) = _lower(case, f"{op.lower()}_18_17")
    np.testing.assert_array_equal(y, BINARY[op](a, c))


@pytest.mark.parametrize("dtype", TYPES)
def test_not_exact_on_extremes_and_random(dtype: str) -> None:
    x = _values(dtype, 300, 3)
    case = Case(_node("BitwiseNot", ["x"]), 18, 17, inputs={"x": x})
    (y,) = _lower(case, "bitwisenot_18_17")
    np.testing.assert_array_equal(y, np.bitwise_not(x))


@pytest.mark.parametrize("dtype", ["int8", "int64", "uint64"])
@pytest.mark.parametrize("op", sorted(BINARY))
def test_binary_broadcasts_with_dynamic_shapes(op: str, dtype: str) -> None:
    a = _values(dtype, 3, 4).reshape(-1, 1, 1)  # [n, 1, 1] against [1, 2, 8]
    c = _values(dtype, 16, 5)[:16].reshape(1, 2, 8)
    case = Case(_node(op, ["a", "c"]), 18, 17, inputs={"a": a, "c": c}, symbolic=True)
    (y,) = _lower(case, f"{op.lower()}_18_17")
    np.testing.assert_array_equal(y, BINARY[op](a, c))


@pytest.mark.parametrize("op", sorted(BINARY))
def test_binary_with_a_scalar_constant(op: str) -> None:
    x = _values("int32", 50, 6).reshape(-1, 1)
    mask = np.asarray(-252645136, np.int32)  # 0xF0F0F0F0
    case = Case(_node(op, ["x", "m"]), 18, 17, inputs={"x": x}, inits={"m": mask})
    (y,) = _lower(case, f"{op.lower()}_18_17")
    np.testing.assert_array_equal(y, BINARY[op](x, mask))


@pytest.mark.parametrize("dtype", TYPES)
@pytest.mark.parametrize("op", ["BitwiseXor", "BitwiseNot"])
def test_lowered_form_goes_on_down_to_opset_11(op: str, dtype: str) -> None:
    """What the adapters emit at 17 is taken further down by the later hops (Sub on 8-bit types, integer Max and
    GreaterOrEqual do not exist at 11)."""
    names = ["a"] if op == "BitwiseNot" else ["a", "c"]
    feeds = {name: _values(dtype, 100, seed) for seed, name in enumerate(names)}
    (y,) = _lower(Case(_node(op, names), 18, 11, inputs=feeds), f"{op.lower()}_18_17", target=11)
    expected = np.bitwise_not(feeds["a"]) if op == "BitwiseNot" else np.bitwise_xor(feeds["a"], feeds["c"])
    np.testing.assert_array_equal(y, expected)
