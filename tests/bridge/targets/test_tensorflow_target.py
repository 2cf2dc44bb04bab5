"""ONNX -> TF SavedModel through onnx-tf: lowering, Resize canonicalisation, the support check, parity in TF."""

from __future__ import annotations

import importlib.util
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
pytest.importorskip("tensorflow")
if importlib.util.find_spec("onnx_tf") is None:  # importing it directly fails by design (see onnx_tf_compat)
    pytest.skip("onnx-tf is not installed", allow_module_level=True)

from adapters.tensorflow.detection import match_detections
from bridge.errors import UnsupportedOpError, UsageError
from bridge.frameworks import read_signature_map
from bridge.runtimes.onnxruntime import OnnxRuntime
from bridge.runtimes.tensorflow import TensorFlowRuntime
from bridge.targets.tensorflow import (
    OnnxTfUnsupportedError,
    export_saved_model,
    move_saved_model,
    prepare_for_onnx_tf,
    unsupported_nodes,
)


def _model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto],
           opset: int, inits: list[onnx.TensorProto] = ()) -> onnx.ModelProto:  # type: ignore[assignment]
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def _const(name: str, value: Any) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value), name)


def resize_softmax_model(opset: int) -> onnx.ModelProto:
    """Conv then the Resize forms exporters emit (incl. onnx's default nearest, which onnx-tf rejects as is),
    Softmax, and Squeeze/Unsqueeze in their opset-13 axes-as-input form. Input names need TF renaming."""
    rng = np.random.default_rng(0)
    out = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
           for n in ("soft:0", "linear_hp", "linear_ac", "nearest_asym", "pooled")]
    nodes = [
        helper.make_node("Conv", ["input.1", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("Resize", ["c", "", "s2"], ["r_default"], mode="nearest", name="up_default"),
        helper.make_node("Softmax", ["r_default"], ["soft:0"], axis=1, name="softmax"),
        helper.make_node("Resize", ["c", "", "s2"], ["linear_hp"], mode="linear", name="up_linear"),
        helper.make_node("Resize", ["c", "", "", "sizes"], ["linear_ac"], mode="linear",
                         coordinate_transformation_mode="align_corners", name="up_align"),
        helper.make_node("Resize", ["c", "", "s2"], ["nearest_asym"], mode="nearest",
                         coordinate_transformation_mode="asymmetric", nearest_mode="floor", name="up_asym"),
        helper.make_node("GlobalAveragePool", ["linear_hp"], ["gap"], name="gap"),
        helper.make_node("Squeeze", ["gap", "axes23"], ["sq"], name="squeeze"),
        helper.make_node("Unsqueeze", ["sq", "axes0"], ["pooled"], name="unsqueeze"),
    ]
    inits = [_const("w", rng.standard_normal((4, 3, 3, 3)).astype(np.float32)),
             _const("b", rng.standard_normal(4).astype(np.float32)),
             _const("s2", np.array([1, 1, 2, 2], np.float32)),
             _const("sizes", np.array([1, 4, 13, 13], np.int64)),
             _const("axes23", np.array([2, 3], np.int64)), _const("axes0", np.array([0], np.int64))]
    x = helper.make_tensor_value_info("input.1", TensorProto.FLOAT, [1, 3, 8, 8])
    return _model(nodes, [x], out, opset, inits)


def nms_model(opset: int) -> onnx.ModelProto:
    nodes = [
        helper.make_node("NonMaxSuppression", ["boxes", "scores", "max_out", "iou", "thr"], ["selected"], name="nms"),
        helper.make_node("Gather", ["selected", "two"], ["box_idx"], axis=1, name="pick_box_index"),
        helper.make_node("Squeeze", ["boxes", "zero"], ["boxes2d"], name="drop_batch"),
        helper.make_node("Gather", ["boxes2d", "box_idx"], ["det_boxes"], axis=0, name="gather_boxes"),
    ]
    inits = [_const("max_out", np.array([6], np.int64)), _const("iou", np.array([0.5], np.float32)),
             _const("thr", np.array([0.2], np.float32)), _const("two", np.array(2, np.int64)),
             _const("zero", np.array([0], np.int64))]
    return _model(nodes, [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, "n", 4]),
                          helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 1, "n"])],
                  [helper.make_tensor_value_info("selected", TensorProto.INT64, ["k", 3]),
                   helper.make_tensor_value_info("det_boxes", TensorProto.FLOAT, ["k", 4])], opset, inits)


def hardmax_model(opset: int) -> onnx.ModelProto:
    return _model([helper.make_node("Hardmax", ["x"], ["y"], axis=-1, name="hardmax")],
                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])], opset)


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, int], tuple[Any, Any]]:
    """(model, TargetResult) per (model kind, opset), converted once for the module."""
    root = tmp_path_factory.mktemp("tf_target")
    out = {}
    for kind, build in (("resize", resize_softmax_model), ("nms", nms_model), ("hardmax", hardmax_model)):
        for opset in (13, 17):
            model = build(opset)
            out[(kind, opset)] = (model, export_saved_model(model, root / f"{kind}_{opset}"))
    return out


@pytest.mark.parametrize("opset", [13, 17])
def test_resize_softmax_squeeze_match_in_tf(opset: int, converted: dict[Any, Any]) -> None:
    model, result = converted[("resize", opset)]
    assert result.opset_in == opset and result.opset_out == min(opset, 16)
    assert any("lowered opset 17 -> 16" in n for n in result.notes) == (opset == 17)
    assert any("Resize" in n for n in result.notes)  # the default nearest form was canonicalised
    assert result.input_names == {"input.1": "input_1"} and result.output_names["soft:0"] == "soft_0"
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)
    ref = OnnxRuntime(model).infer({"input.1": x})
    rt = TensorFlowRuntime(result.path)
    rt.activate()
    got = rt.infer({"input.1": x})
    assert list(got) == [o.name for o in model.graph.output]
    for name, value in ref.items():
        np.testing.assert_allclose(got[name], value, atol=1e-5, rtol=1e-4, err_msg=name)


@pytest.mark.parametrize("opset", [13, 17])
def test_nms_matches_in_tf(opset: int, converted: dict[Any, Any]) -> None:
    model, result = converted[("nms", opset)]
    rng = np.random.default_rng(4)
    centre, size = rng.uniform(0.2, 0.8, (30, 2)), rng.uniform(0.1, 0.3, (30, 2))
    boxes = np.concatenate([centre - size / 2, centre + size / 2], 1).astype(np.float32)[None]
    scores = rng.permutation(np.linspace(0.05, 0.95, 30)).astype(np.float32)[None, None]
    feeds = {"boxes": boxes, "scores": scores}
    ref = OnnxRuntime(model).infer(feeds)
    rt = TensorFlowRuntime(result.path)
    rt.activate()
    got = rt.infer(feeds)
    ref_scores = scores[0, 0][ref["selected"][:, 2]]
    got_scores = scores[0, 0][got["selected"][:, 2]]
    match = match_detections(ref["det_boxes"], ref_scores, ref["selected"][:, 1], got["det_boxes"], got_scores,
                             got["selected"][:, 1], iou=0.99)
    assert match.reference_count > 1 and match.passed(), match


@pytest.mark.parametrize("opset", [13, 17])
def test_hardmax_runs_through_the_stub(opset: int, converted: dict[Any, Any]) -> None:
    model, result = converted[("hardmax", opset)]
    x = np.array([[1, 3, 3, 0, -1], [5, 1, 2, 5, 0]], np.float32)  # ties: the first maximum wins
    rt = TensorFlowRuntime(result.path)
    rt.activate()
    np.testing.assert_array_equal(rt.infer({"x": x})["y"], OnnxRuntime(model).infer({"x": x})["y"])


def test_signature_map_is_stored_with_the_saved_model(converted: dict[Any, Any]) -> None:
    _, result = converted[("resize", 13)]
    stored = read_signature_map(result.path)
    assert stored["inputs"] == {"input.1": "input_1"} and stored["outputs"]["soft:0"] == "soft_0"
    assert (result.path / "saved_model.pb").is_file()
    assert result.converter == "onnx-tf 1.10.0" and result.seconds > 0


def _unsupported_model() -> onnx.ModelProto:
    nodes = [
        helper.make_node("Bernoulli", ["x"], ["b"], name="coin"),
        helper.make_node("FusedConv", ["x"], ["f"], domain="com.microsoft", name="fused"),
        helper.make_node("Resize", ["x4", "", "s15"], ["r"], mode="nearest", name="up_1_5"),
        helper.make_node("ScatterElements", ["x", "idx", "x"], ["s"], axis=0, reduction="add", name="scatter_add"),
        helper.make_node("RoiAlign", ["x4", "rois", "bidx"], ["roi"], name="roi_align"),
    ]
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2]),
         helper.make_tensor_value_info("x4", TensorProto.FLOAT, [1, 1, 4, 4])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("b", "f", "r", "s", "roi")],
        initializer=[_const("s15", np.array([1, 1, 1.5, 1.5], np.float32)),
                     _const("idx", np.zeros((2, 2), np.int64)), _const("rois", np.zeros((1, 4), np.float32)),
                     _const("bidx", np.zeros(1, np.int64))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    return model


def test_unsupported_ops_are_all_reported_before_conversion(tmp_path: Path) -> None:
    out = tmp_path / "never"
    start = time.perf_counter()
    with pytest.raises(OnnxTfUnsupportedError) as info:
        export_saved_model(_unsupported_model(), out)
    assert isinstance(info.value, UnsupportedOpError)
    text = str(info.value)
    for expected in ("Bernoulli", "com.microsoft::FusedConv", "Resize (nearest, half_pixel, round_prefer_floor)",
                     "up_1_5", "ScatterElements (reduction=add)", "RoiAlign (opset-16 form", "roi_align"):
        assert expected in text, text
    assert "lowered to opset 16" in text and "Traceback" not in text
    assert not out.exists() and not list(tmp_path.iterdir())  # nothing written, not even a temp folder
    assert time.perf_counter() - start < 20


def test_unsupported_nodes_against_a_handler_table() -> None:
    """The check itself needs no TF: onnx-tf's registry shape is {domain: {op: handler class}}."""

    class Relu:
        SINCE_VERSION = 14

        @classmethod
        def version_14(cls) -> None: ...

        @classmethod
        def get_versions(cls) -> list[int]:
            return [14]

    class Old(Relu):
        SINCE_VERSION = 13

    model = helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="ok"), helper.make_node("Abs", ["y"], ["z"], name="too_new"),
         helper.make_node("Neg", ["z"], ["w"], name="no_handler")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("w", TensorProto.FLOAT, [1])]), opset_imports=[helper.make_opsetid("", 14)])
    found = unsupported_nodes(model, {"": {"Relu": Relu, "Abs": Old}})
    assert found == {"Abs (opset-13 form; onnx-tf implements versions [14])": ["too_new"], "Neg": ["no_handler"]}


def test_prepare_keeps_the_caller_model_untouched() -> None:
    model = resize_softmax_model(17)
    before = model.SerializeToString()
    prepared = prepare_for_onnx_tf(model)
    assert model.SerializeToString() == before
    assert prepared.opset_out == 16 and prepared.model.graph.input[0].name == "input_1"


def test_existing_output_is_replaced_atomically_and_foreign_folders_refused(converted: dict[Any, Any],
                                                                            tmp_path: Path) -> None:
    model, _ = converted[("hardmax", 13)]
    out = tmp_path / "sm"
    first = export_saved_model(model, out)
    marker = out / "variables" / "old-marker"
    marker.write_text("x")
    export_saved_model(model, out)  # replaces the previous SavedModel as a whole
    assert first.path == out and (out / "saved_model.pb").is_file() and not marker.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sm"]  # no temp or .old folders left behind
    staged = export_saved_model(model, tmp_path / "staging" / "sm").path  # e.g. validated before publishing
    assert move_saved_model(staged, out) == out and not staged.exists() and (out / "saved_model.pb").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sm", "staging"]
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "notes.txt").write_text("mine")
    with pytest.raises(UsageError, match="not a SavedModel"):
        export_saved_model(model, tmp_path / "foreign")


def test_opset16_type_only_versions_run_through_their_older_handlers(tmp_path: Path) -> None:
    """Where / LeakyRelu / PRelu / GreaterOrEqual / LessOrEqual / ScatterElements at opset 17 -> 16."""
    nodes = [
        helper.make_node("LeakyRelu", ["x"], ["lr"], alpha=0.2, name="leaky"),
        helper.make_node("PRelu", ["x", "slope"], ["pr"], name="prelu"),
        helper.make_node("GreaterOrEqual", ["lr", "pr"], ["ge"], name="ge"),
        helper.make_node("LessOrEqual", ["x", "lr"], ["le"], name="le"),
        helper.make_node("And", ["ge", "le"], ["both"], name="both"),
        helper.make_node("Where", ["both", "lr", "pr"], ["w"], name="where"),
        helper.make_node("ScatterElements", ["w", "idx", "upd"], ["y"], axis=1, name="scatter"),
    ]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], 17,
                   [_const("slope", np.array([0.1, 0.2, 0.3, 0.4], np.float32)),
                    _const("idx", np.array([[3], [0]], np.int64)), _const("upd", np.array([[9.0], [-9.0]], np.float32))])
    result = export_saved_model(model, tmp_path / "sm")
    assert result.opset_out == 16
    x = np.random.default_rng(2).standard_normal((2, 4)).astype(np.float32)
    rt = TensorFlowRuntime(result.path)
    rt.activate()
    np.testing.assert_allclose(rt.infer({"x": x})["y"], OnnxRuntime(model).infer({"x": x})["y"], atol=1e-6)


def test_gather_nd_with_batch_dims_gathers_many_tuples_per_batch(tmp_path: Path) -> None:
    """onnx-tf's own bounds check breaks on batch_dims=1 with several index tuples per batch (an SSD's top-k)."""
    model = _model([helper.make_node("GatherND", ["data", "idx"], ["y"], batch_dims=1, name="topk_gather")],
                   [helper.make_tensor_value_info("data", TensorProto.FLOAT, [2, 7, 3])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5, 3])], 13,
                   [_const("idx", np.array([[[6], [0], [3], [-1], [2]], [[1], [1], [5], [4], [0]]], np.int64))])
    result = export_saved_model(model, tmp_path / "sm")
    data = np.random.default_rng(3).standard_normal((2, 7, 3)).astype(np.float32)
    rt = TensorFlowRuntime(result.path)
    rt.activate()
    np.testing.assert_array_equal(rt.infer({"data": data})["y"], OnnxRuntime(model).infer({"data": data})["y"])
