"""TensorFlow as a candidate runtime: runs a SavedModel's signature behind the Runtime protocol.

The runtime receives a SavedModel folder, or a loader callable that builds one on ``activate``
(Polygraphy's "session or loader" runner): converting ONNX to a SavedModel is the TF target's job
(``bridge.targets``), never the runtime's. Feeds and outputs are keyed by the ONNX names: the target
records which signature key each ONNX name became (``bridge.frameworks.read_signature_map``).

TensorFlow is imported only inside ``activate``, never at module import.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bridge.errors import RuntimeLoadError, UsageError
from bridge.frameworks import import_tensorflow, is_saved_model_dir, read_signature_map
from bridge.runtimes.base import TensorMeta, signature_feeds

logger = logging.getLogger(__name__)

class TensorFlowRuntime:
    """Runs a SavedModel signature on numpy feeds keyed by ONNX input names; outputs keyed by ONNX names.

    ``model``: a SavedModel folder, or a callable returning one (called on ``activate``; e.g. the TF
    target converting an ONNX model into a temporary folder). ``signature`` picks the signature.
    """

    name = "tensorflow"

    def __init__(self, model: str | Path | Callable[[], str | Path], *, signature: str = "serving_default") -> None:
        self._signature_name = signature
        self._loader: Callable[[], str | Path] | None = None
        self._saved_model: Path | None = None
        if callable(model):
            self._loader = model
        elif is_saved_model_dir(model):
            self._saved_model = Path(model)
        elif Path(model).is_dir():
            raise UsageError(f"{model} is a folder but not a SavedModel (no saved_model.pb)")
        else:
            raise UsageError(f"{model}: the TensorFlow runtime runs SavedModel folders; convert ONNX models "
                             "with the TensorFlow target (bridge convert --to tensorflow)")
        self._loaded: Any = None
        self._fn: Any = None
        self._to_tf: dict[str, str] = {}
        self._to_onnx: dict[str, str] = {}

    def activate(self) -> None:
        tf = import_tensorflow("validating in TensorFlow")
        if self._saved_model is None:
            assert self._loader is not None
            self._saved_model = Path(self._loader())
        path = self._saved_model
        try:
            self._loaded = tf.saved_model.load(str(path))
        except Exception as exc:
            raise RuntimeLoadError(f"TensorFlow could not load the SavedModel {path}: {type(exc).__name__}: {exc}") from exc
        signatures = dict(self._loaded.signatures)
        if self._signature_name not in signatures:
            raise UsageError(f"--signature {self._signature_name}: {path} has signatures "
                             f"{', '.join(sorted(signatures)) or '(none)'}")
        self._fn = signatures[self._signature_name]
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
        keyed = signature_feeds(feeds, self._to_tf, list(specs), f"SavedModel signature '{self._signature_name}'")
        kwargs = {k: tf.constant(np.ascontiguousarray(v), dtype=specs[k].dtype) for k, v in keyed.items()}
        out = self._fn(**kwargs)
        named = {self._to_onnx.get(k, k): np.asarray(v.numpy()) for k, v in out.items()}
        order = [n for n in self._to_onnx.values() if n in named]  # the ONNX graph's output order
        return {n: named[n] for n in order + [n for n in named if n not in order]}

    def deactivate(self) -> None:
        self._fn = None
        self._loaded = None
