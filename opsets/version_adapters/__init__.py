"""bridge's version adapters (``<op>_<from>_<to>``); importing this package registers all of them in
``opsets.registry``. ``lookup`` / ``all_adapters`` here are the registry's, with the table filled."""

from opsets.registry import all_adapters, lookup
from opsets.version_adapters import (
           activation,
           affinegrid,
           bitcast,
           bitwise,
           centercroppad,
           clip,
           col2im,
           control_flow,
           cumprod,
           deformconv,
           dft,
           elementwise,
           gridsample,
           normalization,
           optional,
           pad,
           pooling,
           quantize,
           reduce,
           resize,
           scan,
           scatter,
           shape,
           softmax,
           split,
           tensorscatter,
           transformer,
           types,
)

__all__ = ["activation", "affinegrid", "all_adapters", "bitcast", "bitwise", "centercroppad", "clip", "col2im", "control_flow", "cumprod",
           "deformconv", "dft", "elementwise", "gridsample", "lookup", "normalization", "optional", "pad", "pooling", "quantize", "reduce",
           "resize", "scan", "scatter", "shape", "softmax", "split", "tensorscatter", "transformer", "types"]
