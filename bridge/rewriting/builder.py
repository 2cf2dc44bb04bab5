"""The one graph builder of bridge's rewrites (contrib lowerings, opset version adapters, NMS grafting).

It wraps ``onnx_ir.tape.Tape``. The lowerings emit dozens of small nodes (Shape, Gather, Where, ...); this wraps the tape with
constant helpers, opset-aware spellings of the few ops whose signature changed between opsets
(Reduce* axes became an input in 13 (ReduceSum) and 18 (ReduceMin/ReduceMax)), and fresh value
names that cannot collide with the names already in the graph (one name set shared by every
builder of a rewrite run, so a run over N nodes scans the graph once, not N times). The contrib
lowerings emit standard ONNX at the model's default-domain opset, which must be >= ``MIN_OPSET`` = 13
(Squeeze/Unsqueeze/ReduceSum with axes inputs, GatherND with batch_dims, TopK's lower-index-first tie
rule); version adapters emit whatever their target opset takes, through ``op``/``op_multi``/``const``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx_ir as ir

MIN_OPSET = 13
F32 = ir.DataType.FLOAT
I64 = ir.DataType.INT64
BOOL = ir.DataType.BOOL
LOWEST_F32 = float(np.finfo(np.float32).min)


def existing_names(graph: ir.Graph) -> set[str]:
    names = {str(v.name) for v in (*graph.inputs, *graph.outputs) if v.name}
    names.update(str(n) for n in graph.initializers)
    for node in graph.all_nodes():
        names.update(str(v.name) for v in node.outputs if v.name)
        if node.name:
            names.add(node.name)
    return names


class Builder:
    """Emit nodes onto a tape; ``nodes`` are inserted into the graph by the caller."""

    def __init__(self, graph: ir.Graph, opset: int, prefix: str, taken: set[str] | None = None,
                 model: ir.Model | None = None) -> None:
        self.graph = graph
        self.model = model  # the model being rewritten, when the driver made this builder
        self.opset = opset
        self.prefix = prefix
        self.tape = ir.tape.Tape()
        self._taken = existing_names(graph) if taken is None else taken
        self._count = 0
        self.warnings: list[str] = []  # collected by the rewrite driver
        self.initializers: list[ir.Value] = []  # registered on the graph by the driver when it splices

    def warn(self, message: str) -> None:
        """Record a warning about this rewrite (the driver hands it to the pass's warnings channel)."""
        self.warnings.append(message)

    @property
    def nodes(self) -> Sequence[ir.Node]:
        return self.tape.nodes

    def fresh(self, hint: str) -> str:
        while True:
            self._count += 1
            name = f"{self.prefix}/{hint}_{self._count}"
            if name not in self._taken:
                self._taken.add(name)
                return name

    # -- node emission -------------------------------------------------------------------------------
    def op(self, op_type: str, *inputs: ir.Value | None, **attrs: Any) -> ir.Value:
        value = self.tape.op(op_type, list(inputs), attributes=attrs or None, name=self.fresh(op_type))
        value.name = self.fresh(op_type.lower())
        return value

    def op_multi(self, op_type: str, *inputs: ir.Value | None, num_outputs: int, **attrs: Any) -> list[ir.Value]:
        values = self.tape.op_multi_out(op_type, list(inputs), attributes=attrs or None, num_outputs=num_outputs,
                                        name=self.fresh(op_type))
        for v in values:
            v.name = self.fresh(op_type.lower())
        return list(values)

    def const(self, array: Any, dtype: Any = None) -> ir.Value:
        arr = np.asarray(array, dtype=dtype)
        return self.op("Constant", value=ir.tensor(arr))

    def initializer(self, array: Any, dtype: Any = None) -> ir.Value:
        """A new initializer (registered when the rewrite is spliced in; a graph output cannot be one)."""
        arr = np.asarray(array, dtype=dtype)
        value = ir.Value(name=self.fresh("init"), type=ir.TensorType(ir.DataType.from_numpy(arr.dtype)),
                         shape=ir.Shape(arr.shape), const_value=ir.tensor(arr))
        self.initializers.append(value)
        return value

    def i64(self, *values: int) -> ir.Value:
        """A 1-D int64 constant (shapes, axes, starts/ends)."""
        return self.const(np.array(values, dtype=np.int64))

    def f32(self, value: float) -> ir.Value:
        """A float32 scalar constant (broadcasts against anything)."""
        return self.const(np.array(value, dtype=np.float32))

    # -- spellings -----------------------------------------------------------------------------------
    def dim(self, x: ir.Value, axis: int) -> ir.Value:
        """Size of ``x`` along ``axis`` as a 1-D int64 tensor of one element."""
        return self.op("Gather", self.op("Shape", x), self.i64(axis), axis=0)

    def unsqueeze(self, x: ir.Value, *axes: int) -> ir.Value:
        return self.op("Unsqueeze", x, self.i64(*axes))

    def squeeze(self, x: ir.Value, *axes: int) -> ir.Value:
        return self.op("Squeeze", x, self.i64(*axes))

    def slice(self, x: ir.Value, axis: int, start: int, end: int) -> ir.Value:
        return self.op("Slice", x, self.i64(start), self.i64(end), self.i64(axis))

    def reduce(self, op_type: str, x: ir.Value, axes: Sequence[int] | None, keepdims: int) -> ir.Value:
        """ReduceSum/Min/Max over ``axes`` (all axes when None), in the form the opset wants."""
        axes_as_input = self.opset >= (13 if op_type == "ReduceSum" else 18)
        if axes is None:
            return self.op(op_type, x, keepdims=keepdims)
        if axes_as_input:
            return self.op(op_type, x, self.i64(*axes), keepdims=keepdims)
        return self.op(op_type, x, axes=list(axes), keepdims=keepdims)

    def cast(self, x: ir.Value, dtype: ir.DataType) -> ir.Value:
        return self.op("Cast", x, to=dtype)

    def where(self, cond: ir.Value, a: ir.Value, b: ir.Value) -> ir.Value:
        return self.op("Where", cond, a, b)

    def columns(self, x: ir.Value, count: int) -> list[ir.Value]:
        """The last axis of ``x`` split into ``count`` slices, each keeping a trailing axis of 1."""
        return [self.slice(x, -1, i, i + 1) for i in range(count)]

    def gather_rows(self, x: ir.Value, index: ir.Value) -> ir.Value:
        """x [B, N, F], index [B, M] -> [B, M, F] (per-batch row gather)."""
        return self.op("GatherND", x, self.unsqueeze(index, -1), batch_dims=1)

    def gather_cols(self, x: ir.Value, index: ir.Value) -> ir.Value:
        """x [B, N], index [B, M] -> [B, M]."""
        return self.op("GatherElements", x, index, axis=1)
