"""tf2onnx handlers for TensorFlow ops tf2onnx 1.17 has none for, registered when imported.

- ``Erfc``: TF's exact GELU (``tf.nn.gelu(approximate=False)``, Keras' ``gelu``) computes
  ``0.5 * x * erfc(-x / sqrt(2))``; ONNX has ``Erf`` only, so ``erfc(x) = 1 - erf(x)``. The absolute
  error of the identity stays at float epsilon; only the relative error of erfc's far tail (x > ~4,
  where erfc < 1e-8) is lost, which GELU multiplies by at most |x| * 0.5.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from tf2onnx import utils
from tf2onnx.handler import tf_op


@tf_op("Erfc")
class Erfc:
    @classmethod
    def version_9(cls, ctx: Any, node: Any, **kwargs: Any) -> None:  # Erf exists from opset 9
        dtype = utils.map_onnx_to_numpy_type(ctx.get_dtype(node.input[0]))
        node.type = "Erf"
        one = ctx.make_const(utils.make_name(f"{node.name}_one"), np.array(1, dtype=dtype))
        sub = ctx.insert_new_node_on_output("Sub", node.output[0], name=utils.make_name(node.name))
        ctx.replace_inputs(sub, [one.output[0], node.output[0]])
        ctx.copy_shape(node.output[0], sub.output[0])
