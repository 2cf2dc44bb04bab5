"""TensorFlow adapter: every source kind exports through tf2onnx and matches TF in onnxruntime."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

import bridge
from adapters.tensorflow.detection import match_detections
from bridge.config import ExportSpec, InputSpec, Source
from bridge.errors import UsageError
from bridge.runtimes.onnxruntime import OnnxRuntime


def _max_err(result: bridge.api.ConvertResult) -> float:
    return max(o.max_abs or 0.0 for c in result.validation for o in c.outputs)


@pytest.mark.parametrize("kind", ["keras", "h5"])
def test_keras_file_matches_in_onnxruntime(kind: str, tf_sources: dict[str, Path], tmp_path: Path) -> None:
    result = bridge.convert(tf_sources[kind], tmp_path / "m.onnx", validate=["onnxruntime"])
    assert result.framework == "tensorflow" and result.exporter.startswith("tf2onnx")
    assert result.passed and _max_err(result) < 1e-4
    assert [m.name for m in result.outputs] == ["up", "gap"]  # the source's order, not tf2onnx's sorted one
    assert result.outputs[0].shape == (1, 32, 32, 4)  # static source -> static model
    assert "Conv" in {n.op_type for n in onnx.load(tmp_path / "m.onnx").graph.node}


def test_keras_object_dynamic_batch_is_named(keras_factory: Any, tmp_path: Path) -> None:
    model = keras_factory(batch=None)
    result = bridge.convert(model, tmp_path / "d.onnx", dynamic=["img:0=batch"], validate=["onnxruntime"])
    assert result.passed
    assert result.inputs[0].shape == ("batch", 16, 16, 3)
    # tf2onnx's per-tensor unk__N symbols are cleared, so inference carries the label to the output
    assert result.outputs[0].shape == ("batch", 32, 32, 4)
    assert result.validation_inputs["img"][0] == 2  # validated at another batch size than the sample
    assert any("batch axis open" in n for n in result.notes)


def test_keras_object_static_batch_defaults_to_one_with_note(keras_factory: Any, tmp_path: Path) -> None:
    result = bridge.convert(keras_factory(batch=None), tmp_path / "s.onnx", inputs=["img:3,16,16,3"],
                            validate=["onnxruntime"])
    assert result.passed and result.inputs[0].shape == (3, 16, 16, 3) and result.outputs[1].shape == (3, 4)
    with pytest.raises(UsageError, match="axis 1 is fixed to 16"):
        bridge.convert(keras_factory(batch=None), tmp_path / "x.onnx", inputs=["img:1,8,16,3"])


def test_tflite_matches_in_onnxruntime_against_the_interpreter(tf_sources: dict[str, Path], tmp_path: Path) -> None:
    result = bridge.convert(tf_sources["tflite"], tmp_path / "t.onnx", validate=["onnxruntime"])
    assert result.passed and _max_err(result) < 1e-4
    assert result.validation[0].reference == "tflite"
    assert "TFLite" in result.exporter


def test_graph_def_with_named_inputs_and_outputs(tf_sources: dict[str, Path], tmp_path: Path) -> None:
    result = bridge.convert(tf_sources["graph_def"], tmp_path / "g.onnx", inputs=["boxes:20,4", "scores:20"],
                            options={"inputs": "boxes,scores:0", "outputs": "Identity:0,Identity_1"},
                            validate=["onnxruntime"])
    assert result.passed and [m.name for m in result.inputs] == ["boxes:0", "scores:0"]
    assert "GraphDef" in result.exporter
    # without --inputs/--outputs the Placeholders and the unconsumed ops are found
    guessed = bridge.convert(tf_sources["graph_def"], tmp_path / "g2.onnx", inputs=["boxes:20,4", "scores:20"],
                             validate=["onnxruntime"])
    assert guessed.passed and len(guessed.outputs) == 2


def test_graph_def_unknown_tensor_is_a_usage_error(tf_sources: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no node"):
        bridge.convert(tf_sources["graph_def"], tmp_path / "g.onnx", options={"inputs": "nope", "outputs": "Identity"})


def test_saved_model_unknown_signature_lists_the_real_ones(tf_sources: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"combined.*nms_v4.*nms_v5.*serving_default"):
        bridge.convert(tf_sources["saved_model"], tmp_path / "x.onnx", options={"signature": "nope"})


def test_unknown_non_batch_axis_needs_a_sample_shape(tf_sources: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="--input boxes:SHAPE"):
        bridge.convert(tf_sources["saved_model"], tmp_path / "x.onnx", options={"signature": "combined"})


def _detections(signature: str, out: dict[str, np.ndarray], boxes: np.ndarray, scores: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(boxes, scores, classes) with padding removed, from each NMS head's outputs."""
    if signature == "nms_v4":
        idx = out["indices"][: int(out["valid"])]
        return boxes[idx], scores[idx], None
    if signature == "combined":
        n = int(out["num"][0])
        return out["det_boxes"][0, :n], out["det_scores"][0, :n], out["det_classes"][0, :n]
    return out["boxes_out"], out["scores_out"], None


@pytest.mark.parametrize("signature", ["serving_default", "nms_v4", "nms_v5", "combined"])
def test_nms_heads_match_in_onnxruntime(signature: str, tf_sources: dict[str, Path], make_boxes: Any,
                                        tmp_path: Path) -> None:
    from adapters import get_adapter
    from adapters.base import ExportResult

    n = 20
    boxes, scores = make_boxes(n, seed=3)
    if signature == "combined":
        feeds = {"boxes": boxes.reshape(1, n, 1, 4),
                 "scores": np.stack([scores, scores[::-1], np.roll(scores, 5)], axis=1).reshape(1, n, 3)}
        inputs = ["boxes:1,20,1,4", "scores:1,20,3"]
    else:
        feeds, inputs = {"boxes": boxes, "scores": scores}, ["boxes:20,4", "scores:20"]
    src = Source(location=str(tf_sources["saved_model"]), options={"signature": signature})
    result = bridge.convert(src, tmp_path / "nms.onnx", inputs=inputs, validate=[])
    model = onnx.load(tmp_path / "nms.onnx")
    assert "NonMaxSuppression" in {nd.op_type for nd in model.graph.node}

    adapter = get_adapter("tensorflow")
    export = ExportResult(model=model, exporter="(file)", inputs=tuple(InputSpec(k, v.shape, "float32")
                                                                       for k, v in feeds.items()),
                          output_names=tuple(o.name for o in result.outputs))
    runner = adapter.reference_runner(src, export)
    runner.activate()
    ref = runner.infer(feeds)
    cand = OnnxRuntime(model).infer(feeds)
    r_boxes, r_scores, r_classes = _detections(signature, ref, boxes, scores)
    c_boxes, c_scores, c_classes = _detections(signature, cand, boxes, scores)
    match = match_detections(r_boxes, r_scores, r_classes, c_boxes, c_scores, c_classes, iou=0.9)
    assert match.reference_count > 1, "the test data should keep several detections"
    assert match.passed(score_atol=1e-5), match


def test_nms_dynamic_box_count(tf_sources: dict[str, Path], make_boxes: Any, tmp_path: Path) -> None:
    """Boxes axis dynamic: the model runs at a box count other than the export sample."""
    result = bridge.convert(tf_sources["saved_model"], tmp_path / "dyn.onnx", inputs=["boxes:20,4", "scores:20"],
                            dynamic=["boxes:0=n", "scores:0=n"], validate=[])
    assert result.inputs[0].shape == ("n", 4)
    boxes, scores = make_boxes(33, seed=5)
    out = OnnxRuntime(str(tmp_path / "dyn.onnx")).infer({"boxes": boxes, "scores": scores})
    import tensorflow as tf

    ref = tf.saved_model.load(str(tf_sources["saved_model"])).signatures["serving_default"](
        boxes=tf.constant(boxes), scores=tf.constant(scores))
    match = match_detections(ref["boxes_out"].numpy(), ref["scores_out"].numpy(), None,
                             out["boxes_out"], out["scores_out"], None)
    assert match.passed(), match


def test_claims_needs_no_tensorflow(tmp_path: Path) -> None:
    """Detection looks at paths only: run it in a process where importing TF would fail."""
    (tmp_path / "sm").mkdir()
    (tmp_path / "sm" / "saved_model.pb").write_bytes(b"")
    code = textwrap.dedent(f"""
        import sys
        class _Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in {{"tensorflow", "keras", "tf2onnx"}}:
                    raise ImportError(name)
        sys.meta_path.insert(0, _Block())
        from adapters.tensorflow import TensorFlowAdapter
        from bridge.config import Source
        a = TensorFlowAdapter()
        got = [a.claims(Source(location=p)) for p in
               ({str(tmp_path / 'sm')!r}, "m.keras", "m.h5", "g.pb", "m.tflite", "m.onnx", "m.pt", {str(tmp_path)!r})]
        assert got == [True, True, True, True, True, False, False, False], got
        print("ok")
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parents[3])
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr


def test_export_result_records_concrete_sample_shapes(tf_sources: dict[str, Path]) -> None:
    from adapters.tensorflow import TensorFlowAdapter

    res = TensorFlowAdapter().export(Source(location=str(tf_sources["keras"])), ExportSpec(opset=13))
    assert res.inputs == (InputSpec("img", (1, 16, 16, 3), "float32"),)
    assert res.output_names == ("up", "gap")
    assert res.model.opset_import[0].version == 13
