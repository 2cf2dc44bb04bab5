"""``--dataset`` as a judge of the one validation run (``bridge.conversion.check.Judge``): after the elementwise
check, the source and every candidate stream the user's images (``bridge.validation.dataset``), and the accuracy
budget's verdict joins the check's (``CheckResult.dataset``).

``convert`` and ``validate`` build the judge from the dataset option group's values; nothing else runs the
dataset. The source runs in its own reference runner here (isolated as the check's is), one runtime at a time,
as the elementwise run does. Ctrl-C between batches raises ``DatasetCancelled`` carrying what was measured; the
caller writes its report from it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from bridge.conversion.check import Check, CheckResult, Judge, SourceReference, source_runtime
from bridge.errors import UsageError


@dataclass(frozen=True)
class DatasetJudge:
    """The dataset run of one check: ``settings`` (``bridge.validation.dataset.options.Settings``), the source
    framework's preprocessing defaults, and the export's sample shapes (a fixed batch wins over the settings')."""

    settings: Any
    framework: str
    defaults: Any = None
    sample_shapes: Mapping[str, Sequence[int]] | None = None

    def __call__(self, check: Check, result: CheckResult) -> None:
        from bridge.validation.dataset import validate_with_settings

        if not isinstance(check.reference, SourceReference) or check.model is None:
            raise UsageError("--dataset runs the source on the images: give --source (a saved --reference holds "
                             "only its own inputs)")
        # a runner of its own: the elementwise run's kept export child (if any) is done with by now
        reference = source_runtime(replace(check.reference, worker=None), check.isolation, result.warnings)
        result.dataset = validate_with_settings(
            self.settings, reference, check.candidates, check.model, check.detections, framework=self.framework,
            defaults=self.defaults, sample_shapes=self.sample_shapes, progress=check.progress)


def dataset_judges(values: Mapping[str, Any], adapter: Any,
                   sample_shapes: Mapping[str, Sequence[int]] | None = None) -> list[Judge]:
    """The judges the dataset options ask for (none without ``--dataset``); a bad option is a UsageError now."""
    from bridge.validation.dataset import dataset_settings

    settings = dataset_settings(values)
    if settings is None:
        return []
    return [DatasetJudge(settings, adapter.framework, getattr(adapter, "dataset_preprocessing", None),
                         sample_shapes)]
