"""FoldConstantsPass: constant folding and dead-node removal with onnxscript's folder and onnx_ir passes.

Exporters leave Shape->Gather->Concat chains on static shapes, Constant nodes and unused outputs;
folding them makes static shapes visible to shape inference and keeps the graph small.

This runs onnxscript's constant folder (the one torch.onnx uses) but deliberately *not*
``onnxscript.optimizer.optimize``'s peephole rewrite rules: they fuse patterns without regard to
the target opset - e.g. Max/Min back into Clip, undoing the integer-Clip legalisation that opsets/
does below opset 12 (onnxruntime has no integer Clip kernel there). Custom-domain nodes
(bridge.contrib) are never folded: a later pass lowers them.
"""

from __future__ import annotations

import onnx_ir as ir
from onnx_ir.passes.common import (
    DeduplicateInitializersPass,
    LiftConstantsToInitializersPass,
    RemoveUnusedNodesPass,
)
from onnxscript.optimizer import fold_constants_ir

from bridge.config import CONTRIB_DOMAIN
from bridge.limits import fold_fits
from bridge.passes.base import graph_fingerprint

_ROUNDS = 2  # folding can expose new dead nodes and vice versa; two rounds reach the fixpoint in practice


def _should_fold(node: ir.Node) -> bool | None:
    if not fold_fits(node):  # the folder would allocate past --max-memory before checking the result's size
        return False
    return False if node.domain == CONTRIB_DOMAIN else None  # None: onnxscript's default rules


class FoldConstantsPass(ir.passes.InPlacePass):
    def call(self, model: ir.Model) -> ir.passes.PassResult:
        before = graph_fingerprint(model)
        for _ in range(_ROUNDS):
            fold_constants_ir(model, onnx_shape_inference=False, should_fold=_should_fold)
            RemoveUnusedNodesPass()(model)
        LiftConstantsToInitializersPass(lift_all_constants=True, size_limit=0)(model)
        DeduplicateInitializersPass()(model)
        return ir.passes.PassResult(model, modified=graph_fingerprint(model) != before)
