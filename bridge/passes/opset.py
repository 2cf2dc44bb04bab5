"""ConvertOpsetPass: bring the model's default-domain opset to the target before anything rewrites it.

Functional (returns a new model): the converters round-trip through protobuf, and a failed
conversion must leave the input model untouched for the error report.

A model that uses no default-domain op at all (only ``ai.onnx.ml`` classifiers, say) has nothing to
convert: it gets a default-domain import at the target (later rewrites key on it; the
unused-opset clean-up drops it again) and its other domains are left as they are. A model that uses
default-domain ops without importing the domain is malformed and is refused, naming the ops.
"""

from __future__ import annotations

import onnx_ir as ir

from bridge.errors import ExportError
from bridge.rewriting import default_opset
from bridge.rewriting.driver import DEFAULT_DOMAINS
from opsets.conversion import check_target, convert_opset


def _imports_default(model: ir.Model) -> bool:
    return any(d in model.opset_imports for d in DEFAULT_DOMAINS)


def _default_domain_ops(model: ir.Model) -> list[str]:
    nodes = [*model.graph.all_nodes(), *(n for f in model.functions.values() for n in f.all_nodes())]
    return sorted({n.op_type for n in nodes if n.domain in DEFAULT_DOMAINS})


def _shell(model: ir.Model) -> ir.Model:
    """A distinct Model sharing ``model``'s graph (safe when nothing in the graph changes)."""
    return ir.Model(model.graph, ir_version=model.ir_version, producer_name=model.producer_name,
                    producer_version=model.producer_version, domain=model.domain,
                    model_version=model.model_version, doc_string=model.doc_string,
                    functions=list(model.functions.values()), metadata_props=dict(model.metadata_props))


class ConvertOpsetPass(ir.passes.FunctionalPass):
    def __init__(self, target: int) -> None:
        super().__init__()
        check_target(target)
        self.target = target

    def requires(self, model: ir.Model) -> None:
        if not _imports_default(model) and (ops := _default_domain_ops(model)):
            raise ExportError(f"the model uses default-domain ops ({', '.join(ops)}) but imports no default-domain "
                              f"opset (imports: {', '.join(sorted(d or 'ai.onnx' for d in model.opset_imports))})")

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        if not _imports_default(model):  # no default-domain op anywhere (requires): only the import is missing
            shell = _shell(model)
            shell.opset_imports[""] = self.target
            return ir.passes.PassResult(shell, modified=True)
        # convert_opset also legalises forms the target rejects (integer Clip below 12) at the same opset
        converted = convert_opset(model, self.target)
        if converted is model:
            # unchanged: a FunctionalPass must still hand back a distinct Model
            return ir.passes.PassResult(_shell(model), modified=False)
        return ir.passes.PassResult(converted, modified=True)

    def ensures(self, model: ir.Model) -> None:
        if default_opset(model) != self.target:
            raise ir.passes.PostconditionError(f"model is at opset {default_opset(model)}, not {self.target}")
