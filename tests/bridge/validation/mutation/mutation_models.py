"""The base models the mutation suite mutates: one provider per model, all behind one interface.

A provider builds a source model (a file or a ``file.py:factory`` the CLI and API both take), the validation
feeds a user would pass (``--feeds``), the keywords ``bridge.api.convert`` needs, and dozens of realistic inputs
on which a base and a mutant are run to decide whether the mutant is equivalent. The suite converts each base
with bridge itself (``conftest.py``), once per session.

Models (layout -> models):
  mxnet                 ``mxnet_ssd`` (the bundled trained examples/mxnet_ssd, legacy MultiBoxDetection),
                        ``mxnet_random_ssd`` (bench/ssd_models.py "tiny", random weights)
  boxes-scores-labels   ``gluoncv_ssd`` (GluonCV's box_nms head on the trained SSD), ``gluoncv_random_ssd``
                        (bench/gluoncv_like.py "gluoncv_tiny", random weights), ``torchvision_ssd`` (PyTorch)
  yolo                  ``yolo_ssd`` (PyTorch, rows [K, 7])
  boxes-scores-classes  ``keras_ssd`` (Keras, tf.image.combined_non_max_suppression), ``padded_ssd`` (PyTorch)
  classifier            ``ssd_classifier`` (PyTorch: softmax, bilinear Resize, max over anchors)
  elementwise           ``seg_logits`` (PyTorch: per-pixel class logits reaching ~1.5e3), ``palm_head`` (TFLite:
                        a BlazePalm-shaped head fed [-1, 1], regressors in pixels reaching ~500, raw score logits);
                        both from ``tests/large_valued_models.py`` (seeded He-normal weights), the outputs the scale
                        rule judges (elementwise, large-valued: they FAIL validation without it)
The SSD-derived ones carry the trained weights (``ssd_ports``): well-separated, realistic detections.

Trained models of branch ``trained`` (``tests/trained_models``, the ``TrainedModel`` interface) plug in with one
line each in ``TRAINED`` (name -> layout): once that package exists each is the provider ``trained_<name>``,
converted through the CLI with its own ``convert_args`` and judged on its own feeds and images.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import ssd_ports

HERE = Path(__file__).resolve().parent
SOURCES = HERE / "mutation_sources.py"  # factories of the in-code sources (``file.py:factory`` for API and CLI)
EQUIVALENCE_IMAGES = 48  # fresh images per model on which base and mutant are compared (plus the feeds)


@dataclass(frozen=True)
class Built:
    """What a provider made: the source, how to convert it, the user's feeds and the equivalence inputs."""

    source: str  # what ``bridge convert`` / ``--source`` takes
    feeds: Path  # the validation feeds a user passes (--feeds), keyed by input name
    inputs: Sequence[dict[str, np.ndarray]]  # realistic inputs (batched as the model takes them) for equivalence
    convert: dict[str, Any] = field(default_factory=dict)  # api.convert keywords besides source, output, feeds
    convert_cli: tuple[str, ...] | None = None  # convert through the CLI with these args instead (trained models)


@dataclass(frozen=True)
class ModelCase:
    name: str
    layout: str  # the detection layout (bridge.validation.detection.layouts) or "classifier"
    framework: str
    trained: bool
    build: Callable[[Path], Built]  # writes what it needs into the given folder
    why: str = ""


def _batches(images: np.ndarray, batch: int, name: str, nhwc: bool = False) -> list[dict[str, np.ndarray]]:
    if nhwc:
        images = ssd_ports.nhwc_feeds(images)
    return [{name: np.ascontiguousarray(images[k:k + batch])} for k in range(0, len(images) - batch + 1, batch)]


def _feeds(folder: Path, name: str, **arrays: np.ndarray) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}_feeds.npz"
    np.savez(path, **arrays)
    return path


def _sample() -> np.ndarray:
    return np.load(ssd_ports.FEEDS)["data"]


# -- providers ------------------------------------------------------------------------------------------------

def mxnet_ssd(folder: Path) -> Built:
    """The bundled trained SSD as it ships: its symbol, its 4 sample images."""
    return Built(str(ssd_ports.SYMBOL), ssd_ports.FEEDS, _batches(ssd_ports.equivalence_images(EQUIVALENCE_IMAGES), 4,
                                                                  "data"),
                 convert={"inputs": ["data:4,3,64,64"]})


def gluoncv_ssd(folder: Path) -> Built:
    symbol = ssd_ports.gluoncv_symbol(folder / "gluoncv_ssd")
    return Built(str(symbol), ssd_ports.FEEDS, _batches(ssd_ports.equivalence_images(EQUIVALENCE_IMAGES), 4, "data"),
                 convert={"inputs": ["data:4,3,64,64"]})


def _torch(factory: str, batch: int, output_names: list[str] | None) -> Callable[[Path], Built]:
    def build(folder: Path) -> Built:
        sample = _sample()
        # batch 1 (torchvision's per-image graphs): the sample image with the most objects (3)
        feeds = ssd_ports.FEEDS if batch == 4 else _feeds(folder, factory, data=sample[2:3])
        kw: dict[str, Any] = {"inputs": [f"data:{batch},3,64,64"], "exporter": "torchscript"}
        if output_names:
            kw["output_names"] = output_names
        return Built(f"{SOURCES}:{factory}", feeds,
                     _batches(ssd_ports.equivalence_images(EQUIVALENCE_IMAGES), batch, "data"), convert=kw)

    return build


def keras_ssd(folder: Path) -> Built:
    saved = ssd_ports.keras_combined_nms(folder)
    feeds = _feeds(folder, "keras_ssd", data=ssd_ports.nhwc_feeds(_sample()))
    return Built(str(saved), feeds, _batches(ssd_ports.equivalence_images(EQUIVALENCE_IMAGES), 4, "data", nhwc=True),
                 convert={"inputs": ["data:4,64,64,3"]})


def _random_images(side: int, count: int, seed: int) -> np.ndarray:
    """Image-like inputs for random-weight models: smooth gradients, flat rectangles, texture (mean-subtracted)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:side, 0:side] / side
    out = np.empty((count, 3, side, side), np.float32)
    for k in range(count):
        img = rng.uniform(0, 255, (3, 1, 1)) + rng.uniform(-60, 60, (3, 1, 1)) * xx + rng.uniform(-60, 60, (3, 1, 1)) * yy
        for _ in range(3):
            w = int(rng.integers(side // 6, side // 2))
            x0, y0 = rng.integers(0, side - w, 2)
            img[:, y0:y0 + w, x0:x0 + w] = rng.uniform(0, 255, (3, 1, 1))
        out[k] = np.clip(img + rng.normal(0, 8, img.shape), 0, 255) - np.asarray((123, 117, 104)).reshape(3, 1, 1)
    return out


def _bench_mxnet(kind: str) -> Callable[[Path], Built]:
    def build(folder: Path) -> Built:
        from bench.ssd_models import mxnet_import

        mx = mxnet_import(2)
        if kind == "ssd":
            from bench.ssd_models import build as build_ssd

            built = build_ssd(mx, "tiny", folder / "bench")
            symbol, side = built.symbol, built.spec.size
        else:
            from bench.gluoncv_like import build_gluoncv

            gbuilt = build_gluoncv(mx, "gluoncv_tiny", folder / "bench")
            symbol, side = gbuilt.symbol, gbuilt.spec.size
        feeds = _feeds(folder, f"random_{kind}", data=_random_images(side, 4, seed=1))
        return Built(str(symbol), feeds, _batches(_random_images(side, EQUIVALENCE_IMAGES, seed=7), 4, "data"),
                     convert={"inputs": [f"data:4,3,{side},{side}"]})

    return build


def seg_logits(folder: Path) -> Built:
    import large_valued_models as lv

    feeds = _feeds(folder, "seg_logits", input=lv.seg_images(1, seed=1))
    return Built(f"{lv.__file__}:seg_logits", feeds, _batches(lv.seg_images(EQUIVALENCE_IMAGES, seed=7), 1, "input"),
                 convert={"inputs": [f"input:1,3,{lv.SEG_SIDE},{lv.SEG_SIDE}"]})


def palm_head(folder: Path) -> Built:
    import large_valued_models as lv

    feeds = _feeds(folder, "palm_head", input=lv.palm_images(1, seed=3))
    return Built(str(lv.palm_tflite()), feeds, _batches(lv.palm_images(EQUIVALENCE_IMAGES, seed=7), 1, "input"))


def trained(name: str) -> Callable[[Path], Built]:
    """A model of ``tests/trained_models`` (branch ``trained``): its source, convert args, feeds, and its images
    preprocessed as it says for deciding equivalence."""

    def build(folder: Path) -> Built:
        from trained_models import trained_model  # type: ignore[import-not-found]

        t = trained_model(name)
        if t.layout != TRAINED[name]:
            raise AssertionError(f"trained model {name} declares layout {t.layout}, the suite expects {TRAINED[name]}")
        feeds = dict(np.load(t.feeds))
        input_name, sample = next(iter(feeds.items()))
        images = images_as_feeds(Path(t.images), dict(t.preprocessing), sample.shape)
        return Built(str(t.source), Path(t.feeds), _batches(images, sample.shape[0], input_name),
                     convert_cli=tuple(t.convert_args))

    return build


def images_as_feeds(folder: Path, prep: dict[str, Any], shape: Sequence[int]) -> np.ndarray:
    """The PNG images of ``folder`` preprocessed per ``prep`` (resize, channel_order, layout, mean, std) into an
    array shaped like one feed batch's images (NCHW or NHWC, float32)."""
    from PIL import Image

    nhwc = str(prep.get("layout", "NCHW")).upper() == "NHWC"
    height, width = (shape[1], shape[2]) if nhwc else (shape[2], shape[3])
    mean = np.asarray(prep.get("mean", (0, 0, 0)), np.float32)
    std = np.asarray(prep.get("std", (1, 1, 1)), np.float32)
    arrays = []
    for path in sorted(folder.glob("*.png"))[:EQUIVALENCE_IMAGES]:
        img = Image.open(path).convert("RGB").resize((width, height))
        a = np.asarray(img, np.float32)
        if str(prep.get("channel_order", "RGB")).upper() == "BGR":
            a = a[..., ::-1]
        a = (a - mean) / std
        arrays.append(a if nhwc else a.transpose(2, 0, 1))
    return np.stack(arrays).astype(np.float32)


def trained_available() -> bool:
    """Whether ``tests/trained_models`` (branch ``trained``) is importable."""
    try:
        return importlib.util.find_spec("trained_models") is not None
    except ValueError:  # in sys.modules without a spec (a stand-in)
        return True


TORCHVISION_OUTPUTS = ["boxes", "scores", "labels"]
PADDED_OUTPUTS = ["detection_boxes", "detection_scores", "detection_classes", "num_detections"]

PROVIDERS: dict[str, ModelCase] = {c.name: c for c in [
    ModelCase("mxnet_ssd", "mxnet", "mxnet", True, mxnet_ssd,
              why="the bundled trained legacy SSD (MultiBoxPrior + MultiBoxDetection)"),
    ModelCase("gluoncv_ssd", "boxes-scores-labels", "mxnet", True, gluoncv_ssd,
              why="GluonCV's SSD head (box_decode, per-class decoder, box_nms) on the trained SSD"),
    ModelCase("torchvision_ssd", "boxes-scores-labels", "pytorch", True,
              _torch("torchvision_ssd", 1, TORCHVISION_OUTPUTS),
              why="the trained SSD in PyTorch, torchvision-style per-image boxes / scores / labels"),
    ModelCase("yolo_ssd", "yolo", "pytorch", True, _torch("yolo_ssd", 4, ["detections"]),
              why="the trained SSD in PyTorch, YOLO end2end rows [K, 7]"),
    ModelCase("padded_ssd", "boxes-scores-classes", "pytorch", True, _torch("padded_ssd", 4, PADDED_OUTPUTS),
              why="the trained SSD in PyTorch, TF-style padded boxes / scores / classes / num"),
    ModelCase("keras_ssd", "boxes-scores-classes", "tensorflow", True, keras_ssd,
              why="the trained SSD in Keras ending in tf.image.combined_non_max_suppression"),
    ModelCase("ssd_classifier", "classifier", "pytorch", True, _torch("ssd_classifier", 4, ["presence"]),
              why="a classifier on the trained SSD's body: per-anchor softmax, bilinear Resize, max"),
    ModelCase("seg_logits", "elementwise", "pytorch", False, seg_logits,
              why="segmentation logits reaching ~1.5e3 (tests/large_valued_models.py, seeded weights)"),
    ModelCase("palm_head", "elementwise", "tflite", False, palm_head,
              why="a BlazePalm-shaped TFLite head fed [-1, 1] (tests/large_valued_models.py, seeded weights)"),
    ModelCase("mxnet_random_ssd", "mxnet", "mxnet", False, _bench_mxnet("ssd"),
              why="bench/ssd_models.py 'tiny' (random weights)"),
    ModelCase("gluoncv_random_ssd", "boxes-scores-labels", "mxnet", False, _bench_mxnet("gluoncv"),
              why="bench/gluoncv_like.py 'gluoncv_tiny' (random weights)"),
]}

# trained models of branch `trained` (tests/trained_models, the TrainedModel interface): name -> detection layout.
# Each becomes the provider "trained_<name>" as soon as that package exists (one line here per model).
TRAINED = {
    "mxnet_ssd": "mxnet",
    "gluoncv_boxnms": "boxes-scores-labels",
    "torchvision_det": "boxes-scores-labels",
    "keras_combined_nms": "boxes-scores-classes",
    "yolo_rows": "yolo",
    "classifier": "classifier",
}
if trained_available():
    PROVIDERS.update({f"trained_{name}": ModelCase(f"trained_{name}", layout, "(TrainedModel.framework)", True,
                                                   trained(name), why=f"tests/trained_models '{name}'")
                      for name, layout in TRAINED.items()})
