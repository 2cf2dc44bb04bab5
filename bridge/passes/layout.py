"""SoftmaxLastAxisPass: ``Softmax(Transpose(y, perm), axis=a)`` -> ``Transpose(Softmax(y, axis=-1), perm)``
when ``perm[a]`` is y's last axis.

Why: MXNet SSDs (and GluonCV exports) compute class probabilities as
``SoftmaxActivation(mode=channel)`` over ``transpose(cls_preds, (0, 2, 1))``, which bridge emits as a
Transpose followed by a Softmax over axis 1 of [B, C+1, N]. onnxruntime's Softmax over a non-last
axis (opset >= 13) transposes to the last axis, runs, and transposes back, and its kernel is far
slower there (measured ~10 ms vs ~1 ms on [1, 21, 34030], bench/README.md). Softmax over x's axis
``a`` is softmax over y's axis ``perm[a]`` (x = transpose(y, perm) means x.shape[i] = y.shape[perm[i]]),
so when that is y's last axis the Softmax can run on y directly and the Transpose move after it: the
same values reduced in the same order, one Transpose instead of three. The original Transpose is
dropped when nothing else reads it. Opset < 13 Softmax (2-D coercion) is left alone.

TransposePairPass: ``Transpose(Transpose(x, p), q)`` whose composed permutation is the identity -> ``x``.
Why: the MultiBoxDetection lowering reads class scores class-last as ``Transpose(cls_prob)``, and after
SoftmaxLastAxisPass cls_prob is ``Transpose(Softmax(y, axis=-1))``: the pair is a copy of the Softmax
output, N x (C+1) floats moved twice. onnxruntime cancels such pairs itself, other runtimes (onnx-tf)
need not, so the ONNX stage removes them. A pair whose outer Transpose is a graph output is left alone.
"""

from __future__ import annotations

from abc import abstractmethod

import onnx_ir as ir

from bridge.passes.base import BridgePass
from bridge.rewriting import default_opset


def _opset(model: ir.Model) -> int:
    return default_opset(model, missing=0)


class _NodeByNodePass(BridgePass):
    """Offer every node of every graph (subgraphs included) to ``_rewrite``; modified when any rewrite applied."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for graph in (model.graph, *(g for g in model.graphs() if g is not model.graph)):
            for node in list(graph):
                modified |= self._rewrite(graph, node)
        return ir.passes.PassResult(model, modified)

    @abstractmethod
    def _rewrite(self, graph: ir.Graph, node: ir.Node) -> bool:
        """Rewrite ``node`` in ``graph`` if it matches; True when the graph changed."""


class SoftmaxLastAxisPass(_NodeByNodePass):
    """Move Softmax before the Transpose that feeds it when that makes it a last-axis Softmax."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        if _opset(model) < 13:
            return ir.passes.PassResult(model, False)
        return super().call(model)

    def _rewrite(self, graph: ir.Graph, node: ir.Node) -> bool:
        if node.op_type != "Softmax" or node.domain not in ("", "ai.onnx") or node.inputs[0] is None:
            return False
        transpose = node.inputs[0].producer()
        if transpose is None or transpose.op_type != "Transpose" or transpose.domain not in ("", "ai.onnx"):
            return False
        perm_attr = transpose.attributes.get("perm")
        if perm_attr is None:
            return False
        perm = list(perm_attr.as_ints())
        rank = len(perm)
        axis_attr = node.attributes.get("axis")
        axis = int(axis_attr.as_int()) if axis_attr is not None else -1
        if not -rank <= axis < rank:
            return False
        axis %= rank
        if axis == rank - 1 or perm[axis] != rank - 1:
            return False
        y = transpose.inputs[0]
        assert y is not None
        softmax = ir.node("Softmax", [y], attributes={"axis": rank - 1}, name=f"{node.name}_last_axis")
        moved = ir.node("Transpose", [softmax.outputs[0]], attributes={"perm": perm}, name=f"{node.name}_transpose")
        old_out = node.outputs[0]
        new_out = moved.outputs[0]
        new_out.name, new_out.type, new_out.shape = old_out.name, old_out.type, old_out.shape
        softmax.outputs[0].name = f"{old_out.name}_last_axis"
        softmax.outputs[0].type = old_out.type
        ir.convenience.replace_nodes_and_values(graph, node, [node], [softmax, moved], [old_out], [new_out])
        if not transpose.outputs[0].uses() and transpose.outputs[0] not in graph.outputs:
            graph.remove(transpose, safe=True)
        return True


class TransposePairPass(_NodeByNodePass):
    """Drop Transpose pairs that compose to the identity; the first Transpose goes too when unused."""

    @staticmethod
    def _perm(node: ir.Node) -> list[int] | None:
        if node.op_type != "Transpose" or node.domain not in ("", "ai.onnx"):
            return None
        attr = node.attributes.get("perm")
        return list(attr.as_ints()) if attr is not None else None  # no perm: reversal, left alone

    def _rewrite(self, graph: ir.Graph, node: ir.Node) -> bool:
        outer = self._perm(node)
        if outer is None or not node.inputs or node.inputs[0] is None or node.inputs[0].producer() is None:
            return False
        x = node.inputs[0]
        first = x.producer()
        assert first is not None
        inner = self._perm(first)
        out = node.outputs[0]
        # y = transpose(x, p) has y[i] = x[p[i]]; z = transpose(y, q) has z[i] = y[q[i]] = x[p[q[i]]]
        if inner is None or len(inner) != len(outer) or [inner[i] for i in outer] != list(range(len(outer))) \
                or out in graph.outputs or first.inputs[0] is None:
            return False
        source = first.inputs[0]
        out.replace_all_uses_with(source)
        graph.remove(node, safe=True)
        if not x.uses() and x not in graph.outputs:
            graph.remove(first, safe=True)
        return True


__all__ = ["SoftmaxLastAxisPass", "TransposePairPass"]
