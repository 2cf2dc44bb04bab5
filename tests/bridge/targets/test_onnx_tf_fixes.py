"""The corrections to onnx-tf's handlers (bridge.targets.onnx_tf_fixes), each checked in the runtimes that run
what the TF path writes: TensorFlow (the SavedModel) and LiteRT (the .tflite converted from it), against
onnxruntime and an exact reference.

- integer Div truncates toward zero, exactly, on operands of both signs and up to 2**62 (onnx-tf's float64
  division was inexact there, and had no LiteRT builtin: the trained torchvision_det / yolo_rows exit 3);
- GatherND whose index depth TensorFlow does not know (tf2onnx's combined NMS, the trained keras_combined_nms
  exit 3), and the ONNX static shapes handlers downstream of it need;
- GatherElements with a negative axis (a pinned variant's TopK values, bridge.validation.pinned_graph);
- a handler output contradicting ONNX's shape names the node; Squeeze-13 on a tensor of unknown rank.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnx
import pytest
from deploy_models import require_litert
from onnx import TensorProto, helper, numpy_helper
from support import make_model

require_litert()

import tensorflow as tf  # noqa: E402  (after the skip: TF is optional)

from bridge.errors import ExportError  # noqa: E402
from bridge.runtimes import activated, get_runtime  # noqa: E402
from bridge.runtimes.onnxruntime import OnnxRuntime  # noqa: E402
from bridge.targets import onnx_tf_fixes  # noqa: E402
from bridge.targets.onnx_tf_compat import _squeeze_13, load_onnx_tf  # noqa: E402
from bridge.targets.onnx_tf_fixes import integer_div, merge_onnx_shapes, onnx_static_shapes  # noqa: E402
from bridge.targets.tensorflow import export_saved_model  # noqa: E402
from bridge.targets.tflite import export_tflite  # noqa: E402

load_onnx_tf()  # installs the corrections


def _onnx(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    with activated(OnnxRuntime(model)) as rt:
        return rt.infer(feeds)


def _in_runtimes(model: onnx.ModelProto, feeds: dict[str, np.ndarray], tmp: Path) -> dict[str, dict[str, np.ndarray]]:
    """``model`` converted by the TF target and the tflite target (LiteRT builtin ops), each run on ``feeds``."""
    saved = export_saved_model(model, tmp / "saved_model").path
    tflite = export_tflite(model, tmp / "model.tflite").path
    outputs = {}
    for name, artefact in (("tensorflow", saved), ("litert", tflite)):
        with activated(get_runtime(name, artefact)) as rt:
            outputs[name] = rt.infer(feeds)
    return outputs


# --- integer Div ---
def _exact_div(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """ONNX integer Div: the quotient truncated toward zero, in Python's exact integers."""
    def one(a: int, b: int) -> int:
        q = abs(a) // abs(b)
        return -q if (a < 0) != (b < 0) else q
    return np.array([one(int(a), int(b)) for a, b in zip(x, y, strict=True)], dtype=x.dtype)


def _div_operands(dtype: type[np.integer], seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Both signs, exact and inexact divisions, divisors +-1 and quotients near the range's limit."""
    rng = np.random.default_rng(seed)
    big = 2**62 if dtype == np.int64 else 2**31 - 1
    pairs = [(7, 2), (-7, 2), (7, -2), (-7, -2), (6, 3), (-6, 3), (0, 5), (0, -5), (1, 7), (-1, 7), (5, 1), (-5, -1),
             (big, 1), (-big, 1), (big, -1), (big, 3), (-big, 3), (big - 1, 7), (-(big - 1), -7), (big, big),
             (big - 1, big), (-(big - 1), big)]
    x = [*(a for a, _ in pairs), *rng.integers(-big, big, 200, dtype=np.int64)]
    y = [*(b for _, b in pairs), *(rng.choice([-1, 1], 200) * rng.integers(1, 1000, 200))]
    return np.array(x, dtype=dtype), np.array(y, dtype=dtype)


def div_model(elem_type: int) -> onnx.ModelProto:
    return make_model([helper.make_node("Div", ["x", "y"], ["q"], name="/Div_1")],
                      [helper.make_tensor_value_info("x", elem_type, ["N"]),
                       helper.make_tensor_value_info("y", elem_type, ["N"])],
                      [helper.make_tensor_value_info("q", elem_type, ["N"])])


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_integer_div_truncates_exactly_in_tensorflow_and_litert(dtype: type[np.integer], tmp_path: Path) -> None:
    """onnx-tf made it a float64 division (tf.RealDiv): no LiteRT builtin, so export_tflite raised, and inexact
    past 2**53 in TensorFlow."""
    x, y = _div_operands(dtype)
    expected = _exact_div(x, y)
    model = div_model(onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))
    np.testing.assert_array_equal(_onnx(model, {"x": x, "y": y})["q"], expected)  # the reference is ONNX's rule
    for runtime, out in _in_runtimes(model, {"x": x, "y": y}, tmp_path).items():
        assert out["q"].dtype == dtype, runtime
        np.testing.assert_array_equal(out["q"], expected, err_msg=runtime)


def test_three_refinement_rounds_are_needed_and_enough(monkeypatch: pytest.MonkeyPatch) -> None:
    """The int64 division's error bound (onnx_tf_fixes docstring): with two rounds quotients near 2**62 are
    off; with three every one is exact."""
    x, y = _div_operands(np.int64, seed=1)
    expected = _exact_div(x, y)
    np.testing.assert_array_equal(integer_div(tf.constant(x), tf.constant(y)).numpy(), expected)
    monkeypatch.setattr(onnx_tf_fixes, "INT64_DIVISION_ROUNDS", 2)
    assert (integer_div(tf.constant(x), tf.constant(y)).numpy() != expected).any()


def test_narrow_integer_div_widens_exactly() -> None:
    """int8 / int16 / uint8 / uint16 through int32, uint32 through int64: the same truncating quotient."""
    for dtype in (np.int8, np.int16, np.uint8, np.uint16, np.uint32):
        info = np.iinfo(dtype)
        rng = np.random.default_rng(3)
        x = rng.integers(info.min, int(info.max) + 1, 300).astype(dtype)
        y = rng.integers(info.min, int(info.max) + 1, 300).astype(dtype)
        y[y == 0] = 1
        if info.min < 0:  # min / -1 overflows the type
            y[(x == info.min) & (y == -1)] = 1
        np.testing.assert_array_equal(integer_div(tf.constant(x), tf.constant(y)).numpy(), _exact_div(x, y),
                                      err_msg=np.dtype(dtype).name)


# --- GatherND with an index depth TensorFlow does not know, and ONNX's static shapes ---
def combined_nms_gather_model() -> onnx.ModelProto:
    """tf2onnx's combined NMS pattern (keras_combined_nms): the (batch, box) columns of NonMaxSuppression-like
    rows ``sel`` [K, 3] sliced out and concatenated into GatherND indices [K, 2] over ``boxes`` [B, N, 1, 4],
    then Squeeze(axis 1) and a Slice of the result. onnx-tf's Slice loses the static dims ([?, ?] where ONNX
    knows [?, 1]); its GatherND then broadcast the indices against every dim of ``boxes`` (wrong rank, a
    failure at Squeeze), and the Slice handler needs a rank."""
    i64, f32 = TensorProto.INT64, TensorProto.FLOAT

    def const(name: str, values: list[int]) -> onnx.TensorProto:
        return numpy_helper.from_array(np.array(values, np.int64), name)

    return make_model(
        [helper.make_node("Slice", ["sel", "zero", "one", "one"], ["batch"], name="take_batch"),
         helper.make_node("Slice", ["sel", "two", "three", "one"], ["box"], name="take_box"),
         helper.make_node("Concat", ["batch", "box"], ["idx"], axis=1, name="indices"),
         helper.make_node("GatherND", ["boxes", "idx"], ["picked"], name="CombinedNonMaxSuppression_GatherND"),
         helper.make_node("Squeeze", ["picked", "one"], ["squeezed"], name="squeeze"),
         helper.make_node("Slice", ["squeezed", "zero", "two", "one"], ["corner"], name="corner")],
        [helper.make_tensor_value_info("boxes", f32, [2, 5, 1, 4]), helper.make_tensor_value_info("sel", i64, ["K", 3])],
        [helper.make_tensor_value_info("squeezed", f32, ["K", 4]), helper.make_tensor_value_info("corner", f32, ["K", 2])],
        initializers=[const("zero", [0]), const("one", [1]), const("two", [2]), const("three", [3])])


def gather_nd_of_any_depth_model(depth: int) -> onnx.ModelProto:
    """GatherND over ``boxes`` [2, 5, 1, 4] with indices [K, D]: the index depth D is known to nobody until the
    model runs (onnx-tf's handler broadcast the indices against all 4 data dims); the output's rank, 5 - D, is
    declared (onnx-tf needs output shapes), its dims are not."""
    f32, i64 = TensorProto.FLOAT, TensorProto.INT64
    return make_model([helper.make_node("GatherND", ["boxes", "idx"], ["picked"], name="gather")],
                      [helper.make_tensor_value_info("boxes", f32, [2, 5, 1, 4]),
                       helper.make_tensor_value_info("idx", i64, ["K", "D"])],
                      [helper.make_tensor_value_info("picked", f32, [f"d{i}" for i in range(5 - depth)])])


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_gather_nd_at_an_index_depth_known_at_run_time_only(depth: int, tmp_path: Path) -> None:
    rng = np.random.default_rng(depth)
    feeds = {"boxes": rng.standard_normal((2, 5, 1, 4)).astype(np.float32),
             "idx": np.stack([rng.integers(-n, n, 6) for n in (2, 5, 1)[:depth]], axis=1).astype(np.int64)}
    expected = _onnx(gather_nd_of_any_depth_model(depth), feeds)["picked"]
    saved = export_saved_model(gather_nd_of_any_depth_model(depth), tmp_path / "saved_model").path
    with activated(get_runtime("tensorflow", saved)) as rt:
        np.testing.assert_array_equal(rt.infer(feeds)["picked"], expected)


def test_gather_nd_whose_index_depth_tf_does_not_know(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    feeds = {"boxes": rng.standard_normal((2, 5, 1, 4)).astype(np.float32),
             # rows (batch, class, box); negative indices count from the end, as ONNX allows
             "sel": np.array([[0, 0, 3], [1, 0, 0], [1, 2, 4], [-1, 1, -2], [0, 0, -5]], np.int64)}
    expected = _onnx(combined_nms_gather_model(), feeds)
    np.testing.assert_array_equal(expected["squeezed"][3], feeds["boxes"][1, 3, 0])
    for runtime, out in _in_runtimes(combined_nms_gather_model(), feeds, tmp_path).items():
        for name, value in expected.items():
            np.testing.assert_array_equal(out[name], value, err_msg=f"{runtime}: {name}")


def test_a_handler_output_contradicting_onnx_names_the_node() -> None:
    node = SimpleNamespace(op_type="GatherND", name="gather", outputs=["picked"])
    with onnx_static_shapes(onnx.shape_inference.infer_shapes(combined_nms_gather_model())):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
        def wrong_rank(x: tf.Tensor) -> tf.Tensor:
            merge_onnx_shapes(node, [x])  # ONNX: [K, 1, 4]
            return x

        with pytest.raises(ExportError, match=r"GatherND handler gives 'gather' output 'picked' the shape \['\?'\] "
                                              r"where ONNX infers \['\?', 1, 4\]"):
            wrong_rank.get_concrete_function()

        @tf.function(input_signature=[tf.TensorSpec(None, tf.float32)])
        def unknown_rank(x: tf.Tensor) -> tf.Tensor:
            merge_onnx_shapes(node, [x])
            assert x.shape.as_list() == [None, 1, 4]  # filled in from ONNX
            return x

        unknown_rank.get_concrete_function()


def test_squeeze_of_a_tensor_whose_rank_tf_does_not_know() -> None:
    """Squeeze-13 needs no rank: TensorFlow's Squeeze normalises (negative) axes when it runs."""
    def squeeze(axes: list[int]) -> tf.types.experimental.ConcreteFunction:
        node = SimpleNamespace(inputs=["x", "axes"], name="sq", op_type="Squeeze")

        @tf.function(input_signature=[tf.TensorSpec(None, tf.float32)])  # rank unknown while tracing
        def run(x: tf.Tensor) -> tf.Tensor:
            return _squeeze_13(None, node, tensor_dict={"x": x, "axes": tf.constant(axes, tf.int64)})[0]
        return run

    x = np.arange(6, dtype=np.float32).reshape(2, 1, 3, 1)
    assert squeeze([1])(x).shape == (2, 3, 1)
    assert squeeze([-1, 1])(x).shape == (2, 3)



# --- GatherElements with a negative axis ---
@pytest.mark.parametrize("axis", [-1, -2])
def test_gather_elements_along_a_negative_axis(axis: int, tmp_path: Path) -> None:
    """onnx-tf failed to convert it at all (a symbolic rank used as a Python index)."""
    f32, i64 = TensorProto.FLOAT, TensorProto.INT64
    shape = [2, 3, 8]
    picked = [*shape]
    picked[axis] = 2  # two elements taken along the axis
    model = make_model([helper.make_node("GatherElements", ["scores", "idx"], ["kept"], name="kept", axis=axis)],
                       [helper.make_tensor_value_info("scores", f32, shape),
                        helper.make_tensor_value_info("idx", i64, picked)],
                       [helper.make_tensor_value_info("kept", f32, picked)])
    rng = np.random.default_rng(-axis)
    feeds = {"scores": rng.standard_normal(shape).astype(np.float32),
             "idx": rng.integers(0, shape[axis], picked).astype(np.int64)}
    expected = _onnx(model, feeds)["kept"]
    np.testing.assert_array_equal(expected, np.take_along_axis(feeds["scores"], feeds["idx"], axis=axis))
    for runtime, out in _in_runtimes(model, feeds, tmp_path).items():
        np.testing.assert_array_equal(out["kept"], expected, err_msg=runtime)
