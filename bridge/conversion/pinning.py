"""``convert``'s upstream tie proof: a failed onnxruntime comparison re-judged with the source's values pinned at
the candidate's selection inputs (``bridge.validation.pinning``), wired to the source and the candidate runtimes.

The source's tensors come from its per-layer taps (``bridge.conversion.sources``: MXNet internals, an ONNX
source's own tensors, PyTorch module outputs, TensorFlow's frozen graph as tf2onnx converts it), fetched in a child process like the reference itself; the
candidate's runs (the model with extra outputs, the pinned model) go through the same ``candidate_runtime``
and isolation as its validation run, so the pinned verdict is the same runtime's. A runtime that runs the
delivering target's artefact (OpenVINO's IR, a .tflite) gets the same proof: each variant of the ONNX model is
made into that artefact by the same target with the same options (``artefact_runtime``), so a tie that
onnxruntime's proof explains is explained for every target alike. A comparison that passed costs nothing
here: the hook returns before any work.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from bridge.config import Source, Tolerance
from bridge.errors import BridgeError
from bridge.inspection import graph_metas
from bridge.provenance import tensor_aliases
from bridge.runtimes.base import activated
from bridge.runtimes.isolated import call_isolated, isolate
from bridge.validation.detection.layouts import DetectionSpec
from bridge.validation.pinning import explain_by_pinning, has_selection_ops
from bridge.validation.run import ComparisonRun, FeedSource

log = logging.getLogger(__name__)


def source_tap_names(framework: str, source: Source, export: Any,
                     aliases: Mapping[str, Mapping[str, Any]] | None = None,
                     trace_feeds: Mapping[str, np.ndarray] | None = None) -> set[str]:
    """The candidate tensor names the source can return (run in the reference's child process); ``trace_feeds``:
    the validation inputs (``bridge.conversion.sources.source_taps``)."""
    from adapters import reference_runner
    from bridge.conversion.sources import source_taps

    return source_taps(framework, source, export, reference_runner(framework, source, export), aliases,
                       trace_feeds).names()


def source_tap_values(framework: str, source: Source, export: Any, feeds: Sequence[Mapping[str, np.ndarray]],
                      names: Sequence[str], aliases: Mapping[str, Mapping[str, Any]] | None = None,
                      trace_feeds: Mapping[str, np.ndarray] | None = None) -> list[dict[str, np.ndarray]]:
    """The source's values of ``names`` on each of ``feeds``."""
    from adapters import reference_runner
    from bridge.conversion.sources import source_taps

    taps = source_taps(framework, source, export, reference_runner(framework, source, export), aliases, trace_feeds)
    return [taps.run(f, list(names)) for f in feeds]


class TapsPinSource:
    """``bridge.validation.pinning.PinSource`` over the source's taps, each call in a child process; ``aliases``:
    the candidate model's layout aliases (a tensor a pass moved a Transpose across is the source's, transposed);
    ``trace_feeds``: the validation inputs (a source traced again to name its tensors is traced on them)."""

    def __init__(self, framework: str, source: Source, export: Any, *, enabled: bool, timeout: float | None,
                 max_memory: int | None, aliases: Mapping[str, Mapping[str, Any]] | None = None,
                 trace_feeds: Mapping[str, np.ndarray] | None = None) -> None:
        self.framework, self.source, self.export = framework, source, export
        self.aliases = dict(aliases or {})
        self.trace_feeds = dict(trace_feeds) if trace_feeds is not None else None
        self.kw: dict[str, Any] = {"enabled": enabled, "timeout": timeout, "max_memory": max_memory}
        self._names: set[str] | None = None

    def names(self) -> set[str]:
        if self._names is None:
            self._names = call_isolated(partial(source_tap_names, self.framework, self.source, self.export,
                                                self.aliases, self.trace_feeds),
                                        stage=f"the {self.framework} source's tensors (pinning)", **self.kw)
        return self._names

    def values(self, feeds: Sequence[Mapping[str, np.ndarray]], names: Sequence[str]) -> list[dict[str, np.ndarray]]:
        return call_isolated(partial(source_tap_values, self.framework, self.source, self.export,
                                     [dict(f) for f in feeds], list(names), self.aliases, self.trace_feeds),
                             stage=f"the {self.framework} source's tensors (pinning)", **self.kw)


def onnx_runtimes(artefact_runtimes: Mapping[str, Any]) -> set[str]:
    """Runtimes validated on the ONNX model itself: those of a target whose artefact is the .onnx, unless the
    current target hands them an artefact of its own (``artefact_runtimes``)."""
    from bridge.targets import get_target, registered_targets

    return {r for t in registered_targets() for r in get_target(t).runtimes
            if not get_target(t).artefact and r not in artefact_runtimes}


def artefact_runtime(target: str, options: Mapping[str, Any], name: str, model: Any, workdir: Path) -> Any:
    """Runtime ``name`` on the artefact target ``target`` (with ``options``) makes of ``model`` in ``workdir``."""
    from bridge.targets import get_target

    return get_target(target, **options).runtime(name, model, workdir)


def without_input_outputs(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[str]]:
    """``model`` without the graph outputs that name one of its graph inputs, and those names: a run returns such an
    output as it was fed. A pinned variant asks for the value its selection reads, which can be a pin's source value,
    fed (``<pin>__bridge_source``). A target's converter need not keep an input that is also an output: OpenVINO's
    ONNX front end gives that output a Parameter of its own, which tensor names being unique it renames ``<name>_1``,
    an input no feed names."""
    inputs = {i.name for i in model.graph.input}
    through = [o.name for o in model.graph.output if o.name in inputs]
    if not through:
        return model, []
    kept = onnx.ModelProto()
    kept.CopyFrom(model)
    del kept.graph.output[:]
    kept.graph.output.extend(o for o in model.graph.output if o.name not in inputs)
    return kept, through


def candidate_runner(name: str, workdir: Path, *, enabled: bool, timeout: float | None, max_memory: int | None,
                     target: tuple[str, Mapping[str, Any]] | None = None,
                     ) -> Callable[[onnx.ModelProto, Mapping[str, np.ndarray]], dict[str, Any]]:
    """Runs a variant of the candidate model (extra outputs, pinned inputs) in runtime ``name``, isolated as
    its validation run was (the model travels as a file in ``workdir``); with ``target`` (name, options), on the
    artefact that target makes of the variant, as the delivered artefact was made."""
    from bridge.io import save_model
    from bridge.targets import candidate_runtime

    counter = itertools.count()

    def run(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> dict[str, Any]:
        k = next(counter)
        model, passed_through = without_input_outputs(model)
        handed: Any = model
        if enabled:
            handed = workdir / f"pinning-{name}-{k}.onnx"
            save_model(model, handed)
        make = partial(candidate_runtime, name, handed, workdir, {}) if target is None else \
            partial(artefact_runtime, target[0], dict(target[1]), name, handed, workdir / f"pinning-{name}-{k}")
        runtime = isolate(make, name=name, stage=f"the {name} candidate (pinning)", enabled=enabled, timeout=timeout,
                          max_memory=max_memory)
        try:
            with activated(runtime):
                return {**{n: feeds[n] for n in passed_through if n in feeds}, **runtime.infer(feeds)}
        finally:
            if isinstance(handed, Path):
                handed.unlink(missing_ok=True)
                Path(f"{handed}.data").unlink(missing_ok=True)

    return run


def pin_failures(run: ComparisonRun, *, framework: str, source: Source, export: Any, model: onnx.ModelProto,
                 workdir: Path, feeds: FeedSource, tolerance: Tolerance, detections: Sequence[DetectionSpec],
                 shape_only: Sequence[str], isolated: bool, timeout: float | None, max_memory: int | None,
                 artefact_runtimes: Mapping[str, Any] | None = None,
                 target: tuple[str, Mapping[str, Any]] | None = None,
                 progress: Callable[[str], None] = lambda _m: None, strict: bool = False,
                 enabled: bool = True) -> None:
    """Each failed comparison of ``run`` on a model with selection ops gets the upstream tie proof; a passing run
    returns at once. ``target``: the delivering target's name and options, whose artefact runtimes are proved on
    its artefacts. ``isolated``: the source and the candidate run in child processes (a live framework object stays
    here). ``strict`` (``--strict``): only rounding ties are excused (``bridge.validation.pinning.STRICT_TIE_ULPS``);
    ``enabled`` False (``--no-pinning``): nothing is tried, each failure says so and stands as measured."""
    failing = [c for c in run.comparisons if not c.passed]
    if not failing or not has_selection_ops(model):
        return
    if not enabled:
        for comp in failing:
            comp.pinning = {"explained": False, "text": "the upstream tie proof by pinning is off (--no-pinning): "
                            "the failure stands as measured"}
        return
    from bridge.targets import get_target

    direct = onnx_runtimes(artefact_runtimes or {})
    # no trace_feeds: pinning explains a near-tie with the source framework's own values, not an export's
    taps = TapsPinSource(framework, source, export, enabled=isolated and source.obj is None, timeout=timeout,
                         max_memory=max_memory)
    # the layout aliases the model records: claims of the model (which may be the file under test), measured
    # against the source before use (bridge.validation.pinning._verified_aliases)
    claimed = tensor_aliases({p.key: p.value for p in model.metadata_props})
    made = set(get_target(target[0], **target[1]).runtimes) if target is not None else set()
    for comp in failing:
        # each variant runs as the candidate was validated: the delivered target's artefact made of it, or (the
        # .onnx itself, or an artefact another target makes for that runtime) through candidate_runtime
        on_artefact = comp.candidate not in direct and comp.candidate in made
        sizes: list[tuple[Mapping[str, np.ndarray], Mapping[str, np.ndarray] | None]] = [
            (run.feeds, run.reference_outputs)]
        extra = list(run.extra_inputs)  # compared after the second size (bridge.validation.coverage)
        if len(comp.sizes) > 1 + len(extra):
            second = feeds.at_second_size(run.feeds, graph_metas(model.graph.input, model))
            if second:
                sizes.append((second, None))
        sizes.extend(extra)
        if comp.second_input and run.second_input is not None:  # a pass must cover the second input too
            sizes.append((run.second_input.inputs, run.second_input.outputs))
        progress(f"pinning: is {comp.candidate}'s failure a tie at a selection?")
        try:
            explain_by_pinning(comp, model, taps, candidate_runner(
                comp.candidate, workdir, enabled=isolated, timeout=timeout, max_memory=max_memory,
                target=target if on_artefact else None),
                sizes, tolerance, detections=detections, shape_only=shape_only, strict=strict, say=progress,
                claimed_aliases=claimed)
        except Exception as exc:  # extra evidence only: when it cannot be gathered the failure stands, said
            log.warning("pinning could not run for %s: %s", comp.candidate, exc, exc_info=not isinstance(exc, BridgeError))
            comp.pinning = {"explained": False, "text": f"pinning could not run ({type(exc).__name__}: {exc}); "
                            "the failure stands as measured"}
