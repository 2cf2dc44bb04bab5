"""Cross-framework matrix: every source -> ONNX -> every target runtime, each validated against its source.

Paths: PyTorch -> ONNX -> onnxruntime and -> TF SavedModel (onnx-tf); Keras -> ONNX -> onnxruntime
and back -> TF SavedModel; MXNet SSD -> ONNX -> TF SavedModel (detection-aware). Each leg records its
max abs error against the source as a test property (``--junitxml`` shows them) and asserts a tolerance.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

import bridge
from bridge.runtimes.onnxruntime import OnnxRuntime

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
REPO = Path(__file__).resolve().parents[1]
HAS = {name: importlib.util.find_spec(name) is not None for name in ("torch", "tensorflow", "tf2onnx", "onnx_tf")}
needs_tf_target = pytest.mark.skipif(not (HAS["tensorflow"] and HAS["onnx_tf"]), reason="needs TensorFlow + onnx-tf")


@pytest.fixture(scope="module", autouse=True)
def tensorflow_registered() -> Iterator[None]:
    """Register the TF adapter/runtime for this module until bridge's registries list them."""
    import adapters
    import bridge.runtimes as runtimes

    saved = (adapters._ADAPTERS.get("tensorflow"), runtimes._RUNTIMES.get("tensorflow"))
    adapters.register_adapter("tensorflow", "adapters.tensorflow:TensorFlowAdapter")
    runtimes._RUNTIMES["tensorflow"] = "bridge.runtimes.tensorflow:TensorFlowRuntime"
    yield
    for registry, value in ((adapters._ADAPTERS, saved[0]), (runtimes._RUNTIMES, saved[1])):
        if value is None:
            registry.pop("tensorflow", None)
        else:
            registry["tensorflow"] = value


def _record(request: pytest.FixtureRequest, name: str, value: float) -> None:
    """A figure for reports (``--junitxml`` shows user properties); printed too for ``-s`` runs."""
    request.node.user_properties.append((name, value))
    print(f"{name} = {value:.3g}")


def _max_abs(ref: dict[str, np.ndarray], got: dict[str, np.ndarray]) -> float:
    assert list(ref) == list(got), (list(ref), list(got))
    for name in ref:
        assert ref[name].shape == got[name].shape, name
    return max(float(np.abs(ref[n].astype(np.float64) - got[n]).max()) for n in ref)


def _tf_outputs(model: onnx.ModelProto, feeds: dict[str, np.ndarray], workdir: Path) -> tuple[dict[str, np.ndarray], Any]:
    from bridge.runtimes.tensorflow import TensorFlowRuntime
    from bridge.targets.tensorflow import export_saved_model

    target_result = export_saved_model(model, Path(workdir) / "saved_model")
    rt = TensorFlowRuntime(target_result.path)
    rt.activate()
    try:
        return rt.infer(feeds), target_result
    finally:
        rt.deactivate()


@pytest.fixture(scope="module")
def torch_leg(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The bundled tiny detector (conv, BN, nn.Upsample, softmax head) exported once through bridge."""
    if not HAS["torch"]:
        pytest.skip("PyTorch not installed")
    import torch

    spec = importlib.util.spec_from_file_location("matrix_tiny_detector", REPO / "examples/tiny_detector/model.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    torch.manual_seed(0)
    model = mod.build().eval()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
    root = tmp_path_factory.mktemp("matrix_torch")
    result = bridge.convert(model, root / "torch.onnx", inputs=["images:1,3,64,64"],
                            output_names=["boxes", "scores", "fmap"], validate=["onnxruntime"])
    x = np.random.default_rng(7).standard_normal((1, 3, 64, 64)).astype(np.float32)
    with torch.no_grad():
        ref = dict(zip(["boxes", "scores", "fmap"], (t.numpy() for t in model(torch.from_numpy(x))), strict=True))
    return {"result": result, "model": onnx.load(root / "torch.onnx"), "feeds": {"images": x}, "ref": ref,
            "root": root}


@pytest.fixture(scope="module")
def keras_leg(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    if not (HAS["tensorflow"] and HAS["tf2onnx"]):
        pytest.skip("TensorFlow / tf2onnx not installed")
    import keras

    keras.utils.set_random_seed(0)
    inp = keras.Input((32, 32, 3), batch_size=2, name="img")
    x = keras.layers.Conv2D(8, 3, padding="same", name="conv")(inp)
    bn = keras.layers.BatchNormalization(name="bn")
    x = keras.layers.ReLU(name="relu")(bn(x))
    up = keras.layers.UpSampling2D(2, name="up")(x)
    logits = keras.layers.Dense(5, name="dense")(keras.layers.GlobalAveragePooling2D(name="gap")(up))
    probs = keras.layers.Softmax(name="probs")(logits)
    model = keras.Model(inp, [up, probs])
    rng = np.random.default_rng(2)
    g, b, m, v = bn.get_weights()
    bn.set_weights([rng.uniform(0.5, 1.5, g.shape), rng.normal(0, 0.1, b.shape), rng.normal(0, 0.1, m.shape),
                    rng.uniform(0.5, 2, v.shape)])
    root = tmp_path_factory.mktemp("matrix_keras")
    model.save(root / "model.keras")
    result = bridge.convert(root / "model.keras", root / "keras.onnx", validate=["onnxruntime"])
    feeds = {"img": rng.standard_normal((2, 32, 32, 3)).astype(np.float32)}
    out = model(feeds["img"], training=False)
    ref = {"up": np.asarray(out[0]), "probs": np.asarray(out[1])}
    return {"result": result, "model": onnx.load(root / "keras.onnx"), "feeds": feeds, "ref": ref, "root": root}


def test_pytorch_to_onnxruntime(torch_leg: dict[str, Any], request: pytest.FixtureRequest) -> None:
    result = torch_leg["result"]
    assert result.passed and result.validation[0].candidate == "onnxruntime"
    err = _max_abs(torch_leg["ref"], OnnxRuntime(torch_leg["model"]).infer(torch_leg["feeds"]))
    _record(request, "max_abs_torch_onnxruntime", err)
    assert err < 1e-4


@needs_tf_target
def test_pytorch_to_tensorflow_saved_model(torch_leg: dict[str, Any], request: pytest.FixtureRequest) -> None:
    got, target = _tf_outputs(torch_leg["model"], torch_leg["feeds"], torch_leg["root"] / "tf")
    err = _max_abs(torch_leg["ref"], got)
    _record(request, "max_abs_torch_tensorflow", err)
    _record(request, "onnx_tf_seconds", target.seconds)
    assert target.opset_in >= 17 and target.opset_out == 16  # the exporter's opset (kept), lowered for onnx-tf
    assert err < 1e-4


def test_keras_to_onnxruntime(keras_leg: dict[str, Any], request: pytest.FixtureRequest) -> None:
    assert keras_leg["result"].passed
    err = _max_abs(keras_leg["ref"], OnnxRuntime(keras_leg["model"]).infer(keras_leg["feeds"]))
    _record(request, "max_abs_keras_onnxruntime", err)
    assert err < 1e-4


@needs_tf_target
def test_keras_back_to_tensorflow_saved_model(keras_leg: dict[str, Any], request: pytest.FixtureRequest) -> None:
    got, target = _tf_outputs(keras_leg["model"], keras_leg["feeds"], keras_leg["root"] / "tf")
    err = _max_abs(keras_leg["ref"], got)
    _record(request, "max_abs_keras_tensorflow", err)
    _record(request, "onnx_tf_seconds", target.seconds)
    assert err < 1e-4


SSD_SYMBOL = REPO / "examples" / "mxnet_ssd" / "model-symbol.json"
SSD_READY = SSD_SYMBOL.is_file() and (REPO / "bridge" / "passes" / "contrib").exists() and importlib.util.find_spec(
    "mxnet") is not None


def _ssd_images(n: int) -> np.ndarray:
    spec = importlib.util.spec_from_file_location("matrix_ssd_shapes", SSD_SYMBOL.with_name("shapes.py"))
    assert spec and spec.loader
    shapes = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(shapes)
    images, _, _ = shapes.make_dataset(n, seed=21)
    return np.asarray(shapes.preprocess(images))


@needs_tf_target
@pytest.mark.skipif(not SSD_READY, reason="needs the bundled SSD and C's lowering")
def test_mxnet_ssd_to_tensorflow_saved_model(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """The SSD's [1, 320, 6] (class, score, x1, y1, x2, y2) detections in TF vs MXNet, matched by class and IoU."""
    from adapters import get_adapter
    from adapters.base import ExportResult
    from adapters.tensorflow.detection import match_detections
    from bridge.config import InputSpec, Source

    params = SSD_SYMBOL.with_name("model-0000.params")
    result = bridge.convert(str(SSD_SYMBOL), tmp_path / "ssd.onnx", inputs=["data:1,3,64,64"], weights=params,
                            validate=["onnxruntime"])
    if result.validation_skipped and "bridge.contrib" in result.validation_skipped:
        pytest.skip("needs the bundled SSD and C's lowering (bridge.contrib ops are not lowered yet)")
    assert result.passed
    model = onnx.load(tmp_path / "ssd.onnx")
    export = ExportResult(model=model, exporter="(file)", inputs=(InputSpec("data", (1, 3, 64, 64)),),
                          output_names=tuple(o.name for o in model.graph.output))
    reference = get_adapter("mxnet").reference_runner(Source(location=str(SSD_SYMBOL), weights=params), export)
    reference.activate()
    from bridge.runtimes.tensorflow import TensorFlowRuntime
    from bridge.targets.tensorflow import export_saved_model

    target_result = export_saved_model(model, tmp_path / "tf" / "saved_model")
    tf_rt = TensorFlowRuntime(target_result.path)
    tf_rt.activate()
    recalls, worst = [], 0.0
    for image in _ssd_images(4):
        feeds = {"data": image[None]}
        ref, got = reference.infer(feeds), tf_rt.infer(feeds)
        name = export.output_names[0]
        r, g = ref[name][0], got[name][0]
        r, g = r[r[:, 0] >= 0], g[g[:, 0] >= 0]  # class -1 rows are suppressed/padding
        match = match_detections(r[:, 2:], r[:, 1], r[:, 0], g[:, 2:], g[:, 1], g[:, 0], iou=0.9)
        assert match.reference_count > 0 and match.passed(score_atol=1e-4), match
        recalls.append(match.recall)
        worst = max(worst, match.max_box_error, match.max_score_error)
    tf_rt.deactivate()
    _record(request, "ssd_detection_recall_min", min(recalls))
    _record(request, "max_abs_ssd_tensorflow_matched", worst)
    _record(request, "onnx_tf_seconds_ssd", target_result.seconds)


@needs_tf_target
def test_cli_keras_file_to_saved_model_validated_in_both_runtimes(tmp_path: Path) -> None:
    """The matrix from the CLI: a .keras file -> ONNX -> TF SavedModel with `-o OUT_DIR`, validated against
    Keras in onnxruntime and in TensorFlow (the SavedModel actually written)."""
    import json

    import keras
    from support import run_cli

    keras.utils.set_random_seed(0)
    inp = keras.Input((16, 16, 3), name="img")
    x = keras.layers.Conv2D(4, 3, padding="same", activation="relu", name="conv")(inp)
    out = keras.layers.UpSampling2D(2, name="up")(x)
    keras.Model(inp, out).save(tmp_path / "m.keras")
    proc = run_cli("convert", str(tmp_path / "m.keras"), "--input", "img:2,16,16,3", "--to", "tensorflow",
                   "-o", str(tmp_path / "m_tf"), "--report", str(tmp_path / "r.json"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert [c["candidate"] for c in report["validation"]] == ["onnxruntime", "tensorflow"]
    assert all(c["passed"] and c["reference"] == "tensorflow" for c in report["validation"])
    assert (tmp_path / "m_tf" / "saved_model.pb").is_file() and (tmp_path / "m_tf.onnx").is_file()
    assert report["target"]["path"] == str(tmp_path / "m_tf")
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging left behind
