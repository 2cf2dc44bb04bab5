"""Per-tensor taps of a TensorFlow source (``bridge.conversion.sources.TFTaps``).

A small Keras detector (NHWC conv, Dense head, a custom decode on ``tf.constant`` anchors, combined NMS) is converted
by bridge; its taps name the tensors of the graph tf2onnx converted, so they meet the ONNX model's tensors by name:

* the taps' values of the tensors feeding the NMS equal onnxruntime's values of the same ONNX tensors;
* validation's selection-inputs proof runs for the TF source: a copy of the converted model with one anchor element
  moved, at an anchor whose score sits far below every other's (no feed selects it), FAILs naming the decoded boxes,
  and PASSes without the proof (what made it a survivor);
* ``bridge debug`` compares tensors between the source and the model, not only the final outputs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

import bridge
from adapters.base import ExportResult
from bridge import api
from bridge.config import InputSpec, Source
from bridge.errors import ValidationMismatch

pytest.importorskip("tensorflow")

SIDE, CELLS, BATCH = 8, 64, 2
NEVER = 37  # the anchor whose score is pushed far below every other's: no input ever selects it


def _anchors() -> np.ndarray:
    rng = np.random.default_rng(5)
    xy = rng.uniform(0.0, 0.7, size=(CELLS, 2)).astype(np.float32)
    return np.concatenate([xy, xy + rng.uniform(0.1, 0.3, size=(CELLS, 2)).astype(np.float32)], axis=-1)


def _keras_detector() -> Any:
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    anchors = _anchors()
    penalty = np.zeros((CELLS, 1), np.float32)
    penalty[NEVER] = -40.0
    inp = keras.Input((SIDE, SIDE, 3), batch_size=BATCH, name="image")
    x = keras.layers.Conv2D(8, 3, padding="same", activation="relu", name="body")(inp)
    x = keras.layers.Reshape((CELLS, 8))(x)
    loc = keras.layers.Dense(4, name="loc")(x)
    cls = keras.layers.Dense(2, name="cls")(x)

    class Decode(keras.layers.Layer):
        def call(self, loc: Any, cls: Any) -> Any:
            a = tf.constant(anchors)
            aw, ah = a[:, 2] - a[:, 0], a[:, 3] - a[:, 1]
            cx = (a[:, 0] + a[:, 2]) / 2 + loc[..., 0] * 0.1 * aw
            cy = (a[:, 1] + a[:, 3]) / 2 + loc[..., 1] * 0.1 * ah
            w = tf.exp(loc[..., 2] * 0.2) * aw / 2
            h = tf.exp(loc[..., 3] * 0.2) * ah / 2
            boxes = tf.stack([cy - h, cx - w, cy + h, cx + w], -1)
            scores = tf.sigmoid(cls + tf.constant(penalty))
            out = tf.image.combined_non_max_suppression(boxes[:, :, None, :], scores, 5, 5, iou_threshold=0.5,
                                                        score_threshold=0.05, clip_boxes=False)
            return {"boxes": out.nmsed_boxes, "scores": out.nmsed_scores, "classes": out.nmsed_classes,
                    "count": out.valid_detections}

    return keras.Model(inp, Decode()(loc, cls), name="tiny_ssd")


def _frozen_graph_def(model: Any, target: Path) -> Path:
    """The Keras model's call frozen into a GraphDef .pb (input ``image``, the outputs' Identity tensors)."""
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    concrete = tf.function(lambda image: model(image)).get_concrete_function(
        tf.TensorSpec([BATCH, SIDE, SIDE, 3], tf.float32, name="image"))
    target.write_bytes(convert_variables_to_constants_v2(concrete).graph.as_graph_def().SerializeToString())
    return target


@pytest.fixture(scope="module", params=["saved_model", "graph_def"])
def converted(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    folder = tmp_path_factory.mktemp("tf_taps")
    model = _keras_detector()
    extra: dict[str, Any] = {}
    if request.param == "saved_model":
        source = folder / "tiny_ssd"
        model.export(str(source), verbose=False)
        image = "image"
    else:
        source = _frozen_graph_def(model, folder / "tiny_ssd.pb")
        image = "image:0"
        # the frozen call's outputs are Identity:0..3 (the dict's keys sorted); named, validation knows the detector
        extra["output_names"] = ["boxes", "classes", "count", "scores"]
    out = folder / "tiny_ssd.onnx"
    bridge.convert(source, out, inputs=[f"{image}:{BATCH},{SIDE},{SIDE},3"], isolated=False, **extra)
    feeds = folder / "feeds.npz"
    np.savez(feeds, **{image: np.random.default_rng(1).uniform(-1, 1, (BATCH, SIDE, SIDE, 3)).astype(np.float32)})
    return source, out, feeds


def _nearest_named(model: onnx.ModelProto, named: set[str]) -> dict[str, list[str]]:
    """For each of the NMS's boxes and scores inputs: the nearest tensors upstream of it that ``named`` holds."""
    producers = {o: n for n in model.graph.node for o in n.output}
    (nms,) = [n for n in model.graph.node if n.op_type == "NonMaxSuppression"]
    found: dict[str, list[str]] = {}
    for start in nms.input[:2]:
        frontier, seen, hits = [start], set(), []
        while frontier:
            name = frontier.pop()
            if name in seen:
                continue
            seen.add(name)
            if name in named:
                hits.append(name)
            elif name in producers:
                frontier.extend(producers[name].input)
        found[start] = hits
    return found


def test_taps_meet_the_onnx_tensors_feeding_the_nms(converted: tuple[Path, Path, Path]) -> None:
    from adapters import reference_runner
    from bridge.conversion.sources import TFTaps, source_taps

    saved, out, feeds_file = converted
    model = onnx.load(out)
    image = model.graph.input[0].name
    export = ExportResult(model=model, exporter="test", inputs=(InputSpec(image, (BATCH, SIDE, SIDE, 3)),),
                          output_names=tuple(o.name for o in model.graph.output))
    source = Source(location=str(saved))
    taps = source_taps("tensorflow", source, export, reference_runner("tensorflow", source, export))
    assert isinstance(taps, TFTaps)
    onnx_names = {v for n in model.graph.node for v in n.output}
    feeding = _nearest_named(model, taps.names() & onnx_names)
    boxes, scores = feeding.values()
    assert any("decode" in n for n in boxes) and any("decode" in n for n in scores), feeding
    # and tensors upstream of them: the Dense heads
    upstream = sorted(n for n in taps.names() & onnx_names if "/loc_1/" in n or "/cls_1/" in n)
    assert upstream, sorted(taps.names())
    names = sorted({*boxes, *scores, *upstream})
    feeds = dict(np.load(feeds_file))
    got = taps.run(feeds, names)
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    probe.graph.output.extend(onnx.ValueInfoProto(name=n) for n in names)
    session = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    want = dict(zip(names, session.run(names, feeds), strict=True))
    for n in names:
        np.testing.assert_allclose(got[n], want[n], rtol=1e-5, atol=1e-5, err_msg=n)
    # final outputs come from the reference runner
    assert set(export.output_names) <= taps.names()
    final = taps.run(feeds, list(export.output_names))
    assert set(final) == set(export.output_names)


def _anchor_moved(model: onnx.ModelProto, delta: float) -> tuple[onnx.ModelProto, str]:
    """A copy with ONE element of the anchor-derived constant (a [CELLS] or [CELLS, k] initializer read by the
    decode) moved at row NEVER; returns it and the constant's name."""
    moved = onnx.ModelProto()
    moved.CopyFrom(model)
    for init in moved.graph.initializer:
        value = numpy_helper.to_array(init)
        if value.dtype == np.float32 and value.ndim >= 1 and value.shape[0] == CELLS and value.size in (CELLS, CELLS * 4):
            value = value.copy()
            value.reshape(CELLS, -1)[NEVER, 0] += delta
            init.CopyFrom(numpy_helper.from_array(value, init.name))
            return moved, init.name
        if value.dtype == np.float32 and value.ndim >= 2 and value.shape[-2:] == (CELLS, 4):
            value = value.copy()
            value.reshape(CELLS, 4)[NEVER, 0] += delta
            init.CopyFrom(numpy_helper.from_array(value, init.name))
            return moved, init.name
    raise AssertionError("no anchor constant in the converted model: "
                         + ", ".join(f"{i.name}{list(i.dims)}" for i in model.graph.initializer))


def test_the_selection_inputs_proof_runs_for_a_tf_source(converted: tuple[Path, Path, Path]) -> None:
    saved, out, feeds = converted
    result = api.validate(out, source=saved, feeds=feeds, runtime=["onnxruntime"], isolated=False)
    assert result.passed
    (comp,) = result.comparisons
    assert comp.selection_inputs is not None and comp.selection_inputs["passed"], comp.selection_inputs
    assert comp.selection_inputs["text"].startswith("selection inputs agree with the source's on every row")


def test_an_anchor_no_feed_selects_fails_by_its_decoded_box(converted: tuple[Path, Path, Path], tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    saved, out, feeds = converted
    moved, constant = _anchor_moved(onnx.load(out), 0.05)
    candidate = tmp_path / "moved.onnx"
    onnx.save(moved, candidate)
    with pytest.raises(ValidationMismatch, match=r"selection input.* though the outputs matched") as caught:
        api.validate(candidate, source=saved, feeds=feeds, runtime=["onnxruntime"], isolated=False)
    result: Any = caught.value.result
    (comp,) = result.comparisons
    assert comp.selection_inputs is not None and not comp.passed, comp.selection_inputs
    assert "decode_1" in comp.selection_inputs["text"].split(" differ ")[0], comp.selection_inputs["text"]
    # the outputs alone cannot show it: without the proof the same check passes
    from bridge.conversion import check

    monkeypatch.setattr(check, "prove_passing", lambda *a, **k: None)
    assert api.validate(candidate, source=saved, feeds=feeds, runtime=["onnxruntime"], isolated=False).passed, constant


def test_debug_compares_intermediate_tensors(converted: tuple[Path, Path, Path], tmp_path: Path) -> None:
    """The correct conversion: every compared tensor (the conv's channels-first ones are not tapped) agrees; the
    moved anchor: the first tensor differing is in the decode."""
    saved, out, feeds = converted
    result = api.debug(saved, model=out, feeds=feeds, isolated=False)
    assert "tf2onnx" in result.granularity
    rows = result.divergence.rows
    outputs = {o.name for o in onnx.load(out).graph.output}
    inner = [r.tensor for r in rows if r.tensor not in outputs]
    assert len(inner) > 10 and any("cls_1/" in t for t in inner) and any("decode_1" in t for t in inner), inner
    assert not any("body_1" in t for t in inner), inner  # channels-first in the ONNX model: not tapped
    assert result.divergence.culprit is None and not [r.tensor for r in rows if r.diverges and not r.propagated]
    moved, _ = _anchor_moved(onnx.load(out), 0.05)
    onnx.save(moved, tmp_path / "moved.onnx")
    culprit = api.debug(saved, model=tmp_path / "moved.onnx", feeds=feeds, isolated=False).divergence.culprit
    assert culprit is not None and "decode_1" in culprit.tensor, culprit
