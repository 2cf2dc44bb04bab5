"""OpenVINO as a candidate runtime: runs an IR (.xml + .bin) or an ONNX model on OpenVINO's CPU plugin.

The runtime receives an IR ``.xml`` path, an ONNX model (path, bytes or ModelProto: OpenVINO reads ONNX
itself), or a loader callable returning either (called on ``activate``; e.g. the OpenVINO target
converting the ONNX stage's model into a work folder). Feeds and outputs are keyed by the ONNX tensor
names, which OpenVINO's ONNX front end and IR keep as tensor names. The model is compiled with its
dynamic dimensions left dynamic, so any batch runs without a recompile; inference runs in float32
(``INFERENCE_PRECISION_HINT``: the CPU plugin would otherwise pick bf16 on hardware that has it).

OpenVINO is imported only inside ``activate``, never at module import.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from bridge.errors import AdapterUnavailableError, InferenceError, RuntimeLoadError, UsageError
from bridge.runtimes.base import TensorMeta

logger = logging.getLogger(__name__)

INSTALL_HINT = "pip install 'bridge[openvino]'"

ModelSource = str | Path | bytes | onnx.ModelProto


def import_openvino(purpose: str) -> Any:
    """Import openvino (without its usage telemetry, ``without_telemetry``) or raise AdapterUnavailableError for
    ``purpose``."""
    without_telemetry()
    try:
        import openvino
    except ImportError:
        raise AdapterUnavailableError("OpenVINO", purpose, INSTALL_HINT) from None
    return openvino


def without_telemetry() -> None:
    """Keep OpenVINO from sending usage telemetry: ``import openvino`` and every ``convert_model`` send events over
    the network (``openvino_telemetry``, on unless a consent file says no) from a thread that forks a process for
    it. bridge sends nothing anywhere, and that fork deadlocks a process running MXNet (its atfork handler stops
    MXNet's threaded engine while the main thread waits for the GIL the forking thread holds: measured, a
    convert hung for an hour with ``isolated=False``). Before OpenVINO is imported, the telemetry package is
    marked absent, so OpenVINO takes its own fallback (``openvino.tools.ovc.telemetry_stub``, which does
    nothing); a process that imported it already keeps it."""
    if "openvino_telemetry" not in sys.modules and "openvino" not in sys.modules:
        sys.modules["openvino_telemetry"] = None  # type: ignore[assignment]  # import raises ImportError: the stub


def read_model(ov: Any, core: Any, model: ModelSource) -> Any:
    """An ``ov.Model`` from an IR path, an ONNX path, ONNX bytes or a ModelProto; an ONNX model gets ONNX's tie
    rules back (``with_onnx_tie_rules``), an IR is taken as it is (it is the artefact under test)."""
    if isinstance(model, onnx.ModelProto):
        model = model.SerializeToString()
    if isinstance(model, bytes):
        return with_onnx_tie_rules(core.read_model(model=model, weights=ov.Tensor(np.empty(0, np.uint8))))
    path = Path(model)
    if not path.is_file():
        raise UsageError(f"{path}: no such model file for OpenVINO (give an IR .xml or an .onnx file)")
    read = core.read_model(str(path))
    return read if path.suffix.lower() == ".xml" else with_onnx_tie_rules(read)


def with_onnx_tie_rules(model: Any) -> Any:
    """``model`` (an ``ov.Model`` converted from ONNX) with every TopK stable, as ONNX's TopK is: of equal values
    the lower index comes first. OpenVINO's ONNX front end emits TopK-11 with ``stable=false``, whose CPU kernel
    orders tied values arbitrarily; a detector whose NMS visits boxes in TopK order (MultiBoxDetection's
    lowering, MXNet's stable sort) then keeps other boxes than onnxruntime and MXNet wherever scores tie."""
    for op in model.get_ordered_ops():
        if op.get_type_name() == "TopK" and op.get_attributes().get("stable") is False:
            op.set_attribute("stable", True)
    return model


class OpenVinoRuntime:
    """Runs a model in an OpenVINO CPU ``CompiledModel``; feeds and outputs keyed by tensor (ONNX) name.

    ``model``: an IR ``.xml`` path, an ONNX path/bytes/ModelProto, or a callable returning one (called on
    ``activate``). ``threads``: ``INFERENCE_NUM_THREADS`` (None: OpenVINO's default, all cores).
    """

    name = "openvino"

    def __init__(self, model: ModelSource | Callable[[], ModelSource], *, threads: int | None = None,
                 describe: str = "the model") -> None:
        self._source = model
        self._threads = threads
        self._describe = describe
        self._compiled: Any = None
        self._request: Any = None
        self._inputs: dict[str, Any] = {}  # tensor name -> ov port
        self._outputs: list[tuple[str, Any]] = []

    def activate(self) -> None:
        ov = import_openvino("validating in OpenVINO")
        source = self._source() if callable(self._source) else self._source
        core = ov.Core()
        config: dict[str, Any] = {"INFERENCE_PRECISION_HINT": "f32"}
        if self._threads:
            config["INFERENCE_NUM_THREADS"] = int(self._threads)
        try:
            model = read_model(ov, core, source)
            self._compiled = core.compile_model(model, "CPU", config)
        except UsageError:
            raise
        except Exception as exc:  # openvino raises RuntimeError / OpConversionFailure with its own words
            raise RuntimeLoadError(f"OpenVINO could not load {self._describe}: {str(exc).strip()[:2000]}") from exc
        self._request = self._compiled.create_infer_request()
        self._inputs = {_port_name(p): p for p in self._compiled.inputs}
        self._outputs = [(_port_name(p), p) for p in self._compiled.outputs]

    def set_threads(self, threads: int) -> None:
        """Before ``activate``: run inference on ``threads`` threads (``bridge bench --threads``)."""
        self._threads = threads

    def _ensure(self) -> None:
        if self._compiled is None:
            self.activate()

    def input_metadata(self) -> Sequence[TensorMeta]:
        self._ensure()
        return [_meta(name, port) for name, port in self._inputs.items()]

    def output_metadata(self) -> Sequence[TensorMeta]:
        self._ensure()
        return [_meta(name, port) for name, port in self._outputs]

    def infer(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        self._ensure()
        unknown = sorted(set(feeds) - set(self._inputs))
        if unknown:
            raise UsageError(f"feed(s) {unknown} are not inputs of the OpenVINO model "
                             f"(inputs: {', '.join(self._inputs)})")
        missing = sorted(set(self._inputs) - set(feeds))
        if missing:
            raise UsageError(f"no feed for OpenVINO model input(s) {missing}")
        inputs = {port: np.ascontiguousarray(feeds[name], dtype=_np_dtype(port)) for name, port in self._inputs.items()}
        try:
            results = self._request.infer(inputs, share_inputs=False, share_outputs=False)
        except Exception as exc:
            raise InferenceError("openvino", f"OpenVINO failed running {self._describe}: {str(exc).strip()[:2000]}") from exc
        return {name: np.array(results[port]) for name, port in self._outputs}

    def deactivate(self) -> None:
        self._request = None
        self._compiled = None


def _port_name(port: Any) -> str:
    """The ONNX name of a port: OpenVINO keeps it as one of the tensor's names (the first, sorted, if several)."""
    names = sorted(port.get_names())
    return str(port.get_any_name()) if len(names) != 1 else str(names[0])


def _np_dtype(port: Any) -> np.dtype[Any]:
    return np.dtype(port.get_element_type().to_dtype())


def _meta(name: str, port: Any) -> TensorMeta:
    shape = port.get_partial_shape()
    dims: tuple[int | str | None, ...] | None = None
    if shape.rank.is_static:
        dims = tuple(int(d.get_length()) if d.is_static else None for d in shape)
    return TensorMeta(name, dims, _np_dtype(port).name)
