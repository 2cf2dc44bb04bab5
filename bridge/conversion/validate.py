"""``bridge validate MODEL``: an existing ONNX model checked against its source (run now) or a saved reference.

The command says what it checks - the source (or the saved ``RunResults``), MODEL in each runtime, the inputs,
tolerance and detection groups - as a ``bridge.conversion.check.Check`` and runs it; ``bridge.api.validate``
only calls this. MODEL is the file under test, so nothing in it decides how it is judged: its input shapes
and names serve the source as they would any caller, but random outputs come from the reference side (the
source giving them differently on the same input, or what a saved reference recorded), and the detection
groups its metadata records are used only where its graph computes them through a selection
(``detection_groups(trusted=False)``).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bridge.config import InputSpec, InputValues, Option, Source, check_names
from bridge.conversion.check import (
    Check,
    Isolation,
    SavedReference,
    SourceReference,
    model_candidates,
    run_check,
)
from bridge.conversion.dataset_check import dataset_judges
from bridge.conversion.options import command_options, resolve, runtime_list, source_of, tolerance_of
from bridge.conversion.recipe import detection_groups, source_output_names
from bridge.errors import UsageError, ValidationMismatch
from bridge.io import check_writable, load_model
from bridge.validation.compare import Comparison
from bridge.validation.dataset.run import DatasetCancelled
from bridge.validation.inputs import check_reference_fits
from bridge.validation.results import RunResults
from bridge.validation.run import FeedSource

Progress = Callable[[str], None]


@dataclass
class ValidateResult:
    model: str
    reference: str
    comparisons: list[Comparison]
    inputs: dict[str, list[int]]
    saved_reference: str | None = None
    strict: bool = False
    sizes: list[dict[str, list[int]]] = field(default_factory=list)  # input shapes of every size checked
    warnings: list[str] = field(default_factory=list)
    # why a model with dynamic axes was checked at one size only (the source failed at the second size, or the
    # saved reference holds one): the verdict stands, proving nothing about those axes; --strict fails it
    second_size_skipped: str | None = None
    # why MODEL ran on one input only (the source failed on the second, or the saved reference holds none)
    second_input_skipped: str | None = None
    random_outputs: list[str] = field(default_factory=list)  # compared by shape only, as the reference side says
    dataset: Any = None  # --dataset: bridge.validation.dataset.DatasetResult (its budget is part of ``passed``)

    @property
    def passed(self) -> bool:
        return (all(c.passed for c in self.comparisons) and not (self.strict and self.vacuous)
                and not (self.strict and (self.second_size_skipped or self.second_input_skipped))
                and (self.dataset is None or self.dataset.passed))

    @property
    def vacuous(self) -> bool:
        return any(c.vacuous for c in self.comparisons)

    def to_dict(self) -> dict[str, Any]:
        return {"command": "validate", "model": self.model, "reference": self.reference, "passed": self.passed,
                "vacuous": self.vacuous, "strict": self.strict, "second_size_skipped": self.second_size_skipped,
                "second_input_skipped": self.second_input_skipped, "random_outputs": self.random_outputs,
                "inputs": self.inputs, "sizes": self.sizes, "warnings": self.warnings,
                "comparisons": [c.to_dict() for c in self.comparisons],
                "saved_reference": self.saved_reference,
                **({} if self.dataset is None else {"dataset": self.dataset.to_dict(),  # --dataset (issue 33)
                                                    "dataset_run": self.dataset.run_dict()})}


def _runtime_choices() -> list[str]:
    from bridge.runtimes import available_runtimes

    return available_runtimes()


# validate's own options; it subscribes to the groups COMMAND_GROUPS["validate"] names for the rest
OWN: tuple[Option, ...] = (
    Option("source", Any, None, "the source model to run as reference", cli_type=str | None, metavar="SOURCE"),
    Option("reference", Path | None, None, "saved RunResults .npz to compare against", metavar="FILE.npz"),
    Option("runtime", list[str] | None, None, "runtime(s) to run MODEL in, comma-separated (default: those the "
           "ONNX delivery validates in)", cli_type=str | None, choices=_runtime_choices, parse=runtime_list,
           metavar="RUNTIMES"),
    Option("save_reference", Path | None, None, "save the source run as RunResults (.npz + .json): every size "
           "checked, the second input and the random outputs", metavar="FILE.npz"),
)


def validate_options() -> list[Option]:
    """Every option ``validate`` takes: its own, then those of its groups."""
    return command_options("validate", OWN)


def as_source(source: Any, weights: str | Path | None, options: Mapping[str, str] | None = None) -> Source:
    """A ``Source`` from a path, a ``module:factory`` string or a live framework object."""
    if isinstance(source, Source):
        return source
    w = Path(weights) if weights else None
    if isinstance(source, (str, Path)):
        return Source(location=str(source), weights=w, options=dict(options or {}))
    return Source(obj=source, weights=w, options=dict(options or {}))


def validate(model: str | Path, *, progress: Progress | None = None, options: Mapping[str, str] | None = None,
             **values: Any) -> ValidateResult:
    """``bridge.api.validate`` (see there): MODEL in each runtime against the source or a saved reference.
    ``values``: ``validate_options()`` by name (``tolerance`` may also be a ``Tolerance``); ``options``: raw
    framework knobs for the source. Stopped by Ctrl-C, the ``report`` says so and the step it stopped in."""
    reached = ["starting"]

    def say(message: str) -> None:
        reached[0] = message
        if progress is not None:
            progress(message)

    try:
        return _validate(model, say, options, values)
    except KeyboardInterrupt:
        if values.get("report"):
            from bridge.errors import EXIT_INTERRUPTED
            from bridge.report import write_report

            write_report({"command": "validate", "model": str(model), "passed": False, "interrupted": reached[0],
                          "error": {"type": "KeyboardInterrupt", "message": f"interrupted (Ctrl-C) while {reached[0]}",
                                    "exit_code": EXIT_INTERRUPTED}}, Path(values["report"]))
        raise


def _validate(model: str | Path, say: Progress, options: Mapping[str, str] | None,
              values: Mapping[str, Any]) -> ValidateResult:
    declared = validate_options()
    v = resolve(values, where="validate", options=declared)
    source, reference = v["source"], v["reference"]
    if (source is None) == (reference is None):
        raise UsageError("validate needs exactly one of --source (run the source model) or --reference (saved results)")
    from bridge.validation.dataset import dataset_settings

    dataset_run = dataset_settings(v)  # a bad --dataset option is a usage error before any work (issue 33)
    if dataset_run is not None and source is None:
        raise UsageError("--dataset runs the source on the images: give --source (a saved --reference holds only "
                         "its own inputs)")
    runtimes = _runtimes(v["runtime"])
    tolerance = tolerance_of(v)
    for path, flag in ((v["report"], "--report"), (v["save_reference"], "--save-reference")):
        if path:  # before the work: a read-only folder fails now, not after the runs
            check_writable(Path(path), flag)
    say(f"loading {model}")
    proto = load_model(model)
    specs = [i if isinstance(i, InputSpec) else InputSpec.parse(i) for i in v["inputs"] or ()]
    warnings: list[str] = []
    groups = detection_groups(proto, v["detections"] or (), trusted=False, warnings=warnings)
    check_names("--tolerance", tolerance.per_output,
                [*(o.name for o in proto.graph.output), *source_output_names(proto, groups)], "output")
    values_kind = InputValues.parse(v["input_kind"], v["input_range"])
    if source is not None and not v["feeds"] and dataset_run is None:  # before the source loads: inputs need sizes
        _check_sample_sizes(proto, specs)
    isolation = Isolation(v["isolated"], v["timeout"])
    meta: dict[str, Any] | None = None
    with tempfile.TemporaryDirectory(prefix="bridge-") as workdir:
        candidates = model_candidates(proto, runtimes, Path(workdir), isolation)
        if reference is not None:
            saved = RunResults.load(Path(reference))
            check_reference_fits(saved, proto, Path(reference))
            if saved.ignored:
                warnings.append(f"--reference {reference}: members {saved.ignored[:5]} are not part of a RunResults "
                                "file and were not read")
            check = Check(SavedReference(saved, f"{saved.runtime} ({reference})"), candidates,
                          tolerance=tolerance, detections=groups, model=proto, strict=v["strict"], isolation=isolation,
                          progress=say)
            ref_name = str(reference)
        else:
            from adapters import detect_adapter, get_adapter
            from adapters.base import ExportResult
            from adapters.onnx import graph_input_specs

            src = source_of(source, v, declared, options)
            adapter = get_adapter(v["framework"]) if v["framework"] else detect_adapter(src)
            given = {s.name: s for s in specs}
            model_specs = tuple(given.get(s.name, s) for s in graph_input_specs(proto))
            # what the source's runner needs to know (inputs, output names), read from MODEL: it is not the
            # source's own export, so nothing random is declared from it (the source's runs say what is)
            export = ExportResult(model=proto, exporter="(existing model)", inputs=model_specs,
                                  output_names=source_output_names(proto, groups))
            feeds = v["feeds"]
            sample_shapes = {s.name: s.shape for s in specs if s.shape}
            if dataset_run is not None and feeds is None:  # --dataset: its first batch, not noise (issue 33)
                from bridge.validation.dataset.options import first_batch

                feeds = first_batch(dataset_run, proto, Path(workdir) / "dataset_feeds.npz",
                                    framework=adapter.framework,
                                    defaults=getattr(adapter, "dataset_preprocessing", None),
                                    sample_shapes=sample_shapes)
            feed_source = FeedSource(Path(feeds) if feeds else None, model_specs, v["seed"],
                                     vary_dynamic=False, model=proto, values=values_kind)
            check = Check(SourceReference(adapter.framework, src, export), candidates, feed_source, tolerance,
                          detections=groups, model=proto, strict=v["strict"], pinning=v["pinning"],
                          isolation=isolation, workdir=Path(workdir), progress=say,
                          judges=dataset_judges(v, adapter, sample_shapes))
            ref_name, meta = f"{adapter.framework} ({src.describe()})", {"source": src.describe(), "seed": v["seed"]}
        try:
            checked = run_check(check)
        except DatasetCancelled as exc:  # Ctrl-C in the dataset run: the report says where, with what was measured
            if v["report"]:
                from bridge.report import write_report

                write_report(ValidateResult(str(model), ref_name, [], {}, dataset=exc.result).to_dict(),
                             Path(v["report"]))
            raise
        if v["save_reference"] is not None and meta is not None:
            checked.reference_results(checked.reference, meta).save(Path(v["save_reference"]))
    saved_to = str(v["save_reference"]) if v["save_reference"] and meta is not None else None
    result = ValidateResult(str(model), ref_name, checked.comparisons, checked.input_shapes(), saved_to,
                            strict=v["strict"], sizes=checked.sizes, warnings=[*warnings, *checked.warnings],
                            second_size_skipped=checked.second_size_skipped,
                            second_input_skipped=checked.second_input_skipped,
                            random_outputs=list(checked.random_outputs), dataset=checked.dataset)
    if v["report"]:
        from bridge.report import write_report

        write_report(result.to_dict(), Path(v["report"]))
    if not result.passed:
        raise ValidationMismatch(checked.failure(), result=result)
    return result


def _check_sample_sizes(proto: Any, given: Sequence[InputSpec]) -> None:
    """UsageError when an input of MODEL has a symbolic dim and neither ``--input`` nor ``--feeds`` gives its size:
    the inputs made for the source and MODEL need one, and finding that out after loading the source took seconds.
    The message gives a line to copy: the model's own dims, a batch of 1, other symbolic dims by their names."""
    from bridge.runtimes.base import TensorMeta

    shaped = {s.name for s in given if s.shape is not None}
    inits = {i.name for i in proto.graph.initializer}
    lacking = []
    for vi in proto.graph.input:
        if vi.name in inits or vi.name in shaped:
            continue
        meta = TensorMeta.from_value_info(vi, unknown_dtype="float32")
        if meta.shape is not None and all(isinstance(d, int) for d in meta.shape):
            continue
        dims = ["D0,D1,..."] if meta.shape is None else [
            str(d) if isinstance(d, int) else ("1" if axis == 0 else str(d or f"D{axis}").upper())
            for axis, d in enumerate(meta.shape)]
        lacking.append((vi.name, ",".join(dims), meta.shape))
    if lacking:
        shown = "; ".join(f"input '{n}' is {list(s) if s is not None else 'of unknown shape'}" for n, _, s in lacking)
        raise UsageError(f"{shown}: give the size to validate at, e.g. "
                         + " ".join(f"--input {n}:{d}" for n, d, _ in lacking) + " (or --feeds FILE.npz)")


def _runtimes(runtime: str | Sequence[str] | None) -> list[str]:
    """The runtimes MODEL runs in: the given ones, or those the default delivery format validates in."""
    if runtime is None:
        from bridge.conversion.options import option
        from bridge.targets import get_target

        return list(get_target(option("to").default).default_runtimes)
    if not runtime:
        raise UsageError("--runtime: name at least one runtime to run MODEL in")
    return [runtime] if isinstance(runtime, str) else list(runtime)
