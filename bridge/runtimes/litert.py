"""LiteRT (TFLite) as a candidate runtime: runs a ``.tflite`` model's signature in the LiteRT interpreter.

The runtime receives a ``.tflite`` path, its bytes, or a loader callable returning one (called on
``activate``; e.g. the tflite target converting the ONNX stage's model in a work folder): converting
is the target's job, never the runtime's. Feeds and outputs are keyed by the ONNX names: the tflite
target stores which signature key each ONNX name became in the model's own metadata (entry
``TFLITE_NAME_MAP``; ``read_name_map``). The signature runner resizes every input to its feed's shape
(dynamic axes, e.g. a batch) and reallocates before it runs.

ai_edge_litert is imported only inside ``activate``, never at module import.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bridge.errors import AdapterUnavailableError, InferenceError, RuntimeLoadError, UsageError
from bridge.runtimes.base import TensorMeta, signature_feeds

logger = logging.getLogger(__name__)

TFLITE_NAME_MAP = "bridge_signature"  # metadata entry: {"inputs": {onnx: key}, "outputs": {onnx: key}}
SIGNATURE = "serving_default"

ModelSource = str | Path | bytes


def import_litert(purpose: str) -> Any:
    """The LiteRT interpreter module, or AdapterUnavailableError for ``purpose``."""
    try:
        from ai_edge_litert import interpreter
    except ImportError:
        raise AdapterUnavailableError("LiteRT", purpose, extra="litert") from None
    return interpreter


def read_name_map(content: bytes) -> dict[str, dict[str, str]]:
    """The ONNX name -> signature key maps stored in a .tflite's metadata ({} when absent)."""
    from ai_edge_litert import schema_py_generated as schema

    model = schema.Model.GetRootAsModel(content, 0)
    for i in range(model.MetadataLength()):
        entry = model.Metadata(i)
        if entry.Name() is not None and entry.Name().decode() == TFLITE_NAME_MAP:
            buffer = model.Buffers(entry.Buffer())
            data = buffer.DataAsNumpy()
            if isinstance(data, np.ndarray):
                raw = data.tobytes()
            elif buffer.Offset():  # large models keep buffers after the flatbuffer
                raw = content[buffer.Offset(): buffer.Offset() + buffer.Size()]
            else:
                raw = b""
            mapping: dict[str, dict[str, str]] = json.loads(raw.decode() or "{}")
            return mapping
    return {}


def flex_ops(content: bytes) -> list[str]:
    """The select TF (Flex) ops a .tflite uses, e.g. ``["FlexExp"]`` (custom op codes named Flex*)."""
    from ai_edge_litert import schema_py_generated as schema

    model = schema.Model.GetRootAsModel(content, 0)
    codes = (model.OperatorCodes(i).CustomCode() for i in range(model.OperatorCodesLength()))
    return sorted({c.decode() for c in codes if c is not None and c.startswith(b"Flex")})


class LiteRtRuntime:
    """Runs a .tflite signature on numpy feeds keyed by ONNX input names; outputs keyed by ONNX names.

    ``threads``: the interpreter's ``num_threads`` (None: LiteRT's default).
    """

    name = "litert"

    def __init__(self, model: ModelSource | Callable[[], ModelSource], *, threads: int | None = None,
                 signature: str = SIGNATURE, describe: str = "the model") -> None:
        self._source = model
        self._threads = threads
        self._signature = signature
        self._describe = describe
        self._interpreter: Any = None
        self._runner: Any = None
        self._to_key: dict[str, str] = {}
        self._to_onnx: dict[str, str] = {}
        self._order: list[str] = []

    def activate(self) -> None:
        litert = import_litert("validating in LiteRT")
        source = self._source() if callable(self._source) else self._source
        if isinstance(source, bytes):
            content = source
        else:
            path = Path(source)
            if not path.is_file():
                raise UsageError(f"{path}: no such .tflite file for LiteRT")
            content = path.read_bytes()
        try:
            flex = flex_ops(content)
        except Exception as exc:  # not a flatbuffer at all: the schema reader fails on the first offset
            raise RuntimeLoadError(f"LiteRT could not load {self._describe}: not a .tflite model "
                                   f"({type(exc).__name__}: {exc})") from exc
        if flex:  # the ai-edge-litert interpreter is not linked with the Flex delegate: say so at load, not mid-run
            raise RuntimeLoadError(f"LiteRT cannot run {self._describe}: it uses select TF ops ({', '.join(flex)}), "
                                   "which need an interpreter linked with the Flex delegate")
        try:
            self._interpreter = litert.Interpreter(model_content=content, num_threads=self._threads)
            signatures = self._interpreter.get_signature_list()
            if self._signature not in signatures:
                raise UsageError(f"signature '{self._signature}' not in the .tflite model (it has "
                                 f"{', '.join(sorted(signatures)) or 'none'})")
            self._runner = self._interpreter.get_signature_runner(self._signature)
            names = read_name_map(content)
        except UsageError:
            raise
        except Exception as exc:  # LiteRT raises ValueError/RuntimeError with its own words (e.g. Flex ops)
            raise RuntimeLoadError(f"LiteRT could not load {self._describe}: {str(exc).strip()[:2000]}") from exc
        self._to_key = dict(names.get("inputs", {}))
        self._to_onnx = {key: onnx for onnx, key in names.get("outputs", {}).items()}
        self._order = list(names.get("outputs", {}))

    def set_threads(self, threads: int) -> None:
        """Before ``activate``: run inference on ``threads`` threads (``bridge bench --threads``)."""
        self._threads = threads

    def _ensure(self) -> None:
        if self._runner is None:
            self.activate()

    def input_metadata(self) -> Sequence[TensorMeta]:
        self._ensure()
        by_key = {key: onnx for onnx, key in self._to_key.items()}
        return [_meta(by_key.get(key, key), d) for key, d in self._runner.get_input_details().items()]

    def output_metadata(self) -> Sequence[TensorMeta]:
        self._ensure()
        return [_meta(self._to_onnx.get(key, key), d) for key, d in self._runner.get_output_details().items()]

    def infer(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        self._ensure()
        details = self._runner.get_input_details()
        keyed = signature_feeds(feeds, self._to_key, list(details), f".tflite signature '{self._signature}'")
        kwargs = {k: np.ascontiguousarray(v, dtype=details[k]["dtype"]) for k, v in keyed.items()}
        try:
            out = self._runner(**kwargs)
        except Exception as exc:
            raise InferenceError("litert", f"LiteRT failed running {self._describe}: {str(exc).strip()[:2000]}") from exc
        named = {self._to_onnx.get(k, k): np.array(v) for k, v in out.items()}
        order = [n for n in self._order if n in named]  # the ONNX graph's output order
        return {n: named[n] for n in order + [n for n in named if n not in order]}

    def deactivate(self) -> None:
        self._runner = None
        self._interpreter = None


def _meta(name: str, detail: Mapping[str, Any]) -> TensorMeta:
    signature = detail.get("shape_signature", detail["shape"])
    dims = tuple(None if int(d) < 0 else int(d) for d in signature)
    return TensorMeta(name, dims, np.dtype(detail["dtype"]).name)
