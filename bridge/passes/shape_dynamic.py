"""Passes that move a model between static and dynamic shapes: forget stale shapes, release input axes,
and find (and where sound, rewrite) constants that baked the old size of an axis into the graph.

A model exported at batch 4 often keeps the 4 in places no shape annotation mentions: a Reshape target
``[4, -1]``, an Expand/ConstantOfShape/Tile constant that broadcasts a learned token to the batch, a
Slice ``ends`` of 4, or a per-sample initializer of shape ``[4, 10]``. Marking the input axis dynamic
is then a lie: the graph still runs only at 4 (or, worse, silently reshapes wrongly). These passes
compare the static model's concrete shapes (inferred before the axes were released) with the
symbolic shapes after release, and

* rewrite what has one sound meaning: a Reshape target element equal to the old size of the *same*
  input dim becomes 0 (copy) or a ``Shape(x)[j]`` slice; a Slice end equal to the old full size becomes
  "to the end"; an Expand/ConstantOfShape/Tile element equal to the old size of a label, at the axis
  position the label has on its graph input, becomes ``Shape(input)[axis]`` (that last one is a
  guess checked by validating at other sizes - ``make_dynamic`` always does); new nodes and constants
  come from the rewrite Builder (``bridge.rewriting.builder``), like every rewrite's;
* report the rest by node (merged sizes like ``4*3=12``, per-sample initializers, Split sizes).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import onnx_ir as ir

from bridge.config import DEFAULT_OPSET, DynamicAxis
from bridge.errors import UsageError
from bridge.passes.shapes import ClearStaleValueInfoPass, input_for_axis
from bridge.rewriting import default_opset, node_label
from bridge.rewriting.builder import Builder, existing_names

logger = logging.getLogger(__name__)

INT64_MAX = np.iinfo(np.int64).max
_BROADCASTING_OPS = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Where", "Equal", "Less", "Greater", "LessOrEqual",
                               "GreaterOrEqual", "And", "Or", "Xor", "Max", "Min", "Mod", "PRelu", "Sum", "Mean"})


class ResetShapesPass(ir.passes.InPlacePass):
    """Forget every intermediate shape, and the symbolic (``which="symbolic"``) or all (``"all"``) dims of
    graph outputs, keeping their rank, so shape inference re-derives them from the graph inputs.

    ClearStaleValueInfoPass keeps graph-output shapes; after inputs change those are stale too (an
    output still saying ``batch`` when the input is now 4, or 4 when it is now ``batch``).
    """

    def __init__(self, which: str = "symbolic") -> None:
        super().__init__()
        if which not in ("symbolic", "all"):
            raise ValueError(f"which must be 'symbolic' or 'all', not {which!r}")
        self.which = which

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph = model.graph
        modified = ClearStaleValueInfoPass()(model).modified  # intermediates first, then the outputs
        for v in graph.outputs:
            if v.shape is None or id(v) in {id(i) for i in graph.inputs}:
                continue
            dims = [ir.SymbolicDim(None) if (self.which == "all" or not isinstance(d, int)) else d for d in v.shape]
            if list(dims) != list(v.shape):
                v.shape = ir.Shape(dims)
                modified = True
        return ir.passes.PassResult(model, modified)


class ReleaseAxesPass(ir.passes.InPlacePass):
    """Make each requested input axis symbolic under its label; ``old_sizes`` records the size it had."""

    def __init__(self, axes: Sequence[DynamicAxis]) -> None:
        super().__init__()
        self.axes = tuple(axes)
        self.old_sizes: dict[str, int] = {}

    def requires(self, model: ir.Model) -> None:
        for axis in self.axes:
            flag = f"--axis {axis.input}:{axis.axis}={axis.label}"
            value = input_for_axis(model, axis, flag)
            if value.shape is None:
                raise UsageError(f"{flag}: input '{axis.input}' has rank unknown")
            dim = value.shape[axis.axis]
            if not isinstance(dim, int):
                raise UsageError(f"{flag}: that axis is already dynamic "
                                 f"('{dim.value or '?'}'); fix it first (`bridge shapes fix`) or rename it with "
                                 "`bridge convert --dynamic`")

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        inputs = {str(v.name): v for v in model.graph.inputs}
        for axis in self.axes:
            value = inputs[axis.input]
            assert value.shape is not None
            dims = list(value.shape)
            old = dims[axis.axis]
            assert isinstance(old, int)
            if self.old_sizes.setdefault(axis.label, old) != old:
                raise UsageError(f"label '{axis.label}' names axes of different sizes ({self.old_sizes[axis.label]} "
                                 f"and {old} on {axis.input}:{axis.axis}); give them different labels")
            dims[axis.axis] = ir.SymbolicDim(axis.label)
            value.shape = ir.Shape(dims)
        return ir.passes.PassResult(model, bool(self.axes))


@dataclass
class BakedShape:
    """One constant that encodes the old size of a dynamic axis, and what was done about it."""

    node: str
    op: str
    constant: str
    value: list[int]
    reason: str
    action: str  # "rewritten" | "unresolved"
    rewrite: str = ""

    def describe(self) -> str:
        what = f"{self.action}: {self.rewrite}" if self.action == "rewritten" else "UNRESOLVED"
        return f"node '{self.node}' ({self.op}) constant '{self.constant}'={self.value}: {self.reason} -> {what}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class _Piece:
    """One element of a rewritten shape vector: a constant, or ``Shape(source)[index]``."""

    const: int | None = None
    source: ir.Value | None = None
    index: int = 0


class RewriteBakedShapesPass(ir.passes.InPlacePass):
    """Find constants that baked the old size of a released axis; rewrite the sound ones (see module doc).

    ``static_dims`` maps value names to their concrete dims in the original (static) model; the model
    this runs on must already carry symbolic shapes inferred from the released inputs.
    """

    def __init__(self, axes: Sequence[DynamicAxis], old_sizes: Mapping[str, int],
                 static_dims: Mapping[str, Sequence[int]], rewrite: bool = True) -> None:
        super().__init__()
        self.axes = tuple(axes)
        self.old_sizes = dict(old_sizes)
        self.static_dims = dict(static_dims)
        self.rewrite = rewrite
        self.findings: list[BakedShape] = []
        self._seen: set[tuple[str, str]] = set()
        self._taken: set[str] = set()

    # ------------------------------------------------------------------------------------------ helpers
    def _tainted(self, model: ir.Model) -> set[int]:
        """ids of values that depend (through data or shapes) on a released input."""
        released = {a.input for a in self.axes}
        tainted = {id(v) for v in model.graph.inputs if v.name in released}
        for node in model.graph:
            if any(i is not None and id(i) in tainted for i in node.inputs):
                tainted.update(id(o) for o in node.outputs)
        return tainted

    def _dynamic_positions(self, value: ir.Value, tainted: set[int]) -> dict[int, int]:
        """{axis: old size} of the dims of ``value`` that vary with a released axis."""
        old = self.static_dims.get(str(value.name))
        if old is None or value.shape is None or len(value.shape) != len(old) or id(value) not in tainted:
            return {}
        return {j: int(old[j]) for j, d in enumerate(value.shape) if not isinstance(d, int)}

    def _label_sources(self, graph: ir.Graph) -> dict[int, tuple[ir.Value, int, str]]:
        """old size -> (graph input, axis, label) for each released axis (first input wins)."""
        inputs = {str(v.name): v for v in graph.inputs}
        out: dict[int, tuple[ir.Value, int, str]] = {}
        for a in self.axes:
            value = inputs[a.input]
            rank = len(value.shape) if value.shape is not None else 0
            out.setdefault(self.old_sizes[a.label], (value, a.axis % max(rank, 1), a.label))
        return out

    def _record(self, node: ir.Node, const: ir.Value, value: np.ndarray, reason: str, action: str,
                rewrite: str = "") -> None:
        key = (node_label(node), reason)
        if key in self._seen:
            return
        self._seen.add(key)
        self.findings.append(BakedShape(node_label(node), node.op_type, str(const.name), [int(v) for v in value.ravel()],
                                        reason, action, rewrite))

    @staticmethod
    def _const(value: ir.Value | None) -> np.ndarray | None:
        if value is None:
            return None
        tensor = ir.convenience.get_const_tensor(value)
        return None if tensor is None else np.asarray(tensor.numpy())

    def _builder(self, graph: ir.Graph, before: ir.Node, opset: int) -> Builder:
        base = node_label(before).replace("<", "").replace(">", "").replace(" ", "_").replace("#", "")
        return Builder(graph, opset, prefix=f"{base}_dyn", taken=self._taken)

    @staticmethod
    def _splice(graph: ir.Graph, before: ir.Node, builder: Builder) -> None:
        """Put what ``builder`` emitted before ``before`` (the caller rewires ``before``'s input)."""
        for init in builder.initializers:
            graph.register_initializer(init)
        if builder.nodes:
            graph.insert_before(before, list(builder.nodes))

    def _shape_vector(self, graph: ir.Graph, before: ir.Node, pieces: Sequence[_Piece], opset: int) -> ir.Value:
        """Build ``Concat(pieces)`` (int64, 1-D) before ``before``; constant runs become one initializer."""
        b = self._builder(graph, before, opset)
        parts: list[ir.Value] = []
        run: list[int] = []

        def flush() -> None:
            if run:
                parts.append(b.initializer(np.array(run, np.int64)))
                run.clear()

        for p in pieces:
            if p.source is None:
                assert p.const is not None
                run.append(p.const)
                continue
            flush()
            # Shape's start/end (opset 15) reads one dim without a Gather
            parts.append(b.op("Shape", p.source, start=p.index, end=p.index + 1) if opset >= 15
                         else b.dim(p.source, p.index))
        flush()
        out = parts[0] if len(parts) == 1 and not b.nodes else b.op("Concat", *parts, axis=0)
        self._splice(graph, before, b)
        return out

    # ------------------------------------------------------------------------------------------- rules
    def _reshape(self, graph: ir.Graph, node: ir.Node, tainted: set[int], opset: int) -> bool:
        data, target = node.inputs[0], node.inputs[1] if len(node.inputs) > 1 else None
        t = self._const(target)
        if data is None or target is None or t is None:
            return False
        dyn = self._dynamic_positions(data, tainted)
        if not dyn:
            return False
        allowzero = node.attributes.get_int("allowzero", 0)
        values = [int(v) for v in t.tolist()]
        # Which target element carries which dynamic input dim. Only one element per input dim may follow it:
        # the element count must scale with the axis exactly as the input's does, so an element that merely
        # equals the old size (the 4 box coordinates in [4, 8192, 4] at batch 4) stays a constant. An element
        # at the input dim's own position wins; otherwise the single equal element, if there is one.
        assigned: dict[int, int] = {}  # target element -> input dim
        for i, v in enumerate(values):
            if i in dyn and (v == dyn[i] or (v == 0 and not allowzero)):
                assigned[i] = i
        unresolved = []
        for j, old in sorted(dyn.items()):
            if j in assigned.values() or old <= 1:
                continue
            candidates = [i for i, v in enumerate(values) if v == old and i not in assigned]
            if len(candidates) == 1:
                assigned[candidates[0]] = j
            elif candidates:
                unresolved.append(f"elements {candidates} all equal the old size {old} of dynamic input dim {j}")
        pieces: list[_Piece] = []
        changed, notes = False, []
        for i, v in enumerate(values):
            source_dim = assigned.get(i)
            if source_dim is None or v == 0:
                pieces.append(_Piece(const=v))
                continue
            j = source_dim
            changed = True
            if j == i and not allowzero:
                pieces.append(_Piece(const=0))
                notes.append(f"[{i}] {v} -> 0 (copy input dim {j})")
            else:
                pieces.append(_Piece(source=data, index=j))
                notes.append(f"[{i}] {v} -> Shape({data.name})[{j}]")
        covered = -1 in values or set(dyn) <= set(assigned.values())
        if not covered and not unresolved:
            olds = {j: dyn[j] for j in sorted(dyn) if j not in assigned.values()}
            unresolved.append(f"target is static but input '{data.name}' has dynamic dims {olds} (old sizes) that no "
                              "element follows; a merged or baked size cannot be derived")
        if unresolved:
            self._record(node, target, t, "; ".join(unresolved), "unresolved")
        if changed and self.rewrite and not unresolved:
            new = self._shape_vector(graph, node, pieces, opset)
            node.replace_input_with(1, new)
            self._record(node, target, t, "Reshape target repeats the old size of a dynamic input dim", "rewritten",
                         ", ".join(notes))
            return True
        if changed and not unresolved:
            self._record(node, target, t, "Reshape target repeats the old size of a dynamic input dim", "unresolved")
        return False

    def _slice(self, graph: ir.Graph, node: ir.Node, tainted: set[int], opset: int) -> bool:
        if len(node.inputs) < 3:
            return False
        data, ends_v = node.inputs[0], node.inputs[2]
        axes_v = node.inputs[3] if len(node.inputs) > 3 else None
        ends = self._const(ends_v)
        if data is None or ends_v is None or ends is None:
            return False
        dyn = self._dynamic_positions(data, tainted)
        rank = len(data.shape) if data.shape is not None else 0
        if not dyn or not rank:
            return False
        axes = self._const(axes_v)
        axes_list = [int(a) % rank for a in (axes.tolist() if axes is not None else range(len(ends)))]
        new = ends.astype(np.int64).copy()
        notes = []
        for k, a in enumerate(axes_list):
            if a in dyn and int(ends[k]) == dyn[a]:
                new[k] = INT64_MAX
                notes.append(f"ends[{k}] {dyn[a]} -> INT64_MAX (to the end of axis {a})")
        if not notes:
            return False
        if not self.rewrite:
            self._record(node, ends_v, ends, "Slice ends at the old full size of a dynamic axis", "unresolved")
            return False
        b = self._builder(graph, node, opset)
        init = b.initializer(new)
        self._splice(graph, node, b)
        node.replace_input_with(2, init)
        self._record(node, ends_v, ends, "Slice ends at the old full size of a dynamic axis", "rewritten", ", ".join(notes))
        return True

    def _broadcast_shape(self, graph: ir.Graph, node: ir.Node, tainted: set[int], opset: int) -> bool:
        """Expand (shape input 1), ConstantOfShape (input 0), Tile (repeats input 1)."""
        idx = 0 if node.op_type == "ConstantOfShape" else 1
        if len(node.inputs) <= idx:
            return False
        const_v = node.inputs[idx]
        c = self._const(const_v)
        if const_v is None or c is None or c.ndim != 1:
            return False
        data = node.inputs[0] if node.op_type != "ConstantOfShape" else None
        data_dyn = self._dynamic_positions(data, tainted) if data is not None else {}
        data_old = self.static_dims.get(str(data.name)) if data is not None else None
        sources = self._label_sources(graph)
        pieces: list[_Piece] = []
        notes, unresolved = [], []
        changed = False
        vals = [int(v) for v in c.tolist()]
        for i, v in enumerate(vals):
            # align the vector with the data's dims from the right (numpy broadcasting / Tile is same rank)
            j = i - (len(vals) - len(data_old)) if data_old is not None else None
            if node.op_type == "Expand" and j is not None and j in data_dyn and data_dyn[j] == v and v > 1:
                pieces.append(_Piece(const=1))  # broadcasting 1 keeps the data's own (dynamic) dim
                notes.append(f"[{i}] {v} -> 1 (keep dynamic input dim {j})")
                changed = True
                continue
            if node.op_type == "Tile" and j is not None and j in data_dyn:
                pieces.append(_Piece(const=v))
                continue
            src = sources.get(v)
            if v > 1 and src is not None:
                value, axis, label = src
                rank = len(value.shape) if value.shape is not None else -1
                out_rank = len(vals) if node.op_type != "Tile" else len(data_old or vals)
                data_one = data_old is None or j is None or j < 0 or int(data_old[j]) == 1
                if i == axis and (axis == 0 or out_rank == rank) and data_one:
                    pieces.append(_Piece(source=value, index=axis))
                    notes.append(f"[{i}] {v} -> Shape({value.name})[{axis}] (label '{label}')")
                    changed = True
                    continue
                unresolved.append(f"element {i}={v} equals the old size of '{label}' at a position that does not "
                                  f"match its axis on input '{value.name}'")
            pieces.append(_Piece(const=v))
        reason = f"{node.op_type} {'repeats' if node.op_type == 'Tile' else 'shape'} holds the old size of a dynamic axis"
        if unresolved:
            self._record(node, const_v, c, "; ".join(unresolved), "unresolved")
            return False
        if not changed:
            return False
        if not self.rewrite:
            self._record(node, const_v, c, reason, "unresolved")
            return False
        new = self._shape_vector(graph, node, pieces, opset)
        node.replace_input_with(idx, new)
        self._record(node, const_v, c, reason, "rewritten", ", ".join(notes))
        return True

    def _per_sample_constants(self, node: ir.Node, tainted: set[int]) -> None:
        """Constant operands of broadcasting ops / Concat whose dims equal the old size at a dynamic position."""
        dyn_inputs = [(i, self._dynamic_positions(i, tainted)) for i in node.inputs if i is not None]
        concat_axis = node.attributes.get_int("axis", 0) if node.op_type == "Concat" else None
        for v in node.inputs:
            c = self._const(v)
            if v is None or c is None or c.ndim == 0:
                continue
            for other, dyn in dyn_inputs:
                if other is v or not dyn:
                    continue
                rank = len(self.static_dims.get(str(other.name), ()))
                offset = rank - c.ndim
                for j, old in dyn.items():
                    k = j - offset
                    if concat_axis is not None and j == concat_axis % max(rank, 1):
                        continue
                    if 0 <= k < c.ndim and c.shape[k] == old and old > 1:
                        self._record(node, v, np.array(c.shape), f"constant of shape {list(c.shape)} has the old size "
                                     f"{old} on axis {k}, which meets dynamic dim {j} of '{other.name}'", "unresolved")

    def _split(self, node: ir.Node, tainted: set[int]) -> None:
        data = node.inputs[0] if node.inputs else None
        sizes_v = node.inputs[1] if len(node.inputs) > 1 else None
        sizes = self._const(sizes_v)
        if data is None or sizes_v is None or sizes is None:
            return
        dyn = self._dynamic_positions(data, tainted)
        rank = len(self.static_dims.get(str(data.name), ()))
        axis = node.attributes.get_int("axis", 0) % max(rank, 1)
        if axis in dyn:
            self._record(node, sizes_v, sizes, f"Split sizes are fixed along dynamic axis {axis}", "unresolved")

    def _matmul(self, node: ir.Node, tainted: set[int]) -> None:
        """A constant weight whose contraction size equals a dim of the data that now varies."""
        if len(node.inputs) < 2 or node.inputs[0] is None or node.inputs[1] is None:
            return
        data, weight = node.inputs[0], node.inputs[1]
        w = self._const(weight)
        dyn = self._dynamic_positions(data, tainted)
        rank = len(self.static_dims.get(str(data.name), ()))
        if w is None or w.ndim < 2 or not dyn or not rank:
            return
        k_axis = rank - 1
        if node.op_type == "Gemm" and node.attributes.get_int("transA"):
            k_axis = 0
        k_w = w.shape[-1] if node.op_type == "Gemm" and node.attributes.get_int("transB") else w.shape[-2]
        if k_axis in dyn and dyn[k_axis] == k_w:
            self._record(node, weight, np.array(w.shape), f"weight of shape {list(w.shape)} contracts axis {k_axis} of "
                         f"'{data.name}', whose size ({k_w}) now varies with a dynamic axis", "unresolved")

    # -------------------------------------------------------------------------------------------- call
    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph = model.graph
        # unresolved findings are re-derived every call: an earlier rewrite may have resolved them
        self.findings = [f for f in self.findings if f.action == "rewritten"]
        self._seen = {(f.node, f.reason) for f in self.findings}
        self._taken = existing_names(graph)  # one name set for every rewrite of this run
        tainted = self._tainted(model)
        opset = default_opset(model, missing=DEFAULT_OPSET)
        modified = False
        for node in list(graph):
            if node.domain not in ("", "ai.onnx"):
                continue
            if node.op_type == "Reshape":
                modified |= self._reshape(graph, node, tainted, opset)
            elif node.op_type == "Slice":
                modified |= self._slice(graph, node, tainted, opset)
            elif node.op_type in ("Expand", "ConstantOfShape", "Tile"):
                modified |= self._broadcast_shape(graph, node, tainted, opset)
            elif node.op_type == "Split":
                self._split(node, tainted)
            elif node.op_type in ("MatMul", "Gemm"):
                self._matmul(node, tainted)
            if node.op_type in _BROADCASTING_OPS or node.op_type == "Concat":
                self._per_sample_constants(node, tainted)
        return ir.passes.PassResult(model, modified)

    @property
    def unresolved(self) -> list[BakedShape]:
        return [f for f in self.findings if f.action == "unresolved"]

