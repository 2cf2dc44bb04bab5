"""``--precision`` as a judge of the one validation run (``bridge.conversion.check.Judge``): once the elementwise
check and the dataset judge (``bridge.conversion.dataset_check``) passed the fp32 model, the reduced-precision
variant is built from it and judged on the same images by the dataset judge's own run
(``bridge.validation.dataset.validate_with_settings``) under the reduced-precision budget, with the accuracy-aware
fallback (``bridge.precision.run.deliver_variant``). Its verdict joins the check's (``CheckResult.precision``);
there is no other path that validates a variant.

Only ``convert`` builds this judge (``precision_judges``); it runs after the dataset judge, whose result it needs.
The source runs in a reference runner of its own (as the dataset judge's does); the fp32 candidate is the check's
own candidate in the variant's runtime when the check had one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

from bridge.conversion.check import Check, CheckResult, Judge, SourceReference, source_runtime
from bridge.errors import UsageError


@dataclass(frozen=True)
class PrecisionJudge:
    """The variant of one convert: ``settings`` (``bridge.precision.options.PrecisionSettings``), the dataset run's
    ``dataset`` settings it is judged with, the target's ``builder`` (``bridge.precision.VariantBuilder``), the
    fp32 ONNX file it is built from (``fp32_onnx``, written from the check's model when missing), the target's
    staged artefacts by runtime, the variant's final ``destination`` and a ``staging`` folder beside it."""

    settings: Any
    dataset: Any
    builder: Any
    fp32_onnx: Path
    artefacts: Mapping[str, Path]
    destination: Path
    staging: Path
    workdir: Path
    framework: str
    defaults: Any = None
    sample_shapes: Mapping[str, Sequence[int]] | None = None

    def __call__(self, check: Check, result: CheckResult) -> None:
        from bridge.precision.run import deliver_variant
        from bridge.runtimes.isolated import isolate
        from bridge.targets import candidate_runtime

        wanted = self.settings.precision
        if result.dataset is None or not result.passed:
            result.warnings.append(f"--precision {wanted} was not built: the fp32 model "
                                   + ("was not validated on --dataset" if result.dataset is None
                                      else "did not pass validation"))
            return
        if not isinstance(check.reference, SourceReference) or check.model is None:
            raise UsageError("--precision judges the variant against the source on the images: give --source")
        if not self.fp32_onnx.exists():
            from bridge.io import save_model

            save_model(check.model, self.fp32_onnx)
        runtime = self.builder.runtime
        isolation = check.isolation

        def load(model: Path, found: Mapping[str, Path], stage: str) -> Any:
            return isolate(partial(candidate_runtime, runtime, model, self.workdir, dict(found)), name=runtime,
                           stage=stage, enabled=isolation.enabled, timeout=isolation.timeout,
                           max_memory=isolation.limit())

        fp32_candidate = check.candidates.get(runtime) or partial(load, self.fp32_onnx, self.artefacts,
                                                                  f"the fp32 {runtime} candidate")
        reference = source_runtime(replace(check.reference, worker=None), isolation, result.warnings)
        result.precision = deliver_variant(
            self.settings, self.dataset, self.builder, fp32_onnx=self.fp32_onnx,
            fp32_artefact=self.artefacts.get(runtime, self.fp32_onnx), reference=reference,
            fp32_candidate=fp32_candidate,
            load_variant=lambda path: partial(load, path, {runtime: path}, f"the {wanted} {runtime} candidate"),
            model=check.model, detections=check.detections, destination=self.destination, staging=self.staging,
            workdir=self.workdir / "precision", framework=self.framework, preprocessing_defaults=self.defaults,
            sample_shapes=self.sample_shapes, progress=check.progress)


def precision_judges(values: Mapping[str, Any], adapter: Any, *, to: str, target_options: Mapping[str, Any],
                     output: Path, artefact_paths: Mapping[str, Path], artefacts: Mapping[str, Path],
                     workdir: Path, staging: list[Path],
                     sample_shapes: Mapping[str, Sequence[int]] | None = None) -> list[Judge]:
    """The judge ``--precision`` asks for (none for fp32 or without ``--dataset``, which ``check_precision``
    already refused). ``artefact_paths``: the artefacts' destinations by name; ``artefacts``: the staged
    artefacts by runtime. The variant's staging folder is added to ``staging`` (the caller removes it)."""
    import tempfile

    from bridge.precision import check_precision, variant_builder
    from bridge.validation.dataset import dataset_settings

    settings = check_precision(values)
    dataset = dataset_settings(values)
    if settings is None or dataset is None:
        return []
    builder = variant_builder(to, settings.precision, **target_options)
    destination = builder.destination(output, artefact_paths, settings.precision)
    destination.parent.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=f".{destination.name}.", dir=destination.parent))
    staging.append(folder)
    return [PrecisionJudge(settings, dataset, builder, workdir / "candidate.onnx", dict(artefacts), destination,
                           folder, workdir, adapter.framework, getattr(adapter, "dataset_preprocessing", None),
                           sample_shapes)]


__all__ = ["PrecisionJudge", "precision_judges"]
