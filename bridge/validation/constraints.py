"""Values for inputs whose consumer only accepts some values: indices, axes, shapes, scales, counts.

Random data is fine for an image, not for the ``indices`` of a Gather (out of bounds), the ``shape``
of a Reshape (wrong element count), the ``scales`` of a Resize or the ``K`` of a TopK. This module
follows each graph input to the nodes that consume it (through value-preserving ops such as Cast or
Squeeze), asks that consumer which values it accepts - from the op's ONNX definition and the shapes
shape inference derives at the concrete input sizes - and generates values in that set.

Where no valid value can be derived (the data shape is unknown, a Squeeze has no size-1 axis to
remove, ...) ``NoValidValues`` names the input and the consumer; the caller asks for ``--feeds``.
Only the main graph is analysed; inputs read inside subgraphs get the generic data.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from bridge.rewriting import default_opset

log = logging.getLogger(__name__)

# ops whose output holds the same values as input 0 (rearranged, retyped or broadcast)
_PASSTHROUGH = {"Cast", "CastLike", "Identity", "Squeeze", "Unsqueeze", "Flatten", "Reshape", "Transpose",
                "Expand", "Concat", "Tile"}


class NoValidValues(Exception):
    """No valid values could be derived for an input; carries the reason (the caller names the input)."""


@dataclass
class _Graph:
    """What the rules read: static shapes (at the concrete input sizes), constants, opset, node rules."""

    shapes: dict[str, tuple[int, ...]]
    consts: dict[str, np.ndarray]
    opset: int
    rng: np.random.Generator
    plans: dict[int, dict[int, np.ndarray]] = field(default_factory=dict)  # joint per-node values (Slice, Range)

    def shape(self, name: str, why: str) -> tuple[int, ...]:
        s = self.shapes.get(name)
        if s is None:
            raise NoValidValues(f"the shape of '{name}' ({why}) is unknown at these input sizes")
        return s


def _attr(node: onnx.NodeProto, name: str, default: Any) -> Any:
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def _axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def _ints(values: Any, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    return np.asarray(values).reshape(shape).astype(dtype)


def _dim(g: _Graph, node: onnx.NodeProto, data_slot: int, axis: int, why: str) -> int:
    shape = g.shape(node.input[data_slot], why)
    ax = _axis(axis, len(shape))
    if not 0 <= ax < len(shape):
        raise NoValidValues(f"axis {axis} is outside the rank {len(shape)} of '{node.input[data_slot]}'")
    return shape[ax]


def _index_range(g: _Graph, high: int, shape: tuple[int, ...], dtype: np.dtype, what: str) -> np.ndarray:
    if high <= 0 and int(np.prod(shape)) > 0:
        raise NoValidValues(f"{what} index into an empty axis")
    return g.rng.integers(0, max(high, 1), size=shape).astype(dtype)


# ---- rules: (graph, node, slot, shape of the input, dtype) -> values --------------------------------
Rule = Callable[[_Graph, onnx.NodeProto, int, tuple[int, ...], np.dtype], np.ndarray]


def _gather(g: _Graph, n: onnx.NodeProto, slot: int, shape: tuple[int, ...], dt: np.dtype) -> np.ndarray:
    d = _dim(g, n, 0, int(_attr(n, "axis", 0)), "the data it indexes")
    return _index_range(g, d, shape, dt, "indices")


def _elements(g: _Graph, n: onnx.NodeProto, slot: int, shape: tuple[int, ...], dt: np.dtype) -> np.ndarray:
    """GatherElements/ScatterElements indices: [0, data.shape[axis]); unique along the axis for scatters
    (duplicates make the result depend on the order writes land in)."""
    data = g.shape(n.input[0], "the data it indexes")
    ax = _axis(int(_attr(n, "axis", 0)), len(data))
    if not 0 <= ax < len(data):
        raise NoValidValues(f"axis {ax} is outside the rank of data of shape {list(data)}")
    d = data[ax]
    if len(shape) != len(data):  # reached through Unsqueeze/Reshape/...: the range still holds
        return _index_range(g, d, shape, dt, "indices")
    if n.op_type.startswith("Scatter") and shape[ax] <= d and d > 0:
        order = np.argsort(g.rng.random((*shape[:ax], d, *shape[ax + 1:])), axis=ax)
        return np.take(order, np.arange(shape[ax]), axis=ax).astype(dt)
    return _index_range(g, d, shape, dt, "indices")


def _nd(g: _Graph, n: onnx.NodeProto, slot: int, shape: tuple[int, ...], dt: np.dtype) -> np.ndarray:
    data = g.shape(n.input[0], "the data it indexes")
    b = int(_attr(n, "batch_dims", 0))
    k = shape[-1] if shape else 0
    if not shape or b + k > len(data):
        raise NoValidValues(f"indices of shape {list(shape)} do not fit data of shape {list(data)}")
    cols = [g.rng.integers(0, max(data[b + j], 1), size=shape[:-1]) for j in range(k)]
    return np.stack(cols, axis=-1).astype(dt) if cols else np.zeros(shape, dt)


def _topk(g: _Graph, n: onnx.NodeProto, slot: int, shape: tuple[int, ...], dt: np.dtype) -> np.ndarray:
    d = _dim(g, n, 0, int(_attr(n, "axis", -1)), "the data it ranks")
    return np.full(shape, max(1, (d + 1) // 2) if d else 0, dt)


def _reshape(g: _Graph, n: onnx.NodeProto, slot: int, shape: tuple[int, ...], dt: np.dtype) -> np.ndarray:
    data = g.shape(n.input[0], "the data it reshapes")
    r = shape[0] if shape else 0
    if r == len(data):
        target = list(data)
    elif r > len(data):
        target = [*data, *([1] * (r - len(data)))]
    elif r == 0:
        if int(np.prod(data)) != 1:
            raise NoValidValues(f"a rank-0 shape cannot hold the {int(np.prod(data))} elements of '{n.input[0]}'")
        target = []
    else:
        target = [*data[: r - 1], int(np.prod(data[r - 1:]))]
    return _ints(target, shape, dt)


def _expand(g: _Graph, n: onnx.NodeProto, slot: int, shape: tuple[int, ...], dt: np.dtype) -> np.ndarray:
    data = g.shape(n.input[0], "the data it expands")
    r = shape[0] if shape else 0
    target = [*([1] * (r - len(data))), *data] if r >= len(data) else [1] * r
    return _ints(target, shape, dt)


def _tile(g: _Graph, n: onnx.NodeProto, slot: int, shape: tuple[int, ...], dt: np.dtype) -> np.ndarray:
    return g.rng.integers(1, 3, size=shape).astype(dt)


def _resize(g: _Graph, n: onnx.NodeProto, slot: int, shape: tuple[int, ...], dt: np.dtype) -> np.ndarray:
    """Resize roi (1), scales (2), sizes (3); Upsample scales (1): the spatial (last two) axes x2."""
    data = g.shape(n.input[0], "the data it resizes")
    axes = [_axis(int(a), len(data)) for a in _attr(n, "axes", [])] or list(range(len(data)))
    count = shape[0] if shape else 0
    if n.op_type == "Resize" and slot == 1:  # roi: starts then ends, normalised (tf_crop_and_resize)
        half = count // 2
        return np.asarray([0.1] * half + [0.9] * (count - half)).astype(dt)
    if count != len(axes):
        raise NoValidValues(f"{count} values for {len(axes)} axes of '{n.input[0]}'")
    spatial = [i >= len(axes) - 2 and (len(axes) <= 2 or i >= 2) for i in range(count)]
    if n.op_type == "Resize" and slot == 3:
        return _ints([data[a] * (2 if s else 1) for a, s in zip(axes, spatial, strict=True)], shape, dt)
    return np.asarray([2.0 if s else 1.0 for s in spatial]).astype(dt)


def _axes_unique(g: _Graph, n: onnx.NodeProto, slot: int, shape: tuple[int, ...], dt: np.dtype) -> np.ndarray:
    """Reduce*/Pad axes: distinct axes of the data; Unsqueeze: distinct axes of the output; Squeeze:
    axes whose size is 1."""
    data = g.shape(n.input[0], "the data whose axes it names")
    count = int(np.prod(shape)) if shape else 1
    if n.op_type == "Squeeze":
        choices = [i for i, d in enumerate(data) if d == 1]
    elif n.op_type == "Unsqueeze":
        choices = list(range(len(data) + count))
    else:
        choices = list(range(len(data)))
    if count > len(choices):
        raise NoValidValues(f"{count} distinct axes wanted, '{n.input[0]}' (shape {list(data)}) has {len(choices)}")
    picked = sorted(g.rng.choice(choices, size=count, replace=False).tolist()) if count else []
    return _ints(picked, shape, dt)


def _axis_scalar(g: _Graph, n: onnx.NodeProto, slot: int, shape: tuple[int, ...], dt: np.dtype) -> np.ndarray:
    data = g.shape(n.input[0], "the data whose axis it names")
    if not data:
        raise NoValidValues(f"'{n.input[0]}' is a scalar and has no axis")
    return _ints([g.rng.integers(0, len(data))] * max(int(np.prod(shape)), 1), shape, dt)


def _slice(g: _Graph, n: onnx.NodeProto, slot: int, shape: tuple[int, ...], dt: np.dtype) -> np.ndarray:
    """starts (1), ends (2), axes (3), steps (4), planned together: distinct axes, 0 <= start < end <= dim."""
    plan = g.plans.get(id(n))
    if plan is None:
        data = g.shape(n.input[0], "the data it slices")
        count = shape[0] if shape else 0
        axes_in = n.input[3] if len(n.input) > 3 and n.input[3] else ""
        if axes_in in g.consts:
            axes = [_axis(int(a), len(data)) for a in g.consts[axes_in].ravel()]
        elif axes_in:
            if count > len(data):
                raise NoValidValues(f"{count} slice axes for rank {len(data)}")
            axes = sorted(g.rng.choice(len(data), size=count, replace=False).tolist())
        else:
            axes = list(range(count))
        if any(not 0 <= a < len(data) for a in axes):
            raise NoValidValues(f"slice axes {axes} outside the rank {len(data)} of '{n.input[0]}'")
        starts = [int(g.rng.integers(0, data[a])) if data[a] else 0 for a in axes]
        ends = [int(g.rng.integers(s + 1, data[a] + 1)) if data[a] else 0 for s, a in zip(starts, axes, strict=True)]
        plan = g.plans[id(n)] = {1: np.asarray(starts), 2: np.asarray(ends), 3: np.asarray(axes),
                                 4: np.ones(len(axes), np.int64)}
    return _ints(plan[slot], shape, dt)


def _split(g: _Graph, n: onnx.NodeProto, slot: int, shape: tuple[int, ...], dt: np.dtype) -> np.ndarray:
    d = _dim(g, n, 0, int(_attr(n, "axis", 0)), "the data it splits")
    parts = shape[0] if shape else 0
    if parts == 0:
        raise NoValidValues("an empty split list")
    cuts = np.sort(g.rng.integers(0, d + 1, size=parts - 1))
    return _ints(np.diff(np.concatenate([[0], cuts, [d]])), shape, dt)


def _positive(low: int, high: int) -> Rule:
    def rule(g: _Graph, n: onnx.NodeProto, slot: int, shape: tuple[int, ...], dt: np.dtype) -> np.ndarray:
        return g.rng.integers(low, high, size=shape).astype(dt)
    return rule


def _fraction(g: _Graph, n: onnx.NodeProto, slot: int, shape: tuple[int, ...], dt: np.dtype) -> np.ndarray:
    return g.rng.uniform(0.0, 0.9, size=shape).astype(dt)


def _false(g: _Graph, n: onnx.NodeProto, slot: int, shape: tuple[int, ...], dt: np.dtype) -> np.ndarray:
    return np.zeros(shape, dt)  # training_mode: inference only (training draws random masks)


def _nonzero_int(g: _Graph, n: onnx.NodeProto, slot: int, shape: tuple[int, ...], dt: np.dtype) -> np.ndarray:
    if dt.kind not in "iu":
        raise _NotConstrained
    return g.rng.integers(1, 10, size=shape).astype(dt)  # integer Div/Mod by zero is an error


def _range(g: _Graph, n: onnx.NodeProto, slot: int, shape: tuple[int, ...], dt: np.dtype) -> np.ndarray:
    """start (0), limit (1), delta (2): a short ascending range, whichever of them are constants."""
    plan = g.plans.get(id(n))
    if plan is None:
        c = [g.consts.get(x) for x in n.input[:3]]
        delta = float(c[2]) if c[2] is not None else 1.0
        if delta == 0:
            raise NoValidValues("Range's delta is the constant 0")
        start = float(c[0]) if c[0] is not None else (float(c[1]) - 5 * delta if c[1] is not None else 0.0)
        limit = float(c[1]) if c[1] is not None else start + 5 * delta
        plan = g.plans[id(n)] = {0: np.asarray(start), 1: np.asarray(limit), 2: np.asarray(delta)}
    return _ints(plan[slot], shape, dt)


def _mel(g: _Graph, n: onnx.NodeProto, slot: int, shape: tuple[int, ...], dt: np.dtype) -> np.ndarray:
    """MelWeightMatrix: num_mel_bins, dft_length, sample_rate, lower/upper edge (Hz) of one valid bank
    (the edges must fall inside the spectrogram: 0 <= lower < upper <= sample_rate / 2)."""
    return _ints([8, 64, 8000, 100.0, 3000.0][slot], shape, dt)


def _seq_lens(data_axis: Callable[[onnx.NodeProto], int]) -> Rule:
    def rule(g: _Graph, n: onnx.NodeProto, slot: int, shape: tuple[int, ...], dt: np.dtype) -> np.ndarray:
        t = _dim(g, n, 0, data_axis(n), "the sequences it measures")
        return g.rng.integers(1, max(t, 1) + 1, size=shape).astype(dt)
    return rule


def _class_index(g: _Graph, n: onnx.NodeProto, slot: int, shape: tuple[int, ...], dt: np.dtype) -> np.ndarray:
    return _index_range(g, _dim(g, n, 0, 1, "the scores it labels"), shape, dt, "class")


def _batch_index(g: _Graph, n: onnx.NodeProto, slot: int, shape: tuple[int, ...], dt: np.dtype) -> np.ndarray:
    return _index_range(g, _dim(g, n, 0, 0, "the feature map it crops"), shape, dt, "batch")


def _onehot(g: _Graph, n: onnx.NodeProto, slot: int, shape: tuple[int, ...], dt: np.dtype) -> np.ndarray:
    depth_in = n.input[1]
    depth = int(np.asarray(g.consts[depth_in]).ravel()[0]) if depth_in in g.consts else 5
    if slot == 1:
        return np.full(shape, depth, dt)
    return _index_range(g, depth, shape, dt, "one-hot")


class _NotConstrained(Exception):
    """The rule does not apply to this dtype (e.g. float Div): generic data is fine."""


# (op, input slot) -> rule; opset-dependent slots (Reduce* axes) are listed for every op that has them
RULES: dict[tuple[str, int], Rule] = {
    ("Gather", 1): _gather, ("GatherElements", 1): _elements, ("ScatterElements", 1): _elements,
    ("Scatter", 1): _elements, ("GatherND", 1): _nd, ("ScatterND", 1): _nd, ("TopK", 1): _topk,
    ("Reshape", 1): _reshape, ("Expand", 1): _expand, ("Tile", 1): _tile,
    ("Resize", 1): _resize, ("Resize", 2): _resize, ("Resize", 3): _resize, ("Upsample", 1): _resize,
    ("Squeeze", 1): _axes_unique, ("Unsqueeze", 1): _axes_unique, ("Pad", 3): _axes_unique,
    ("Pad", 1): _positive(0, 3), ("CumSum", 1): _axis_scalar,
    ("Slice", 1): _slice, ("Slice", 2): _slice, ("Slice", 3): _slice, ("Slice", 4): _slice,
    ("Split", 1): _split, ("ConstantOfShape", 0): _positive(1, 4),
    ("Div", 1): _nonzero_int, ("Mod", 1): _nonzero_int,
    ("NonMaxSuppression", 2): _positive(0, 10), ("NonMaxSuppression", 3): _fraction,
    ("NonMaxSuppression", 4): _fraction, ("Dropout", 1): _fraction, ("Dropout", 2): _false,
    ("RoiAlign", 2): _batch_index, ("OneHot", 0): _onehot, ("OneHot", 1): _onehot,
    ("Range", 0): _range, ("Range", 1): _range, ("Range", 2): _range,
    ("ReverseSequence", 1): _seq_lens(lambda n: int(_attr(n, "time_axis", 0))),
    ("RNN", 4): _seq_lens(lambda n: int(_attr(n, "layout", 0))),
    ("GRU", 4): _seq_lens(lambda n: int(_attr(n, "layout", 0))),
    ("LSTM", 4): _seq_lens(lambda n: int(_attr(n, "layout", 0))),
    ("NegativeLogLikelihoodLoss", 1): _class_index, ("SoftmaxCrossEntropyLoss", 1): _class_index,
    ("Loop", 0): _positive(1, 4),
    **{("MelWeightMatrix", k): _mel for k in range(5)},
}
for _op in ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
            "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"):
    RULES[(_op, 1)] = _axes_unique


@dataclass
class Consumer:
    """Where a graph input's values end up: node (index in the graph), its op and the input slot."""

    node: onnx.NodeProto
    slot: int

    def describe(self) -> str:
        return f"input {self.slot} of {self.node.op_type} node '{self.node.name or '?'}'"


# ops whose outputs hold some of input 0's values (a column, a slice) or clamp them: a role (an index column of
# MXNet's rois rows, Gather -> Cast -> Max -> RoiAlign's batch indices) reaches its consumer through these
_SELECTING = {"Gather", "GatherElements", "GatherND", "Slice", "Split", "Clip", "Floor", "Ceil", "Round"}
_CLAMPING = {"Max", "Min"}  # any operand


def constrained_consumers(model: onnx.ModelProto, names: set[str], *,
                          through_selections: bool = False) -> dict[str, list[Consumer]]:
    """For each of ``names``: the nodes with a rule that read its values (following value-preserving ops, and with
    ``through_selections`` also ops that select or clamp some of them: a tensor whose column becomes indices
    has a role, though the rest of it may be coordinates)."""
    readers: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
    for node in model.graph.node:
        for slot, x in enumerate(node.input):
            if x:
                readers.setdefault(x, []).append((node, slot))
    found: dict[str, list[Consumer]] = {}
    for name in names:
        stack, seen = [name], {name}
        while stack:
            value = stack.pop()
            for node, slot in readers.get(value, ()):
                if (node.op_type, slot) in RULES:
                    found.setdefault(name, []).append(Consumer(node, slot))
                    continue
                follow = node.op_type in _PASSTHROUGH and slot == 0
                if through_selections:
                    follow = follow or (node.op_type in _SELECTING and slot == 0) or node.op_type in _CLAMPING
                outputs = node.output if through_selections else node.output[:1]
                for out in outputs if follow else ():
                    if out and out not in seen:
                        seen.add(out)
                        stack.append(out)
    return found


def _static_shapes(model: onnx.ModelProto, shapes: Mapping[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    """Static shapes of every value at the concrete input sizes (what ONNX shape inference derives)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for vi in m.graph.input:
        if vi.name in shapes and vi.type.HasField("tensor_type"):
            vi.type.tensor_type.ClearField("shape")
            for d in shapes[vi.name]:
                vi.type.tensor_type.shape.dim.add().dim_value = int(d)
    try:
        m = onnx.shape_inference.infer_shapes(m, strict_mode=False, data_prop=True)
    except Exception as exc:  # an invalid model: the rules then say which shape they miss
        log.debug("shape inference for input generation failed: %s", exc)
    out: dict[str, tuple[int, ...]] = dict(shapes)
    for vi in (*m.graph.input, *m.graph.value_info, *m.graph.output):
        tt = vi.type.tensor_type
        if vi.name not in out and tt.HasField("shape") and all(d.HasField("dim_value") for d in tt.shape.dim):
            out[vi.name] = tuple(int(d.dim_value) for d in tt.shape.dim)
    for init in m.graph.initializer:
        out.setdefault(init.name, tuple(int(d) for d in init.dims))
    return out


def _constants(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    consts: dict[str, np.ndarray] = {}
    small = [i for i in model.graph.initializer if int(np.prod(i.dims)) <= 4096]
    for init in small:
        try:
            consts[init.name] = numpy_helper.to_array(init)
        except Exception:  # external or malformed data: not a constant we can read
            continue
    for node in model.graph.node:
        if node.op_type == "Constant" and node.output:
            for a in node.attribute:
                if a.name == "value":
                    try:
                        consts[node.output[0]] = numpy_helper.to_array(a.t)
                    except Exception:
                        continue
    return consts


def valid_values(
    model: onnx.ModelProto,
    shapes: Mapping[str, tuple[int, ...]],
    dtypes: Mapping[str, np.dtype],
    rng: np.random.Generator,
    skip: frozenset[str] | set[str] = frozenset(),
) -> tuple[dict[str, np.ndarray], dict[str, str], dict[str, str]]:
    """Values for the inputs of ``model`` whose consumers constrain them, why they were chosen, and why
    none could be derived for the others: ``(values, reasons, failures)``.

    An input with several constrained consumers takes the first that yields values; ``failures`` holds
    (for inputs with none) the first consumer's reason, for the caller to raise when no other graph helps.
    """
    consumers = constrained_consumers(model, set(shapes) - set(skip))  # skip: values already chosen
    if not consumers:
        return {}, {}, {}
    opset = default_opset(model, missing=0)
    g = _Graph(_static_shapes(model, shapes), _constants(model), opset, rng)
    values: dict[str, np.ndarray] = {}
    reasons: dict[str, str] = {}
    failures: dict[str, str] = {}
    for name in shapes:  # input order: reproducible draws
        for consumer in consumers.get(name, ()):
            rule = RULES[(consumer.node.op_type, consumer.slot)]
            try:
                value = rule(g, consumer.node, consumer.slot, tuple(shapes[name]), np.dtype(dtypes[name]))
            except _NotConstrained:
                continue
            except (NoValidValues, ValueError, IndexError, TypeError) as exc:  # incl. shapes contradicting the op
                failures.setdefault(name, f"{consumer.describe()}: {exc}")
                continue
            values[name] = value
            reasons[name] = consumer.describe()
            failures.pop(name, None)
            break
    return values, reasons, failures
