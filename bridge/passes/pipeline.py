"""The ONNX stage's pass order, each entry with the reason it sits where it does, and the runner.

``conversion_pipeline`` is the single place the order is decided. ``run_pipeline`` runs the
passes one by one (onnx_ir's contract: requires -> call -> ensures), records which changed the
model, and turns failures into errors that name the pass and, when known, the node and op.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import onnx
import onnx_ir as ir
from onnx_ir.passes.common import CheckerPass, RemoveUnusedOpsetsPass, TopologicalSortPass

from bridge import provenance
from bridge.config import DynamicAxis, InputSpec
from bridge.errors import BridgeError, BridgeInternalError, NodeError, PassFailedError, UsageError
from bridge.model import ModelContainer, PassRecord
from bridge.passes.attributes import CheckAttributesPass
from bridge.passes.base import BridgePass
from bridge.passes.cleanup import FoldConstantsPass
from bridge.passes.contrib import (
    LowerBoxDecodePass,
    LowerBoxNMSPass,
    LowerMultiBoxDetectionPass,
    LowerMultiBoxPriorPass,
    LowerProposalPass,
)
from bridge.passes.layout import SoftmaxLastAxisPass, TransposePairPass
from bridge.passes.opset import ConvertOpsetPass
from bridge.passes.shapes import (
    ClearStaleValueInfoPass,
    FixInputShapesPass,
    InferShapesPass,
    NameDynamicAxesPass,
    NameOutputDimsByProbePass,
    Probe,
    RequireStaticShapesPass,
)

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Step:
    """A pass and the reason it is in the pipeline at this position."""

    pass_: ir.passes.PassBase
    reason: str

    @property
    def name(self) -> str:
        return type(self.pass_).__name__


def has_custom_domain(model: ir.Model) -> bool:
    return any(node.domain not in ("", "ai.onnx") for node in model.graph.all_nodes())


def conversion_pipeline(
    *,
    opset: int,
    inputs: Sequence[InputSpec] = (),
    dynamic: Sequence[DynamicAxis] = (),
    detection_format: str = "mxnet",
    max_detections: int | None = None,
    full_check: bool = True,
    probe: Probe | None = None,
    target_steps: Sequence[Step] = (),
) -> list[Step]:
    """The passes ``bridge convert`` runs, in order. ``probe`` runs the model to name output dims that
    inference loses behind data-dependent ops (``bridge.validation.probe``); without it that step is left out.
    ``target_steps`` (a target's own rewrites of the lowered outputs, e.g. an output layout) run right after
    the lowerings, before folding."""
    steps = [
        Step(CheckAttributesPass(),
             "an attribute outside the spec's range (group=0) crashes runtimes that load the model: named with its "
             "node before anything runs or rewrites it"),
        Step(CheckerPass(full_check=False),
             "reject a malformed export before anything rewrites it (errors then point at the exporter, not bridge)"),
        Step(TopologicalSortPass(),
             "some exporters emit nodes out of order; every later pass assumes producers come first"),
        Step(ConvertOpsetPass(opset),
             "one opset for the rest of the stage: later rewrites are keyed by the target opset"),
        Step(FixInputShapesPass(inputs, dynamic),
             "pin the inputs to the user's concrete shapes (dynamic axes excepted) before folding, so "
             "shape-computing subgraphs fold to constants"),
        # Layers ONNX has no op for (bridge.contrib, from any adapter) are lowered here: after the opset is
        # final (the lowerings emit opset-specific forms) and the inputs are pinned (static anchors), and
        # before folding, which skips contrib nodes but turns the lowered anchor subgraphs into constants.
        Step(LowerMultiBoxPriorPass(),
             "anchors depend only on feature-map shapes: lowered to exact MXNet arithmetic, folded to a constant next"),
        Step(LowerBoxDecodePass(), "box_decode (GluonCV) -> standard ONNX arithmetic"),
        Step(LowerProposalPass(), "legacy rcnn RPN Proposal -> anchors, decode, clip, NonMaxSuppression, top-N"),
        Step(LowerBoxNMSPass(), "box_nms (GluonCV) -> class-aware NonMaxSuppression, as MXNet does it"),
        Step(LowerMultiBoxDetectionPass(detection_format, max_detections),
             "MultiBoxDetection -> decode + class-aware NonMaxSuppression + MXNet's row layout; after the anchor "
             "lowering, whose output it consumes"),
        *target_steps,
        Step(FoldConstantsPass(),
             "fold constant subgraphs and drop dead nodes after the opset is final (folding must see final op semantics)"),
        Step(SoftmaxLastAxisPass(),
             "Softmax over a non-last axis fed by a Transpose (SSD class probabilities) runs ~8x faster in "
             "onnxruntime as a last-axis Softmax before the Transpose; after folding, on the final graph"),
        Step(TransposePairPass(),
             "the MultiBoxDetection lowering reads scores class-last through a Transpose that cancels the one "
             "SoftmaxLastAxisPass just moved after the Softmax; after it, so both halves of the pair exist"),
        Step(RemoveUnusedOpsetsPass(), "drop opset imports that folding left unused"),
    ]
    if dynamic:
        steps.append(Step(NameDynamicAxesPass(dynamic),
                          "give each dynamic axis the user's label on every input and output that carries it; "
                          "before clearing value_info, while the exporter's symbols still link outputs to inputs"))
    steps += [
        Step(ClearStaleValueInfoPass(),
             "value_info from the exporter or earlier passes can be stale (onnxruntime warns on mismatches)"),
        Step(InferShapesPass(),
             "re-derive every intermediate shape from the final inputs (keeping named output dims)"),
    ]
    if dynamic and probe is not None:
        steps.append(Step(NameOutputDimsByProbePass(dynamic, inputs, probe),
                          "outputs behind data-dependent ops (NMS) lose their axis names in inference; name them "
                          "from runs at two sizes, after inference so only dims it could not follow are probed"))
    if not dynamic:
        steps.append(Step(RequireStaticShapesPass(),
                          "static means static: fail loudly if any input/output dim is still symbolic"))
    steps.append(Step(CheckerPass(full_check=full_check),
                      "the result must pass the full checker (incl. strict shape inference) before it is written"))
    return steps


# onnx's checker says "Bad node spec for node. Name: node_mean OpType: ReduceMean"
_NODE_IN_MESSAGE = re.compile(r"Name:\s*(?P<node>\S*)\s+OpType:\s*(?P<op>\w+)")


def run_pipeline(container: ModelContainer, steps: Sequence[Step], progress: Progress | None = None) -> None:
    """Run ``steps`` in order on ``container.model``, appending a PassRecord per pass to its history.
    Every node carries its provenance (``bridge.provenance``): exported nodes are stamped first, nodes a
    pass creates are attributed to it."""
    provenance.stamp_export(container.model, container.source_framework, container.exporter)
    for step in steps:
        if progress:
            progress(f"pass {step.name}")
        if isinstance(step.pass_, CheckerPass) and has_custom_domain(container.model):
            # custom-domain ops (bridge.contrib) have no schema: check structure only, skip strict inference
            step = Step(CheckerPass(full_check=False), step.reason + " (structure only: custom-domain ops present)")
        earlier = provenance.before(container.model)
        start = time.perf_counter()
        try:
            result = step.pass_(container.model)
        except Exception as exc:
            raise _as_pass_error(step.name, exc) from _root_cause(exc)
        container.model = result.model
        container.history.append(PassRecord(step.name, step.reason, bool(result.modified), time.perf_counter() - start))
        provenance.attribute_new_nodes(container.model, earlier, step.name)
        if isinstance(step.pass_, BridgePass):  # the declared warnings channel (reset by the pass on every run)
            container.warnings.extend(step.pass_.warnings)


def _root_cause(exc: BaseException) -> BaseException:
    """Unwrap onnx_ir's PassError / Pre-/PostconditionError wrappers to what the pass really raised."""
    while exc.__cause__ is not None and isinstance(exc, (ir.passes.PassError, ir.passes.InvariantError)):
        exc = exc.__cause__
    return exc


def _as_pass_error(pass_name: str, exc: BaseException) -> Exception:
    """User-caused failures become PassFailedError (exit 3 or the error's own code); bugs become internal."""
    root = _root_cause(exc)
    if isinstance(root, UsageError):  # an option the user gave (--dynamic, --input): said in its words, exit 2
        return root
    if isinstance(root, NodeError):
        return PassFailedError(pass_name, str(root), node=root.node, op=root.op)
    if isinstance(root, BridgeError):
        if isinstance(root, PassFailedError):
            return root
        error = PassFailedError(pass_name, str(root))
        error.exit_code = root.exit_code
        return error
    if isinstance(root, (onnx.checker.ValidationError, onnx.shape_inference.InferenceError)):
        m = _NODE_IN_MESSAGE.search(str(root))
        return PassFailedError(pass_name, str(root).strip(), node=m.group("node") if m else None,
                               op=m.group("op") if m else None)
    return BridgeInternalError(f"pass {pass_name} crashed: {type(root).__name__}: {root}")
