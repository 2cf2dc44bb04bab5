"""Opset hops of whole small models, numerically checked in onnxruntime before and after.

Upsample (7: scales attribute, 9: scales input) nearest/linear, Clip (float; int64 at 11 which
onnxruntime refuses, so a numpy reference stands in), Softmax-family with a non-last axis, the
stock converter's Upsample-linear shift, a torch dynamo export taken down to 13 and 11, errors.
"""

from __future__ import annotations

import itertools

import numpy as np
import onnx
import onnx.version_converter
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from bridge.errors import UsageError
from opsets.conversion import (
    OpsetConversionError,
    check_target,
    convert_opset,
    convert_opset_with_report,
    newest_runtime_opset,
)

RNG = np.random.RandomState(0)


def model(nodes: list[onnx.NodeProto], opset: int, x_shape: list[int], x_type: int = TensorProto.FLOAT,
          inits: dict[str, np.ndarray] | None = None) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", x_type, x_shape)],
                              [onnx.ValueInfoProto(name="y")],
                              initializer=[numpy_helper.from_array(v, k) for k, v in (inits or {}).items()])
    return onnx.shape_inference.infer_shapes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=7))


def run(m: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(m.SerializeToString(), options, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def convert(m: onnx.ModelProto, target: int) -> onnx.ModelProto:
    out = ir.serde.serialize_model(convert_opset(ir.serde.deserialize_model(m), target))
    assert out.opset_import[0].version == target
    return out


def upsample(mode: str, scales: list[float], opset: int) -> onnx.ModelProto:
    if opset < 9:
        return model([helper.make_node("Upsample", ["x"], ["y"], mode=mode, scales=scales)], opset, [1, 2, 3, 4])
    return model([helper.make_node("Upsample", ["x", "s"], ["y"], mode=mode)], opset, [1, 2, 3, 4],
                 inits={"s": np.asarray(scales, np.float32)})


MODELS = {
    **{f"upsample7-{mode}-{'x'.join(f'{s:g}' for s in sc)}": (lambda mode=mode, sc=sc: upsample(mode, sc, 7))
       for mode in ("nearest", "linear") for sc in ([1.0, 1.0, 2.0, 2.0], [1.0, 1.0, 2.0, 3.0])},
    "upsample9-linear-2x3": lambda: upsample("linear", [1.0, 1.0, 2.0, 3.0], 9),
    "clip7-float": lambda: model([helper.make_node("Clip", ["x"], ["y"], min=-0.5, max=0.7)], 7, [2, 3, 4, 5]),
    "softmax7-axis1": lambda: model([helper.make_node("Softmax", ["x"], ["y"], axis=1)], 7, [2, 3, 4, 5]),
    "logsoftmax7-axis2": lambda: model([helper.make_node("LogSoftmax", ["x"], ["y"], axis=2)], 7, [2, 3, 4, 5]),
    "softmax7-default": lambda: model([helper.make_node("Softmax", ["x"], ["y"])], 7, [2, 3, 4, 5]),
}
CHAIN = [7, 9, 11, 13, 17]
HOPS = [*itertools.pairwise(CHAIN), (7, 13), (7, 17)]


def _input(name: str, m: onnx.ModelProto) -> np.ndarray:
    shape = [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim]
    if name.startswith("upsample"):
        return np.arange(np.prod(shape), dtype=np.float32).reshape(shape)  # a ramp shows coordinate shifts
    return RNG.randn(*shape).astype(np.float32)


@pytest.mark.parametrize("name", MODELS)
def test_chain_7_9_11_13_17(name: str) -> None:
    m = MODELS[name]()
    x = _input(name, m)
    ref = run(m, x)
    start = m.opset_import[0].version
    for target in [t for t in CHAIN if t > start]:
        m = convert(m, target)
        np.testing.assert_allclose(run(m, x), ref, atol=1e-5, err_msg=f"{name} at opset {target}")


@pytest.mark.parametrize(("name", "hop"), [(n, h) for n in MODELS for h in HOPS if MODELS[n]().opset_import[0].version == h[0]])
def test_single_hop(name: str, hop: tuple[int, int]) -> None:
    m = MODELS[name]()
    x = _input(name, m)
    np.testing.assert_allclose(run(convert(m, hop[1]), x), run(m, x), atol=1e-5)


@pytest.mark.parametrize("name", ["softmax7-axis1", "logsoftmax7-axis2"])
@pytest.mark.parametrize("down", [11, 9])
def test_softmax_round_trip_down(name: str, down: int) -> None:
    """13 -> 11/9 is the trap: onnx's converter keeps a non-last axis and changes results."""
    op, axis = ("Softmax", 1) if name.startswith("softmax") else ("LogSoftmax", 2)
    m13 = model([helper.make_node(op, ["x"], ["y"], axis=axis)], 13, [2, 3, 4, 5])
    x = _input(name, m13)
    np.testing.assert_allclose(run(convert(m13, down), x), run(m13, x), atol=1e-5)
    stock = onnx.version_converter.convert_version(m13, down)
    assert np.abs(run(stock, x) - run(m13, x)).max() > 0.1


def test_upsample_linear_stock_shifts_ours_exact() -> None:
    m = upsample("linear", [1.0, 1.0, 2.0, 2.0], 7)
    x = np.arange(24, dtype=np.float32).reshape(1, 2, 3, 4)
    ref = run(m, x)
    stock = float(np.abs(run(onnx.version_converter.convert_version(m, 11), x) - ref).max())
    ours = float(np.abs(run(convert(m, 11), x) - ref).max())
    assert stock > 1.0  # ~1.25 on this ramp: half_pixel instead of Upsample's asymmetric
    assert ours == 0.0
    resize = next(n for n in convert(m, 11).graph.node if n.op_type == "Resize")
    attrs = {a.name: a.s.decode() for a in resize.attribute if a.type == onnx.AttributeProto.STRING}
    assert attrs["coordinate_transformation_mode"] == "asymmetric"


def test_upsample_nearest_becomes_asymmetric_floor() -> None:
    m = convert(upsample("nearest", [1.0, 1.0, 2.0, 3.0], 7), 11)
    resize = next(n for n in m.graph.node if n.op_type == "Resize")
    attrs = {a.name: a.s.decode() for a in resize.attribute if a.type == onnx.AttributeProto.STRING}
    assert attrs == {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}


def _int_clip(opset: int) -> onnx.ModelProto:
    inits = {"lo": np.asarray(-3, np.int64), "hi": np.asarray(5, np.int64)}
    return model([helper.make_node("Clip", ["x", "lo", "hi"], ["y"], name="clip_i64")], opset, [2, 6], TensorProto.INT64, inits)


X_INT = np.asarray([[-(2**40), -4, -3, 0, 5, 9], [1, 2, 3, 4, 6, 2**40 + 1]], np.int64)


@pytest.mark.parametrize("target", [11, 12, 13, 17])
def test_clip_int64_from_opset_11(target: int) -> None:
    m = _int_clip(11)
    with pytest.raises(Exception, match=r"(?i)clip|type"):
        run(m, X_INT)  # onnxruntime refuses the original: integer Clip needs opset 12
    out = run(convert(m, target), X_INT)
    np.testing.assert_array_equal(out, np.clip(X_INT, -3, 5))
    assert out.dtype == np.int64


def test_clip_int64_down_to_11_and_9() -> None:
    m = _int_clip(13)
    for target in (11, 9):
        out = run(convert(m, target), X_INT)
        np.testing.assert_array_equal(out, np.clip(X_INT, -3, 5))


def test_clip6_int32_up_gets_typed_bounds() -> None:
    m = model([helper.make_node("Clip", ["x"], ["y"], min=-2.0, max=3.0)], 7, [5], TensorProto.INT32)
    x = np.arange(-4, 6, 2, dtype=np.int32)
    np.testing.assert_array_equal(run(convert(m, 12), x), np.clip(x, -2, 3))


def _dynamo_model() -> tuple[onnx.ModelProto, np.ndarray]:
    torch = pytest.importorskip("torch")

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.bn = torch.nn.BatchNorm2d(8)
            self.ln = torch.nn.LayerNorm(8)

        def forward(self, x):  # type: ignore[no-untyped-def]
            y = torch.relu(self.bn(self.conv(x)))
            y = torch.nn.functional.interpolate(y, scale_factor=2, mode="nearest")
            z = torch.nn.functional.interpolate(y, scale_factor=2, mode="bilinear", align_corners=False)
            a, b = torch.split(z, 4, dim=1)
            m = a.mean(dim=(2, 3), keepdim=True) + b.sum(dim=1, keepdim=True).amax(dim=(2, 3), keepdim=True)
            y = torch.softmax(a * m, dim=1)
            y = y.reshape(1, 4, -1).permute(0, 2, 1)
            return self.ln(torch.cat([y, y], dim=2))

    torch.manual_seed(0)
    net = Net().eval()
    x = torch.randn(1, 3, 4, 5)
    proto = torch.onnx.export(net, (x,), dynamo=True, verbose=False).model_proto
    return proto, x.numpy()


@pytest.fixture(scope="module")
def dynamo() -> tuple[onnx.ModelProto, np.ndarray]:
    return _dynamo_model()


@pytest.mark.parametrize("target", [17, 13, 11])
def test_dynamo_export_down(dynamo: tuple[onnx.ModelProto, np.ndarray], target: int) -> None:
    proto, x = dynamo
    assert proto.opset_import[0].version >= 18
    feeds = {proto.graph.input[0].name: x}
    options = ort.SessionOptions()
    options.log_severity_level = 3
    ref = ort.InferenceSession(proto.SerializeToString(), options).run(None, feeds)
    converted, applied = convert_opset_with_report(ir.serde.deserialize_model(proto), target)
    out_proto = ir.serde.serialize_model(converted)
    onnx.checker.check_model(out_proto, full_check=True)
    out = ort.InferenceSession(out_proto.SerializeToString(), options).run(None, feeds)
    for a, b in zip(ref, out, strict=True):
        np.testing.assert_allclose(b, a, atol=1e-5)
    assert {"split_18_13", "reducemean_18_13", "resize_19_18"} <= set(applied)
    if target <= 13:
        assert {"layernormalization_17_16", "relu_14_13", "reshape_14_13"} <= set(applied)
    if target <= 11:
        assert "softmax_13_11" in applied


def test_no_path_down_names_op_and_node() -> None:
    # GridSample exists from opset 16 only; no adapter turns it into something older
    nodes = [helper.make_node("GridSample", ["x", "g"], ["y"], name="sampler")]
    m = model(nodes, 16, [1, 1, 4, 4], inits={"g": np.zeros((1, 2, 2, 2), np.float32)})
    with pytest.raises(OpsetConversionError, match=r"GridSample.*sampler"):
        convert(m, 15)


def test_adapter_refusal_names_op_and_node() -> None:
    nodes = [helper.make_node("Resize", ["x", "", "s"], ["y"], name="up", mode="linear",
                              coordinate_transformation_mode="half_pixel_symmetric")]
    # 4 * 1.3 is no whole length: half_pixel_symmetric then differs from half_pixel (a whole one converts)
    m = model(nodes, 19, [1, 1, 4, 4], inits={"s": np.asarray([1, 1, 1.3, 1.3], np.float32)})
    with pytest.raises(OpsetConversionError, match=r"Resize node 'up'.*half_pixel_symmetric"):
        convert(m, 17)


def test_newest_runtime_opset_bounds_targets() -> None:
    newest = newest_runtime_opset()
    assert newest >= 21
    check_target(newest)
    with pytest.raises(UsageError):
        check_target(newest + 1)
    with pytest.raises(UsageError):
        check_target(6)


@pytest.mark.parametrize("target", [17, 9])  # up through onnx's converter (from 11), and down
def test_conversion_shares_the_weights_and_leaves_the_input_alone(target: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A copy of the graph, not of the weights: the converted model's initializers are the input's own tensor
    objects, onnx's C++ converter never sees a weight over 1 KB (it stands in as a typed input), the input
    model is unchanged, and the numbers are the same."""
    w = RNG.randn(64, 3, 3, 3).astype(np.float32)  # 6.9 KB
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),  # b: a small initializer
             helper.make_node("Softmax", ["c"], ["y"], axis=1)]  # Softmax changes at 13: a stock hop
    proto = model(nodes, 11, [1, 3, 8, 8], inits={"w": w, "b": RNG.randn(64).astype(np.float32)})
    source = ir.serde.deserialize_model(proto)
    weight = source.graph.initializers["w"].const_value
    seen: list[onnx.ModelProto] = []
    stock = onnx.version_converter.convert_version

    def spy(p: onnx.ModelProto, to: int) -> onnx.ModelProto:
        seen.append(p)
        return stock(p, to)

    monkeypatch.setattr(onnx.version_converter, "convert_version", spy)
    converted = convert_opset(source, target)
    assert seen and all("w" not in [t.name for t in p.graph.initializer] for p in seen)
    assert converted.graph.initializers["w"].const_value is weight  # shared, not copied
    assert [v.name for v in converted.graph.inputs] == ["x"] and set(converted.graph.initializers) == {"w", "b"}
    assert source.graph.initializers["w"].const_value is weight and [v.name for v in source.graph.inputs] == ["x"]
    assert dict(source.opset_imports)[""] == 11
    x = RNG.randn(1, 3, 8, 8).astype(np.float32)
    np.testing.assert_allclose(run(ir.serde.serialize_model(converted), x), run(proto, x), rtol=1e-5, atol=1e-6)
