"""ConvertOpsetPass: bring the model's default-domain opset to the target before anything rewrites it.

Functional (returns a new model): the converters round-trip through protobuf, and a failed
conversion must leave the input model untouched for the error report.
"""

from __future__ import annotations

import onnx_ir as ir

from bridge.passes.base import default_opset
from opsets.conversion import check_target, convert_opset, model_opset


class ConvertOpsetPass(ir.passes.FunctionalPass):
    def __init__(self, target: int) -> None:
        super().__init__()
        check_target(target)
        self.target = target

    def requires(self, model: ir.Model) -> None:
        default_opset(model)  # a model without a default-domain import cannot be converted

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        if model_opset(model) == self.target:
            # FunctionalPass must not hand back its input: an unchanged copy keeps the contract honest
            return ir.passes.PassResult(ir.serde.deserialize_model(ir.serde.serialize_model(model)), modified=False)
        return ir.passes.PassResult(convert_opset(model, self.target), modified=True)

    def ensures(self, model: ir.Model) -> None:
        if default_opset(model) != self.target:
            raise ir.passes.PostconditionError(f"model is at opset {default_opset(model)}, not {self.target}")
