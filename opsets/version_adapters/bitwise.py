"""BitwiseAnd / BitwiseOr / BitwiseXor / BitwiseNot-18 -> opset 17: integer arithmetic, as no bitwise op exists
before 18.

BitwiseNot is one subtraction: ``-1 - x`` for signed types (two's complement ``~x``; it never overflows, ``min``
maps to ``max``), ``max - x`` for unsigned ones; in the input's own type, or in int32 for 8- and 16-bit types
(Sub takes those only from opset 14, and later hops may go below it).

The binary ops go through bytes. Every operand is taken apart into *digits* of at most 32 bits held in int64
(the one integer type every runtime does all arithmetic on): a type of width ``w <= 32`` is one digit, its
two's-complement pattern ``Mod(x, 2^w)`` (Mod-13 with ``fmod=0`` takes the divisor's sign, so the pattern of a
negative value is ``x + 2^w``); a 64-bit type is two, ``lo = Mod(x, 2^32)`` and ``hi = (x - lo) / 2^32`` (exact;
for int64 ``hi`` is a signed 32-bit value, taken to its pattern by ``Mod`` again). A digit ``u`` of ``k`` bits
becomes its bytes ``Mod(Div(u[..., None], 256^[0..k/8)), 256)`` (``u >= 0``: Div is floor division); each pair of
bytes indexes a 256 x 256 uint8 table of the op (a 64 KB initializer, built with numpy's own bitwise op), and
``ReduceSum(result_bytes * 256^[0..k/8))`` puts the digit together again. Digits go back to the type: a signed
pattern ``r >= 2^(w-1)`` is ``r - 2^w``; int64 is ``hi * 2^32 + lo`` with ``hi`` signed; uint64 is rebuilt in
uint64 (``hi * 2^32 + lo`` fits). Every step stays in range, so the result is exact for every value, extremes
included. The byte axis makes the intermediates ``k / 8`` int64 values per element.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx_ir as ir

from bridge.rewriting import Builder
from opsets.registry import register
from opsets.version_adapters._util import Rewritten, fail

I64 = ir.DataType.INT64
_SIGNED = {ir.DataType.INT8: 8, ir.DataType.INT16: 16, ir.DataType.INT32: 32, ir.DataType.INT64: 64}
_UNSIGNED = {ir.DataType.UINT8: 8, ir.DataType.UINT16: 16, ir.DataType.UINT32: 32, ir.DataType.UINT64: 64}
_TABLES: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "BitwiseAnd": np.bitwise_and, "BitwiseOr": np.bitwise_or, "BitwiseXor": np.bitwise_xor}


def _dtype(node: ir.Node, hop: str) -> ir.DataType:
    types = {v.dtype for v in node.inputs if v is not None}
    if len(types) != 1 or None in types:
        raise fail(node, hop, "the input types must be known (and equal) to choose the integer width")
    dtype = types.pop()
    assert dtype is not None
    if dtype not in _SIGNED and dtype not in _UNSIGNED:
        raise fail(node, hop, f"{node.op_type} on {dtype.name} is not an integer type of the schema")
    return dtype


def _i64(b: Builder, value: int) -> ir.Value:
    return b.const(np.asarray(value, np.int64))


def _digits(b: Builder, x: ir.Value, dtype: ir.DataType) -> list[tuple[ir.Value, int]]:
    """``x`` as (digit, bits) pairs, least significant first, each digit an int64 in ``[0, 2^bits)``."""
    width = _SIGNED.get(dtype) or _UNSIGNED[dtype]
    if width <= 32:
        wide = b.cast(x, I64)
        return [(b.op("Mod", wide, _i64(b, 1 << width), fmod=0) if dtype in _SIGNED else wide, width)]
    if dtype == ir.DataType.UINT64:
        base = b.const(np.asarray(1 << 32, np.uint64))
        return [(b.cast(b.op("Mod", x, base, fmod=0), I64), 32), (b.cast(b.op("Div", x, base), I64), 32)]
    base = _i64(b, 1 << 32)
    lo = b.op("Mod", x, base, fmod=0)  # [0, 2^32)
    hi = b.op("Div", b.op("Sub", x, lo), base)  # exact: x - lo is a multiple of 2^32 in int64's range
    return [(lo, 32), (b.op("Mod", hi, base, fmod=0), 32)]


def _combine(b: Builder, op: str, a: ir.Value, c: ir.Value, bits: int) -> ir.Value:
    """``op`` on two int64 digits of ``bits`` bits, byte by byte through a 256 x 256 table along a new last axis."""
    base = _i64(b, 256)
    values = np.arange(256, dtype=np.uint8)
    table = b.initializer(_TABLES[op](values[:, None], values[None, :]).reshape(-1))  # table[256 x + y] = x op y
    if bits == 8:  # one byte: the digits index the table as they are
        return b.cast(b.op("Gather", table, b.op("Add", b.op("Mul", a, base), c), axis=0), I64)
    weights = b.const(np.asarray([1 << (8 * i) for i in range(bits // 8)], np.int64))
    x = b.op("Mod", b.op("Div", b.unsqueeze(a, -1), weights), base, fmod=0)  # the bytes, least significant first
    y = b.op("Mod", b.op("Div", b.unsqueeze(c, -1), weights), base, fmod=0)
    out = b.cast(b.op("Gather", table, b.op("Add", b.op("Mul", x, base), y), axis=0), I64)
    return b.reduce("ReduceSum", b.op("Mul", out, weights), [-1], keepdims=0)


def _signed(b: Builder, r: ir.Value, bits: int) -> ir.Value:
    """A ``bits``-bit pattern in int64 as the signed value it encodes."""
    return b.where(b.op("Less", r, _i64(b, 1 << (bits - 1))), r, b.op("Sub", r, _i64(b, 1 << bits)))  # Less: opset 9


def _assemble(b: Builder, digits: list[ir.Value], dtype: ir.DataType) -> ir.Value:
    if len(digits) == 1:
        (r,) = digits
        return b.cast(_signed(b, r, _SIGNED[dtype]) if dtype in _SIGNED else r, dtype)
    lo, hi = digits
    if dtype == ir.DataType.UINT64:
        base = b.const(np.asarray(1 << 32, np.uint64))
        return b.op("Add", b.op("Mul", b.cast(hi, dtype), base), b.cast(lo, dtype))
    return b.op("Add", b.op("Mul", _signed(b, hi, 32), _i64(b, 1 << 32)), lo)


def _binary(b: Builder, node: ir.Node) -> Rewritten:
    hop = f"{node.op_type.lower()}_18_17"
    a, c = node.inputs[0], node.inputs[1]
    if a is None or c is None:
        raise fail(node, hop, "an input is missing")
    dtype = _dtype(node, hop)
    pairs = zip(_digits(b, a, dtype), _digits(b, c, dtype), strict=True)
    digits = [_combine(b, node.op_type, da, dc, bits) for (da, bits), (dc, _) in pairs]
    return [_assemble(b, digits, dtype)]


@register("BitwiseAnd", 18, 17)
def bitwiseand_18_17(b: Builder, node: ir.Node) -> Rewritten:
    return _binary(b, node)


@register("BitwiseOr", 18, 17)
def bitwiseor_18_17(b: Builder, node: ir.Node) -> Rewritten:
    return _binary(b, node)


@register("BitwiseXor", 18, 17)
def bitwisexor_18_17(b: Builder, node: ir.Node) -> Rewritten:
    return _binary(b, node)


@register("BitwiseNot", 18, 17)
def bitwisenot_18_17(b: Builder, node: ir.Node) -> Rewritten:
    x = node.inputs[0]
    if x is None:
        raise fail(node, "bitwisenot_18_17", "the input is missing")
    dtype = _dtype(node, "bitwisenot_18_17")
    top = -1 if dtype in _SIGNED else int(np.iinfo(dtype.numpy()).max)  # ~x = -1 - x (two's complement) or max - x
    if (_SIGNED.get(dtype) or _UNSIGNED[dtype]) <= 16:  # Sub takes 8- and 16-bit types only from opset 14
        wide = b.op("Sub", b.const(np.asarray(top, np.int32)), b.cast(x, ir.DataType.INT32))
        return [b.cast(wide, dtype)]  # in the type's range: exact
    return [b.op("Sub", b.const(np.asarray(top, dtype.numpy())), x)]
