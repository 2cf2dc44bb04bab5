"""``bridge shapes fix``: turn a model with symbolic dims into a fully static one at given input shapes.

Exporters leave three kinds of symbolic dims: named ones (``batch``, ``s77``), tf2onnx's ``unk__N``,
and derived expressions. Fixing only the graph inputs is not enough: graph outputs and value_info keep
the old symbols (onnxruntime then warns "Expected shape from model ... does not match actual shape"),
and Reshape targets built from ``Shape(x)`` stay run-time computations. So the inputs are pinned,
every other shape is forgotten and re-inferred, the shape subgraphs are folded to constants, and the
result must be static everywhere, pass the full checker, look static to ``bridge.inspection.inspect_model``, and
compute what the original computes at that shape (both run in onnxruntime).
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import onnx
from onnx_ir.passes.common import CheckerPass, TopologicalSortPass

from bridge.config import DEFAULT_TOLERANCE, InputSpec, Tolerance
from bridge.conversion.check import Isolation
from bridge.errors import UsageError, ValidationMismatch
from bridge.io import check_writable, refuse_overwriting_inputs
from bridge.model import ModelContainer, PassRecord
from bridge.passes.cleanup import FoldConstantsPass
from bridge.passes.pipeline import Step, run_pipeline
from bridge.passes.shape_dynamic import ResetShapesPass
from bridge.passes.shapes import (
    ClearStaleValueInfoPass,
    FixInputShapesPass,
    InferShapesPass,
    RequireStaticShapesPass,
)
from bridge.runtimes.isolated import DEFAULT_TIMEOUT_S
from bridge.runtimes.onnxruntime import OnnxRuntime
from bridge.shapes.common import (
    Progress,
    dims,
    graph_inputs,
    load,
    parse_specs,
    quiet,
    symbolic_dims,
    write_checked,
)
from bridge.validation.compare import Comparison
from bridge.validation.run import FeedSource

logger = logging.getLogger(__name__)


def fix_pipeline(specs: Sequence[InputSpec]) -> list[Step]:
    """The passes ``bridge shapes fix`` runs, in order, each with its reason."""
    return [
        Step(TopologicalSortPass(), "later passes assume producers come first"),
        Step(FixInputShapesPass(specs), "pin the graph inputs to the requested shapes"),
        Step(ResetShapesPass("symbolic"),
             "forget intermediate shapes and the symbolic dims of outputs: they name the old symbols"),
        Step(InferShapesPass(),
             "size every value from the pinned inputs, so the folder can see static Shape() results"),
        Step(FoldConstantsPass(),
             "fold Shape->Gather->Concat chains (e.g. Reshape targets built from the batch) into constants"),
        Step(ClearStaleValueInfoPass(), "folding replaced values; drop their shapes before the final inference"),
        Step(InferShapesPass(), "re-derive every shape from the static graph"),
        Step(RequireStaticShapesPass(), "static means static: fail naming every tensor that is still symbolic"),
        Step(CheckerPass(full_check=True), "the result must pass the full checker (strict shape inference)"),
    ]


def complete_specs(proto: onnx.ModelProto, given: Sequence[InputSpec]) -> tuple[InputSpec, ...]:
    """One spec per graph input: the given shape, or the model's own when it is already static."""
    by_name = {s.name: s for s in given}
    names = [vi.name for vi in graph_inputs(proto)]
    unknown = sorted(set(by_name) - set(names))
    if unknown:
        raise UsageError(f"--input names {unknown} are not inputs of the model (inputs: {', '.join(names)})")
    specs, missing = [], []
    for vi in graph_inputs(proto):
        d = dims(vi)
        elem = vi.type.tensor_type.elem_type
        dtype = onnx.helper.tensor_dtype_to_np_dtype(elem).name if elem else "float32"
        spec = by_name.get(vi.name)
        if spec is not None and spec.shape is not None:
            specs.append(InputSpec(vi.name, spec.shape, dtype))
        elif d is not None and all(isinstance(x, int) for x in d):
            specs.append(InputSpec(vi.name, tuple(int(x) for x in d), dtype))  # type: ignore[arg-type]
        else:
            missing.append(f"{vi.name}{d if d is not None else '[unknown shape]'}")
    if missing:
        raise UsageError("these inputs have symbolic dims and no --input NAME:SHAPE was given: " + ", ".join(missing))
    return tuple(specs)


def fix_proto(proto: onnx.ModelProto, specs: Sequence[InputSpec],
              progress: Progress | None = None) -> tuple[onnx.ModelProto, ModelContainer]:
    """Run the fix pipeline on a copy of ``proto``; the static proto and the container (history, warnings)."""
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    container = ModelContainer.from_proto(copy, source_framework="onnx", exporter="bridge shapes fix",
                                          inputs=tuple(specs))
    run_pipeline(container, fix_pipeline(specs), progress)
    fixed = container.to_proto()
    return fixed, container


@dataclass
class FixResult:
    """What ``fix_shapes`` did: the pinned signature, pass history, folds, validation."""

    model: str
    output: Path | None
    inputs: dict[str, list[int]]
    outputs: dict[str, list[Any]]
    symbolic_before: list[str]
    folded: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    passes: list[PassRecord] = field(default_factory=list)
    validation: list[Comparison] = field(default_factory=list)
    validation_skipped: str | None = None
    timings: dict[str, float] = field(default_factory=dict)
    written: bool = False
    proto: onnx.ModelProto | None = field(default=None, repr=False)

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.validation)

    def to_dict(self) -> dict[str, Any]:
        return {
            "command": "shapes fix", "model": self.model, "output": str(self.output) if self.output else None,
            "written": self.written, "inputs": self.inputs, "outputs": self.outputs,
            "symbolic_before": self.symbolic_before, "folded_ops": self.folded, "warnings": self.warnings,
            "passes": [asdict(p) for p in self.passes], "validation": [c.to_dict() for c in self.validation],
            "validation_skipped": self.validation_skipped, "passed": self.passed, "timings": self.timings,
        }


def fix_shapes(
    model: str | Path | onnx.ModelProto,
    output: str | Path | None,
    *,
    inputs: Sequence[str | InputSpec],
    validate: bool = True,
    tolerance: Tolerance = DEFAULT_TOLERANCE,
    seed: int = 0,
    progress: Progress | None = None,
    timeout: float | None = DEFAULT_TIMEOUT_S,
    isolated: bool = True,
) -> FixResult:
    """Make every dim of ``model`` concrete at ``inputs`` (``NAME:4,3,512,512``); write ``output`` if given.

    The result is validated against the original in onnxruntime at that shape (and on a second input of it)
    unless ``validate`` is False; on a mismatch nothing is written and ValidationMismatch (with ``.result``) is
    raised. Both models run in child processes (``isolated``), each step under ``timeout`` seconds (a spinning
    Loop is stopped).
    """
    say = progress or quiet
    if output is not None and not isinstance(model, onnx.ModelProto):
        refuse_overwriting_inputs(output, [model])  # a failed run must not destroy its own source
        check_writable(output, "-o")  # before the work, not after it
    proto, name = load(model)
    specs = complete_specs(proto, parse_specs(inputs))
    timings: dict[str, float] = {}
    start = time.perf_counter()
    fixed, container = fix_proto(proto, specs, say)
    timings["passes_s"] = time.perf_counter() - start
    before = Counter(n.op_type for n in proto.graph.node)
    after = Counter(n.op_type for n in fixed.graph.node)
    folded = {op: n - after.get(op, 0) for op, n in before.items() if n > after.get(op, 0)}
    result = FixResult(
        model=name, output=Path(output) if output is not None else None,
        inputs={s.name: list(s.shape or ()) for s in specs},
        outputs={o.name: dims(o) or [] for o in fixed.graph.output},
        symbolic_before=symbolic_dims(proto), folded=folded, warnings=list(container.warnings),
        passes=container.history, timings=timings, proto=fixed,
    )
    if validate:
        say("validating against the original in onnxruntime")
        start = time.perf_counter()
        result.validation = validate_same(proto, fixed, specs, tolerance, seed, timeout=timeout,
                                          isolation=Isolation(isolated, timeout))
        timings["validate_s"] = time.perf_counter() - start
    else:
        result.validation_skipped = "validation disabled"
    if not result.passed:
        failing = "; ".join(c.summary() for c in result.validation if not c.passed)
        raise ValidationMismatch(f"the fixed model does not match the original at {result.inputs} ({failing})"
                                 + (f"; {output} was not written" if output else ""), result=result)
    if output is not None:
        say(f"writing {output}")
        result.warnings += write_checked(fixed, Path(output), require_static=True)
        result.written = True
    return result


def validate_same(original: onnx.ModelProto, candidate: onnx.ModelProto, specs: Sequence[InputSpec],
                  tolerance: Tolerance, seed: int, *, timeout: float | None = DEFAULT_TIMEOUT_S,
                  isolation: Isolation | None = None, strict: bool = False) -> list[Comparison]:
    """The fixed model against the original, one ``Check``: both in onnxruntime (each in a child process under
    ``timeout`` and the memory limit, unless ``isolation`` says otherwise) on the same seeded inputs at ``specs``'
    shapes, and on a second input of those shapes."""
    from bridge.conversion.check import Check, RuntimeReference, model_candidates, run_check
    from bridge.validation.run import random_outputs

    isolation = isolation or Isolation(True, timeout)
    with tempfile.TemporaryDirectory(prefix="bridge-fix-") as workdir:
        reference = RuntimeReference(partial(OnnxRuntime, original.SerializeToString()), "original model (onnxruntime)",
                                     random_outputs(original))
        # the fixed model runs in the runtime the original runs in
        checked = run_check(Check(reference, model_candidates(candidate, [OnnxRuntime.name], Path(workdir), isolation),
                                  FeedSource(specs=specs, seed=seed, vary_dynamic=False, model=original), tolerance,
                                  model=candidate, strict=strict, isolation=isolation, second_size=False,
                                  workdir=Path(workdir)))
    return checked.comparisons
