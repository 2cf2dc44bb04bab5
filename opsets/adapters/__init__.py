"""bridge's version adapters; importing this package registers all of them (opsets.registry)."""

from opsets.adapters import clip, elementwise, normalization, reduce, resize, shape, softmax, split, types

__all__ = ["clip", "elementwise", "normalization", "reduce", "resize", "shape", "softmax", "split", "types"]
