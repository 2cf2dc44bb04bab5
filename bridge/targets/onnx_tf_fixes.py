"""Corrections to onnx-tf 1.10.0 handlers that exist but build the wrong TensorFlow graph, and the static shapes
its handlers rely on.

``onnx_tf_compat.extend_handlers`` installs these on onnx-tf's classes in memory (never on disk):

- **Integer Div** (``integer_div``). onnx-tf computes it as ``cast(truediv(x, y))``: a float64 division, inexact
  past 2**53 and, on LiteRT, no builtin at all (``tf.RealDiv`` on float64), so a detector's ``index // classes``
  could not be converted to a .tflite. ONNX's integer Div truncates toward zero (C semantics: -7 / 2 = -3). The
  replacement computes exactly that with ops LiteRT has as builtins, so the SavedModel the TF target writes is
  also the one the tflite target converts:

  - int32 (and int8/int16/uint8/uint16, widened to int32 and back, exactly): ``tf.truncatediv``, which is TF's
    ``TruncateDiv`` and LiteRT's ``DIV`` (its int32 kernel truncates, as C does);
  - int64 and uint32 (widened to int64): LiteRT has no int64 division kernel (neither ``DIV``, ``FLOOR_DIV`` nor
    ``TruncateDiv`` take int64), but ``FLOOR_MOD`` does. ``r = floormod(x, y)`` (exact, the sign of ``y``) makes
    ``d = x - r`` an exact multiple of ``y``; the multiple ``f = d / y`` is found by three rounds of
    ``f += round(float32(d - f*y) / float32(y))``. Each round leaves an error at most ~1.8e-7 of the previous
    one (three float32 roundings) plus 0.5 before rounding: from |f| <= 2**62 the error is < 2**40, then
    < 2**18, then < 0.03, which rounds to exactly 0. So ``f = floor(x / y)`` exactly for |x|, |y| <= 2**62; the
    ONNX (truncating) quotient is ``f + 1`` where the division is inexact (``r != 0``) and the signs of ``x``
    and ``y`` differ, else ``f``. (TF's ``FloorDiv`` floors: -7 // 2 = -4; that is why the correction is there.)
  - uint64 keeps onnx-tf's float64 division (no exact TF/LiteRT integer path for values past 2**63).

  Division by zero is undefined in ONNX; here it is whatever the kernels give.

- **GatherND / ScatterND negative indices** (``process_neg_idx``). onnx-tf reads the index depth (the indices'
  last dim) from the static shape when the *data's* shape is fully known; when the indices' last dim is not
  known to TensorFlow it slices ``data_shape[:None]``, i.e. every data dim, and the indices broadcast against
  all of them: a wrong static rank (tf2onnx's combined NMS in the trained Keras detector: GatherND output
  ``[?]`` where ONNX has ``[?, 1, 4]``) and a failure at run time. The depth is now the static one when known,
  else ``tf.shape(indices)[-1]``;
  the data dims it addresses are read as onnx-tf reads them (a constant where TensorFlow knows them, else an int64
  ``tf.shape``: the LiteRT converter cannot legalize an int32 one sliced and cast, in a detector's top-k gather).

- **GatherElements with a negative axis** (``_gather_elements``). onnx-tf turns ``axis=-1`` into
  ``tf.add(tf.rank(data), axis)``, a tensor, and then indexes a shape with it in Python
  (``process_neg_idx_along_axis``): the conversion fails ("Cannot convert a symbolic tf.Tensor"). The axis is
  made non-negative from the data's static rank before the handler runs (the same op: ONNX counts a negative axis
  from the end).

- **Static shapes from ONNX** (``onnx_static_shapes``). Many onnx-tf handlers read static ranks and dims
  (Squeeze/Unsqueeze axes, Slice, Split, GatherElements, the GatherND depth above, NMS box width, ...), but
  onnx-tf lets TensorFlow infer shapes alone and loses them where its graphs compute sizes at run time (a Slice
  with constant starts on a batch-dynamic tensor gives ``[?, ?]`` where ONNX knows ``[?, 1]``). While the TF
  target converts a model, each handler's output gets the static shape ONNX's shape inference gave that value,
  merged with TensorFlow's (``tf.Tensor.set_shape``: only dims TensorFlow does not know are filled). A handler
  whose output contradicts ONNX's shape (another rank or size) is a conversion error naming the node.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping
from typing import Any

import onnx

from bridge.errors import ExportError

# ONNX value name -> static shape (None for an unknown dim), for the model onnx-tf is converting now
_SHAPES: contextvars.ContextVar[Mapping[str, tuple[int | None, ...]] | None] = contextvars.ContextVar(
    "bridge_onnx_tf_shapes", default=None)

# refinement rounds of the int64 division (module docstring: 3 suffice for |x|, |y| <= 2**62)
INT64_DIVISION_ROUNDS = 3


# --- integer Div ---
def integer_div(x: Any, y: Any) -> Any:
    """ONNX integer Div (truncating toward zero) of ``x`` and ``y`` (same integer dtype, broadcasting), built
    from ops TensorFlow runs and LiteRT has as builtins (module docstring)."""
    import tensorflow as tf

    dtype = x.dtype
    if dtype == tf.int32:
        return tf.truncatediv(x, y)
    if dtype in (tf.int8, tf.int16, tf.uint8, tf.uint16):  # exact in int32
        return tf.cast(tf.truncatediv(tf.cast(x, tf.int32), tf.cast(y, tf.int32)), dtype)
    if dtype == tf.uint32:  # exact in int64
        return tf.cast(_int64_div(tf.cast(x, tf.int64), tf.cast(y, tf.int64)), dtype)
    if dtype == tf.int64:
        return _int64_div(x, y)
    raise TypeError(f"integer_div: no exact integer division for {dtype.name}")


def _int64_div(x: Any, y: Any) -> Any:
    """Truncating int64 division with FLOOR_MOD, float32 estimates and int64 corrections (module docstring)."""
    import tensorflow as tf

    remainder = tf.math.floormod(x, y)  # sign of y; exact
    multiple = x - remainder  # floor(x / y) * y, exactly
    divisor = tf.cast(y, tf.float32)
    quotient = tf.zeros_like(multiple)
    for _ in range(INT64_DIVISION_ROUNDS):
        error = multiple - quotient * y  # an exact multiple of y
        quotient += tf.cast(tf.round(tf.cast(error, tf.float32) / divisor), tf.int64)
    # floor -> toward zero: one up where the division is inexact and the quotient negative
    inexact_negative = tf.logical_and(tf.not_equal(remainder, 0), tf.not_equal(x < 0, y < 0))
    return quotient + tf.cast(inexact_negative, tf.int64)


def _div(cls: Any, node: Any, original: Any, **kwargs: Any) -> list[Any]:
    import tensorflow as tf

    x, y = (kwargs["tensor_dict"][name] for name in node.inputs[:2])
    if x.dtype.is_integer and x.dtype != tf.uint64:
        return [integer_div(x, y)]
    result: list[Any] = original(node, **kwargs)
    return result


# --- GatherElements negative axis ---
def _gather_elements(cls: Any, node: Any, original: Any, **kwargs: Any) -> list[Any]:
    axis = int(node.attrs.get("axis", 0))
    rank = kwargs["tensor_dict"][node.inputs[0]].shape.rank
    if axis < 0 and rank is not None:
        node.attrs = {**node.attrs, "axis": axis + rank}
    result: list[Any] = original(node, **kwargs)
    return result


# --- GatherND / ScatterND negative indices ---
def process_neg_idx(cls: Any, data: Any, indices: Any, batch_dims: int = 0) -> Any:
    """``indices`` with negative entries made positive (``i + dim`` mod ``dim`` for the data dims they address),
    the index depth read statically when TensorFlow knows it, else at run time (module docstring)."""
    import tensorflow as tf

    depth = indices.shape[-1] if indices.shape.rank else None
    static = data.shape[batch_dims:batch_dims + depth] if depth is not None and data.shape.rank is not None else None
    if static is not None and static.is_fully_defined():
        limits = tf.constant(static.as_list(), dtype=indices.dtype)  # the dims addressed are known (as onnx-tf)
    else:
        # the shape read as int64 and sliced there, as onnx-tf does: an int32 tf.shape sliced then cast to int64
        # is a pair the LiteRT converter cannot legalize ("unresolved materialization from i64 to i32")
        end = batch_dims + (depth if depth is not None else tf.shape(indices, out_type=tf.int64)[-1])
        limits = tf.cast(tf.shape(data, out_type=tf.int64)[batch_dims:end], indices.dtype)
    return tf.math.floormod(indices + limits, limits)


# --- static shapes from ONNX ---
def value_shapes(model: onnx.ModelProto) -> dict[str, tuple[int | None, ...]]:
    """Every value of ``model`` (subgraphs included) with a known rank: name -> dims (None where unknown)."""
    shapes: dict[str, tuple[int | None, ...]] = {}

    def visit(graph: onnx.GraphProto) -> None:
        for vi in (*graph.input, *graph.value_info, *graph.output):
            t = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
            if t is not None and t.HasField("shape"):
                shapes[vi.name] = tuple(d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim)
        for node in graph.node:
            for attr in node.attribute:
                for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)):
                    visit(sub)

    visit(model.graph)
    return shapes


@contextlib.contextmanager
def onnx_static_shapes(model: onnx.ModelProto) -> Iterator[None]:
    """While active, every onnx-tf handler's output gets ``model``'s ONNX static shape (module docstring)."""
    token = _SHAPES.set(value_shapes(model))
    try:
        yield
    finally:
        _SHAPES.reset(token)


def merge_onnx_shapes(node: Any, outputs: Any) -> None:
    """Give each TF tensor in ``outputs`` (node ``node``'s, in order) the static shape ONNX inferred for it."""
    import tensorflow as tf

    shapes = _SHAPES.get()
    if not shapes or not isinstance(outputs, (list, tuple)):
        return
    for name, tensor in zip(node.outputs, outputs, strict=False):
        dims = shapes.get(name)
        if dims is None or not isinstance(tensor, tf.Tensor):
            continue
        known = tf.TensorShape(dims)
        if not tensor.shape.is_compatible_with(known):
            raise ExportError(f"onnx-tf's {node.op_type} handler gives '{node.name}' output '{name}' the shape "
                              f"{_text(tensor.shape)} where ONNX infers {_text(known)}; the TF target cannot "
                              "convert this node faithfully")
        tensor.set_shape(known)


def _text(shape: Any) -> str:
    return "unknown rank" if shape.rank is None else str([d if d is not None else "?" for d in shape.as_list()])


def _with_onnx_shapes(original: Any) -> Any:
    """``TensorflowBackend._onnx_node_to_tensorflow_op`` followed by ``merge_onnx_shapes``."""

    def convert_node(cls: Any, node: Any, tensor_dict: Any, handlers: Any = None, opset: Any = None,
                     strict: bool = True) -> Any:
        outputs = original(node, tensor_dict, handlers, opset=opset, strict=strict)
        merge_onnx_shapes(node, outputs)
        return outputs

    convert_node.bridge_fix = True  # type: ignore[attr-defined]
    return convert_node


def _wrap_versions(cls: Any, versions: tuple[int, ...], fix: Any) -> list[int]:
    """Replace handler class ``cls``'s ``version_N`` methods by ``fix(cls, node, original, **kwargs)`` (each once);
    returns the versions wrapped now."""
    wrapped: list[int] = []
    for version in versions if cls is not None else ():
        current = vars(cls).get(f"version_{version}")
        if current is None or getattr(current.__func__, "bridge_fix", False):
            continue
        original = current.__get__(None, cls)

        def fixed(cls: Any, node: Any, _original: Any = original, **kwargs: Any) -> list[Any]:
            result: list[Any] = fix(cls, node, _original, **kwargs)
            return result

        fixed.bridge_fix = True  # type: ignore[attr-defined]
        setattr(cls, f"version_{version}", classmethod(fixed))
        wrapped.append(version)
    return wrapped


def install(classes: Mapping[str, Any], backend: Any) -> list[str]:
    """Install the corrections on onnx-tf's handler ``classes`` (ONNX op -> class) and ``backend`` class;
    returns what was installed (nothing twice)."""
    installed: list[str] = []
    for op, versions, fix, what in (("Div", (7, 13, 14), _div, "exact integer division"),
                                    ("GatherElements", (11, 13), _gather_elements, "negative axis")):
        installed += [f"{op}.version_{v} ({what})" for v in _wrap_versions(classes.get(op), versions, fix)]
    for op in ("GatherND", "ScatterND"):
        cls = classes.get(op)
        if cls is not None and "process_neg_idx" not in vars(cls):
            cls.process_neg_idx = classmethod(process_neg_idx)
            installed.append(f"{op}.process_neg_idx (unknown index depth)")
    convert = vars(backend).get("_onnx_node_to_tensorflow_op")
    if convert is not None and not getattr(convert.__func__, "bridge_fix", False):
        backend._onnx_node_to_tensorflow_op = classmethod(_with_onnx_shapes(convert.__get__(None, backend)))
        installed.append("TensorflowBackend._onnx_node_to_tensorflow_op (ONNX static shapes)")
    return installed
