"""CanonicalizeResizePass: each exact equivalence rewritten and bit-exact in onnxruntime; the
non-equivalent forms (scale 1.5, 0.5, align_corners on a length where it differs) left alone
with a warning naming the node."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from bridge.passes.resize import CanonicalizeResizePass
from opsets.support import ONNX_TF


def resize_model(coord: str, rounding: str, *, scales: list[float] | None = None, sizes: list[int] | None = None,
                 shape: tuple[int, ...] = (1, 2, 5, 7), opset: int = 13, axes: list[int] | None = None) -> onnx.ModelProto:
    inits = []
    names = ["x", ""]
    if scales is not None:
        inits.append(numpy_helper.from_array(np.asarray(scales, np.float32), "scales"))
        names.append("scales")
    else:
        names.append("")
        inits.append(numpy_helper.from_array(np.asarray(sizes, np.int64), "sizes"))
        names.append("sizes")
    attrs: dict[str, object] = {"mode": "nearest", "coordinate_transformation_mode": coord, "nearest_mode": rounding}
    if axes is not None:
        attrs["axes"] = axes
    node = helper.make_node("Resize", names, ["y"], name="up", **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def run(m: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def canonicalize(m: onnx.ModelProto) -> tuple[onnx.ModelProto, CanonicalizeResizePass, bool]:
    p = CanonicalizeResizePass("onnx-tf")
    result = p(ir.serde.deserialize_model(m))
    return ir.serde.serialize_model(result.model), p, bool(result.modified)


def resize_attrs(m: onnx.ModelProto) -> dict[str, str]:
    node = next(n for n in m.graph.node if n.op_type == "Resize")
    return {a.name: a.s.decode() for a in node.attribute if a.type == onnx.AttributeProto.STRING}


EQUIVALENT = [
    pytest.param("half_pixel", "round_prefer_floor", {"scales": [1, 1, 2, 2]}, id="half_pixel-rpf-2x"),
    pytest.param("half_pixel", "round_prefer_ceil", {"scales": [1, 1, 3, 2]}, id="half_pixel-rpc-3x2"),
    pytest.param("pytorch_half_pixel", "round_prefer_floor", {"scales": [1, 1, 4, 3]}, id="pytorch_half_pixel-4x3"),
    pytest.param("half_pixel", "round_prefer_floor", {"sizes": [1, 2, 10, 21]}, id="half_pixel-sizes-2x3"),
    pytest.param("asymmetric", "round_prefer_floor", {"scales": [1, 1, 2, 2]}, id="asymmetric-rpf-2x"),
    pytest.param("align_corners", "round_prefer_floor", {"scales": [1, 1, 2, 2], "shape": (1, 1, 4, 3)},
                 id="align_corners-2x-static"),
    pytest.param("half_pixel", "round_prefer_floor", {"scales": [2, 2], "axes": [2, 3], "opset": 18}, id="axes-18"),
]


@pytest.mark.parametrize(("coord", "rounding", "kw"), EQUIVALENT)
def test_equivalent_forms_rewritten_bit_exact(coord: str, rounding: str, kw: dict[str, object]) -> None:
    m = resize_model(coord, rounding, **kw)  # type: ignore[arg-type]
    shape = [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim]
    x = np.random.RandomState(0).randn(*shape).astype(np.float32)
    out, p, modified = canonicalize(m)
    assert modified and not p.warnings
    attrs = resize_attrs(out)
    assert (attrs["coordinate_transformation_mode"], attrs["nearest_mode"]) == ("asymmetric", "floor")
    assert ONNX_TF.accepts_resize("nearest", "asymmetric", "floor")
    np.testing.assert_array_equal(run(out, x), run(m, x))


NOT_EQUIVALENT = [
    # (half_pixel + round_prefer_floor happens to pick asymmetric/floor's pixels at 0.5 and 1.5 on
    # these lengths, via .5 ties; the pass claims only integer upscales, where no tie can occur)
    pytest.param("half_pixel", "round_prefer_ceil", {"scales": [1, 1, 1.5, 1.5]}, "not all integer", id="1.5x"),
    pytest.param("half_pixel", "round_prefer_ceil", {"scales": [1, 1, 0.5, 0.5]}, "not all integer", id="0.5x"),
    pytest.param("half_pixel", "floor", {"scales": [1, 1, 2, 2]}, "different pixels", id="half_pixel-floor"),
    pytest.param("align_corners", "round_prefer_floor", {"scales": [1, 1, 3, 3], "shape": (1, 1, 3, 3)},
                 "different pixels", id="align_corners-3x"),
]


@pytest.mark.parametrize(("coord", "rounding", "kw", "why"), NOT_EQUIVALENT)
def test_non_equivalent_left_alone_with_warning(coord: str, rounding: str, kw: dict[str, object], why: str) -> None:
    m = resize_model(coord, rounding, **kw)  # type: ignore[arg-type]
    shape = [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim]
    x = np.random.RandomState(1).randn(*shape).astype(np.float32)
    out, p, modified = canonicalize(m)
    assert not modified
    assert resize_attrs(out)["coordinate_transformation_mode"] == coord
    assert len(p.warnings) == 1 and "'up'" in p.warnings[0] and why in p.warnings[0]
    # and the equivalence really fails: forcing asymmetric/floor would change the output
    forced = resize_model("asymmetric", "floor", **kw)  # type: ignore[arg-type]
    assert not np.array_equal(run(forced, x), run(m, x))


@pytest.mark.parametrize("scale", [1.5, 0.5])
def test_fractional_scales_never_claimed(scale: float) -> None:
    _, p, modified = canonicalize(resize_model("half_pixel", "round_prefer_floor", scales=[1, 1, scale, scale]))
    assert not modified and "not all integer" in p.warnings[0]


def test_accepted_form_untouched() -> None:
    _, p, modified = canonicalize(resize_model("asymmetric", "floor", scales=[1, 1, 2, 2]))
    assert not modified and not p.warnings


def test_unknown_target_rejected() -> None:
    with pytest.raises(KeyError, match="no support table"):
        CanonicalizeResizePass("tvm")
