"""Tell the TensorFlow sources bridge accepts apart and load each into one shape: inputs + a callable.

- a SavedModel folder (``saved_model.pb`` inside; signature from ``options["signature"]``, default
  ``serving_default``);
- a Keras model file (``.keras``, ``.h5``/``.hdf5``) or a live ``keras.Model``;
- a frozen GraphDef (``.pb`` file), with input/output tensor names from ``options["inputs"]`` /
  ``options["outputs"]`` (comma-separated, ``name`` or ``name:0``); without them the Placeholders
  are the inputs and the ops nothing consumes are the outputs;
- a TFLite flatbuffer (``.tflite``), run by the TFLite interpreter; ``options["outputs"]`` cuts it at those
  tensors, and sparse weights are densified for the export (``adapters.tensorflow.tflite_file``).

Kind detection looks only at paths (no TensorFlow import), so ``claims`` stays cheap.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bridge.config import Source
from bridge.errors import BadInputFileError, SourceNotFoundError, UsageError
from bridge.frameworks import import_tensorflow, is_saved_model_dir

logger = logging.getLogger(__name__)

KERAS_SUFFIXES = (".keras", ".h5", ".hdf5")
GRAPHDEF_SUFFIXES = (".pb",)
TFLITE_SUFFIXES = (".tflite",)
DEFAULT_SIGNATURE = "serving_default"
_NOT_OUTPUTS = frozenset({"Const", "NoOp", "Assert", "Placeholder", "VarHandleOp", "SaveV2", "RestoreV2"})


@dataclass(frozen=True)
class TensorSig:
    """One input or output as the source declares it: shape may hold None (unknown), None = unknown rank."""

    name: str
    shape: tuple[int | None, ...] | None
    dtype: str


@dataclass
class LoadedTF:
    """A loaded TF source. ``call`` (SavedModel, Keras) maps {input name: tf.Tensor} -> {output name: tensor}."""

    kind: str  # saved_model | keras | graph_def | tflite
    inputs: list[TensorSig]
    output_names: list[str]
    call: Any = None
    graph_def: Any = None  # graph_def: the GraphDef; inputs/outputs are tensor names ("x:0")
    path: Path | None = None  # tflite: the flatbuffer the reference runs (the source, or its --outputs cut)
    keep: list[Any] = field(default_factory=list)  # objects that must outlive ``call`` (loaded SavedModel)
    export_path: Path | None = None  # tflite: what tf2onnx reads when it differs from ``path`` (densified)
    origin: Path | None = None  # tflite: the user's file (``path`` may be its cut)


def source_kind(source: Source) -> str | None:
    """The kind of TF source ``source`` is, from its path or object type, without importing TF."""
    if source.obj is not None:
        mro = [c.__module__.split(".")[0] for c in type(source.obj).__mro__]
        return "keras" if any(m in ("keras", "tf_keras") for m in mro) else None
    if not source.location:
        return None
    p = Path(source.location)
    if p.is_dir() or (p.name == "saved_model.pb" and is_saved_model_dir(p.parent)):
        return "saved_model" if is_saved_model_dir(p if p.is_dir() else p.parent) else None
    suffix = p.suffix.lower()
    if suffix in KERAS_SUFFIXES:
        return "keras"
    if suffix in GRAPHDEF_SUFFIXES:
        return "graph_def"
    if suffix in TFLITE_SUFFIXES:
        return "tflite"
    return None


# the source options only some kinds read (flag, kinds); another kind refuses them rather than ignore them
_KIND_OPTIONS = {"outputs": ("--outputs", ("graph_def", "tflite")), "graph_inputs": ("--inputs", ("graph_def",)),
                 "inputs": ("--inputs", ("graph_def",)), "signature": ("--signature", ("saved_model",))}
_KIND_NAMES = {"graph_def": "a frozen GraphDef .pb", "saved_model": "a SavedModel folder", "keras": "a Keras model",
               "tflite": "a .tflite file"}


def check_kind_options(source: Source, kind: str) -> None:
    """UsageError naming the option for a knob this kind of TF source does not read (``--outputs`` on a
    Keras file, ``--signature`` on a GraphDef)."""
    for key, (flag, kinds) in _KIND_OPTIONS.items():
        value = source.options.get(key)
        if value and kind not in kinds:
            raise UsageError(f"{flag} {value}: {source.describe()} is {_KIND_NAMES[kind]}, and {flag} applies to "
                             f"{' and '.join(_KIND_NAMES[k] for k in kinds)} only; drop it")


def load(source: Source) -> LoadedTF:
    kind = source_kind(source)
    if kind is None:
        raise UsageError(f"'{source.describe()}' is not a TensorFlow source: use a SavedModel folder, a .keras/.h5 "
                         "Keras file, a frozen GraphDef .pb or a .tflite file")
    check_kind_options(source, kind)
    if source.obj is None:
        assert source.location is not None
        if not Path(source.location).exists():
            raise SourceNotFoundError(f"no such file or folder: {source.location}")
    import_tensorflow(f"converting TensorFlow models ({kind})")
    if kind == "saved_model":
        return _load_saved_model(source)
    if kind == "keras":
        return _load_keras(source)
    if kind == "graph_def":
        return _load_graph_def(source)
    return _load_tflite(source)


def _dtype(tf_dtype: Any) -> str:
    return str(np.dtype(tf_dtype.as_numpy_dtype).name)


def _shape(tf_shape: Any) -> tuple[int | None, ...] | None:
    if tf_shape.rank is None:
        return None
    return tuple(tf_shape.as_list())


def _load_saved_model(source: Source) -> LoadedTF:
    import tensorflow as tf

    assert source.location is not None
    path = Path(source.location)
    path = path if path.is_dir() else path.parent
    try:
        loaded = tf.saved_model.load(str(path))
    except Exception as exc:
        raise BadInputFileError(f"{path}: tf.saved_model.load failed: {type(exc).__name__}: {exc}") from exc
    wanted = source.options.get("signature", DEFAULT_SIGNATURE)
    signatures = dict(loaded.signatures)
    if wanted not in signatures:
        raise UsageError(f"--signature {wanted}: {path} has signatures {', '.join(sorted(signatures)) or '(none)'}"
                         + ("" if signatures else "; re-save it with tf.saved_model.save(..., signatures=...)"))
    fn = signatures[wanted]
    specs = fn.structured_input_signature[1]
    # signatures are keyword-only: sorted names give every load the same input (and output) order
    inputs = [TensorSig(name, _shape(specs[name].shape), _dtype(specs[name].dtype)) for name in sorted(specs)]
    outputs = sorted(fn.structured_outputs)

    def call(feeds: dict[str, Any]) -> dict[str, Any]:
        return dict(fn(**feeds))

    return LoadedTF("saved_model", inputs, outputs, call=call, path=path, keep=[loaded, fn])


def _load_keras(source: Source) -> LoadedTF:
    import keras

    if source.obj is not None:
        model = source.obj
    else:
        assert source.location is not None
        try:
            model = keras.models.load_model(source.location, compile=False)
        except Exception as exc:
            raise BadInputFileError(f"{source.location}: keras.models.load_model failed: {type(exc).__name__}: "
                                    f"{str(exc).splitlines()[0] if str(exc) else ''}") from exc
    try:
        model_inputs = list(model.inputs)
    except (AttributeError, ValueError):
        model_inputs = []
    if not model_inputs:
        raise UsageError("the Keras model has no defined inputs (a Sequential model never built on data); "
                         "build it with keras.Input(...) or call it once before saving")
    inputs = [TensorSig(_keras_name(t, i), tuple(t.shape), str(np.dtype(t.dtype).name))
              for i, t in enumerate(model_inputs)]
    output_names = [str(n) for n in getattr(model, "output_names", None) or
                    [f"output_{i}" for i in range(len(model.outputs))]]
    if len(set(output_names)) != len(output_names):
        output_names = [f"output_{i}" for i in range(len(output_names))]
    names = [s.name for s in inputs]

    def call(feeds: dict[str, Any]) -> dict[str, Any]:
        args = [feeds[n] for n in names]
        out = model(args[0] if len(args) == 1 else args, training=False)
        if isinstance(out, dict):
            return {str(k): v for k, v in out.items()}
        values = list(out) if isinstance(out, (list, tuple)) else [out]
        return dict(zip(output_names, values, strict=True))

    probe_out = output_names
    return LoadedTF("keras", inputs, probe_out, call=call, keep=[model])


def _keras_name(tensor: Any, index: int) -> str:
    name = str(getattr(tensor, "name", "") or f"input_{index}")
    return name.split(":")[0]


def _tensor_name(name: str) -> str:
    name = name.strip()
    return name if ":" in name else f"{name}:0"


def _load_graph_def(source: Source) -> LoadedTF:
    import tensorflow as tf

    assert source.location is not None
    gd = tf.compat.v1.GraphDef()
    try:
        gd.ParseFromString(Path(source.location).read_bytes())
    except Exception as exc:
        raise BadInputFileError(f"{source.location} is not a binary GraphDef: {exc}") from exc
    nodes = {n.name: n for n in gd.node}
    given_in = [_tensor_name(s) for s in (source.options.get("graph_inputs") or source.options.get("inputs", "")).split(",")
                if s.strip()]
    given_out = [_tensor_name(s) for s in source.options.get("outputs", "").split(",") if s.strip()]
    in_names = given_in or [f"{n.name}:0" for n in gd.node if n.op == "Placeholder"]
    if not given_out:
        consumed = {i.lstrip("^").split(":")[0] for n in gd.node for i in n.input}
        given_out = [f"{n.name}:0" for n in gd.node if n.name not in consumed and n.op not in _NOT_OUTPUTS]
    missing = [t for t in (*in_names, *given_out) if t.split(":")[0] not in nodes]
    if missing:
        raise UsageError(f"GraphDef {source.location} has no node(s) {', '.join(missing)}")
    if not in_names or not given_out:
        raise UsageError(f"cannot tell the inputs/outputs of GraphDef {source.location}; give them with "
                         "--inputs NAME[,NAME] --outputs NAME[,NAME]")
    inputs = []
    for t in in_names:
        node = nodes[t.split(":")[0]]
        if node.op != "Placeholder":
            raise UsageError(f"--inputs {t}: node '{node.name}' is a {node.op}, not a Placeholder")
        dtype = tf.dtypes.as_dtype(node.attr["dtype"].type)
        shape = tf.TensorShape(node.attr["shape"].shape) if "shape" in node.attr else tf.TensorShape(None)
        inputs.append(TensorSig(t, _shape(shape), _dtype(dtype)))
    return LoadedTF("graph_def", inputs, given_out, graph_def=gd, path=Path(source.location))


def tflite_interpreter(path: Path) -> Any:
    """The LiteRT interpreter when ai_edge_litert is installed, else tf.lite.Interpreter (deprecated, still there)."""
    import warnings

    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError:
        import tensorflow as tf

        Interpreter = tf.lite.Interpreter
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*tf.lite.Interpreter is deprecated.*")
        try:
            return Interpreter(model_path=str(path))
        except Exception as exc:
            raise BadInputFileError(f"{path} is not a loadable TFLite model: {exc}") from exc


def _load_tflite(source: Source) -> LoadedTF:
    """The .tflite, cut at ``--outputs`` when given (the reference runs the cut), densified for tf2onnx when it
    stores sparse weights; the rewritten flatbuffers live in a temporary folder as long as the LoadedTF."""
    import shutil
    import tempfile
    import weakref

    from adapters.tensorflow import tflite_file

    assert source.location is not None
    original = Path(source.location)
    content = original.read_bytes()
    asked = source.options.get("outputs") or ""
    outputs = [o.strip() for o in (asked if isinstance(asked, list) else str(asked).split(",")) if o.strip()]
    try:
        cut = tflite_file.prune(content, outputs, original.name) if outputs else None
        dense = tflite_file.densify(cut or content)
    except UsageError:
        raise
    except Exception as exc:
        raise BadInputFileError(f"{original}: could not prepare the .tflite for conversion: {type(exc).__name__}: "
                                f"{exc}") from exc
    folder = Path(tempfile.mkdtemp(prefix="bridge-tflite-")) if cut is not None or dense is not None else None
    path, export_path = original, None
    if folder is not None:
        if cut is not None:
            path = folder / f"{original.stem}.cut.tflite"
            path.write_bytes(cut)
        if dense is not None:
            export_path = folder / f"{original.stem}.dense.tflite"
            export_path.write_bytes(dense)
            logger.info("%s: sparse weights (DENSIFY) densified for the export", original)
    interp = tflite_interpreter(path)
    inputs = []
    for d in interp.get_input_details():
        sig = d.get("shape_signature", d["shape"])
        inputs.append(TensorSig(d["name"], tuple(None if int(v) < 0 else int(v) for v in sig),
                                np.dtype(d["dtype"]).name))
    names = [d["name"] for d in interp.get_output_details()]
    loaded = LoadedTF("tflite", inputs, names, path=path, export_path=export_path, origin=original)
    if folder is not None:
        weakref.finalize(loaded, shutil.rmtree, folder, True)
    return loaded
