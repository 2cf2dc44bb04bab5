"""ConvertOpsetPass: bring the model's default-domain opset to the target before anything rewrites it.

Functional (returns a new model): the converters round-trip through protobuf, and a failed
conversion must leave the input model untouched for the error report.
"""

from __future__ import annotations

import onnx_ir as ir

from bridge.rewriting import default_opset
from opsets.conversion import check_target, convert_opset


class ConvertOpsetPass(ir.passes.FunctionalPass):
    def __init__(self, target: int) -> None:
        super().__init__()
        check_target(target)
        self.target = target

    def requires(self, model: ir.Model) -> None:
        default_opset(model)  # a model without a default-domain import cannot be converted

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        # convert_opset also legalises forms the target rejects (integer Clip below 12) at the same opset
        converted = convert_opset(model, self.target)
        if converted is model:
            # unchanged: a FunctionalPass must still hand back a distinct Model; sharing the graph is safe
            # because nothing was modified
            shell = ir.Model(model.graph, ir_version=model.ir_version, producer_name=model.producer_name,
                             producer_version=model.producer_version, domain=model.domain,
                             model_version=model.model_version, doc_string=model.doc_string,
                             functions=list(model.functions.values()), metadata_props=dict(model.metadata_props))
            return ir.passes.PassResult(shell, modified=False)
        return ir.passes.PassResult(converted, modified=True)

    def ensures(self, model: ir.Model) -> None:
        if default_opset(model) != self.target:
            raise ir.passes.PostconditionError(f"model is at opset {default_opset(model)}, not {self.target}")
