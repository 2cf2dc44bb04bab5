"""TensorFlow as a target runtime: an ONNX model converted to a SavedModel (via onnx-tf), or a SavedModel.

``--validate tensorflow`` hands this runtime the converted ONNX model; it converts it with
``bridge.targets.tensorflow.export_saved_model`` into a temporary folder, loads the SavedModel and
runs its signature. Given a SavedModel folder instead (e.g. one ``bridge convert --to tensorflow``
wrote), it loads that directly. Either way feeds and outputs are keyed by the ONNX names: the
target records which signature key each ONNX name became (``assets.extra/bridge_signature.json``).

TensorFlow is imported only inside ``activate``/``import_tensorflow``, never at module import.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bridge.errors import AdapterUnavailableError, RuntimeLoadError, UsageError
from bridge.runtimes.base import TensorMeta

logger = logging.getLogger(__name__)

TF_INSTALL_HINT = "pip install 'bridge[tensorflow]'"


def import_tensorflow(purpose: str) -> Any:
    """Import TensorFlow quietly (no C++ INFO banners) or raise AdapterUnavailableError for ``purpose``."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        import tensorflow as tf
    except ImportError:
        raise AdapterUnavailableError("TensorFlow", purpose, TF_INSTALL_HINT) from None
    return tf


def is_saved_model_dir(path: str | Path) -> bool:
    p = Path(path)
    return p.is_dir() and ((p / "saved_model.pb").is_file() or (p / "saved_model.pbtxt").is_file())


class TensorFlowRuntime:
    """Runs a SavedModel signature on numpy feeds keyed by ONNX input names; outputs keyed by ONNX names.

    ``model``: a SavedModel folder, or an ONNX model (path, bytes, ModelProto) that is converted
    through the TF target on ``activate``. ``signature`` picks the SavedModel signature.
    """

    name = "tensorflow"

    def __init__(self, model: Any, *, signature: str = "serving_default", workdir: str | Path | None = None) -> None:
        self._signature_name = signature
        self._saved_model: Path | None = None
        self._onnx: Any = None
        if isinstance(model, (str, Path)) and is_saved_model_dir(model):
            self._saved_model = Path(model)
        elif isinstance(model, (str, Path)) and Path(model).is_dir():
            raise UsageError(f"{model} is a folder but not a SavedModel (no saved_model.pb)")
        else:
            self._onnx = model
        self._workdir = Path(workdir) if workdir else None
        self._tmp: Path | None = None
        self._loaded: Any = None
        self._fn: Any = None
        self._to_tf: dict[str, str] = {}
        self._to_onnx: dict[str, str] = {}
        self.target_result: Any = None  # the TargetResult when this runtime converted an ONNX model

    def activate(self) -> None:
        tf = import_tensorflow("validating in TensorFlow")
        path = self._saved_model
        if path is None:
            from bridge.targets.tensorflow import export_saved_model

            parent = self._workdir or Path(tempfile.mkdtemp(prefix="bridge-tf-"))
            if self._workdir is None:
                self._tmp = parent
            self.target_result = export_saved_model(self._onnx, parent / "saved_model")
            path = self.target_result.path
        assert path is not None
        try:
            self._loaded = tf.saved_model.load(str(path))
        except Exception as exc:
            raise RuntimeLoadError(f"TensorFlow could not load the SavedModel {path}: {type(exc).__name__}: {exc}") from exc
        signatures = dict(self._loaded.signatures)
        if self._signature_name not in signatures:
            raise UsageError(f"--signature {self._signature_name}: {path} has signatures "
                             f"{', '.join(sorted(signatures)) or '(none)'}")
        self._fn = signatures[self._signature_name]
        from bridge.targets.tensorflow import read_signature_map

        names = read_signature_map(path)
        self._to_tf = dict(names.get("inputs", {}))
        self._to_onnx = {tf_key: onnx for onnx, tf_key in names.get("outputs", {}).items()}

    def _specs(self) -> dict[str, Any]:
        if self._fn is None:
            self.activate()
        specs: dict[str, Any] = self._fn.structured_input_signature[1]
        return specs

    def input_metadata(self) -> Sequence[TensorMeta]:
        by_tf = {tf_key: onnx for onnx, tf_key in self._to_tf.items()}
        metas = []
        for key, spec in self._specs().items():
            shape = None if spec.shape.rank is None else tuple(spec.shape.as_list())
            metas.append(TensorMeta(by_tf.get(key, key), shape, np.dtype(spec.dtype.as_numpy_dtype).name))
        return metas

    def infer(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        import tensorflow as tf

        specs = self._specs()
        kwargs = {}
        for name, value in feeds.items():
            key = self._to_tf.get(name, name)
            if key not in specs:
                raise UsageError(f"feed '{name}' is not an input of the SavedModel signature "
                                 f"'{self._signature_name}' (inputs: {', '.join(specs)})")
            kwargs[key] = tf.constant(np.ascontiguousarray(value), dtype=specs[key].dtype)
        missing = sorted(set(specs) - set(kwargs))
        if missing:
            raise UsageError(f"no feed for SavedModel input(s) {missing}")
        out = self._fn(**kwargs)
        named = {self._to_onnx.get(k, k): np.asarray(v.numpy()) for k, v in out.items()}
        order = [n for n in self._to_onnx.values() if n in named]  # the ONNX graph's output order
        return {n: named[n] for n in order + [n for n in named if n not in order]}

    def deactivate(self) -> None:
        self._fn = None
        self._loaded = None
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None
