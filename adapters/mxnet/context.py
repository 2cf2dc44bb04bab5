"""The ONNX graph under construction while MXNet nodes are translated, with per-tensor type tracking.

Translators emit ONNX nodes through ``ConversionContext.emit``; after each emitted node the output
types are inferred with ONNX's own per-node shape inference (``infer_node_outputs``), so translators
that need a static shape (Reshape codes, Pooling 'full', MultiBoxPrior's output length, ...) can ask
for it without running whole-model inference again and again. Dims are ints, symbolic names (from
dynamic axes) or None when unknown.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper, shape_inference

from bridge import provenance
from bridge.config import CONTRIB_DOMAIN
from bridge.errors import ExportError
from bridge.limits import check_allocation, nbytes_of

log = logging.getLogger(__name__)

Dim = int | str | None
Shape = tuple[Dim, ...]


class TensorType:
    """ONNX element type plus shape (None when even the rank is unknown)."""

    __slots__ = ("elem", "shape")

    def __init__(self, elem: int, shape: Shape | None) -> None:
        self.elem = elem
        self.shape = shape

    def to_proto(self) -> onnx.TypeProto:
        return helper.make_tensor_type_proto(self.elem, None if self.shape is None else list(self.shape))

    @classmethod
    def from_proto(cls, tp: onnx.TypeProto) -> TensorType:
        t = tp.tensor_type
        if not t.HasField("shape"):
            return cls(t.elem_type, None)
        dims: list[Dim] = []
        for d in t.shape.dim:
            if d.HasField("dim_value"):
                dims.append(int(d.dim_value))
            elif d.HasField("dim_param"):
                dims.append(d.dim_param)
            else:
                dims.append(None)
        return cls(t.elem_type, tuple(dims))


def shape_like(t: TensorProto) -> bool:
    """An initializer whose values shape inference may need (data propagation): integer or tiny."""
    return t.data_type in (TensorProto.INT64, TensorProto.INT32) or int(np.prod(t.dims, dtype=np.int64)) <= 64


def np_to_onnx(dtype: Any) -> int:
    return int(helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))


def onnx_to_np(elem: int) -> np.dtype:
    return np.dtype(helper.tensor_dtype_to_np_dtype(elem))


_KEEP_CONST_BYTES = 64 * 1024  # initializer values kept as numpy too (the weights only as TensorProtos: once)


class ConversionContext:
    """Collects nodes, initializers, inputs and tensor types for one export."""

    def __init__(self, opset: int) -> None:
        self.opset = opset
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: dict[str, TensorProto] = {}
        self.consts: dict[str, np.ndarray] = {}
        self.inputs: list[onnx.ValueInfoProto] = []
        self.types: dict[str, TensorType] = {}
        self.declared: dict[str, TensorType] = {}  # value_info for outputs ONNX cannot infer (contrib)
        self.warnings: list[str] = []
        self.uses_contrib = False
        self._names: set[str] = set()
        self._node_names: set[str] = set()
        # what every emitted node records as its provenance (the MXNet node being translated, by which translator)
        self.origin: provenance.Provenance | None = None

    # ---- names -------------------------------------------------------------------------------
    def reserve(self, name: str) -> str:
        """Claim ``name`` exactly; ExportError when already taken (canonical output names)."""
        if name in self._names:
            raise ExportError(f"tensor name '{name}' is produced twice (duplicate MXNet node names?)")
        self._names.add(name)
        return name

    def fresh(self, hint: str) -> str:
        """A unique tensor name derived from ``hint`` (intermediates: ``<node>__<what>``)."""
        return _claim_unique(hint, self._names)

    def warn(self, message: str) -> None:
        log.warning(message)
        self.warnings.append(message)

    # ---- values ------------------------------------------------------------------------------
    def add_initializer(self, name: str, value: np.ndarray) -> str:
        return self._put_initializer(self.reserve(name), value)

    def _put_initializer(self, name: str, value: np.ndarray) -> str:
        value = np.asarray(value)
        self.initializers[name] = numpy_helper.from_array(value, name)
        if value.nbytes <= _KEEP_CONST_BYTES:  # large ones (weights) are decoded from their proto when asked
            self.consts[name] = value
        self.types[name] = TensorType(np_to_onnx(value.dtype), tuple(int(d) for d in value.shape))
        return name

    def const(self, value: Any, hint: str, dtype: Any = None) -> str:
        arr = np.asarray(value, dtype=dtype)
        return self._put_initializer(self.fresh(hint), arr)

    def i64(self, values: Sequence[int], hint: str) -> str:
        return self.const(np.asarray(list(values), dtype=np.int64), hint)

    def add_input(self, name: str, elem: int, shape: Shape) -> str:
        self.reserve(name)
        t = TensorType(elem, shape)
        self.inputs.append(helper.make_tensor_value_info(name, elem, list(shape)))
        self.types[name] = t
        return name

    def value(self, name: str) -> np.ndarray | None:
        if name not in self.consts and name in self.initializers:
            return numpy_helper.to_array(self.initializers[name])
        return self.consts.get(name)

    def type(self, name: str) -> TensorType:
        t = self.types.get(name)
        if t is None:
            return TensorType(onnx.TensorProto.UNDEFINED, None)
        return t

    def shape(self, name: str) -> Shape | None:
        return self.type(name).shape

    def rank(self, name: str, node: str = "?") -> int:
        s = self.shape(name)
        if s is None:
            raise ExportError(f"node '{node}': the rank of '{name}' is unknown; give static input shapes")
        return len(s)

    def static_shape(self, name: str, node: str = "?") -> tuple[int, ...]:
        s = self.shape(name)
        if s is None or not all(isinstance(d, int) for d in s):
            raise ExportError(
                f"node '{node}': needs the static shape of '{name}' but it is {s}; "
                "pass concrete --input shapes (dynamic axes cannot reach this op)"
            )
        return tuple(int(d) for d in s)  # type: ignore[arg-type]

    def static_dims(self, name: str, node: str, axes: slice | Sequence[int]) -> tuple[int, ...]:
        """The dims of ``name`` at ``axes`` (a slice or axis list, negative from the end), which must be static;
        other axes may stay dynamic (a dynamic batch reaches Pooling, Deconvolution, ... that only read H, W)."""
        s = self.shape(name)
        if s is None:
            raise ExportError(f"node '{node}': the shape of '{name}' is unknown; pass concrete --input shapes")
        picked = list(s[axes]) if isinstance(axes, slice) else [s[a] for a in axes]
        if not all(isinstance(d, int) for d in picked):
            which = f"[{axes.start or 0}:{'' if axes.stop is None else axes.stop}]" if isinstance(axes, slice) \
                else f"{list(axes)}"
            raise ExportError(
                f"node '{node}': needs static dims {which} of '{name}' but its shape is {s}; "
                "pass concrete --input shapes (dynamic axes cannot reach these dims of this op)"
            )
        return tuple(int(d) for d in picked)  # type: ignore[arg-type]

    def elem(self, name: str) -> int:
        return self.type(name).elem

    def np_dtype(self, name: str) -> np.dtype:
        e = self.elem(name)
        return onnx_to_np(e) if e else np.dtype(np.float32)

    # ---- nodes -------------------------------------------------------------------------------
    def emit(
        self,
        op_type: str,
        inputs: Sequence[str],
        outputs: Sequence[str] | str | int = 1,
        *,
        name: str,
        domain: str = "",
        out_types: Sequence[TensorType] | None = None,
        doc: str | None = None,
        **attrs: Any,
    ) -> list[str]:
        """Append one node; ``outputs`` are exact names (already reserved) or a count of fresh names."""
        if isinstance(outputs, int):
            outs = [self.fresh(f"{name}__{op_type.lower()}" + (f"{i}" if outputs > 1 else "")) for i in range(outputs)]
        elif isinstance(outputs, str):
            outs = [outputs]
        else:
            outs = list(outputs)
        attrs = {k: v for k, v in attrs.items() if v is not None}
        node = helper.make_node(op_type, list(inputs), outs, name=self.fresh_node_name(name), domain=domain, **attrs)
        if doc:
            node.doc_string = doc
        if self.origin is not None:
            provenance.write(node, self.origin)
        self.nodes.append(node)
        if out_types is not None:
            for o, t in zip(outs, out_types, strict=True):
                self.types[o] = t
                self.declared[o] = t
        elif domain == "":
            self._infer(node)
        if domain == CONTRIB_DOMAIN:
            self.uses_contrib = True
        return outs

    def fresh_node_name(self, hint: str) -> str:
        return _claim_unique(hint, self._node_names)

    def _infer(self, node: onnx.NodeProto) -> None:
        try:
            schema = onnx.defs.get_schema(node.op_type, self.opset, node.domain)
        except onnx.defs.SchemaError:
            raise ExportError(f"ONNX has no op {node.op_type} at opset {self.opset} (needed by node '{node.name}')") from None
        if any(i and i not in self.types for i in node.input):
            # an input without a type (a variable still lacking a shape): the converter reports it
            for out in node.output:
                self.types[out] = TensorType(onnx.TensorProto.UNDEFINED, None)
            return
        in_types = {i: self.type(i).to_proto() for i in node.input if i}
        # values only of shape-like initializers (integers, or a few elements: Reshape shapes, Resize scales):
        # handing inference the weights re-serializes every weight tensor once per consuming node
        in_data = {i: t for i in node.input if i in self.initializers
                   and shape_like(t := self.initializers[i])}
        try:
            result = shape_inference.infer_node_outputs(
                schema, node, in_types, in_data, opset_imports=[helper.make_opsetid("", self.opset)]
            )
        except Exception as e:  # onnx raises several kinds; an inconsistent node is a translator bug
            raise ExportError(f"node '{node.name}' ({node.op_type}) fails ONNX shape inference: {e}") from e
        for out in node.output:
            if out in result:
                self.types[out] = TensorType.from_proto(result[out])
                self._check_size(out, node)
            else:
                self.types[out] = TensorType(onnx.TensorProto.UNDEFINED, None)

    def _check_size(self, name: str, node: onnx.NodeProto) -> None:
        """A statically known output larger than the memory limit (a Tile / Reshape / ConstantOfShape bomb in
        the symbol's attributes) is refused at conversion, before any runtime tries to allocate it."""
        t = self.types[name]
        if t.shape is None or not all(isinstance(d, int) and d >= 0 for d in t.shape) or not t.elem:
            return
        try:
            itemsize = onnx_to_np(t.elem).itemsize
        except (KeyError, TypeError, ValueError):
            return
        check_allocation(nbytes_of(t.shape, itemsize),  # type: ignore[arg-type]
                         f"node '{node.name}' ({node.op_type}) output '{name}' of shape {list(t.shape)}")

    # ---- small helpers used by many translators ----------------------------------------------
    def reduce(self, op: str, x: str, axes: Sequence[int] | None, keepdims: bool, *, name: str,
               output: str | None = None) -> str:
        """Reduce* with axes as attribute (< 18; ReduceSum < 13) or input, as the opset requires."""
        axes_as_input = self.opset >= (13 if op == "ReduceSum" else 18)
        out: Sequence[str] | int = [output] if output else 1
        if axes is None:
            return self.emit(op, [x], out, name=name, keepdims=int(keepdims))[0]
        if axes_as_input:
            return self.emit(op, [x, self.i64(axes, f"{name}__axes")], out, name=name, keepdims=int(keepdims))[0]
        return self.emit(op, [x], out, name=name, axes=list(axes), keepdims=int(keepdims))[0]

    def unsqueeze(self, x: str, axes: Sequence[int], *, name: str, output: str | None = None) -> str:
        out: Sequence[str] | int = [output] if output else 1
        return self.emit("Unsqueeze", [x, self.i64(axes, f"{name}__axes")], out, name=name)[0]

    def squeeze(self, x: str, axes: Sequence[int], *, name: str, output: str | None = None) -> str:
        out: Sequence[str] | int = [output] if output else 1
        return self.emit("Squeeze", [x, self.i64(axes, f"{name}__axes")], out, name=name)[0]

    def as_int64(self, x: str, hint: str) -> str:
        """``x`` as int64 (cast unless it already is): indices, labels, multi-indices."""
        return x if self.elem(x) == TensorProto.INT64 else self.emit("Cast", [x], 1, name=hint, to=TensorProto.INT64)[0]

    def as_bool(self, x: str, hint: str) -> str:
        """``x != 0`` as bool: nonzero is true (a NaN too), as C's ``&&`` on MXNet's DType."""
        zero = self.emit("Equal", [x, self.scalar(0, x, f"{hint}__zero")], 1, name=f"{hint}__eq0")[0]
        return self.emit("Not", [zero], 1, name=f"{hint}__nz")[0]

    def scalar(self, value: Any, like: str, hint: str) -> str:
        """A 0-d constant with the element type of tensor ``like`` (MXNet casts scalars to DType)."""
        return self.const(np.asarray(value).astype(self.np_dtype(like)), hint)

    def shape_of(self, exprs: Sequence[ShapeExpr], src: str, *, name: str) -> str:
        """An int64 shape tensor from expressions over ``src``'s dims (constant when all are static)."""
        src_shape = self.shape(src) or ()
        static: list[int] = []
        for e in exprs:
            v = e.static(src_shape)
            if v is None:
                break
            static.append(v)
        else:
            return self.i64(static, f"{name}__shape")
        shp = self.emit("Shape", [src], 1, name=f"{name}__shape_of")[0]
        parts = []
        for i, e in enumerate(exprs):
            parts.append(e.build(self, shp, src_shape, f"{name}__dim{i}"))
        return self.emit("Concat", parts, 1, name=f"{name}__shape", axis=0)[0]


class ShapeExpr:
    """One output dim: a constant, or the product of some of the source tensor's dims."""

    def __init__(self, const: int | None = None, dims: Sequence[int] = ()) -> None:
        self.const_value = const
        self.dims = tuple(dims)

    def static(self, src_shape: Sequence[Dim]) -> int | None:
        if self.const_value is not None:
            return self.const_value
        out = 1
        for d in self.dims:
            v = src_shape[d] if d < len(src_shape) else None
            if not isinstance(v, int):
                return None
            out *= v
        return out

    def build(self, ctx: ConversionContext, shp: str, src_shape: Sequence[Dim], hint: str) -> str:
        v = self.static(src_shape)
        if v is not None:
            return ctx.i64([v], hint)
        cur = ctx.emit("Gather", [shp, ctx.i64([self.dims[0]], hint + "_i")], 1, name=hint, axis=0)[0]
        for d in self.dims[1:]:
            nxt = ctx.emit("Gather", [shp, ctx.i64([d], hint + "_i")], 1, name=hint, axis=0)[0]
            cur = ctx.emit("Mul", [cur, nxt], 1, name=hint)[0]
        return cur


def _claim_unique(hint: str, taken: set[str]) -> str:
    """``hint``, or ``hint_1``, ``hint_2``, ... whichever is free first; recorded as taken."""
    name, k = hint, 1
    while name in taken:
        name = f"{hint}_{k}"
        k += 1
    taken.add(name)
    return name
