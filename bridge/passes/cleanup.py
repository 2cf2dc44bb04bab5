"""FoldConstantsPass: constant folding and dead-node removal through onnxscript's optimizer.

Exporters leave Shape->Gather->Concat chains on static shapes, Constant nodes and unused outputs;
folding them makes static shapes visible to shape inference and keeps the graph small. The
optimizer is onnxscript's (the one torch.onnx itself uses); this pass only adds an honest
``modified`` flag and keeps custom-domain nodes (bridge.contrib) untouched.
"""

from __future__ import annotations

import onnx_ir as ir
import onnxscript.optimizer

from bridge.passes.base import graph_fingerprint

CONTRIB_DOMAIN = "bridge.contrib"


class FoldConstantsPass(ir.passes.InPlacePass):
    def call(self, model: ir.Model) -> ir.passes.PassResult:
        before = graph_fingerprint(model)
        # Never fold custom-domain nodes: they have no reference implementation and a later pass lowers them.
        onnxscript.optimizer.optimize_ir(
            model, onnx_shape_inference=False, should_fold=lambda node: False if node.domain == CONTRIB_DOMAIN else None
        )
        return ir.passes.PassResult(model, modified=graph_fingerprint(model) != before)
