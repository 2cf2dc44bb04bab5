"""BitCast-26 -> opset 25: only the identity BitCast (``to`` equal to the input's type) has an older form.

BitCast reinterprets a tensor's bytes as another type of the same width; no op before opset 26 reads a
value's bits, and arithmetic stand-ins (e.g. frexp via Log2/Floor for float -> int) are not exact for NaN,
infinities, signed zeros and subnormals. So a BitCast to its own type becomes Identity and any other is
refused naming the node and both types, rather than converted approximately.
"""

from __future__ import annotations

import onnx_ir as ir

from bridge.rewriting import Builder
from bridge.rewriting.attrs import required_int
from opsets.registry import register
from opsets.version_adapters._util import Rewritten, fail


@register("BitCast", 26, 25)
def bitcast_26_25(b: Builder, node: ir.Node) -> Rewritten:
    x = node.inputs[0]
    to = ir.DataType(required_int(node, "to"))
    if x is not None and x.dtype == to:
        return [b.op("Identity", x)]
    source = x.dtype.name if x is not None and x.dtype is not None else "an unknown type"
    raise fail(node, "bitcast_26_25", f"reinterpreting the bits of {source} as {to.name} (to={to.value}) has no exact "
               "form before opset 26; keep the model at opset 26 or newer")
