"""SoftmaxLastAxisPass: ``Softmax(Transpose(y, perm), axis=a)`` -> ``Transpose(Softmax(y, axis=-1), perm)``
when ``perm[a]`` is y's last axis (a rewrite on the rewriting driver: new nodes built with its Builder,
spliced in with the old output names, and carrying the replaced Softmax's provenance).

Why: MXNet SSDs (and GluonCV exports) compute class probabilities as
``SoftmaxActivation(mode=channel)`` over ``transpose(cls_preds, (0, 2, 1))``, which bridge emits as a
Transpose followed by a Softmax over axis 1 of [B, C+1, N]. onnxruntime's Softmax over a non-last
axis (opset >= 13) transposes to the last axis, runs, and transposes back, and its kernel is far
slower there (measured ~10 ms vs ~1 ms on [1, 21, 34030], bench/README.md). Softmax over x's axis
``a`` is softmax over y's axis ``perm[a]`` (x = transpose(y, perm) means x.shape[i] = y.shape[perm[i]]),
so when that is y's last axis the Softmax can run on y directly and the Transpose move after it: the
same values reduced in the same order, one Transpose instead of three. The original Transpose is
dropped when nothing else reads it. Opset < 13 Softmax (2-D coercion) is left alone. The moved Softmax's
output is the old output (the source's tensor, e.g. MXNet's ``cls_prob_output``) in y's layout; the pass
records it as ``transpose(old, inverse perm)`` (``bridge.provenance.TENSOR_ALIASES_META``), so pinning and
``bridge debug`` still meet the source's tensor there once TransposePairPass has dropped the old name.

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
from bridge.provenance import record_tensor_alias
from bridge.rewriting import Builder, MatchResult, Rewrite, apply_rewrites, default_opset


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


def _transposed_softmax(node: ir.Node) -> tuple[ir.Node, list[int]] | None:
    """The Transpose feeding ``node`` and its perm, when moving it after the Softmax makes a last-axis one."""
    x = node.inputs[0] if node.inputs else None
    transpose = x.producer() if x is not None else None
    if transpose is None or transpose.op_type != "Transpose" or transpose.domain not in ("", "ai.onnx") \
            or transpose.inputs[0] is None:
        return None
    perm_attr = transpose.attributes.get("perm")
    if perm_attr is None:
        return None
    perm = list(perm_attr.as_ints())
    rank = len(perm)
    axis_attr = node.attributes.get("axis")
    axis = int(axis_attr.as_int()) if axis_attr is not None else -1
    if not -rank <= axis < rank:
        return None
    axis %= rank
    if axis == rank - 1 or perm[axis] != rank - 1:
        return None
    return transpose, perm


class SoftmaxLastAxisPass(BridgePass, Rewrite):
    """Move Softmax before the Transpose that feeds it when that makes it a last-axis Softmax."""

    op_type = "Softmax"
    min_opset = 13  # Softmax < 13 coerces its input to 2-D: another computation
    # this call's moved Softmaxes: (new output, the old output's name, inverse perm), recorded as aliases at the end
    _moved: list[tuple[ir.Value, str, list[int]]]

    def check(self, node: ir.Node, opset: int) -> MatchResult:
        verdict = super().check(node, opset)
        if not verdict.ok:
            return verdict
        if _transposed_softmax(node) is None:
            return MatchResult.fail("not a Softmax over an axis a Transpose moved off the last one")
        return MatchResult.success()

    def rewrite(self, b: Builder, node: ir.Node) -> list[ir.Value]:
        found = _transposed_softmax(node)
        assert found is not None  # check() passed
        transpose, perm = found
        softmax = b.op("Softmax", transpose.inputs[0], axis=len(perm) - 1)
        softmax.type = node.outputs[0].type
        # the new Softmax holds the old output (named after the source's tensor) in y's layout; once
        # TransposePairPass drops the Transpose back, only this tensor is left: record which it stands for
        self._moved.append((softmax, node.outputs[0].name or "", [perm.index(i) for i in range(len(perm))]))
        return [b.op("Transpose", softmax, perm=perm)]

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        self._moved = []
        if default_opset(model) < 13:
            return ir.passes.PassResult(model, False)
        feeding = [t for graph in model.graphs() for node in graph if node.op_type == "Softmax"
                   and (found := _transposed_softmax(node)) is not None for t in [found[0]]]
        outcome = apply_rewrites(model, lambda n: self if self.matches(n) and _transposed_softmax(n) else None,
                                 by=type(self).__name__)
        for transpose in feeding:  # the original Transpose goes when nothing else reads it
            graph = transpose.graph
            if graph is not None and not transpose.outputs[0].uses() and transpose.outputs[0] not in graph.outputs:
                graph.remove(transpose, safe=True)
        moved, self._moved = self._moved, []
        for softmax, of, inverse in moved:
            if softmax.name and of:
                record_tensor_alias(model.metadata_props, softmax.name, of, inverse)
        return ir.passes.PassResult(model, outcome.modified)


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
