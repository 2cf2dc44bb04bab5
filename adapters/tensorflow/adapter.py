"""TensorFlow -> ONNX through tf2onnx, for SavedModels, Keras models, frozen GraphDefs and TFLite files.

Shapes work as in the PyTorch adapter: inputs are exported at the concrete sample shapes
(``--input NAME:SHAPE``, else the source's own fully known shape), so shape-computing subgraphs
fold; axes named in ``--dynamic`` are exported as unknown dims. tf2onnx calls every unknown dim
``unk__N`` with a fresh N per tensor, so an output's ``unk__7`` says nothing about which input
axis it follows; the adapter therefore clears those symbols on outputs and intermediates (an
unnamed dim) and leaves the inputs' to the ONNX stage, whose NameDynamicAxesPass names them and
whose shape inference carries the label to the outputs.

A source signature with an unknown batch axis (``None`` at axis 0) and no sample shape is
exported with batch 1 (noted in the result); any other unknown axis needs ``--input``.
Warnings raised while exporting are collected for the report, TF's log chatter goes to debug.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from types import MappingProxyType
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from adapters.base import ExportResult, rename_outputs
from adapters.tensorflow.loading import LoadedTF, TensorSig, load, source_kind
from adapters.tensorflow.runner import make_runner
from adapters.tensorflow.trust import refuse_side_effects
from bridge.chatter import captured_warnings, quiet, root_cause
from bridge.config import ExportSpec, InputSpec, Option, Source
from bridge.errors import BridgeError, ExportError, UsageError
from bridge.frameworks import framework_found, import_tensorflow
from bridge.runtimes.base import Runtime

logger = logging.getLogger(__name__)

TF2ONNX_MAX_OPSET = 18  # tf2onnx 1.17's newest opset; the ONNX stage converts to the requested one
_UNK = re.compile(r"^unk__\d+$")


class TensorFlowAdapter:
    framework = "tensorflow"
    honours = ("outputs", "output_names")  # --outputs: GraphDefs only (loading.load refuses it for the others)
    # --dataset preprocessing when the user gives none (bridge.validation.dataset; stated in the report)
    dataset_preprocessing = MappingProxyType({"channel_order": "RGB", "why": "TF detection / Keras models fed raw RGB pixels 0..255"})
    # the recipe runs export() in a child process (file sources, isolation on): the framework never enters
    # bridge's own process, which holds only the ONNX model while validation children run
    export_in_child = True
    # this adapter's own options, handed to it in Source.options (read by adapters.tensorflow.loading)
    options = (Option("graph_inputs", str | None, None, "GraphDef .pb: comma-separated input tensor names",
                      flags=("--inputs",), manifest="graph_inputs"),
               Option("signature", str | None, None, "SavedModel signature (default serving_default)"))

    def __init__(self) -> None:
        self._cache: dict[tuple[str, str], LoadedTF] = {}

    def claims(self, source: Source) -> bool:
        return source_kind(source) is not None

    def _load(self, source: Source) -> LoadedTF:
        key = (source.location or f"obj:{id(source.obj)}", source.options.get("signature", ""))
        if key not in self._cache:
            self._cache[key] = load(source)
        return self._cache[key]

    def require_framework(self) -> None:
        """AdapterUnavailableError when TensorFlow is not installed, checked before an export child starts."""
        if not framework_found("tensorflow"):
            import_tensorflow("converting TensorFlow models")

    def export(self, source: Source, spec: ExportSpec) -> ExportResult:
        import_tensorflow("converting TensorFlow models")
        loaded = self._load(source)
        notes: list[str] = []
        inputs, export_shapes = resolve_inputs(loaded.inputs, spec, notes)
        opset = min(spec.opset, TF2ONNX_MAX_OPSET)
        start = time.perf_counter()
        with captured_warnings() as caught, quiet(["tensorflow", "tf2onnx", "absl"], "tf2onnx"):
            try:
                model, exporter = _export(loaded, inputs, export_shapes, opset)
            except BridgeError:
                raise
            except Exception as exc:
                raise ExportError(f"tf2onnx could not convert the {loaded.kind} model: {root_cause(exc)}") from exc
        order_outputs(model, loaded.output_names)
        output_names = [o.name for o in model.graph.output]
        if spec.output_names:
            rename_outputs(model, spec.output_names)
            output_names = list(spec.output_names)
        else:
            notes += cut_name_notes(source.options.get("outputs") or "", output_names)
        clear_unknown_symbols(model)
        return ExportResult(model=model, exporter=exporter, inputs=inputs, output_names=tuple(output_names),
                            warnings=caught, notes=notes, seconds=time.perf_counter() - start)

    def nms_iou_thresholds(self, source: Source, run: Callable[[Callable[[], dict[str, float]]], dict[str, float]]
                           | None = None) -> dict[str, float] | None:
        """The constant IoU threshold of every TF NMS op (``NMS_IOU_INPUT``) of a SavedModel (its graph and every
        function in it, all signatures) or a frozen GraphDef, by node name; None for other kinds (Keras, TFLite)
        and live objects. Validation's tie rules take the threshold from here, not from the candidate. Read by
        ``run`` where given (where the reference runs: its child, TensorFlow already imported there), else in a
        child process of its own (TensorFlow parses the file and stays out of this process)."""
        kind = source_kind(source)
        if source.location is None or source.obj is not None or kind not in ("saved_model", "graph_def"):
            return None
        job = partial(read_nms_iou_thresholds, source.location, kind)
        if run is not None:
            return run(job)
        from bridge.runtimes.isolated import call_isolated

        return call_isolated(job, stage="reading the TensorFlow source's NMS thresholds")

    def reference_runner(self, source: Source, export: ExportResult) -> Runtime:
        import_tensorflow("running the TensorFlow reference")
        loaded = self._load(source)
        refuse_side_effects(_graph_def_of(loaded), source)  # validation executes the source graph
        by_name = {s.name: s for s in export.inputs}
        inputs = [by_name.get(s.name, InputSpec(s.name, None, s.dtype)) for s in loaded.inputs]
        return make_runner(loaded, inputs, export.output_names)


# TF ops that run an NMS -> the input position of their IoU threshold (tf.raw_ops signatures)
NMS_IOU_INPUT = {"NonMaxSuppressionV2": 3, "NonMaxSuppressionV3": 3, "NonMaxSuppressionV4": 3,
                 "NonMaxSuppressionV5": 3, "CombinedNonMaxSuppression": 4}


def read_nms_iou_thresholds(location: str, kind: str) -> dict[str, float]:
    """``TensorFlowAdapter.nms_iou_thresholds`` (run in a child): NMS node name -> its IoU threshold where that is
    a Const of the same graph or function body (one passed in as an argument or computed is not stated)."""
    from pathlib import Path

    tf = import_tensorflow("reading the source's NMS thresholds")
    from tensorflow.core.framework import graph_pb2
    from tensorflow.core.protobuf import saved_model_pb2

    path = Path(location)
    graph_defs: list[Any] = []
    if kind == "saved_model":
        saved = saved_model_pb2.SavedModel()
        saved.ParseFromString((path / "saved_model.pb" if path.is_dir() else path).read_bytes())
        graph_defs = [m.graph_def for m in saved.meta_graphs]
    else:
        graph_def = graph_pb2.GraphDef()
        graph_def.ParseFromString(path.read_bytes())
        graph_defs = [graph_def]
    found: dict[str, float] = {}
    for graph_def in graph_defs:
        for nodes in [list(graph_def.node), *(list(f.node_def) for f in graph_def.library.function)]:
            consts = {n.name: n for n in nodes if n.op == "Const"}
            for node in nodes:
                position = NMS_IOU_INPUT.get(node.op)
                if position is None or len(node.input) <= position:
                    continue
                const = consts.get(node.input[position].split(":")[0])
                if const is not None:
                    found[node.name] = float(np.asarray(tf.make_ndarray(const.attr["value"].tensor)).reshape(-1)[0])
    return found


def _graph_def_of(loaded: LoadedTF) -> object | None:
    """The graph the reference would execute (SavedModel signature with its functions, or a GraphDef)."""
    if loaded.kind == "graph_def":
        return loaded.graph_def
    if loaded.kind == "saved_model" and len(loaded.keep) > 1 and hasattr(loaded.keep[1], "graph"):
        return loaded.keep[1].graph.as_graph_def()
    return None


def resolve_inputs(sigs: Sequence[TensorSig], spec: ExportSpec, notes: list[str]
                   ) -> tuple[tuple[InputSpec, ...], dict[str, list[int | None]]]:
    """(sample InputSpecs, export shapes with None on dynamic axes), checked against the source signature."""
    names = [s.name for s in sigs]
    aliases = {_short(n): n for n in names}

    def canon(name: str) -> str:
        return name if name in names else aliases.get(name, aliases.get(_short(name), name))

    given = {canon(s.name): s for s in spec.inputs}
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise UsageError(f"--input {unknown[0]}: the model's inputs are {names}")
    dynamic: dict[str, set[int]] = {}
    for axis in spec.dynamic:
        name = canon(axis.input)
        if name not in names:
            raise UsageError(f"--dynamic {axis.input}:{axis.axis}: the model's inputs are {names}")
        dynamic.setdefault(name, set()).add(axis.axis)
    missing = [f"{s.name} ({'unknown rank' if s.shape is None else list(s.shape)})" for s in sigs
               if (given.get(s.name) is None or given[s.name].shape is None)
               and (s.shape is None or any(d is None for d in s.shape[1:]))]
    if missing:
        raise UsageError("the source leaves these input shapes open: " + ", ".join(missing) + "; give sample "
                         "shapes: " + " ".join(f"--input {m.split(' ')[0]}:SHAPE" for m in missing))
    samples: list[InputSpec] = []
    export: dict[str, list[int | None]] = {}
    for sig in sigs:
        g = given.get(sig.name)
        rank = len(g.shape) if g is not None and g.shape is not None else len(sig.shape or ())
        if sig.shape is not None and len(sig.shape) != rank:
            raise UsageError(f"--input {sig.name}: rank {rank} given, the source's input has rank {len(sig.shape)} "
                             f"({list(sig.shape)})")
        dyn = {a % rank for a in dynamic.get(sig.name, set())} if rank else set()
        if g is not None and g.shape is not None:
            for i, (d, want) in enumerate(zip(sig.shape or (None,) * rank, g.shape, strict=True)):
                if d is not None and d != want and i not in dyn:
                    raise UsageError(f"--input {sig.name}: axis {i} is fixed to {d} in the source, {want} given")
            sample = tuple(g.shape)
        else:
            assert sig.shape is not None
            unknown_axes = [i for i, d in enumerate(sig.shape) if d is None]  # at most axis 0 (checked above)
            sample = tuple(1 if d is None else d for d in sig.shape)
            if unknown_axes:
                notes.append(f"input '{sig.name}': the source leaves the batch axis open; "
                             + ("sample batch 1 (the axis stays dynamic)" if 0 in dyn else
                                "exported with batch 1 (give --dynamic to keep it dynamic)"))
        samples.append(InputSpec(sig.name, sample, sig.dtype))
        export[sig.name] = [None if i in dyn else d for i, d in enumerate(sample)]
    return tuple(samples), export


def _short(name: str) -> str:
    return name[:-2] if name.endswith(":0") else name


@dataclass(frozen=True)
class Tf2OnnxGraph:
    """The TensorFlow graph bridge hands tf2onnx (``from_graph_def``): for a SavedModel signature or a Keras model,
    its function frozen (``freeze``) with the calls grappler must inline made inlinable; a GraphDef as given.
    ``renames``: tensor -> the ONNX name tf2onnx gives it (the signature's input/output names); ``captured``:
    the function's captured constants by placeholder name (``captured_values``)."""

    graph_def: Any
    name: str
    input_names: list[str]
    output_names: list[str]
    renames: Mapping[str, str] = field(default_factory=dict)
    captured: Mapping[str, Callable[[], np.ndarray]] = field(default_factory=dict)


def tf2onnx_graph(loaded: LoadedTF, inputs: Sequence[InputSpec], shapes: Mapping[str, Sequence[int | None]]
                  ) -> Tf2OnnxGraph:
    """The graph ``_export`` converts (SavedModel, Keras, GraphDef; not TFLite), traced at ``shapes``."""
    import tensorflow as tf
    from tf2onnx.convert import tensor_names_from_structed

    if loaded.kind == "graph_def":
        return Tf2OnnxGraph(loaded.graph_def, "unknown", [s.name for s in inputs], list(loaded.output_names))
    specs = [tf.TensorSpec(list(shapes[s.name]), tf.as_dtype(s.dtype), name=s.name) for s in inputs]
    names = [s.name for s in inputs]
    out_names = list(loaded.output_names)
    call = loaded.call

    @tf.function(input_signature=specs, autograph=False)
    def fn(*args: Any) -> dict[str, Any]:
        out = call(dict(zip(names, args, strict=True)))
        return {n: tf.identity(out[n]) for n in out_names}

    concrete = fn.get_concrete_function(*specs)
    in_names = [t.name for t in concrete.inputs if t.dtype != tf.resource]
    out_names = [t.name for t in concrete.outputs if t.dtype != tf.resource]
    graph_def = freeze(concrete)
    inlined = inline_compiled_calls(graph_def)
    if inlined:
        logger.debug("function calls marked for XLA compilation made inlinable: %s", inlined)
    return Tf2OnnxGraph(graph_def, concrete.name, in_names, out_names,
                        tensor_names_from_structed(concrete, in_names, out_names), captured_values(concrete))


def tf2onnx_optimized(graph: Tf2OnnxGraph) -> Any:
    """The GraphDef tf2onnx turns into ONNX nodes: ``graph`` after the grappler pass ``from_graph_def`` runs
    first (``tf_loader.tf_optimize``: constant folding, function inlining), so its tensor names are the ONNX
    model's (where tf2onnx keeps a TF tensor, it keeps its name)."""
    import tensorflow as tf
    from tf2onnx import tf_loader

    with tf.device("/cpu:0"), tf.Graph().as_default():  # as from_graph_def: the graph imported into a fresh one
        tf.compat.v1.import_graph_def(graph.graph_def, name="")
        return tf_loader.tf_optimize(list(graph.input_names), list(graph.output_names), graph.graph_def)


def _export(loaded: LoadedTF, inputs: Sequence[InputSpec], shapes: dict[str, list[int | None]], opset: int
            ) -> tuple[onnx.ModelProto, str]:
    import tensorflow as tf
    import tf2onnx
    import tf2onnx.convert

    import adapters.tensorflow.tf_ops  # noqa: F401  (registers tf2onnx handlers for ops it lacks)

    exporter = f"tf2onnx {tf2onnx.__version__}"
    if loaded.kind == "graph_def":
        model, _ = tf2onnx.convert.from_graph_def(
            loaded.graph_def, input_names=[s.name for s in inputs], output_names=list(loaded.output_names),
            opset=opset, shape_override={s.name: shapes[s.name] for s in inputs})
        return model, f"{exporter} (frozen GraphDef)"
    if loaded.kind == "tflite":
        assert loaded.path is not None
        path = loaded.export_path or loaded.path
        override = {s.name: shapes[s.name] for s, sig in zip(inputs, loaded.inputs, strict=True)
                    if list(sig.shape or ()) != shapes[s.name]}
        model, _ = tf2onnx.convert.from_tflite(str(path), opset=opset, shape_override=override or None)
        check_tflite_export(model, loaded, shapes)
        densified = ", sparse weights densified" if loaded.export_path is not None else ""
        return model, f"{exporter} (TFLite{densified})"
    graph = tf2onnx_graph(loaded, inputs, shapes)
    with tf.device("/cpu:0"):
        model, _ = tf2onnx.convert.from_graph_def(
            graph.graph_def, name=graph.name, input_names=graph.input_names, output_names=graph.output_names,
            opset=opset, tensors_to_rename=dict(graph.renames))
    fold_captured_inputs(model, [s.name for s in inputs], graph.captured)
    kind = "SavedModel signature" if loaded.kind == "saved_model" else "Keras model"
    return model, f"{exporter} ({kind})"


def check_tflite_export(model: onnx.ModelProto, loaded: LoadedTF, shapes: Mapping[str, Sequence[int | None]]) -> None:
    """What tf2onnx could not do for a .tflite, in a .tflite user's words: ops it left as TFLite ops (custom ops
    named as custom, with the --outputs cut before them), and axes asked dynamic that the file fixes."""
    from adapters.tensorflow.tflite_file import unsupported_in_export

    assert loaded.path is not None
    name = (loaded.origin or loaded.path).name
    error = unsupported_in_export(((n.op_type, n.name) for n in model.graph.node), loaded.path.read_bytes(), name)
    if error is not None:
        raise error
    for vi in model.graph.input:
        want = shapes.get(vi.name)
        if want is None:
            continue
        dims = vi.type.tensor_type.shape.dim
        fixed = [i for i, (d, w) in enumerate(zip(dims, want, strict=False)) if w is None and d.HasField("dim_value")]
        if fixed:
            axis = fixed[0]
            raise UsageError(
                f"--dynamic {_short(vi.name)}:{axis}: {name} fixes axis {axis} of input '{vi.name}' to "
                f"{dims[axis].dim_value}. A .tflite keeps the shapes it was converted with (its reshape targets and "
                "other shape values are numbers stored in the file), so the model cannot follow another size on "
                f"that axis. Drop --dynamic and run {dims[axis].dim_value} at a time (a batch of images: one call per "
                "image), or convert the model's own source (SavedModel, Keras) with --dynamic if you have it")


def freeze(concrete: Any) -> Any:
    """The GraphDef of ``concrete`` with its variables turned into constants (as tf2onnx's ``from_function``
    freezes it, including its fallback for resources the freezer cannot type)."""
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2
    from tf2onnx import tf_loader

    try:
        frozen = convert_variables_to_constants_v2(concrete, lower_control_flow=False, aggressive_inlining=True)
    except ValueError as exc:
        if "incompatible with expected resource" not in str(exc):
            raise
        graph_def = tf_loader.fix_freezing_errors(tf_loader.convert_variables_to_constants_large_model(concrete))
    else:
        graph_def = frozen.graph.as_graph_def(add_shapes=True)
    return tf_loader.fix_freezing_errors_part2(graph_def)


# attributes that keep grappler's function optimizer from inlining a call (it leaves functions marked for
# XLA compilation to XLA); tf2onnx converts no call op, so every call it meets must be inlined first
_NO_INLINE_ATTRS = ("_XlaMustCompile", "_XlaCompile", "_XlaScope", "_noinline")
_CALL_OPS = frozenset({"PartitionedCall", "StatefulPartitionedCall"})


def inline_compiled_calls(graph_def: Any) -> list[str]:
    """Clear the attributes that stop grappler from inlining function calls, on the call nodes of
    ``graph_def`` (and of its function library) and on the library's functions, in place. Keras 3 wraps
    some layers' kernels in ``tf.function(jit_compile=True)`` (grouped and depthwise convolutions, for
    one): frozen, they stay ``StatefulPartitionedCall`` nodes that tf2onnx cannot convert. Returns the
    names of the call nodes changed."""
    changed: list[str] = []

    def clear(node: Any) -> None:
        hit = [a for a in _NO_INLINE_ATTRS if a in node.attr]
        for a in hit:
            del node.attr[a]
        if hit and node.op in _CALL_OPS:
            changed.append(node.name)

    for node in graph_def.node:
        clear(node)
    for fdef in graph_def.library.function:
        for a in _NO_INLINE_ATTRS:
            if a in fdef.attr:
                del fdef.attr[a]
        for node in fdef.node_def:
            clear(node)
    return changed


def captured_values(concrete: Any) -> dict[str, Callable[[], np.ndarray]]:
    """The tensors a concrete function captures from outside (``tf.constant`` anchors of an SSD head, ...),
    by the name of their placeholder inside the function: ``from_function`` hands tf2onnx every placeholder
    as an input, the captured ones included (tf2onnx's SavedModel and Keras paths drop them:
    ``captured_inputs``). Variables (resource handles) are left out: freezing turns them into weights."""
    import tensorflow as tf

    return {internal.name: partial(_numpy, external) for external, internal in concrete.graph.captures
            if internal.dtype != tf.resource}


def _numpy(tensor: Any) -> np.ndarray:
    return np.asarray(tensor.numpy())


def fold_captured_inputs(model: onnx.ModelProto, inputs: Sequence[str],
                         captured: Mapping[str, Callable[[], np.ndarray]]) -> list[str]:
    """Graph inputs of ``model`` that are not among the source's ``inputs`` but captured constants become
    initializers holding the captured value (or go, when nothing reads them: freezing already made a
    constant of them); the written model's inputs are then exactly the source's. Returns the names folded;
    any other extra input is left for the end-of-conversion check to name."""
    keep = set(inputs)
    inits = {t.name for t in model.graph.initializer}
    read = _names_read(model.graph)
    folded: list[str] = []
    for vi in list(model.graph.input):
        if vi.name in keep or vi.name not in captured:
            continue
        if vi.name in read and vi.name not in inits:
            model.graph.initializer.append(numpy_helper.from_array(captured[vi.name](), vi.name))
        model.graph.input.remove(vi)
        folded.append(vi.name)
    if folded:
        logger.debug("captured tensors %s folded into constants", folded)
    return folded


def _names_read(graph: onnx.GraphProto) -> set[str]:
    """Every value name a node of ``graph`` or of its subgraphs reads."""
    names: set[str] = set()
    for node in graph.node:
        names.update(node.input)
        for attr in node.attribute:
            for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)):
                names |= _names_read(sub)
    names.update(o.name for o in graph.output)
    return names


def order_outputs(model: onnx.ModelProto, names: Sequence[str]) -> None:
    """Put the graph outputs in the source's order (tf2onnx sorts a returned dict's keys)."""
    by_name = {o.name: o for o in model.graph.output}
    if set(by_name) != set(names) or list(by_name) == list(names):
        return
    ordered = [onnx.ValueInfoProto.FromString(by_name[n].SerializeToString()) for n in names]
    del model.graph.output[:]
    model.graph.output.extend(ordered)


def cut_name_notes(asked: str, outputs: Sequence[str]) -> list[str]:
    """A note naming both spellings when an ``--outputs`` cut point given as a node name (``name``) comes back
    as the graph output ``name:0`` (TensorFlow names a node's tensors ``<node>:<index>``), so the next
    command (--tolerance, --detections, bridge validate) uses the name that exists."""
    given = [a.strip() for a in asked.split(",") if a.strip()]
    renamed = [f"{a} -> {a}:0" for a in given if ":" not in a and a not in outputs and f"{a}:0" in outputs]
    if not renamed:
        return []
    return [f"--outputs: the model's outputs carry TensorFlow's tensor names ({', '.join(renamed)}: TensorFlow "
            "names a node's outputs <node>:0, <node>:1, ...); use those names in later options and commands, "
            "or name the outputs with --output-names"]


def clear_unknown_symbols(model: onnx.ModelProto) -> None:
    """Drop tf2onnx's per-tensor ``unk__N`` symbols from outputs and value_info (see module docstring)."""
    for vi in (*model.graph.output, *model.graph.value_info):
        for d in vi.type.tensor_type.shape.dim:
            if d.HasField("dim_param") and _UNK.match(d.dim_param):
                d.ClearField("dim_param")
