"""Shape passes: drop stale value_info, name dynamic axes consistently, and hold static models to it.

Exporters name dynamic dims after internal symbols (``s77``, ``(((s14 - 1)//2)) + 1``) and leave
value_info that later rewrites make stale (onnxruntime then warns "Expected shape from model ...
does not match actual shape"). The order in the pipeline is: name axes -> clear value_info ->
shape inference -> require static, so inference re-derives every intermediate shape from the
(renamed or concrete) graph inputs.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import onnx
import onnx_ir as ir

from bridge.config import DynamicAxis, InputSpec
from bridge.errors import ExportError, UsageError
from bridge.passes.base import BridgePass, all_values
from bridge.rewriting.protos import infer_shapes

# (model, labelled axes, input specs) -> per run: (size of each axis label, output shapes by name)
Probe = Callable[[onnx.ModelProto, Sequence[DynamicAxis], Sequence[InputSpec]],
                 list[tuple[dict[str, int], dict[str, tuple[int, ...]]]]]

# ops whose output sizes depend on data, so a "static" model may legitimately keep unknown dims there
# (a sequence's length and its elements' shapes are data: what is read out of one is too)
DATA_DEPENDENT_OPS = frozenset({"NonZero", "NonMaxSuppression", "Unique", "Compress", "TopK", "Loop", "If",
                                "SplitToSequence", "ConcatFromSequence", "SequenceAt", "SequenceMap",
                                "OptionalGetElement"})


def _dims(value: ir.Value) -> list[int | str | None]:
    if value.shape is None:
        return []
    return [d if isinstance(d, int) else d.value for d in value.shape]


def input_for_axis(model: ir.Model, axis: DynamicAxis, flag: str) -> ir.Value:
    """The graph input ``axis`` names, or a UsageError (quoting ``flag``) when it is missing or the axis
    is out of its rank. Shared by every pass that takes ``NAME:AXIS=LABEL`` arguments."""
    inputs = {str(v.name): v for v in model.graph.inputs}
    value = inputs.get(axis.input)
    if value is None:
        raise UsageError(f"{flag}: the model has no input '{axis.input}' (inputs: {', '.join(inputs)})")
    rank = len(value.shape) if value.shape is not None else None
    if rank is not None and not -rank <= axis.axis < rank:
        raise UsageError(f"{flag}: input '{axis.input}' has rank {rank}")
    return value


class ClearStaleValueInfoPass(ir.passes.InPlacePass):
    """Forget the shapes of intermediate values (not graph inputs/outputs) so inference recomputes them."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph = model.graph
        keep = {id(v) for v in (*graph.inputs, *graph.outputs, *graph.initializers.values())}
        modified = False
        for node in graph:
            for v in node.outputs:
                if id(v) not in keep and v.shape is not None:
                    v.shape = None
                    modified = True
        return ir.passes.PassResult(model, modified)


class NameDynamicAxesPass(ir.passes.InPlacePass):
    """Rename the exporter's symbol for each requested axis to the user's label, everywhere it appears.

    A dim that is exactly the old symbol becomes the label; a dim expression that mentions it
    (``(((s14 - 1)//2)) + 1``) has the symbol replaced inside it, so outputs that carry a derived size
    still say which input axis they follow.
    """

    def __init__(self, axes: Sequence[DynamicAxis]) -> None:
        super().__init__()
        self.axes = tuple(axes)

    def requires(self, model: ir.Model) -> None:
        for axis in self.axes:
            input_for_axis(model, axis, f"--dynamic {axis.input}:{axis.axis}")

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        inputs = {str(v.name): v for v in model.graph.inputs}
        renames: dict[str, str] = {}
        for axis in self.axes:
            value = inputs[axis.input]
            assert value.shape is not None
            dim = value.shape[axis.axis]
            if isinstance(dim, int):
                raise ExportError(
                    f"axis {axis.axis} of input '{axis.input}' was asked to be dynamic ('{axis.label}') but the "
                    f"exporter fixed it to {dim}: the model specialises on that size (e.g. a reshape with a "
                    "hard-coded batch); make the model shape-generic or drop --dynamic for this axis"
                )
            old = dim.value
            if old is None:  # unnamed dynamic dim: name it in place
                shape = list(value.shape)
                shape[axis.axis] = ir.SymbolicDim(axis.label)
                value.shape = ir.Shape(shape)
                continue
            if old in renames and renames[old] != axis.label:
                raise UsageError(f"axes labelled '{renames[old]}' and '{axis.label}' are the same dimension "
                                 f"in the exported model (symbol {old}); give them one label")
            renames[old] = axis.label
        modified = bool(renames)
        if renames:
            pattern = re.compile(r"\b(" + "|".join(re.escape(s) for s in sorted(renames, key=len, reverse=True)) + r")\b")
            for v in all_values(model):
                if v.shape is None:
                    continue
                new_dims: list[int | ir.SymbolicDim] = []
                changed = False
                for d in v.shape:
                    if isinstance(d, int) or d.value is None:
                        new_dims.append(d if isinstance(d, int) else ir.SymbolicDim(None))
                        continue
                    new = pattern.sub(lambda m: renames[m.group(1)], d.value)
                    changed |= new != d.value
                    new_dims.append(ir.SymbolicDim(new))
                if changed:
                    v.shape = ir.Shape(new_dims)
        return ir.passes.PassResult(model, modified)


class FixInputShapesPass(ir.passes.InPlacePass):
    """Set graph input shapes to the concrete ones the user gave (``--input NAME:SHAPE``)."""

    def __init__(self, inputs: Sequence[InputSpec], keep_dynamic: Sequence[DynamicAxis] = ()) -> None:
        super().__init__()
        self.inputs = {s.name: s for s in inputs if s.shape is not None}
        self.keep_axes = tuple(keep_dynamic)

    def requires(self, model: ir.Model) -> None:
        names = {str(v.name) for v in model.graph.inputs}
        unknown = sorted(set(self.inputs) - names)
        if unknown:
            raise UsageError(f"--input names {unknown} are not inputs of the model (inputs: {', '.join(sorted(names))})")

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for value in model.graph.inputs:
            spec = self.inputs.get(str(value.name))
            if spec is None or spec.shape is None:
                continue
            if value.shape is not None and len(value.shape) != len(spec.shape):
                raise UsageError(f"--input {value.name}: rank {len(spec.shape)} given, the model's input has rank "
                                 f"{len(value.shape)} ({_dims(value)})")
            rank = len(spec.shape)
            dynamic = {d.axis % rank for d in self.keep_axes if d.input == value.name}
            old = value.shape
            new = [old[i] if (i in dynamic and old is not None) else spec.shape[i] for i in range(rank)]
            for i, d in enumerate(old or ()):
                if isinstance(d, int) and i not in dynamic and d != spec.shape[i]:
                    raise UsageError(f"--input {value.name}: axis {i} is fixed to {d} in the model, {spec.shape[i]} given")
            if old is None or list(old) != new:
                value.shape = ir.Shape(new)
                modified = True
        return ir.passes.PassResult(model, modified)


class RequireStaticShapesPass(BridgePass):
    """Static means static: every input, output and value_info dim must be a number after inference.

    Intermediate values whose shape inference could not make concrete lose their (stale) shape;
    a symbolic graph input or output fails loudly, naming each tensor and axis. Sequence, optional and
    map inputs/outputs are not held to it (their element shapes may differ from element to element). Outputs of
    data-dependent ops (NonZero, NonMaxSuppression, ...) may keep an unknown dim; that is reported
    as a warning, since no export can make them static.
    """

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph = model.graph
        problems: list[str] = []
        modified = False
        boundary = {id(v) for v in (*graph.inputs, *graph.outputs)}
        data_dependent = {id(v) for node in graph if node.op_type in DATA_DEPENDENT_OPS for v in node.outputs}
        for v in graph.inputs:
            if not _is_tensor(v):
                continue
            bad = [(i, d) for i, d in enumerate(_dims(v)) if not isinstance(d, int)]
            if bad or v.shape is None:
                problems.append(f"input '{v.name}' shape {_dims(v) if v.shape is not None else 'unknown'}")
        for v in graph.outputs:
            if not _is_tensor(v):
                continue
            bad = [(i, d) for i, d in enumerate(_dims(v)) if not isinstance(d, int)]
            if bad and _depends_on_data(v, data_dependent):
                self.warnings.append(f"output '{v.name}' has data-dependent dims {_dims(v)}; they cannot be static")
            elif bad or v.shape is None:
                problems.append(f"output '{v.name}' shape {_dims(v) if v.shape is not None else 'unknown'}")
        for node in graph:
            for v in node.outputs:
                if id(v) in boundary or v.shape is None:
                    continue
                if any(not isinstance(d, int) for d in _dims(v)):
                    v.shape = None  # stale or unknowable: better no value_info than a wrong one
                    modified = True
        if problems:
            raise ExportError(
                "static shapes were requested but these tensors still have symbolic dims:\n  "
                + "\n  ".join(problems)
                + "\nGive every input a concrete --input NAME:SHAPE, or name the axis with --dynamic."
            )
        return ir.passes.PassResult(model, modified)


def _is_tensor(value: ir.Value) -> bool:
    """A plain tensor (or untyped) value; sequences, optionals and maps have no static shape to require:
    a sequence's length is data and its elements may differ in shape."""
    return value.type is None or isinstance(value.type, ir.TensorType)


def _depends_on_data(value: ir.Value, data_dependent: set[int]) -> bool:
    """True when ``value`` is produced downstream of a data-dependent op (walks producers)."""
    stack, seen = [value], set()
    while stack:
        v = stack.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        if id(v) in data_dependent:
            return True
        producer = v.producer()
        if producer is not None:
            stack.extend(i for i in producer.inputs if i is not None)
    return False


def _is_anonymous(dim: int | ir.SymbolicDim) -> bool:
    """A dim with no information a user gave: unknown, or a fresh symbol onnx inference made up (unk__N)."""
    return not isinstance(dim, int) and (dim.value is None or dim.value.startswith("unk__"))


class InferShapesPass(ir.passes.InPlacePass):
    """onnx shape inference (``bridge.rewriting.protos.infer_shapes``: sequence and optional values keep
    their types), keeping the named dims of graph outputs.

    onnx's inference cannot always follow a dim through data-dependent subgraphs (NMS, TopK), and
    then invents a fresh ``unk__N`` symbol; merged naively, that would replace a ``batch`` label the
    exporter or NameDynamicAxesPass put on an output. Concrete inferred dims still win.
    """

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        before = {id(v): v.shape for v in model.graph.outputs}
        modified = infer_shapes(model)
        for v in model.graph.outputs:
            old = before[id(v)]
            if old is None or v.shape is None or len(old) != len(v.shape):
                continue
            dims = [o if (_is_anonymous(n) and not _is_anonymous(o)) else n for o, n in zip(old, v.shape, strict=True)]
            if dims != list(v.shape):
                v.shape = ir.Shape(dims)
        return ir.passes.PassResult(model, modified)


class NameOutputDimsByProbePass(BridgePass):
    """Name output dims shape inference could not follow, from runs of the model at two sizes.

    Through data-dependent subgraphs (NMS, TopK, Loop) onnx inference loses the link between an
    output dim and the dynamic input axis it follows, and the TorchScript exporter names such dims
    after its own nodes (``Reshape38_dim_0``, ``Transposeoutput_0_dim_1``). ``probe`` (``bridge.
    validation.probe.probe_output_shapes``, handed in by the caller: a pass never runs a runtime
    itself) runs the model at the export sample sizes and at other sizes of every labelled axis; an
    output dim that is anonymous or an exporter's symbol (mentions no label) is named after the one
    label whose size it equals in both runs, and becomes a number when it keeps one size while every
    label changes and the output is not computed by a data-dependent op (NMS counts may coincide).
    Nothing else is guessed: a dim matching several labels stays as it is; a model that fails at the
    other sizes is reported.
    """

    def __init__(self, axes: Sequence[DynamicAxis], inputs: Sequence[InputSpec], probe: Probe) -> None:
        super().__init__()
        self.axes = tuple(axes)
        self.inputs = tuple(inputs)
        self.probe = probe

    def _unlabelled(self, dim: int | ir.SymbolicDim) -> bool:
        if isinstance(dim, int):
            return False
        if dim.value is None or _is_anonymous(dim):
            return True
        return not any(re.search(rf"\b{re.escape(a.label)}\b", dim.value) for a in self.axes)

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        outputs = [v for v in model.graph.outputs if v.shape is not None and any(self._unlabelled(d) for d in v.shape)]
        if not outputs or not self.axes:
            return ir.passes.PassResult(model, False)
        try:
            runs = self.probe(ir.serde.serialize_model(model), self.axes, self.inputs)
        except Exception as exc:  # a model that cannot run at other sizes keeps its anonymous dims
            self.warnings.append(f"could not name output dims by running the model at other sizes: {exc}")
            return ir.passes.PassResult(model, False)
        sizes = [r[0] for r in runs]
        shapes = [r[1] for r in runs]
        # a dim that keeps its size while every labelled axis changed is fixed - unless some input dim is
        # symbolic without a label (the probe keeps those at their sample size, so they never change)
        every_label_changed = all(len({s[lab] for s in sizes}) == len(sizes) for lab in sizes[0]) and all(
            not self._unlabelled(d) for v in model.graph.inputs if v.shape is not None for d in v.shape)
        data_dependent = {id(v) for node in model.graph for v in node.outputs if node.op_type in DATA_DEPENDENT_OPS}
        modified = False
        for v in outputs:
            assert v.shape is not None
            dims: list[int | ir.SymbolicDim] = list(v.shape)
            for i, d in enumerate(dims):
                if not self._unlabelled(d):
                    continue
                seen = [s[str(v.name)][i] for s in shapes]
                labels = [lab for lab in sizes[0] if [s[lab] for s in sizes] == seen and seen[0] != seen[1]]
                if len(labels) == 1:
                    dims[i] = ir.SymbolicDim(labels[0])
                    modified = True
                elif len(set(seen)) == 1 and every_label_changed and not _depends_on_data(v, data_dependent):
                    dims[i] = int(seen[0])  # the same size whatever the labelled axes are: a fixed dim
                    modified = True
            v.shape = ir.Shape(dims)
        return ir.passes.PassResult(model, modified)
