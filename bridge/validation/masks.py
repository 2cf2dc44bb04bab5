"""Which graph inputs are masks, and mask values a model sees in use.

An ``attention_mask`` is int64 in most exports, so generic integer data (0..9) would feed it values a
model never sees; worse, random 0/1 data masks whole rows, where the source and the candidate may
legitimately differ (a softmax over nothing). An input is a mask when its name says so (it contains
"mask" and it holds integers or bools) or when, through value-preserving ops, it reaches a boolean consumer: the condition of a
Where, And/Or/Xor/Not, or a Cast to bool. Masks get padding-style values: along the last axis a run
of ones from the start (at least one) followed by zeros, as a padded batch has.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

import numpy as np
import onnx

_PASSTHROUGH = {"Identity", "Squeeze", "Unsqueeze", "Flatten", "Reshape", "Transpose", "Expand", "Tile", "CastLike"}
_BOOLEAN = {"And", "Or", "Xor", "Not"}


def mask_inputs(models: Iterable[onnx.ModelProto], names: Iterable[str], integer: Collection[str] = ()) -> dict[str, str]:
    """``{input: why it is a mask}`` for the named graph inputs that are masks (``integer``: those of an
    integer or bool dtype, the only ones a name alone makes a mask: a float "mask" may be additive)."""
    found: dict[str, str] = {}
    names = list(names)
    for name in names:
        if "mask" in name.lower() and name in integer:
            found[name] = "its name says mask"
    for model in models:
        consumers: dict[str, list[onnx.NodeProto]] = {}
        for node in model.graph.node:
            for value in node.input:
                if value:
                    consumers.setdefault(value, []).append(node)
        for name in names:
            if name in found:
                continue
            why = _boolean_consumer(name, consumers)
            if why:
                found[name] = why
    return found


def _boolean_consumer(name: str, consumers: dict[str, list[onnx.NodeProto]]) -> str | None:
    frontier, seen = [name], {name}
    while frontier:
        value = frontier.pop()
        for node in consumers.get(value, []):
            label = f"{node.op_type} '{node.name}'" if node.name else node.op_type
            if node.op_type in _BOOLEAN:
                return f"it feeds {label}"
            if node.op_type == "Where" and node.input[0] == value:
                return f"it is the condition of {label}"
            if node.op_type == "Cast":
                to = next((a.i for a in node.attribute if a.name == "to"), None)
                if to == onnx.TensorProto.BOOL:
                    return f"{label} casts it to bool"
                continue  # a Cast to a number: the values are used as numbers from here on
            if node.op_type in _PASSTHROUGH and node.input[0] == value:
                for out in node.output:
                    if out and out not in seen:
                        seen.add(out)
                        frontier.append(out)
    return None


def padding_mask(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """Ones then zeros along the last axis, at least one one per row (a padded batch's mask)."""
    if not shape:
        return np.ones((), dtype=dtype)
    rows = int(np.prod(shape[:-1], dtype=np.int64))
    width = shape[-1]
    lengths = rng.integers(1, width + 1, size=rows) if width else np.zeros(rows, dtype=np.int64)
    mask = np.arange(width)[None, :] < lengths[:, None]
    return mask.reshape(shape).astype(dtype)
