"""onnxruntime as a target runtime, plus plain-words explanations of its load errors.

onnxruntime's load errors are precise but terse ("Could not find an implementation for Clip(11)
node with name ''"); ``explain_load_error`` turns the common ones into an actionable sentence.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from bridge.errors import InferenceError, RuntimeLoadError
from bridge.runtimes.base import TensorMeta

_ORT_TYPES = {
    "tensor(float)": "float32", "tensor(double)": "float64", "tensor(float16)": "float16",
    "tensor(int64)": "int64", "tensor(int32)": "int32", "tensor(int16)": "int16", "tensor(int8)": "int8",
    "tensor(uint8)": "uint8", "tensor(bool)": "bool", "tensor(string)": "object",
    "tensor(uint16)": "uint16", "tensor(uint32)": "uint32", "tensor(uint64)": "uint64",
}
# onnx's element types by the name onnxruntime gives them (``tensor(<name>)``)
_ONNX_TYPE_NAMES = {onnx.TensorProto.FLOAT: "float", onnx.TensorProto.DOUBLE: "double",
                    onnx.TensorProto.FLOAT16: "float16", onnx.TensorProto.INT64: "int64",
                    onnx.TensorProto.INT32: "int32", onnx.TensorProto.INT16: "int16", onnx.TensorProto.INT8: "int8",
                    onnx.TensorProto.UINT8: "uint8", onnx.TensorProto.BOOL: "bool", onnx.TensorProto.STRING: "string",
                    onnx.TensorProto.UINT16: "uint16", onnx.TensorProto.UINT32: "uint32",
                    onnx.TensorProto.UINT64: "uint64"}

# (pattern on the onnxruntime message, explanation template using the named groups)
_TYPE_ERROR = (r"Type '?\(?(?P<t>tensor\(\w+\))'?\)? of (?:input|output) (?:parameter|arg) \((?P<name>[^)]*)\) "
               r"of operator \((?P<op>{op})\) in node \((?P<node>[^)]*)\) is invalid")
_EXPLANATIONS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(_TYPE_ERROR.format(op="Clip")),
     "Clip node '{node}' gets {t}: integer Clip is only valid from opset 12, so onnxruntime refuses the model; "
     "convert it to opset >= 12 (e.g. `bridge convert MODEL.onnx --opset 13`)."),
    (re.compile(r"Could not find an implementation for Clip\((?P<v>\d+)\) node with name '(?P<node>[^']*)'"),
     "Clip node '{node}' runs on a type onnxruntime has no Clip-{v} kernel for. Clip on int64/int32 is only "
     "valid from opset 12; convert the model to opset >= 12 (e.g. `bridge convert MODEL.onnx --opset 13`)."),
    (re.compile(r"Could not find an implementation for (?P<op>\w+)\((?P<v>\d+)\) node with name '(?P<node>[^']*)'"),
     "onnxruntime has no kernel for {op} (opset {v}) with the input types node '{node}' uses; the op exists "
     "but not for these types at this opset. Converting to a newer opset or casting the inputs usually helps."),
    (re.compile(r"No Op registered for (?P<op>\w+) with domain_version of (?P<v>\d+)"),
     "op {op} does not exist in its domain at opset {v}. If it is a bridge.contrib op it still needs "
     "lowering; otherwise the model uses an op newer or older than its opset import."),
    (re.compile(r"Unsupported model IR version: (?P<ir>\d+), max supported IR version: (?P<max>\d+)"),
     "the model's IR version {ir} is newer than this onnxruntime supports ({max}); re-save it with an older "
     "IR version or upgrade onnxruntime."),
    (re.compile(r"Opset (?P<v>\d+) is under development|opset (?P<v2>\d+) is (not supported|higher)", re.I),
     "the model's opset is newer than this onnxruntime supports; convert it down with --opset."),
    (re.compile(_TYPE_ERROR.format(op=r"\w+")),
     "node '{node}' ({op}) gets {t} for '{name}', a type that op does not accept at this opset."),
]


# "Non-zero status code returned while running Gather node. Name:'g' Status Message: ..."
_RUN_NODE = re.compile(r"while running (?P<op>\w+) node\. Name:'(?P<node>[^']*)' Status Message: (?P<msg>.*)", re.S)


def explain_load_error(message: str) -> str | None:
    """A plain-words explanation of an onnxruntime load error, or None when it is not a known kind."""
    for pattern, template in _EXPLANATIONS:
        m = pattern.search(message)
        if m:
            groups = {k: (v or "") for k, v in m.groupdict().items()}
            return template.format(**groups)
    return None


def _as_model_bytes(model: Any) -> bytes | str:
    if isinstance(model, onnx.ModelProto):
        return model.SerializeToString()
    if isinstance(model, (str, Path)):
        return str(model)
    if isinstance(model, bytes):
        return model
    raise TypeError(f"OnnxRuntime needs a path, bytes or ModelProto, not {type(model).__name__}")


class OnnxRuntime:
    """Runs an ONNX model in an onnxruntime CPU InferenceSession."""

    name = "onnxruntime"

    @staticmethod
    def declared_input_metadata(model: onnx.ModelProto) -> list[TensorMeta] | None:
        """``input_metadata()`` without a session (see the module's ``declared_input_metadata``)."""
        return declared_input_metadata(model)

    def __init__(self, model: Any, *, log_severity: int = 2, intra_op_threads: int | None = None,
                 describe: str = "the model", failure_hint: str = "") -> None:
        self._model = _as_model_bytes(model)
        self._log_severity = log_severity
        self._threads = intra_op_threads
        self._spinning = True
        self._session: Any = None
        self._describe = describe  # how run failures name the model ("the source ONNX file", ...)
        self._hint = failure_hint

    def activate(self) -> None:
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.log_severity_level = self._log_severity
        if self._threads:
            opts.intra_op_num_threads = self._threads
        if not self._spinning:
            opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        try:
            self._session = ort.InferenceSession(self._model, opts, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own Fail/InvalidGraph/... types
            text = str(exc)
            hint = explain_load_error(text)
            raise RuntimeLoadError(f"onnxruntime could not load the model: {hint or text}") from exc

    def set_threads(self, threads: int) -> None:
        """Before ``activate``: ``threads`` intra-op threads that sleep when idle instead of spinning (so they
        do not take the cores from whatever runs next, e.g. another runtime in ``bridge bench --threads``)."""
        self._threads, self._spinning = threads, False

    @property
    def session(self) -> Any:
        if self._session is None:
            self.activate()
        return self._session

    def input_metadata(self) -> Sequence[TensorMeta]:
        return [_meta(i) for i in self.session.get_inputs()]

    def output_metadata(self) -> Sequence[TensorMeta]:
        return [_meta(o) for o in self.session.get_outputs()]

    def infer(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        names = [o.name for o in self.session.get_outputs()]
        try:
            values = self.session.run(names, dict(feeds))
        except Exception as exc:  # onnxruntime's Fail / InvalidArgument / RuntimeException ...
            text = str(exc)
            m = _RUN_NODE.search(text)
            node = m.group("node") if m else None
            where = f" at {m.group('op')} node '{node}'" if m else ""
            detail = m.group("msg").strip() if m else text.strip()
            raise InferenceError("onnxruntime", f"onnxruntime failed running {self._describe}{where}: {detail}"
                                 + (f"; {self._hint}" if self._hint else ""), node) from exc
        return dict(zip(names, values, strict=True))

    def deactivate(self) -> None:
        self._session = None


def declared_input_metadata(model: onnx.ModelProto) -> list[TensorMeta] | None:
    """What ``OnnxRuntime(model).input_metadata()`` says, read from the graph without a session: the graph's
    inputs that are not initializers (onnxruntime lists those apart), dims as ints, names or None. None when
    the graph does not settle it (an input without a shape or of a type this table does not name)."""
    initializers = {i.name for i in model.graph.initializer}
    metas: list[TensorMeta] = []
    for vi in model.graph.input:
        if vi.name in initializers:
            continue
        tt = vi.type.tensor_type
        ort_type = f"tensor({_ONNX_TYPE_NAMES.get(tt.elem_type, '?')})"
        if not vi.type.HasField("tensor_type") or not tt.HasField("shape") or ort_type not in _ORT_TYPES:
            return None
        shape = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim)
        metas.append(TensorMeta(vi.name, shape, _ORT_TYPES[ort_type]))
    return metas


def _meta(arg: Any) -> TensorMeta:
    shape = None if arg.shape is None else tuple(d if isinstance(d, int) else (d or None) for d in arg.shape)
    return TensorMeta(arg.name, shape, _ORT_TYPES.get(arg.type, arg.type))
