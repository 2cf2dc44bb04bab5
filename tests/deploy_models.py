"""Small models for the deployment targets and runtimes (OpenVINO, LiteRT), built in code.

``decode_model``: a Conv feature map and an SSD-style box decode with the float64 exp island of
``bridge.passes.contrib.nms`` (Cast f64 -> Exp -> Cast f32), a dynamic batch, and tensor names that are
not TF signature keys (``input.1``, ``feat:0``). ``custom_op_model``: a node no runtime has a kernel for.
``DEPLOY_SOURCES``: source models of each framework for the deploy targets (``deploy_source``).
``require_litert`` / ``require_openvino``: the skip of a test module whose runtime is not installed.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from support import REPO, make_model

SSD_SYMBOL = REPO / "examples" / "mxnet_ssd" / "model-symbol.json"
SSD_FEEDS = REPO / "examples" / "mxnet_ssd" / "sample_inputs.npz"
SSD_ARGS = {"inputs": ["data:4,3,64,64"], "dynamic": ["data:0=batch"], "feeds": SSD_FEEDS}


def require_litert() -> None:
    """Skip the calling test module unless LiteRT, TensorFlow (the converter) and onnx-tf are installed."""
    pytest.importorskip("ai_edge_litert", reason="LiteRT is not installed (pip install 'bridge[litert]')")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    pytest.importorskip("tensorflow", reason="TensorFlow (the .tflite converter) is not installed")
    if importlib.util.find_spec("onnx_tf") is None:
        pytest.skip("onnx-tf (the ONNX -> TF step of the tflite target) is not installed", allow_module_level=True)


def require_openvino() -> None:
    """Skip the calling test module unless OpenVINO is installed."""
    pytest.importorskip("openvino", reason="OpenVINO is not installed (pip install 'bridge[openvino]')")


def decode_model(opset: int = 17) -> onnx.ModelProto:
    """input.1 [N, 3, 8, 8] -> Conv -> Relu -> feat:0 [N, 4, 8, 8]; the conv map as [N, 64, 4] deltas decoded
    as exp(d * 0.2) (in float64, rounded once) * anchor sizes -> boxes [N, 64, 4]."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.3
    b = rng.standard_normal(4).astype(np.float32) * 0.1
    sizes = rng.uniform(0.05, 0.9, (1, 64, 4)).astype(np.float32)
    f64, f32 = TensorProto.DOUBLE, TensorProto.FLOAT
    return make_model(
        [helper.make_node("Conv", ["input.1", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
         helper.make_node("Relu", ["c"], ["feat:0"], name="relu"),
         helper.make_node("Reshape", ["c", "shape"], ["deltas"], name="to_deltas"),
         helper.make_node("Mul", ["deltas", "var"], ["t"], name="scale"),
         helper.make_node("Cast", ["t"], ["t64"], to=f64, name="up"),
         helper.make_node("Exp", ["t64"], ["e64"], name="exp"),
         helper.make_node("Cast", ["e64"], ["e"], to=f32, name="down"),
         helper.make_node("Mul", ["e", "sizes"], ["boxes"], name="decode")],
        [helper.make_tensor_value_info("input.1", f32, ["N", 3, 8, 8])],
        [helper.make_tensor_value_info("feat:0", f32, ["N", 4, 8, 8]),
         helper.make_tensor_value_info("boxes", f32, ["N", 64, 4])],
        opset=opset,
        initializers=[numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b"),
                      numpy_helper.from_array(np.array([0, -1, 4], np.int64), "shape"),
                      numpy_helper.from_array(np.array(0.2, np.float32), "var"),
                      numpy_helper.from_array(sizes, "sizes")],
    )


def tied_topk_model(n: int = 5000, k: int = 400) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """scores [1, n] -> TopK(k) -> values, indices; the feed holds 5 distinct values only, so nearly every
    selected value is tied with others and ONNX's tie rule (the lower index first) decides the order."""
    model = make_model(
        [helper.make_node("TopK", ["scores", "k"], ["values", "indices"], axis=1, largest=1, sorted=1, name="topk")],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, n])],
        [helper.make_tensor_value_info("values", TensorProto.FLOAT, [1, k]),
         helper.make_tensor_value_info("indices", TensorProto.INT64, [1, k])],
        initializers=[numpy_helper.from_array(np.array([k], np.int64), "k")])
    scores = np.random.default_rng(0).integers(0, 5, (1, n)).astype(np.float32)
    return model, {"scores": scores}


def custom_op_model() -> onnx.ModelProto:
    """x -> Relu -> my.ops::Frobnicate (no runtime has it) -> y."""
    model = make_model(
        [helper.make_node("Relu", ["x"], ["r"], name="relu"),
         helper.make_node("Frobnicate", ["r"], ["y"], domain="my.ops", name="frob_1")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
    )
    model.opset_import.append(helper.make_opsetid("my.ops", 1))
    return model


def save(model: onnx.ModelProto, path: Path) -> Path:
    onnx.save(model, str(path))
    return path


def feeds(batch: int, seed: int = 0) -> dict[str, np.ndarray]:
    return {"input.1": np.random.default_rng(seed).standard_normal((batch, 3, 8, 8)).astype(np.float32)}


def onnxruntime_outputs(model: onnx.ModelProto, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    import onnxruntime as ort

    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, inputs), strict=True))


def initializer(model: onnx.ModelProto, name: str) -> np.ndarray:
    return next(numpy_helper.to_array(t) for t in model.graph.initializer if t.name == name)


def tamper(path: Path, original: np.ndarray) -> None:
    """Scale the weights ``original`` by 1.5 where the artefact stores them (fails when they are not there)."""
    data = path.read_bytes()
    raw = np.ascontiguousarray(original).tobytes()
    assert data.count(raw) == 1, f"{path.name} does not hold the weights verbatim"
    path.write_bytes(data.replace(raw, (original * np.float32(1.5)).astype(original.dtype).tobytes()))


def compare_with_onnxruntime(model: onnx.ModelProto, candidate: object, batch: int = 2) -> object:
    """The validation verdict for ``candidate`` (a Runtime) against onnxruntime on ``model``."""
    from bridge.config import DEFAULT_TOLERANCE
    from bridge.validation.results import RunResults
    from bridge.validation.run import FeedSource, run_and_compare

    x = feeds(batch, seed=7)
    reference = RunResults(x, onnxruntime_outputs(model, x), "onnxruntime", {})
    run = run_and_compare(reference, {"candidate": candidate}, FeedSource(), DEFAULT_TOLERANCE)  # type: ignore[dict-item]
    (comparison,) = run.comparisons
    return comparison


# -- source models of each framework for the deploy targets -------------------------------------------------

def _mxnet() -> object:
    from support import mxnet_available

    if not mxnet_available():
        pytest.skip("MXNet (the reference of the MXNet sources) is not installed")
    from bench.ssd_models import mxnet_import

    return mxnet_import(2)


Feeds = Callable[[int], dict[str, np.ndarray]]  # batch size -> inputs of the converted model


def _images(name: str, shape: tuple[int, ...], low: float, high: float) -> Feeds:
    def make(batch: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(batch)
        return {name: rng.uniform(low, high, (batch, *shape)).astype(np.float32)}

    return make


def _feeds_file(path: Path, feeds: Feeds, batch: int) -> Path:
    np.savez(path, **feeds(batch))
    return path


def _bundled_ssd(folder: Path) -> tuple[object, dict[str, object], Feeds]:
    _mxnet()
    sample = np.load(SSD_FEEDS)["data"]  # trained: random pixels detect nothing, its sample images do

    def make(batch: int) -> dict[str, np.ndarray]:
        return {"data": np.resize(sample, (batch, *sample.shape[1:]))}

    return SSD_SYMBOL, dict(SSD_ARGS), make


def _saturated_ssd(folder: Path) -> tuple[object, dict[str, object], Feeds]:
    """bench's tiny SSD with random weights fed 0..255 pixels: scores saturate to exactly 1.0 and most boxes
    clip flat (zero area) - equal scores everywhere, the case LiteRT's NMS kernel once got wrong."""
    from bench.ssd_models import build

    built = build(_mxnet(), "tiny", folder / "cache")
    feeds = _images("data", (3, 64, 64), 0.0, 255.0)
    return built.symbol, {"inputs": ["data:2,3,64,64"], "dynamic": ["data:0=batch"],
                          "feeds": _feeds_file(folder / "feeds.npz", feeds, 2)}, feeds


def _gluoncv_box_nms(folder: Path) -> tuple[object, dict[str, object], Feeds]:
    """A GluonCV-style SSD head (box_decode, per-class scores, box_nms) on bench's tiny backbone."""
    from bench.gluoncv_like import build_gluoncv

    built = build_gluoncv(_mxnet(), "gluoncv_tiny", folder / "cache")
    feeds = _images("data", (3, 64, 64), 0.0, 1.0)
    return built.symbol, {"inputs": ["data:2,3,64,64"], "dynamic": ["data:0=batch"],
                          "feeds": _feeds_file(folder / "feeds.npz", feeds, 2)}, feeds


def _pytorch(folder: Path) -> tuple[object, dict[str, object], Feeds]:
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                                torch.nn.MaxPool2d(2), torch.nn.Conv2d(8, 4, 3, padding=1), torch.nn.Sigmoid()).eval()
    return (model, {"inputs": ["input:2,3,16,16"], "dynamic": ["input:0=batch"], "exporter": "torchscript"},
            _images("input", (3, 16, 16), -1.0, 1.0))


def _keras(folder: Path) -> tuple[object, dict[str, object], Feeds]:
    pytest.importorskip("tf2onnx", reason="tf2onnx (the Keras exporter) is not installed")
    import keras

    keras.utils.set_random_seed(0)
    inp = keras.Input((16, 16, 3), name="img")
    x = keras.layers.Conv2D(8, 3, padding="same", activation="relu", name="conv")(inp)
    x = keras.layers.DepthwiseConv2D(3, padding="same", name="dw")(x)
    x = keras.layers.UpSampling2D(2, name="up")(x)
    return keras.Model(inp, x, name="tiny"), {"dynamic": ["img:0=batch"]}, _images("img", (16, 16, 3), -1.0, 1.0)


# name -> (folder -> (source, bridge.convert arguments, inputs of the converted model by batch size)); every
# source has a dynamic batch
DEPLOY_SOURCES = {"bundled_ssd": _bundled_ssd, "saturated_ssd": _saturated_ssd, "gluoncv_box_nms": _gluoncv_box_nms,
                  "pytorch": _pytorch, "keras": _keras}


def deploy_source(name: str, folder: Path) -> tuple[object, dict[str, object], Feeds]:
    return DEPLOY_SOURCES[name](folder)
