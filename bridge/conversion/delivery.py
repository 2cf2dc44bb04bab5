"""``convert`` after the recipe's export: ONNX stage, the target's artefacts, validation of every file that
will be written, then writing them (only when validation passed) - each stage with its status.

The target names its artefacts and their paths (``Target.place``); each artefact is staged beside its
destination, validated in the runtimes that run it, and moved into place. The ``.onnx`` is validated in
the runtimes that run ONNX. ``ConvertResult.files`` says which file each verdict covers. A validation
that cannot run is never a plain success: the result says why (stage ``validation`` skipped, with its
cause); ``--strict`` or an explicit ``--validate`` make it a failure, and a written model that no
runtime can load (bridge's own output) is always one.
"""

from __future__ import annotations

import contextlib
import gc
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import onnx

from bridge.config import CONTRIB_DOMAIN, ConvertConfig, check_names
from bridge.conversion.check import Check, Isolation, SourceReference, model_candidates, run_check
from bridge.conversion.recipe import (
    SKIP_DISABLED,
    SKIP_SOURCE,
    SKIP_UNRUNNABLE,
    ConvertResult,
    Progress,
    StageStatus,
    container_of,
    detection_groups,
    export,
    failure_report,
    feed_source,
    new_stages,
    onnx_stage_steps,
    pick_adapter,
    staged,
    without_weights,
)
from bridge.errors import (
    AdapterUnavailableError,
    BridgeError,
    ReferenceUnavailableError,
    RuntimeLoadError,
    ValidationMismatch,
)
from bridge.inspection import graph_metas
from bridge.limits import memory_limit
from bridge.runtimes.isolated import KeptWorker
from bridge.validation.run import random_outputs, saved_detection_outputs


def convert(source: Any, output: str | Path, *, progress: Progress | None = None,
            options: dict[str, str] | None = None, **values: Any) -> ConvertResult:
    """``bridge.api.convert`` (see there): the option values as a ConvertConfig, run under ``max_memory``."""
    from bridge.conversion.options import build_config
    from bridge.conversion.preflight import check_outputs
    from bridge.validation.detection.layouts import as_detection_specs

    with memory_limit(values.get("max_memory")):
        cfg = build_config(source, output, values, raw_options=options)
        as_detection_specs(list(cfg.detections))  # a malformed --detections is a usage error before any export
        from bridge.validation.dataset import dataset_settings

        dataset_settings(cfg.values)  # so is a bad --dataset option (issue 33)
        from bridge.precision import check_precision

        check_precision(cfg.values)  # and a --precision the target cannot build (issue 34)
        check_outputs(cfg)  # a read-only --report folder fails now, not after the model was written
        return run_recipe(cfg, progress or (lambda _msg: None))


def run_recipe(cfg: ConvertConfig, progress: Progress) -> ConvertResult:
    """Convert as ``bridge convert`` does; the report is written on every outcome."""
    stages = new_stages()
    try:
        return deliver(cfg, stages, progress)
    except (BridgeError, KeyboardInterrupt) as exc:  # Ctrl-C too: the report says the stage it stopped in
        if cfg.report and not isinstance(exc, ValidationMismatch):  # a mismatch writes its own, fuller report
            failure_report(cfg, exc, stages)
        raise


def deliver(cfg: ConvertConfig, stages: dict[str, StageStatus], progress: Progress) -> ConvertResult:
    # the export child is kept to run the framework reference (the framework is imported once); stopped on the
    # way out whatever happens, and at once when validation does not run
    with KeptWorker() as worker:
        return _deliver(cfg, stages, progress, worker)


def _deliver(cfg: ConvertConfig, stages: dict[str, StageStatus], progress: Progress,
             worker: KeptWorker) -> ConvertResult:
    from bridge.targets import get_target

    with staged(stages, "adapter"):
        target = get_target(cfg.to, **cfg.target_options)
        adapter = pick_adapter(cfg)
    runtimes = cfg.validate if cfg.validate is not None else target.default_runtimes
    # kept only when the reference comes next: a target writing artefacts of its own (a SavedModel) would
    # convert beside an idle framework process
    exported = export(cfg, adapter, stages, progress, worker=worker if runtimes and not target.artefact else None)
    # imported after the export: while an export child runs, this process stays small (the tree's peak)
    from bridge.passes.pipeline import run_pipeline

    timings = {"export_s": stages["export"].seconds or 0.0}
    with staged(stages, "onnx_stage") as stage:
        container = container_of(adapter, exported, cfg)
        run_pipeline(container, onnx_stage_steps(cfg, exported), progress)
        container.check_inputs()  # the written model's inputs are the source's: anything else is an error naming it
        # the final model is written into the exporter's ModelProto around the weights it holds (a copy would
        # hold them twice); a weightless copy of the exporter's model stays for validation (metadata, inputs)
        weightless = without_weights(exported.model)
        proto = container.to_proto(reuse=exported.model if exported.model is not cfg.source.obj else None)
        exported.model = weightless
        if cfg.strip_provenance:
            from bridge.provenance import strip

            strip(proto)
        # a per-output tolerance for an output that does not exist would be silently unused: a typo
        check_names("--tolerance", cfg.tolerance.per_output,
                    [*exported.output_names, *(o.name for o in proto.graph.output)], "output")
        specs = detection_groups(proto, cfg.detections)
        warnings, history = container.warnings, container.history
        del container
        # the IR is a web of reference cycles (nodes <-> values): only the cycle collector frees it, and with it
        # any tensor proto it still points at (upb frees a model's memory only when nothing refers into it)
        gc.collect()
    timings["passes_s"] = stage.seconds or 0.0

    result = ConvertResult(
        source=cfg.source.describe(), framework=adapter.framework, output=cfg.output, exporter=exported.exporter,
        opset=exported.opset or cfg.export.opset, inputs=graph_metas(proto.graph.input, proto),
        outputs=graph_metas(proto.graph.output, proto), notes=list(exported.notes), warnings=warnings,
        passes=history, timings=timings, strict=cfg.strict, detections=[s.to_dict() for s in specs],
        export_inputs=exported.example_source, warning_details=list(exported.warning_details), stages=stages,
        validation_required=cfg.strict or cfg.validate_given, config=cfg,
    )
    with tempfile.TemporaryDirectory(prefix="bridge-") as workdir:
        staging: list[Path] = []
        try:
            artefacts = _stage_artefacts(cfg, target, proto, result, staging, progress)
            with staged(stages, "validation"):
                _validate(cfg, adapter, exported, proto, runtimes, artefacts, Path(workdir), result, progress,
                          worker, staging)
            worker.close()
            result.files = _files(cfg, target, artefacts, result)
            _write(cfg, target, proto, artefacts, result)
        finally:
            for path in staging:
                shutil.rmtree(path, ignore_errors=True)
    return result


def _stage_artefacts(cfg: ConvertConfig, target: Any, proto: onnx.ModelProto, result: ConvertResult,
                     staging: list[Path], progress: Progress) -> dict[str, Path]:
    """The target's artefacts, each staged beside its destination (same filesystem), by artefact name."""
    artefacts: dict[str, Path] = {}
    with staged(result.stages, "target") as stage:
        if not target.artefact:
            stage.status, stage.reason = "skipped", f"--to {target.name} writes only the .onnx"
            return artefacts
        progress(f"writing the {target.name} target")
        for name, destination in cfg.artefacts.items():
            destination.parent.mkdir(parents=True, exist_ok=True)
            folder = Path(tempfile.mkdtemp(prefix=f".{destination.name}.", dir=destination.parent))
            staging.append(folder)
            exported = target.export(proto, folder)
            if exported is not None:
                result.timings["target_s"] = exported.seconds
                result.target = exported.to_dict()
                result.notes.extend(exported.notes)
                result.warnings.extend(exported.warnings)
                artefacts[name] = exported.path
    return artefacts


def _skip(result: ConvertResult, reason: str, cause: str) -> None:
    stage = result.stages["validation"]
    stage.status, stage.reason, stage.cause = "skipped", reason, cause
    result.validation_skipped = reason
    if cause != SKIP_DISABLED:
        result.warnings.append(reason)
    if result.config is not None and result.config.values.get("dataset"):  # --dataset (issue 33)
        result.warnings.append(f"--dataset was not run: {reason}")
    if result.config is not None and result.config.values.get("precision") not in (None, "fp32"):  # issue 34
        result.warnings.append(f"--precision {result.config.values['precision']} was not built: {reason}")


def _validate(cfg: ConvertConfig, adapter: Any, export: Any, proto: onnx.ModelProto, runtimes: Sequence[str],
              artefacts: dict[str, Path], workdir: Path, result: ConvertResult, progress: Progress,
              worker: KeptWorker | None = None, staging: list[Path] | None = None) -> None:
    from bridge.targets import get_target

    leftover = Counter(n.op_type for n in proto.graph.node if n.domain == CONTRIB_DOMAIN)
    if not runtimes:
        return _skip(result, "validation disabled (--validate none)", SKIP_DISABLED)
    if leftover:
        if worker is not None:
            worker.close()
        ops = ", ".join(f"{op} x{n}" for op, n in sorted(leftover.items()))
        return _skip(result, f"the model still contains {CONTRIB_DOMAIN} ops ({ops}) that no standard runtime runs; "
                     "they need lowering before validation", SKIP_UNRUNNABLE)
    from bridge.conversion.dataset_check import dataset_judges
    from bridge.conversion.precision_check import precision_judges
    from bridge.validation.dataset.run import DatasetCancelled

    start = time.perf_counter()
    target = get_target(cfg.to, **cfg.target_options)
    # an artefact is validated in the runtimes that run it; every other runtime validates the .onnx itself
    by_runtime = {name: path for name in target.runtimes for path in artefacts.values()}
    isolation = Isolation(cfg.isolate, cfg.timeout)
    candidates = model_candidates(proto, runtimes, workdir, isolation, artefacts=by_runtime)
    shapes = {s.name: s.shape for s in export.inputs if s.shape}
    check = Check(SourceReference(adapter.framework, cfg.source, export, worker=worker), candidates,
                  feed_source(cfg, export, proto), cfg.tolerance, detections=saved_detection_outputs(proto),
                  model=proto, random_outputs=random_outputs(export.model), strict=cfg.strict,
                  pinning=cfg.values.get("pinning", True), isolation=isolation,
                  artefact_runtimes=by_runtime, workdir=workdir, progress=progress,
                  target=(cfg.to, dict(cfg.target_options)) if target.artefact else None,
                  judges=[*dataset_judges(cfg.values, adapter, shapes),  # --dataset, then --precision on its images
                          *precision_judges(cfg.values, adapter, to=cfg.to, target_options=cfg.target_options,
                                            output=cfg.output, artefact_paths=cfg.artefacts, artefacts=by_runtime,
                                            workdir=workdir, staging=staging if staging is not None else [],
                                            sample_shapes=shapes)])
    try:
        progress(f"validating in {', '.join(runtimes)} against the {adapter.framework} source")
        checked = run_check(check)
    except DatasetCancelled as exc:  # --dataset stopped by Ctrl-C: the report says where, with what was measured
        result.dataset = exc.result
        if cfg.report:
            from bridge.report import write_report

            write_report(result.to_dict(), cfg.report)
        raise
    except (AdapterUnavailableError, ReferenceUnavailableError) as exc:
        reason = str(exc)
        _skip(result, reason if reason.startswith("source reference") else f"source reference unavailable: {reason}",
              SKIP_SOURCE)
        _check_loads(candidates)  # with no reference, at least every runtime must load what bridge wrote
    else:
        result.warnings.extend(checked.warnings)
        result.validation = checked.comparisons
        result.validation_inputs = checked.input_shapes()
        result.validation_sizes = checked.sizes
        result.second_size_skipped = checked.second_size_skipped
        result.second_input_skipped = checked.second_input_skipped
        result.validation_feeds = checked.run.input_summary(check.feeds.describe())
        result.dataset = checked.dataset
        result.precision = checked.precision
    result.timings["validate_s"] = time.perf_counter() - start


def _check_loads(candidates: dict[str, Any]) -> None:
    """Load bridge's output in every candidate runtime; one that cannot is a conversion error (exit 3), never
    a skipped validation: the fault is bridge's own output, not the source's."""
    for name, make in candidates.items():
        runtime = make()
        try:
            runtime.activate()
        except AdapterUnavailableError:
            raise  # the runtime is missing here: nothing is known about the model
        except BridgeError as exc:
            raise RuntimeLoadError(f"the converted model cannot be loaded by {name} ({exc}); it was not written") from exc
        finally:
            with contextlib.suppress(Exception):  # a runtime that never activated has nothing to release
                runtime.deactivate()


def _files(cfg: ConvertConfig, target: Any, artefacts: dict[str, Path], result: ConvertResult) -> list[dict[str, Any]]:
    """Every file ``convert`` delivers and the runtimes whose verdicts cover it."""
    on_artefact = set(target.runtimes) if artefacts else set()
    files = [{"kind": "onnx", "path": str(cfg.output),
              "validated_by": [c.candidate for c in result.validation if c.candidate not in on_artefact]}]
    for name in artefacts:
        files.append({"kind": name, "path": str(cfg.artefacts[name]),
                      "validated_by": [c.candidate for c in result.validation if c.candidate in on_artefact]})
    for f in files:
        verdicts = [c for c in result.validation if c.candidate in f["validated_by"]]
        # --dataset's accuracy budget judges the same runtimes: a runtime outside it fails its file too (issue 33)
        budget = [] if result.dataset is None else [result.dataset.candidate_passed(n) for n in f["validated_by"]]
        f["verdict"] = ("not validated" if not verdicts else
                        "pass" if all(c.passed for c in verdicts) and False not in budget else "fail")
    return files


def _write(cfg: ConvertConfig, target: Any, proto: onnx.ModelProto, artefacts: dict[str, Path],
           result: ConvertResult) -> None:
    """The model (and the target's artefacts) only when validation passed; the report always."""
    with staged(result.stages, "write") as stage:
        if result.passed:
            from bridge.io import save_model

            save_model(proto, cfg.output, external_data=cfg.external_data)
            for name, staged_path in artefacts.items():
                placed = target.commit(staged_path, cfg.artefacts[name])
                if result.target is not None:
                    result.target["path"] = str(placed)
            if result.precision is not None and result.precision.final is not None:  # --precision (issue 34)
                from bridge.precision import variant_builder

                variant = result.precision
                builder = variant_builder(cfg.to, variant.precision, **cfg.target_options)
                assert variant.final.build is not None  # a variant that passed was built
                variant.destination = builder.commit(variant.final.build.path, variant.destination)
                variant.written = True
            result.written = True
        else:
            stage.status, stage.reason = "skipped", "validation did not pass"
    if cfg.report:
        from bridge.report import write_report

        write_report(result.to_dict(), cfg.report)
    if not result.passed:
        raise ValidationMismatch(_failure(cfg, result), result=result)


def _failure(cfg: ConvertConfig, result: ConvertResult) -> str:
    if result.unproved:
        why = "--strict" if cfg.strict else f"--validate {','.join(cfg.validate or ())}"
        return (f"validation could not run ({result.validation_skipped}) and {why} asks for it; "
                f"{cfg.output} was not written")
    failing = "; ".join(c.summary() for c in result.validation if not c.passed or c.vacuous)
    if result.precision is not None and not result.precision.passed:  # --precision's budget (issue 34)
        return (f"the --precision {result.precision.precision} variant fails: {result.precision.failure}; "
                f"nothing was written")
    if result.dataset is not None and not result.dataset.passed:  # --dataset's accuracy budget (issue 33)
        failing = "; ".join([*([failing] if failing else []), *result.dataset.failures])
        if all(c.passed for c in result.validation):
            return f"converted model fails the dataset's accuracy budget ({failing}); {cfg.output} was not written"
    if all(c.passed for c in result.validation) and not (cfg.strict and result.vacuous):
        # only the second size or the second input is missing, and --strict fails that
        failing = str(result.second_size_skipped or result.second_input_skipped)
    what = ("does not match the source" if not all(c.passed for c in result.validation)
            else "was only checked vacuously (--strict)" if result.vacuous
            else "was checked at one size of its dynamic axes only (--strict)" if result.second_size_skipped
            else "was checked on one input only (--strict)")
    return f"converted model {what} ({failing}); {cfg.output} was not written"
