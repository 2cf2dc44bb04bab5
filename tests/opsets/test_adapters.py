"""Every registered version adapter, one small single-node model each, checked in onnxruntime.

Each case builds a model at the adapter's hop start, converts it one hop (or to the named
target), asserts the adapter really ran, and compares outputs before/after in onnxruntime. The
coverage test fails when an adapter is registered without a case here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from opsets.conversion import convert_opset_with_report
from opsets.errors import OpsetConversionError
from opsets.registry import all_adapters

RNG = np.random.RandomState(0)
X = (RNG.rand(2, 3, 4, 4) + 0.5).astype(np.float32)  # positive: Log/Sqrt/Pow stay finite


@dataclass
class Case:
    node: onnx.NodeProto
    opset: int
    target: int
    inputs: dict[str, np.ndarray] = field(default_factory=lambda: {"x": X})
    inits: dict[str, np.ndarray] = field(default_factory=dict)
    outputs: tuple[str, ...] = ("y",)
    symbolic: bool = False  # graph inputs with named (dynamic) dims instead of the feeds' static shape
    nodes: tuple[onnx.NodeProto, ...] = ()  # nodes before ``node`` (e.g. computing one of its inputs)
    reference: bool = False  # the source model's outputs from onnx's reference evaluator (onnxruntime refuses the form)


def build(case: Case) -> onnx.ModelProto:
    def shape(name: str, value: np.ndarray) -> list[int | str]:
        return [f"{name}_{i}" for i in range(value.ndim)] if case.symbolic else list(value.shape)

    graph = helper.make_graph(
        [*case.nodes, case.node], "g",
        [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), shape(k, v)) for k, v in case.inputs.items()],
        [onnx.ValueInfoProto(name=o) for o in case.outputs],
        initializer=[numpy_helper.from_array(v, k) for k, v in case.inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", case.opset)], ir_version=8)
    return onnx.shape_inference.infer_shapes(model)  # fills in the output types


def run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"]).run(None, feeds)


def n(op: str, inputs: list[str], outputs: list[str] | None = None, **attrs: object) -> onnx.NodeProto:
    return helper.make_node(op, inputs, outputs or ["y"], name=f"{op.lower()}_node", **attrs)


def i64(*v: int) -> np.ndarray:
    return np.asarray(v, dtype=np.int64)


def f32(*v: float) -> np.ndarray:
    return np.asarray(v, dtype=np.float32)


UNARY = {"Abs", "Ceil", "Floor", "Exp", "Log", "Neg", "Reciprocal", "Relu", "Sigmoid", "Sign", "Sqrt", "Tanh",
         "Erf", "Identity", "IsNaN", "IsInf", "LeakyRelu", "GlobalMaxPool"}
BINARY = {"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean", "Equal", "Greater", "Less",
          "GreaterOrEqual", "LessOrEqual", "PRelu", "MatMul"}
REDUCE = {"ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum",
          "ReduceLogSumExp", "ReduceSumSquare", "ReduceSum"}


def generic(op: str, frm: int, to: int) -> Case:
    """A valid single node of ``op`` at opset ``frm`` for the types-only and axes adapters."""
    down = to < frm
    at, target = (frm, frm - 1) if down else (frm - 1, frm)
    if op in UNARY:
        return Case(n(op, ["x"]), at, target)
    if op in BINARY:
        return Case(n(op, ["x", "w"]), at, target, inits={"w": (RNG.rand(2, 3, 4, 4) + 0.5).astype(np.float32)})
    if op in REDUCE:
        if at >= 18 or (op == "ReduceSum" and at >= 13):
            return Case(n(op, ["x", "axes"], keepdims=0), at, target, inits={"axes": i64(1, 3)})
        return Case(n(op, ["x"], axes=[1, 3], keepdims=0), at, target)
    table: dict[str, Callable[[], Case]] = {
        "Concat": lambda: Case(n("Concat", ["x", "x"], axis=1), at, target),
        "Transpose": lambda: Case(n("Transpose", ["x"], perm=[0, 2, 3, 1]), at, target),
        "Flatten": lambda: Case(n("Flatten", ["x"], axis=2), at, target),
        "Reshape": lambda: Case(n("Reshape", ["x", "s"], **({"allowzero": 1} if at >= 14 else {})), at, target,
                                inits={"s": i64(2, -1, 4)}),
        "Shape": lambda: Case(n("Shape", ["x"]), at, target),
        "Size": lambda: Case(n("Size", ["x"]), at, target),
        "Gather": lambda: Case(n("Gather", ["x", "i"], axis=2), at, target, inits={"i": i64(3, 0)}),
        "GatherElements": lambda: Case(n("GatherElements", ["x", "i"], axis=0), at, target,
                                       inits={"i": np.zeros((1, 3, 4, 4), np.int64)}),
        "Slice": lambda: Case(n("Slice", ["x", "b", "e", "a"]), at, target, inits={"b": i64(1), "e": i64(3), "a": i64(2)}),
        "Pad": lambda: Case(n("Pad", ["x", "p"], mode="reflect"), at, target, inits={"p": i64(0, 0, 1, 1, 0, 0, 1, 1)}),
        "Expand": lambda: Case(n("Expand", ["x", "s"]), at, target, inits={"s": i64(2, 2, 3, 4, 4)}),
        "Tile": lambda: Case(n("Tile", ["x", "r"]), at, target, inits={"r": i64(1, 2, 1, 1)}),
        "ArgMax": lambda: Case(n("ArgMax", ["x"], axis=1), at, target),
        "ArgMin": lambda: Case(n("ArgMin", ["x"], axis=1), at, target),
        "DepthToSpace": lambda: Case(n("DepthToSpace", ["x"], blocksize=2), at, target,
                                     inputs={"x": RNG.rand(1, 4, 2, 2).astype(np.float32)}),
        "SpaceToDepth": lambda: Case(n("SpaceToDepth", ["x"], blocksize=2), at, target),
        "Cast": lambda: Case(n("Cast", ["x"], to=TensorProto.DOUBLE, **({"saturate": 1} if at >= 19 else {})), at, target),
        "CastLike": lambda: Case(n("CastLike", ["x", "d"]), at, target, inits={"d": np.zeros(1, np.float64)}),
        "Constant": lambda: Case(n("Constant", [], value=numpy_helper.from_array(f32(1, 2))), at, target, inputs={}),
        "ConstantOfShape": lambda: Case(n("ConstantOfShape", ["s"]), at, target, inputs={}, inits={"s": i64(2, 3)}),
        "Where": lambda: Case(n("Where", ["c", "x", "x"]), at, target, inits={"c": np.asarray([True, False, True, False])}),
        "CumSum": lambda: Case(n("CumSum", ["x", "a"]), at, target, inits={"a": np.asarray(2, np.int64)}),
        "Gemm": lambda: Case(n("Gemm", ["a", "b"], transB=1), at, target, inputs={"a": RNG.rand(3, 4).astype(np.float32)},
                             inits={"b": RNG.rand(5, 4).astype(np.float32)}),
        "AveragePool": lambda: Case(n("AveragePool", ["x"], kernel_shape=[2, 2], **({"dilations": [1, 1]} if at >= 19 else {})),
                                    at, target),
        "MaxPool": lambda: Case(n("MaxPool", ["x"], kernel_shape=[2, 2]), at, target),
        "BatchNormalization": lambda: Case(n("BatchNormalization", ["x", "s", "b", "m", "v"]), at, target,
                                           inits={k: (RNG.rand(3) + 0.5).astype(np.float32) for k in "sbmv"}),
        "Squeeze": lambda: Case(n("Squeeze", ["x", "a"]), at, target, inputs={"x": RNG.rand(2, 1, 4).astype(np.float32)},
                                inits={"a": i64(1)}),
        "Unsqueeze": lambda: Case(n("Unsqueeze", ["x", "a"]), at, target, inits={"a": i64(0, 5)}),
        "Mod": lambda: Case(n("Mod", ["x", "w"]), at, target, inputs={"x": RNG.randint(-50, 50, (3, 4)).astype(np.int64)},
                            inits={"w": i64(7, -3, 5, 2)}),
        "GatherND": lambda: Case(n("GatherND", ["x", "i"]), at, target, inits={"i": i64(1, 0, 0, 1, 1, 2).reshape(3, 2)}),
        "ScatterElements": lambda: Case(n("ScatterElements", ["x", "i", "u"], axis=1), at, target,
                                        inits={"i": np.asarray([[0, 3]], np.int64), "u": f32(5, 6).reshape(1, 2)},
                                        inputs={"x": RNG.rand(2, 4).astype(np.float32)}),
        "ScatterND": lambda: Case(n("ScatterND", ["x", "i", "u"]), at, target, inits={"i": i64(1, 0).reshape(2, 1),
                                                                                 "u": RNG.rand(2, 3, 4, 4).astype(np.float32)}),
    }
    return table[op]()


def _resize(at: int, target: int, attrs: dict[str, object], scales: np.ndarray | None = None,
            sizes: np.ndarray | None = None, x: np.ndarray = X) -> Case:
    inits: dict[str, np.ndarray] = {}
    names = ["x"]
    if at >= 11:
        names.append("roi" if at < 13 else "")
        if at < 13:
            inits["roi"] = np.zeros(0, np.float32)
    if scales is not None:
        names.append("scales")
        inits["scales"] = scales
    elif at >= 11:
        names.append("")
    if sizes is not None:
        names.append("sizes")
        inits["sizes"] = sizes
    if at < 13 and "" in names:
        inits["empty"] = np.zeros(0, np.float32)
        names = ["empty" if nm == "" else nm for nm in names]
    return Case(helper.make_node("Resize", names, ["y"], name="resize_node", **attrs), at, target,
                inputs={"x": x}, inits=inits)


RAMP = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)

# Cases for the adapters whose behaviour is not a plain "same node, older schema"
SPECIAL: dict[str, Callable[[], Case]] = {
    "resize_10_11": lambda: _resize(10, 11, {"mode": "nearest"}, scales=f32(1, 1, 0.5, 0.5)),  # downscale: ceil
    "resize_11_10": lambda: _resize(11, 10, {"mode": "nearest", "coordinate_transformation_mode": "asymmetric",
                                             "nearest_mode": "floor"}, scales=f32(1, 1, 2, 3)),
    "resize_13_11": lambda: _resize(13, 11, {"mode": "linear"}, sizes=i64(2, 3, 7, 9)),
    "resize_18_13": lambda: _resize(18, 13, {"mode": "linear", "axes": [2, 3], "antialias": 0},
                                    scales=f32(2, 1.5)),
    "resize_19_18": lambda: _resize(19, 18, {"mode": "nearest"}, scales=f32(1, 1, 2, 2)),
    "clip_6_11": lambda: Case(n("Clip", ["x"], min=0.7, max=1.2), 10, 11),
    "clip_11_6": lambda: Case(n("Clip", ["x", "lo", "hi"]), 11, 10, inits={"lo": f32(0.7)[0:1].reshape(()), "hi": np.asarray(1.2, np.float32)}),
    "clip_12_11": lambda: Case(n("Clip", ["x", "lo"]), 12, 11, inits={"lo": np.asarray(0.9, np.float32)}),
    "clip_13_12": lambda: Case(n("Clip", ["x", "", "hi"]), 13, 12, inits={"hi": np.asarray(0.9, np.float32)}),
    "relu_14_13": lambda: Case(n("Relu", ["x"]), 14, 13, inputs={"x": np.arange(-3, 3, dtype=np.int32)}),
    "shape_15_13": lambda: Case(n("Shape", ["x"], start=1, end=-1), 15, 14),
    "split_18_13": lambda: Case(n("Split", ["x"], ["a", "b"], axis=1, num_outputs=2), 18, 17, outputs=("a", "b")),
    "pad_18_13": lambda: Case(n("Pad", ["x", "p", "", "a"], mode="reflect"), 18, 17, inits={"p": i64(1, 2, 0, 1),
                                                                                          "a": i64(-1, 2)}),
    "mish_18_17": lambda: Case(n("Mish", ["x"]), 18, 17),
    "gelu_20_19": lambda: Case(n("Gelu", ["x"]), 20, 19),
    "bitcast_26_25": lambda: Case(n("BitCast", ["x"], to=TensorProto.FLOAT), 26, 17),
    "swish_24_23": lambda: Case(n("Swish", ["x"], alpha=1.7), 24, 17, inputs={"x": RNG.randn(2, 3, 4).astype(np.float32)},
                                symbolic=True),
    "lppool_18_11": lambda: Case(n("LpPool", ["x"], kernel_shape=[2, 2], p=2, ceil_mode=0), 18, 17),
    "gridsample_20_16": lambda: Case(n("GridSample", ["x", "g"], mode="linear", align_corners=1), 20, 19,
                                     inits={"g": (RNG.rand(2, 3, 5, 2) * 2 - 1).astype(np.float32)}),
    "groupnormalization_18_17": lambda: Case(n("GroupNormalization", ["x", "s", "b"], num_groups=2, epsilon=1e-3), 18, 17,
                                             inputs={"x": RNG.rand(2, 4, 3, 3).astype(np.float32)},
                                             inits={"s": f32(0.5, 2.0), "b": f32(0.1, -0.3)}),
    "groupnormalization_21_18": lambda: Case(n("GroupNormalization", ["x", "s", "b"], num_groups=2), 21, 20,
                                             inputs={"x": RNG.rand(2, 4, 3, 3).astype(np.float32)},
                                             inits={"s": f32(0.5, 2.0, 1.5, -1), "b": f32(0.1, -0.3, 0, 1)}),
    "col2im_18_17": lambda: Case(n("Col2Im", ["x", "img", "blk"], strides=[2, 1], pads=[1, 0, 1, 1], dilations=[1, 2]),
                                 18, 17, inputs={"x": RNG.rand(2, 3 * 2 * 2, 4 * 4).astype(np.float32)},
                                 inits={"img": i64(6, 5), "blk": i64(2, 2)}),
    "split_13_11": lambda: Case(n("Split", ["x", "s"], ["a", "b"], axis=2), 13, 12, inits={"s": i64(1, 3)},
                                outputs=("a", "b")),
    "softmax_13_11": lambda: Case(n("Softmax", ["x"], axis=1), 13, 12),
    "logsoftmax_13_11": lambda: Case(n("LogSoftmax", ["x"], axis=2), 13, 12),
    "hardmax_13_11": lambda: Case(n("Hardmax", ["x"], axis=1), 13, 12),
    "hardmax_11_13": lambda: Case(n("Hardmax", ["x"], axis=1), 12, 13),
    "layernormalization_17_16": lambda: Case(n("LayerNormalization", ["x", "s", "b"], axis=-2, epsilon=1e-3), 17, 16,
                                             inits={"s": RNG.rand(4, 4).astype(np.float32),
                                                    "b": RNG.rand(4, 4).astype(np.float32)}),
    "rmsnormalization_23_22": lambda: Case(n("RMSNormalization", ["x", "s"]), 23, 17, inits={"s": f32(0.5, 2.0, -1.0, 1.5)}),
    "rotaryembedding_23_22": lambda: _rotary({"num_heads": 0}, (2, 2, 5, 8), 4, positions=True),
    "attention_23_22": lambda: _attention({}, (2, 2, 5, 4), (2, 2, 6, 4)),
    "affinegrid_20_19": lambda: Case(n("AffineGrid", ["t", "s"]), 20, 17, inputs={"t": RNG.randn(2, 2, 3).astype(np.float32)},
                                     inits={"s": i64(2, 3, 4, 5)}),
    "deformconv_19_18": lambda: _deform({}, (2, 3, 6, 5), (4, 3, 3, 3)),
    "cumprod_26_25": lambda: Case(n("CumProd", ["x", "a"]), 26, 17, inits={"a": np.asarray(2, np.int64)}),
    # every integer type, extremes and odd sizes: tests/opsets/test_bitwise.py, test_centercroppad.py
    "centercroppad_18_17": lambda: Case(n("CenterCropPad", ["x", "s"], axes=[2, 3]), 18, 17, inits={"s": i64(3, 7)}),
    **{f"bitwise{op}_18_17": (lambda op=op: Case(n(f"Bitwise{op.capitalize()}", ["x", "w"]), 18, 17, inputs={
        "x": RNG.randint(-(2**31), 2**31 - 1, (3, 4)).astype(np.int32)}, inits={"w": np.asarray(-(2**31), np.int32)}))
       for op in ("and", "or", "xor")},
    "bitwisenot_18_17": lambda: Case(n("BitwiseNot", ["x"]), 18, 17, inputs={"x": np.asarray([0, 1, 255, 128], np.uint8)}),
    "mod_28_13": lambda: Case(n("Mod", ["x", "w"]), 28, 17, inputs={"x": RNG.randint(-50, 50, (3, 4)).astype(np.int32)},
                              inits={"w": np.asarray([7, -3, 5, -11], np.int32)}, reference=True),  # integers: kept
    "swiglu_28_27": lambda: Case(n("SwiGLU", ["x", "w"], alpha=1.702), 28, 17, inits={"w": RNG.randn(2, 3, 4, 4).astype(np.float32)},
                                 inputs={"x": RNG.randn(2, 3, 4, 4).astype(np.float32)}, reference=True),
    "dft_20_17": lambda: Case(n("DFT", ["x"]), 20, 17, inputs={"x": RNG.rand(2, 8, 1).astype(np.float32)}),  # axis -2
    "dequantizelinear_21_19": lambda: Case(n("DequantizeLinear", ["x", "s", "z"], axis=1, block_size=2), 21, 17, inputs={
        "x": RNG.randint(-128, 128, (2, 5, 3)).astype(np.int8)}, inits={"s": RNG.rand(2, 3, 3).astype(np.float32),
                                                                          "z": RNG.randint(-5, 5, (2, 3, 3)).astype(np.int8)}),
    "quantizelinear_21_19": lambda: Case(n("QuantizeLinear", ["x", "s", "z"], axis=-1, block_size=3), 21, 17, inputs={
        "x": (RNG.randn(3, 7) * 40).astype(np.float32)}, inits={"s": RNG.rand(3, 3).astype(np.float32) + 0.1,
                                                                 "z": RNG.randint(0, 30, (3, 3)).astype(np.uint8)}),
    # duplicate targets, a negative index
    "scatterelements_18_16": lambda: Case(n("ScatterElements", ["x", "i", "u"], reduction="max", axis=1), 18, 17,
                                          inputs={"x": RNG.randn(3, 4).astype(np.float32), "u": RNG.randn(3, 3).astype(np.float32)},
                                          inits={"i": np.asarray([[0, 0, 3], [1, -3, 2], [3, 3, 3]], np.int64)}),
    "scatternd_18_16": lambda: Case(n("ScatterND", ["x", "i", "u"], reduction="min"), 18, 17,
                                    inputs={"x": RNG.randn(4, 3, 2).astype(np.float32), "u": RNG.randn(2, 2, 3, 2).astype(np.float32)},
                                    inits={"i": np.asarray([[[0], [2]], [[0], [0]]], np.int64)}),
    "tensorscatter_24_23": lambda: Case(n("TensorScatter", ["c", "u", "w"]), 24, 17, inputs={
        "c": RNG.randn(3, 2, 8, 4).astype(np.float32), "u": RNG.randn(3, 2, 2, 4).astype(np.float32),
        "w": i64(0, 3, 6)}),
    "optionalhaselement_18_15": lambda: Case(n("OptionalHasElement", ["x"]), 18, 17),  # a plain tensor: true
    "optionalgetelement_18_15": lambda: Case(n("OptionalGetElement", ["x"]), 18, 17),  # a plain tensor: itself
    "bitshift_28_11": lambda: Case(n("BitShift", ["x", "s"], direction="RIGHT"), 28, 17, inputs={
        "x": np.asarray([0, 1, 2**32 - 1, 12345], np.uint32)}, inits={"s": np.asarray([3, 0, 31, 7], np.uint32)}, reference=True),  # onnxruntime stops at opset 26
}


def _rotary(attrs: dict[str, int], shape: tuple[int, ...], half: int, positions: bool, symbolic: bool = False) -> Case:
    """RotaryEmbedding on ``x`` of ``shape``; caches of ``half`` columns, indexed by position ids or per token."""
    batch, seq = shape[0], shape[-2] if len(shape) == 4 else shape[1]
    x = RNG.randn(*shape).astype(np.float32)
    angles = RNG.rand(10 if positions else batch, *(() if positions else (seq,)), half).astype(np.float32) * 6
    feeds = {"x": x, "cos": np.cos(angles), "sin": np.sin(angles)}
    if positions:
        feeds["p"] = RNG.randint(0, 10, (batch, seq)).astype(np.int64)
    names = ["x", "cos", "sin", "p"] if positions else ["x", "cos", "sin"]
    return Case(n("RotaryEmbedding", names, ["y"], **attrs), 23, 17, inputs=feeds, symbolic=symbolic)


def _deform(attrs: dict[str, object], x: tuple[int, ...], w: tuple[int, ...], mask: bool = False, bias: bool = False,
            offset_group: int = 1) -> Case:
    """DeformConv on random offsets of up to two pixels (some taps land outside the image)."""
    strides, pads, dil = attrs.get("strides", [1, 1]), attrs.get("pads", [0, 0, 0, 0]), attrs.get("dilations", [1, 1])
    assert isinstance(strides, list) and isinstance(pads, list) and isinstance(dil, list)
    out = [(x[2 + i] + pads[i] + pads[i + 2] - dil[i] * (w[2 + i] - 1) - 1) // strides[i] + 1 for i in range(2)]
    taps = w[2] * w[3]
    feeds = {"x": RNG.randn(*x).astype(np.float32), "off": (RNG.randn(x[0], offset_group * 2 * taps, *out) * 2).astype(np.float32)}
    inits = {"w": RNG.randn(*w).astype(np.float32)}
    names = ["x", "w", "off", "b" if bias else ""]
    if bias:
        inits["b"] = RNG.randn(w[0]).astype(np.float32)
    if mask:
        feeds["m"] = RNG.rand(x[0], offset_group * taps, *out).astype(np.float32)
        names.append("m")
    node = n("DeformConv", names, kernel_shape=list(w[2:]), offset_group=offset_group, **attrs)
    return Case(node, 19, 17, inputs=feeds, inits=inits)


def _attention(attrs: dict[str, object], q: tuple[int, ...], kv: tuple[int, ...], mask: np.ndarray | None = None,
               symbolic: bool = False, outputs: tuple[str, ...] = ("y",), reference: bool = False) -> Case:
    feeds = {"q": RNG.randn(*q).astype(np.float32), "k": RNG.randn(*kv).astype(np.float32),
             "v": RNG.randn(*kv).astype(np.float32)}
    if mask is not None:
        feeds["m"] = mask
    return Case(n("Attention", list(feeds), list(outputs), **attrs), 23, 17, inputs=feeds, symbolic=symbolic,
                outputs=outputs, reference=reference)


def _bool_mask(rows: int, cols: int, dead_row: bool) -> np.ndarray:
    mask = RNG.rand(rows, cols) > 0.3
    mask[:, 0] = True
    if dead_row:
        mask[1] = False  # every key masked: Attention gives zeros there
    return mask



def _scan_8() -> Case:
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "v"], ["s_out"]), helper.make_node("Mul", ["s_out", "v"], ["scan_out"])],
        "body", [helper.make_tensor_value_info("s_in", TensorProto.FLOAT, [4]),
                 helper.make_tensor_value_info("v", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("s_out", TensorProto.FLOAT, [4]),
         helper.make_tensor_value_info("scan_out", TensorProto.FLOAT, [4])])
    node = n("Scan", ["", "s", "x"], ["y", "z"], num_scan_inputs=1, body=body, directions=[1])
    return Case(node, 8, 9, inputs={"s": RNG.rand(1, 4).astype(np.float32), "x": RNG.rand(1, 5, 4).astype(np.float32)},
                outputs=("y", "z"))


SPECIAL["scan_8_9"] = _scan_8


def _summed(name: str, out: str) -> list[onnx.NodeProto]:
    """``out = ReduceSum(name * name, axes=[0], keepdims=1)`` in the ReduceSum-13 form (axes as an input), so a
    subgraph holds a node the hops below 13 must convert as well."""
    return [helper.make_node("Mul", [name, name], [f"{out}_sq"]),
            helper.make_node("Constant", [], [f"{out}_ax"], value=numpy_helper.from_array(i64(0))),
            helper.make_node("ReduceSum", [f"{out}_sq", f"{out}_ax"], [out], keepdims=1)]


def _loop(opset: int, state: str = "tensor") -> Case:
    """A Loop of 4 trips carrying ``s`` (+= x) and scanning out a ReduceSum of its square."""
    vi = helper.make_tensor_value_info
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "x"], ["s_out"]), helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         *_summed("s_out", "sc")],
        "body", [vi("i", TensorProto.INT64, []), vi("cond_in", TensorProto.BOOL, []), vi("s_in", TensorProto.FLOAT, [3])],
        [vi("cond_out", TensorProto.BOOL, []), vi("s_out", TensorProto.FLOAT, [3]), vi("sc", TensorProto.FLOAT, [1])])
    node = n("Loop", ["n", "c", "s0"], ["y", "z"], body=body)
    return Case(node, opset, 11, inputs={"x": RNG.rand(3).astype(np.float32), "s0": RNG.rand(3).astype(np.float32)},
                inits={"n": np.asarray(4, np.int64), "c": np.asarray(True)}, outputs=("y", "z"))


def _if(opset: int) -> Case:
    vi = helper.make_tensor_value_info
    branches = {
        f"{side}_branch": helper.make_graph(
            [helper.make_node(op, ["x", "x"], [f"{side}_t"]), *_summed(f"{side}_t", f"{side}_out")], side, [],
            [vi(f"{side}_out", TensorProto.FLOAT, [1, 3, 4, 4])])
        for side, op in (("then", "Add"), ("else", "Mul"))}
    return Case(n("If", ["c"], **branches), opset, 11, inputs={"x": X, "c": np.asarray(False)})


def _scan_16() -> Case:
    vi = helper.make_tensor_value_info
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "v"], ["s_out"]), *_summed("s_out", "scan_out")],
        "body", [vi("s_in", TensorProto.FLOAT, [4]), vi("v", TensorProto.FLOAT, [4])],
        [vi("s_out", TensorProto.FLOAT, [4]), vi("scan_out", TensorProto.FLOAT, [1])])
    return Case(n("Scan", ["s", "x"], ["y", "z"], num_scan_inputs=1, body=body), 16, 11,
                inputs={"s": RNG.rand(4).astype(np.float32), "x": RNG.rand(5, 4).astype(np.float32)}, outputs=("y", "z"))


SPECIAL.update({"loop_16_13": lambda: _loop(16), "loop_13_11": lambda: _loop(13), "if_16_13": lambda: _if(16),
                "if_13_11": lambda: _if(13), "scan_16_11": _scan_16})


def case_for(name: str) -> Case:
    if name in SPECIAL:
        return SPECIAL[name]()
    adapter = next(a for a in all_adapters() if a.name == name)
    return generic(adapter.op, adapter.from_version, adapter.to_version)


ADAPTER_NAMES = [a.name for a in all_adapters()]


# More than one form per adapter, where the forms take different paths through it
VARIANTS: dict[str, tuple[str, Callable[[], Case]]] = {
    "pad_18_13-no-axes": ("pad_18_13", lambda: Case(n("Pad", ["x", "p"]), 18, 17, inits={"p": i64(0, 1, 0, 2, 0, 0, 1, 0)})),
    "pad_18_13-computed-pads": ("pad_18_13", lambda: Case(
        n("Pad", ["x", "p", "v", "a"]), 18, 17, inits={"a": i64(2, 3), "v": np.asarray(-1, np.float32)}, symbolic=True,
        nodes=(n("Shape", ["x"], ["s"], start=2), n("Sub", ["s", "k"], ["r"]), n("Concat", ["z", "r"], ["p"], axis=0)),
        inputs={"x": X, "k": i64(1, 2), "z": i64(0, 0)})),
    "split_18_13-dynamic-uneven": ("split_18_13", lambda: Case(
        n("Split", ["x"], ["a", "b", "c"], axis=-1, num_outputs=3), 18, 17, symbolic=True, outputs=("a", "b", "c"),
        inputs={"x": RNG.rand(2, 3, 7).astype(np.float32)})),
    "split_18_13-dynamic-even": ("split_18_13", lambda: Case(
        n("Split", ["x"], ["a", "b"], axis=0, num_outputs=2), 18, 17, symbolic=True, outputs=("a", "b"))),
    "split_18_13-static-uneven": ("split_18_13", lambda: Case(
        n("Split", ["x"], ["a", "b", "c"], axis=2, num_outputs=3), 18, 17, outputs=("a", "b", "c"),
        inputs={"x": RNG.rand(2, 3, 7).astype(np.float32)})),
    "gelu_20_19-tanh": ("gelu_20_19", lambda: Case(n("Gelu", ["x"], approximate="tanh"), 20, 19)),
    "groupnormalization_21_18-fp16": ("groupnormalization_21_18", lambda: Case(
        n("GroupNormalization", ["x", "s", "b"], num_groups=1), 21, 20, inputs={"x": RNG.rand(2, 4, 3).astype(np.float16)},
        inits={"s": RNG.rand(4).astype(np.float16), "b": RNG.rand(4).astype(np.float16)})),
    "rmsnormalization_23_22-axis1-dynamic": ("rmsnormalization_23_22", lambda: Case(
        n("RMSNormalization", ["x", "s"], axis=1, epsilon=1e-2), 23, 17, symbolic=True,
        inits={"s": RNG.rand(3, 4, 4).astype(np.float32)})),
    "rmsnormalization_23_22-fp16": ("rmsnormalization_23_22", lambda: Case(
        n("RMSNormalization", ["x", "s"]), 23, 17, inputs={"x": RNG.randn(2, 5, 8).astype(np.float16)},
        inits={"s": RNG.rand(8).astype(np.float16)})),
    "rotaryembedding_23_22-3d-interleaved-partial": ("rotaryembedding_23_22", lambda: _rotary(
        {"num_heads": 2, "interleaved": 1, "rotary_embedding_dim": 4}, (2, 5, 16), 2, positions=True)),
    "rotaryembedding_23_22-3d-halves-dynamic": ("rotaryembedding_23_22", lambda: _rotary(
        {"num_heads": 3}, (2, 5, 12), 2, positions=True, symbolic=True)),
    "rotaryembedding_23_22-per-token-cache-dynamic": ("rotaryembedding_23_22", lambda: _rotary(
        {"interleaved": 1}, (2, 3, 5, 6), 3, positions=False, symbolic=True)),
    "attention_23_22-3d-gqa-causal": ("attention_23_22", lambda: _attention(
        {"q_num_heads": 4, "kv_num_heads": 2, "is_causal": 1}, (2, 5, 16), (2, 5, 8))),
    "attention_23_22-bool-mask-dynamic": ("attention_23_22", lambda: _attention(
        {}, (2, 2, 5, 4), (2, 2, 6, 4), mask=_bool_mask(5, 6, dead_row=True), symbolic=True)),
    "attention_23_22-float-mask-scale-softcap-causal": ("attention_23_22", lambda: _attention(
        {"scale": 0.3, "softcap": 2.0, "is_causal": 1}, (2, 2, 5, 4), (2, 2, 5, 4),
        mask=RNG.randn(2, 1, 5, 5).astype(np.float32))),
    "attention_23_22-short-mask-present": ("attention_23_22", lambda: _attention(
        {"q_num_heads": 2, "kv_num_heads": 2}, (2, 5, 8), (2, 6, 8), mask=_bool_mask(5, 4, dead_row=False),
        outputs=("y", "pk", "pv"), reference=True)),  # onnxruntime wants the mask as long as the keys
    "affinegrid_20_19-3d-align-corners": ("affinegrid_20_19", lambda: Case(
        n("AffineGrid", ["t", "s"], align_corners=1), 20, 17, inputs={"t": RNG.randn(2, 3, 4).astype(np.float32)},
        inits={"s": i64(2, 1, 3, 2, 4)})),
    # a length-1 axis with align_corners sits at -1 (onnx's reference, torch's linspace); onnxruntime puts it at +1
    "affinegrid_20_19-align-corners-length-1": ("affinegrid_20_19", lambda: Case(
        n("AffineGrid", ["t", "s"], align_corners=1), 20, 17, inputs={"t": RNG.randn(2, 3, 4).astype(np.float32)},
        inits={"s": i64(2, 1, 3, 1, 4)}, reference=True)),
    "affinegrid_20_19-computed-size-dynamic": ("affinegrid_20_19", lambda: Case(
        n("AffineGrid", ["t", "s"]), 20, 17, symbolic=True, nodes=(n("Shape", ["x"], ["s"]),),
        inputs={"t": RNG.randn(2, 2, 3).astype(np.float32), "x": RNG.rand(2, 3, 6, 1).astype(np.float32)})),
    "deformconv_19_18-groups-mask-bias-strided": ("deformconv_19_18", lambda: _deform(
        {"group": 2, "strides": [2, 1], "pads": [1, 0, 1, 2], "dilations": [1, 2]}, (2, 4, 7, 6), (6, 2, 2, 3),
        mask=True, bias=True, offset_group=2)),
    "cumprod_26_25-exclusive-reverse-dynamic": ("cumprod_26_25", lambda: Case(
        n("CumProd", ["x", "a"], exclusive=1, reverse=1), 26, 17, symbolic=True, inits={"a": np.asarray(-1, np.int64)})),
    "cumprod_26_25-int32-with-zeros": ("cumprod_26_25", lambda: Case(
        n("CumProd", ["x", "a"]), 26, 17, inputs={"x": RNG.randint(-3, 4, (3, 6)).astype(np.int32)},
        inits={"a": np.asarray(1, np.int32)})),
    "cumprod_26_25-exclusive-axis0": ("cumprod_26_25", lambda: Case(
        n("CumProd", ["x", "a"], exclusive=1), 26, 17, inputs={"x": RNG.randn(5, 2, 3).astype(np.float64)},
        inits={"a": np.asarray(0, np.int64)})),
    # a in [-6, 6] and its specials against b with both signs, +-0 and +-inf (onnxruntime stops at opset 26)
    "mod_28_13-float-floored-specials": ("mod_28_13", lambda: Case(
        n("Mod", ["a", "b"], fmod=0), 28, 17, reference=True, inputs={
            "a": np.concatenate([RNG.uniform(-6, 6, 12), [0.0, -0.0, 5.0, -5.0, np.inf, -np.inf, np.nan, 4.5]]
                                ).astype(np.float32).reshape(-1, 1),
            "b": f32(2.5, -2.5, 0.75, -1e-3, 0.0, -0.0, np.inf, -np.inf, 1.5, np.nan)})),
    "mod_28_13-float-fmod-kept": ("mod_28_13", lambda: Case(
        n("Mod", ["x", "w"], fmod=1), 28, 17, reference=True, inits={"w": f32(-1.5, 0.7, 2.0, 0.3)})),
    "dft_20_17-axis-length-inverse": ("dft_20_17", lambda: Case(
        n("DFT", ["x", "l", "a"], inverse=1), 20, 17, inputs={"x": RNG.randn(2, 6, 5, 2).astype(np.float32)},
        inits={"l": np.asarray(7, np.int64), "a": np.asarray(1, np.int64)})),
    "dft_20_17-onesided-negative-axis-dynamic": ("dft_20_17", lambda: Case(
        n("DFT", ["x", "", "a"], onesided=1), 20, 17, inputs={"x": RNG.randn(2, 6, 5, 1).astype(np.float32)},
        inits={"a": np.asarray(-3, np.int64)}, symbolic=True)),
    "dequantizelinear_21_19-int16-per-axis": ("dequantizelinear_21_19", lambda: Case(
        n("DequantizeLinear", ["x", "s", "z"], axis=0), 21, 17, inputs={"x": RNG.randint(-30000, 30000, (3, 4)).astype(np.int16)},
        inits={"s": f32(0.5, 0.01, 2.0), "z": np.asarray([3, -7, 100], np.int16)})),
    "dequantizelinear_21_19-uint8-blocked-no-zero-point-fp16-dynamic": ("dequantizelinear_21_19", lambda: Case(
        n("DequantizeLinear", ["x", "s"], axis=0, block_size=4), 21, 17, symbolic=True,
        inputs={"x": RNG.randint(0, 256, (6, 2)).astype(np.uint8)}, inits={"s": RNG.rand(2, 2).astype(np.float16)})),
    "dequantizelinear_21_19-per-tensor-kept": ("dequantizelinear_21_19", lambda: Case(
        n("DequantizeLinear", ["x", "s", "z"]), 21, 17, inputs={"x": RNG.randint(0, 256, (6, 2)).astype(np.uint8)},
        inits={"s": np.asarray(0.3, np.float32), "z": np.asarray(7, np.uint8)})),
    "quantizelinear_21_19-int16-per-axis-saturating": ("quantizelinear_21_19", lambda: Case(
        n("QuantizeLinear", ["x", "s", "z"], axis=1), 21, 17, inputs={"x": (RNG.randn(2, 3) * 3e4).astype(np.float32)},
        inits={"s": f32(0.5, 1.0, 2.5), "z": np.asarray([0, -100, 7], np.int16)})),
    "quantizelinear_21_19-ties-to-even-int8-output-dtype": ("quantizelinear_21_19", lambda: Case(
        n("QuantizeLinear", ["x", "s"], axis=0, block_size=2, output_dtype=TensorProto.INT8), 21, 17,
        inputs={"x": f32(0.5, 1.5, 2.5, -0.5, -1.5, 300, -300, 3.49)}, inits={"s": f32(1, 1, 1, 1)})),
    "quantizelinear_21_19-per-tensor-int8-dtype-kept": ("quantizelinear_21_19", lambda: Case(
        n("QuantizeLinear", ["x", "s"], output_dtype=TensorProto.INT8), 21, 17,
        inputs={"x": (RNG.randn(5, 3) * 100).astype(np.float32)}, inits={"s": np.asarray(0.7, np.float32)})),
    "scatterelements_18_16-min-int32-axis0-dynamic": ("scatterelements_18_16", lambda: Case(
        n("ScatterElements", ["x", "i", "u"], reduction="min", axis=-2), 18, 17, symbolic=True,
        inputs={"x": RNG.randint(-2**31, 2**31 - 1, (4, 3, 2)).astype(np.int32),
                "u": RNG.randint(-2**31, 2**31 - 1, (4, 3, 2)).astype(np.int32),
                "i": RNG.randint(-3, 3, (4, 3, 2)).astype(np.int32)})),
    "scatterelements_18_16-add-kept": ("scatterelements_18_16", lambda: Case(
        n("ScatterElements", ["x", "i", "u"], reduction="add", axis=0), 18, 17,
        inputs={"x": RNG.randn(3, 4).astype(np.float32), "u": RNG.randn(2, 4).astype(np.float32)},
        inits={"i": np.asarray([[0, 1, 2, 0], [0, 1, 1, 2]], np.int64)})),
    "scatternd_18_16-max-uint8-full-tuples": ("scatternd_18_16", lambda: Case(
        n("ScatterND", ["x", "i", "u"], reduction="max"), 18, 17,
        inputs={"x": RNG.randint(0, 256, (3, 4)).astype(np.uint8), "u": RNG.randint(0, 256, (6,)).astype(np.uint8)},
        inits={"i": np.asarray([[0, 0], [2, 3], [0, 0], [1, 1], [2, 3], [0, 0]], np.int64)})),
    "reducemax_20_18-bool-any": ("reducemax_20_18", lambda: Case(
        n("ReduceMax", ["x", "a"], keepdims=0), 20, 17, inputs={"x": RNG.rand(3, 4, 2) > 0.7}, inits={"a": i64(1)})),
    "reducemin_20_18-bool-all-keepdims": ("reducemin_20_18", lambda: Case(
        n("ReduceMin", ["x", "a"], keepdims=1), 20, 17, inputs={"x": RNG.rand(3, 4, 2) > 0.3}, inits={"a": i64(0, 2)})),
    "pad_19_18-wrap-beyond-the-size-and-crop": ("pad_19_18", lambda: Case(
        n("Pad", ["x", "p"], mode="wrap"), 19, 17, inputs={"x": RNG.randn(2, 3, 4).astype(np.float32)},
        inits={"p": i64(0, 7, 1, 1, -1, 5)})),
    "pad_19_18-wrap-against-onnx-reference": ("pad_19_18", lambda: Case(
        n("Pad", ["x", "p"], mode="wrap"), 19, 17, inputs={"x": RNG.randn(2, 3, 4).astype(np.float32)},
        inits={"p": i64(1, 7, 0, 0, 2, 9)}, reference=True)),
    "pad_19_18-wrap-axes-computed-pads-dynamic": ("pad_19_18", lambda: Case(
        n("Pad", ["x", "p", "", "a"], mode="wrap"), 19, 17, symbolic=True, nodes=(n("Shape", ["x"], ["s"], start=2),
                                                                          n("Sub", ["s", "k"], ["p"])),
        inputs={"x": X, "k": i64(2, 3)}, inits={"a": i64(-1)})),
    "resize_19_18-half-pixel-symmetric-whole-lengths": ("resize_19_18", lambda: _resize(
        19, 17, {"mode": "linear", "coordinate_transformation_mode": "half_pixel_symmetric"}, scales=f32(1, 1, 1.5, 0.75))),
    "resize_19_18-half-pixel-symmetric-sizes": ("resize_19_18", lambda: _resize(
        19, 17, {"mode": "cubic", "coordinate_transformation_mode": "half_pixel_symmetric"}, sizes=i64(2, 3, 7, 3))),
    "tensorscatter_24_23-circular-axis1-dynamic": ("tensorscatter_24_23", lambda: Case(
        n("TensorScatter", ["c", "u", "w"], mode="circular", axis=1), 24, 17, symbolic=True, inputs={
            "c": RNG.randint(0, 100, (2, 5, 3)).astype(np.int64), "u": RNG.randint(0, 100, (2, 3, 3)).astype(np.int64),
            "w": i64(4, 1)})),
    "tensorscatter_24_23-prefill-no-indices": ("tensorscatter_24_23", lambda: Case(
        n("TensorScatter", ["c", "u"]), 24, 17, inputs={
            "c": np.zeros((2, 6, 4), np.float32), "u": RNG.randn(2, 4, 4).astype(np.float32)})),
    "optionalhaselement_18_15-no-input": ("optionalhaselement_18_15", lambda: Case(
        n("OptionalHasElement", []), 18, 17, inputs={})),
    "optionalhaselement_18_15-optional-kept": ("optionalhaselement_18_15", lambda: Case(
        n("OptionalHasElement", ["o"]), 18, 17, nodes=(helper.make_node("Optional", ["x"], ["o"]),))),
    "optionalhaselement_18_15-empty-optional-kept": ("optionalhaselement_18_15", lambda: Case(
        n("OptionalHasElement", ["o"]), 18, 17, inputs={}, nodes=(helper.make_node(
            "Optional", [], ["o"], type=helper.make_tensor_type_proto(TensorProto.FLOAT, [2])),))),
    "optionalhaselement_18_15-sequence": ("optionalhaselement_18_15", lambda: Case(
        n("OptionalHasElement", ["q"]), 18, 17, nodes=(helper.make_node("SequenceConstruct", ["x", "x"], ["q"]),))),
    "optionalgetelement_18_15-optional-kept": ("optionalgetelement_18_15", lambda: Case(
        n("OptionalGetElement", ["o"]), 18, 17, nodes=(helper.make_node("Optional", ["x"], ["o"]),))),
    "centercroppad_18_17-dynamic-runtime-shape": ("centercroppad_18_17", lambda: Case(
        n("CenterCropPad", ["x", "s"], axes=[-1, 1]), 18, 17, inputs={"x": X, "s": i64(7, 2)}, symbolic=True)),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_adapter_variant_parity(variant: str) -> None:
    name, make = VARIANTS[variant]
    check_parity(name, make())


@pytest.mark.parametrize("name", ADAPTER_NAMES)
def test_adapter_parity(name: str) -> None:
    check_parity(name, case_for(name))


def check_parity(name: str, case: Case) -> None:
    """``case`` converted to its target opset runs ``name`` and computes what it computed at its own opset."""
    model = build(case)
    if case.reference:
        with np.errstate(divide="ignore", invalid="ignore"):  # the reference's own arithmetic (2 / (L - 1) at L = 1, x % 0)
            before = [np.asarray(o) for o in ReferenceEvaluator(model).run(None, case.inputs)]
    else:
        before = run(model, case.inputs)
    converted, applied = convert_opset_with_report(ir.serde.deserialize_model(model), case.target)
    assert name in applied
    proto = ir.serde.serialize_model(converted)
    assert proto.opset_import[0].version == case.target
    after = run(proto, case.inputs)
    for a, b in zip(before, after, strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype
        if not np.issubdtype(a.dtype, np.inexact):  # integers and booleans: exactly (rtol would hide large ones)
            np.testing.assert_array_equal(b, a)
            continue
        tol = 1e-2 if a.dtype == np.float16 else 1e-5
        np.testing.assert_allclose(b, a, atol=tol, rtol=tol)


def test_mod_28_13_zero_takes_the_divisors_sign() -> None:
    """Mod-28 fmod=0 on floats: a zero result has the divisor's sign (``assert_allclose`` does not see it)."""
    case = VARIANTS["mod_28_13-float-floored-specials"][1]()
    converted, _ = convert_opset_with_report(ir.serde.deserialize_model(build(case)), 17)
    (y,) = run(ir.serde.serialize_model(converted), case.inputs)
    with np.errstate(invalid="ignore"):
        expected = np.mod(case.inputs["a"], case.inputs["b"])
    assert (y == 0).any()
    np.testing.assert_array_equal(np.signbit(y), np.signbit(expected))
    np.testing.assert_array_equal(y, expected)


# Lowered forms the later hops must take further down (integer Max/Min/GreaterOrEqual do not exist before 12)
BELOW_12 = ["scatterelements_18_16-min-int32-axis0-dynamic", "scatternd_18_16-max-uint8-full-tuples",
            "pad_19_18-wrap-beyond-the-size-and-crop", "mod_28_13-float-floored-specials"]


@pytest.mark.parametrize("variant", BELOW_12)
def test_lowered_forms_go_on_down_to_opset_11(variant: str) -> None:
    name, make = VARIANTS[variant]
    case = make()
    case.target = 11
    check_parity(name, case)


def test_every_adapter_has_a_case() -> None:
    missing = []
    for name in ADAPTER_NAMES:
        try:
            case_for(name)
        except KeyError:
            missing.append(name)
    assert not missing, f"adapters without a test case: {missing}"


def test_registry_names_follow_convention() -> None:
    for adapter in all_adapters():
        assert adapter.name == f"{adapter.op.lower()}_{adapter.from_version}_{adapter.to_version}"
        assert adapter.from_version != adapter.to_version


# Forms an adapter has no exact rewrite for: refused with an error naming the node and what stops it
REFUSALS: dict[str, tuple[Callable[[], Case], str]] = {
    "attention-kv-cache": (lambda: Case(
        n("Attention", ["q", "k", "v", "", "pk", "pv"], ["y", "k2", "v2"]), 23, 17, outputs=("y", "k2", "v2"),
        inputs={name: RNG.randn(1, 2, 3, 4).astype(np.float32) for name in ("q", "k", "v", "pk", "pv")}), "past_key"),
    "attention-qk-output": (lambda: _attention({"qk_matmul_output_mode": 1}, (1, 2, 3, 4), (1, 2, 3, 4),
                                               outputs=("y", "", "", "qk")), "qk_matmul_output"),
    "loop-sequence-state-below-13": (lambda: _sequence_loop(), "needs opset 13"),
    "bitcast-float-to-int32": (lambda: Case(n("BitCast", ["x"], to=TensorProto.INT32), 26, 17), "FLOAT as INT32"),
    "cumprod-computed-axis": (lambda: Case(n("CumProd", ["x", "a"]), 26, 17, inputs={"x": X, "a": np.asarray(1, np.int64)}),
                              "axis must be a constant"),
    "bitshift-signed-to-11": (lambda: Case(n("BitShift", ["x", "s"], direction="LEFT"), 28, 17, inputs={
        "x": np.asarray([-3, 5], np.int32), "s": np.asarray([1, 2], np.int32)}), "tensor(int32)"),
    "dft-computed-axis": (lambda: Case(n("DFT", ["x", "", "a"]), 20, 17, inputs={
        "x": RNG.rand(2, 8, 1).astype(np.float32), "a": np.asarray(1, np.int64)}), "axis is computed"),
    "quantizelinear-blocked-float8": (lambda: Case(n("QuantizeLinear", ["x", "s"], axis=0, block_size=2,
                                                     output_dtype=TensorProto.FLOAT8E4M3FN), 21, 17,
                                                   inputs={"x": f32(1, 2, 3, 4)}, inits={"s": f32(1, 1)}), "FLOAT8E4M3FN"),
    "resize-half-pixel-symmetric-fractional": (lambda: _resize(
        19, 17, {"mode": "linear", "coordinate_transformation_mode": "half_pixel_symmetric"}, scales=f32(1, 1, 1.3, 0.7)),
        "fractional output lengths"),
    "rotaryembedding-3d-without-heads": (lambda: _rotary({}, (2, 5, 8), 4, positions=True), "num_heads"),
}


def _sequence_loop() -> Case:
    """A Loop whose carried state is a tensor sequence (Loop-13 and newer), taken to opset 11."""
    vi = helper.make_tensor_value_info
    seq = helper.make_tensor_sequence_value_info
    body = helper.make_graph(
        [helper.make_node("SequenceInsert", ["s_in", "x"], ["s_out"]), helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body", [vi("i", TensorProto.INT64, []), vi("cond_in", TensorProto.BOOL, []), seq("s_in", TensorProto.FLOAT, None)],
        [vi("cond_out", TensorProto.BOOL, []), seq("s_out", TensorProto.FLOAT, None)])
    return Case(n("Loop", ["n", "c", "e"], ["s"], body=body), 13, 11, outputs=("s",),
                nodes=(helper.make_node("SequenceEmpty", [], ["e"]),), inputs={"x": X},
                inits={"n": np.asarray(3, np.int64), "c": np.asarray(True)})


@pytest.mark.parametrize("refusal", sorted(REFUSALS))
def test_adapter_refuses_inexact_forms(refusal: str) -> None:
    make, why = REFUSALS[refusal]
    case = make()
    model = ir.serde.deserialize_model(build(case))
    with pytest.raises(OpsetConversionError) as err:
        convert_opset_with_report(model, case.target)
    message = str(err.value)
    assert f"'{case.node.name}'" in message and why in message
