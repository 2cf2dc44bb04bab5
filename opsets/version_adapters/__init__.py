"""bridge's version adapters (``<op>_<from>_<to>``); importing this package registers all of them in
``opsets.registry``. ``lookup`` / ``all_adapters`` here are the registry's, with the table filled."""

from opsets.registry import all_adapters, lookup
from opsets.version_adapters import (
           clip,
           elementwise,
           normalization,
           reduce,
           resize,
           scan,
           shape,
           softmax,
           split,
           types,
)

__all__ = ["all_adapters", "clip", "elementwise", "lookup", "normalization", "reduce", "resize", "scan", "shape", "softmax",
           "split", "types"]
