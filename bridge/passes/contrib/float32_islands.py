"""Float32IslandsPass: the float64 islands of a decode (``Cast(f64) -> Exp -> Cast(f32)``) computed in float32.

Why: the SSD box decode (``decode.DECODERS["ssd"]``, both layouts, used by the MultiBoxDetection,
box_decode and box_nms lowerings) computes exp in float64 and rounds once, the correctly rounded expf
closest to MXNet's glibc expf. Runtimes without float64 kernels cannot run that: TFLite/LiteRT has no
builtin float64 Exp (it needs the FlexExp select op, which the LiteRT interpreter does not ship). For
such a target this pass turns every ``Cast(x: float32 -> float64) -> <unary> -> Cast(-> float32)``
chain into ``<unary>(x)`` in float32, for the elementwise ops in ``ISLAND_OPS``.

Error bound (stated, and checked in tests against the float64 path): a float32 exp kernel is within
``EXP_ULPS`` units in the last place of the correctly rounded result, so each decoded half-size
``exp(t) * size / 2`` is within ``EXP_ULPS * 2**-23`` relative of the float64 decode, and a decoded
corner ``centre -/+ half`` within ``(EXP_ULPS + 1) * 2**-23 * |half| + 2**-24 * |corner|`` absolute
(one more rounding of the Add/Sub). For boxes in [0, 1] that is under 4e-7: below the validation
tolerance, though a near-tie in NMS overlap (IoU at the threshold to within that) can flip which of two
boxes survives; the detection-aware comparison reports such a flip as a tie.
"""

from __future__ import annotations

import onnx_ir as ir

from bridge.passes.base import BridgePass

# elementwise unary ops whose float32 kernels are within a few ulp of the correctly rounded result
ISLAND_OPS = frozenset({"Exp", "Log", "Sqrt", "Tanh", "Sigmoid"})
EXP_ULPS = 2  # float32 exp in TFLite / XNNPACK / Eigen: measured <= 1 ulp; 2 leaves margin (see tests)


def _cast_to(node: ir.Node | None, dtype: ir.DataType) -> bool:
    if node is None or node.op_type != "Cast" or node.domain not in ("", "ai.onnx"):
        return False
    to = node.attributes.get("to")
    return to is not None and to.as_int() == dtype.value


class Float32IslandsPass(BridgePass):
    """Rewrite float64 islands (a float32 value cast up, one unary op, cast back down) to float32."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for graph in model.graphs():
            for node in list(graph):
                if node.op_type not in ISLAND_OPS or node.domain not in ("", "ai.onnx"):
                    continue
                up = node.inputs[0].producer() if node.inputs and node.inputs[0] is not None else None
                if not _cast_to(up, ir.DataType.DOUBLE) or up is None or up.inputs[0] is None \
                        or up.inputs[0].dtype != ir.DataType.FLOAT:
                    continue
                result = node.outputs[0]
                if result.is_graph_output() or not result.uses():
                    continue
                downs = [user for user, _ in result.uses()]
                if not all(_cast_to(d, ir.DataType.FLOAT) for d in downs):
                    continue
                source = up.inputs[0]
                node.replace_input_with(0, source)
                result.dtype = ir.DataType.FLOAT
                for down in downs:  # each Cast back to float32 is now the identity: bypass it
                    out = down.outputs[0]
                    if out.is_graph_output():
                        idx = [i for i, o in enumerate(graph.outputs) if o is out]
                        node.outputs[0].name, out.name = out.name, None
                        for i in idx:
                            graph.outputs[i] = result
                    ir.convenience.replace_all_uses_with(out, result)
                    graph.remove(down, safe=False)
                if not up.outputs[0].uses():
                    graph.remove(up, safe=False)
                modified = True
        return ir.passes.PassResult(model, modified)
