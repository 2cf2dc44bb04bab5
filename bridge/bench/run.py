"""``bridge bench``: how fast a converted ONNX model runs in each runtime, against its source framework.

Every runner - the source framework (through its adapter's reference runner) and each candidate runtime
(looked up in the runtime registry, built by ``bridge.targets.candidate_runtime`` as validation builds
it) - lives in its own child process (``bridge.runtimes.isolated``), so one runtime's threads, memory
and crashes never touch another's, and each child's peak memory is its runtime's. For each batch size the
same inputs go to every runner once (``bridge.bench.child.stage``: the first run is timed), then warm-up
calls, then interleaved rounds (``bridge.bench.timing.run_rounds``: only one runner works at a time, the
order rotates per round), each call timed in its child. The headline is each runtime's median latency
against the source's (``BenchResult.ratio``: > 1 means the runtime is faster).
"""

from __future__ import annotations

import contextlib
import logging
import math
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from bridge.bench import child
from bridge.bench.timing import Latency, machine, ratio, run_rounds, split
from bridge.config import InputSpec, InputValues, Source
from bridge.errors import AdapterUnavailableError, BridgeError, UsageError
from bridge.runtimes.base import Runtime, TensorMeta
from bridge.runtimes.isolated import DEFAULT_TIMEOUT_S, IsolatedRuntime, isolate

log = logging.getLogger(__name__)
Progress = Callable[[str], None]

DEFAULT_ITERATIONS = 50
DEFAULT_WARMUP = 3
DEFAULT_ROUNDS = 10
MAX_SECONDS = 86_400  # --time: a day per runner and batch size; past it a typo (1e308), not a benchmark


class BenchFailedError(BridgeError):
    """No runtime ran the model (each failed to load or to run it): a benchmark with no figure is a failure
    (exit code 3), not a table of dashes. ``result`` holds what was measured (the source's figures, errors)."""

    def __init__(self, message: str, result: BenchResult | None = None) -> None:
        super().__init__(message)
        self.result = result


@dataclass(frozen=True)
class BenchSettings:
    """How the figures were taken (recorded in every report)."""

    batches: tuple[int, ...]
    iterations: int | None = DEFAULT_ITERATIONS  # timed calls per runner and batch size, or
    seconds: float | None = None  # timed seconds per runner and batch size
    warmup: int = DEFAULT_WARMUP
    rounds: int = DEFAULT_ROUNDS
    threads: int | None = None
    isolated: bool = True
    feeds: str = ""  # where the inputs came from

    def __post_init__(self) -> None:
        """Refuse settings that would never finish or measure nothing, before any runner starts."""
        if self.iterations is not None and self.iterations < 1:
            raise UsageError(f"--iterations {self.iterations}: at least 1 timed call")
        if self.seconds is not None and not (math.isfinite(self.seconds) and self.seconds > 0):
            raise UsageError(f"--time {self.seconds}: must be a positive number of seconds")
        if self.seconds is not None and self.seconds > MAX_SECONDS:
            raise UsageError(f"--time {self.seconds:g}: at most {MAX_SECONDS} s per runner and batch size")
        if self.warmup < 0:
            raise UsageError(f"--warmup {self.warmup}: cannot be negative")
        if self.rounds < 1:
            raise UsageError(f"--rounds {self.rounds}: at least 1 round")
        if self.threads is not None and self.threads < 1:
            raise UsageError(f"--threads {self.threads}: at least 1 thread")
        if any(b < 1 for b in self.batches):
            raise UsageError(f"--batch {','.join(map(str, self.batches))}: batch sizes must be positive")

    def to_dict(self) -> dict[str, Any]:
        return {"batches": list(self.batches), "iterations": self.iterations, "seconds": self.seconds,
                "warmup": self.warmup, "rounds": self.rounds, "threads": self.threads, "isolated": self.isolated,
                "inputs": self.feeds}


@dataclass
class Runner:
    """One runner: the source framework or a candidate runtime; ``error`` when it could not run at all."""

    name: str
    kind: str  # "source" | "runtime"
    load_s: float | None = None  # process start, framework import, model load / compile
    peak_rss: int | None = None  # bytes, of its own child process (None when run in-process)
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "load_s": self.load_s, "peak_rss_bytes": self.peak_rss,
                "error": self.error}


@dataclass
class Cell:
    """One runner at one batch size."""

    runner: str
    batch: int
    latency: Latency | None = None
    first_run_s: float | None = None
    peak_rss: int | None = None  # the runner's peak memory once this batch size had run
    rounds: list[int] = field(default_factory=list)  # calls per round
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"runner": self.runner, "batch": self.batch, "first_run_s": self.first_run_s,
                             "peak_rss_bytes": self.peak_rss, "calls_per_round": self.rounds, "error": self.error}
        if self.latency is not None:
            d["latency"] = self.latency.to_dict()
            d["throughput_per_s"] = self.latency.throughput(self.batch)
            d["samples_ms"] = [s * 1e3 for s in self.latency.samples]
        return d


@dataclass
class BenchResult:
    """Per runner and batch size: latency, throughput, first run, peak memory; ratios against the source."""

    model: str
    source: str | None
    settings: BenchSettings
    runners: list[Runner]
    cells: list[Cell]
    machine: dict[str, Any]
    inputs: dict[int, dict[str, list[int]]] = field(default_factory=dict)  # batch -> input shapes
    notes: list[str] = field(default_factory=list)
    variants: dict[str, dict[str, str]] = field(default_factory=dict)  # label -> {runtime, model}: other files timed
    verification: dict[str, Any] | None = None  # ``--verify``: the check's verdict before anything was timed

    def relative(self, runner: str, base: str, batch: int) -> float | None:
        """``base``'s median latency / ``runner``'s at ``batch`` (> 1: ``runner`` is faster); None without both."""
        mine, theirs = self.cell(runner, batch), self.cell(base, batch)
        if mine is None or theirs is None or mine.latency is None or theirs.latency is None:
            return None
        return ratio(theirs.latency.p50, mine.latency.p50)

    @property
    def source_runner(self) -> str | None:
        return next((r.name for r in self.runners if r.kind == "source"), None)

    def cell(self, runner: str, batch: int) -> Cell | None:
        return next((c for c in self.cells if c.runner == runner and c.batch == batch), None)

    @property
    def measured(self) -> bool:
        """Whether any runtime running the model produced a figure (the source alone measures nothing of it)."""
        kinds = {r.name: r.kind for r in self.runners}
        return any(c.latency is not None and kinds.get(c.runner) == "runtime" for c in self.cells)

    def failure(self) -> str:
        """Why nothing was measured: each runner's (or runner and batch size's) error."""
        errors = [f"{r.name}: {r.error}" for r in self.runners if r.error]
        errors += [f"{c.runner} at batch {c.batch}: {c.error}" for c in self.cells if c.error]
        return "; ".join(errors) or "no runtime ran the model"

    def ratio(self, runner: str, batch: int) -> float | None:
        """Source median latency / ``runner``'s at ``batch`` (> 1: the runtime is faster); None without both."""
        src = self.source_runner
        mine, theirs = self.cell(runner, batch), self.cell(src, batch) if src else None
        if mine is None or theirs is None or mine.latency is None or theirs.latency is None or runner == src:
            return None
        return ratio(theirs.latency.p50, mine.latency.p50)

    def to_dict(self) -> dict[str, Any]:
        ratios = {f"{c.runner}@{c.batch}": self.ratio(c.runner, c.batch) for c in self.cells
                  if self.ratio(c.runner, c.batch) is not None}
        # a variant (another file in the same runtime, e.g. an int8 model) against the runtime on the model itself
        vs_base = {f"{c.runner}@{c.batch}": self.relative(c.runner, v["runtime"], c.batch) for c in self.cells
                   for v in [self.variants.get(c.runner)] if v is not None
                   and self.relative(c.runner, v["runtime"], c.batch) is not None}
        return {"kind": "bench", "model": self.model, "source": self.source, "reference": self.source_runner,
                "settings": self.settings.to_dict(), "machine": self.machine,
                "runners": [r.to_dict() for r in self.runners], "results": [c.to_dict() for c in self.cells],
                "ratios_vs_source": ratios, "inputs": {str(b): s for b, s in self.inputs.items()},
                "notes": self.notes, "variants": self.variants, "ratios_vs_base": vs_base,
                "verification": self.verification}


def model_inputs(proto: onnx.ModelProto) -> list[TensorMeta]:
    inits = {i.name for i in proto.graph.initializer}
    return [TensorMeta.from_value_info(vi) for vi in proto.graph.input if vi.name not in inits]


def default_batch(metas: Sequence[TensorMeta], specs: Sequence[InputSpec] = (), feeds: Path | None = None) -> int:
    """The model's own batch size: a fixed axis 0, else the one ``--input`` gives, else the ``--feeds`` rows, else 1."""
    given = {s.name: s for s in specs}
    for meta in metas:
        if meta.shape and isinstance(meta.shape[0], int):
            return meta.shape[0]
    for meta in metas:
        spec = given.get(meta.name)
        if spec is not None and spec.shape:
            return spec.shape[0]
    if feeds is not None:
        from bridge.validation.inputs import load_feeds

        arrays = [a for a in load_feeds(feeds, metas).values() if a.ndim]
        if arrays:
            return int(arrays[0].shape[0])
    return 1


def shapes_at(metas: Sequence[TensorMeta], batch: int, specs: Sequence[InputSpec] = (),
              file_shapes: Mapping[str, tuple[int, ...]] | None = None) -> dict[str, tuple[int, ...]]:
    """Each input's shape at ``batch``: axis 0 when symbolic becomes ``batch``; other symbolic dims come from
    ``--input`` or the ``--feeds`` arrays. A fixed axis 0 of another size is refused, naming the input."""
    given = {s.name: s for s in specs}
    shapes: dict[str, tuple[int, ...]] = {}
    for meta in metas:
        spec = given.get(meta.name)
        if meta.shape is None:
            known = (file_shapes or {}).get(meta.name) or (spec.shape if spec else None)
            if known is None:
                raise UsageError(f"input '{meta.name}' has no known shape; give one with --input {meta.name}:SHAPE")
            meta = TensorMeta(meta.name, tuple(known), meta.dtype)
        dims: list[int] = []
        for axis, dim in enumerate(meta.shape or ()):
            if axis == 0:
                if isinstance(dim, int) and dim != batch:
                    raise UsageError(f"--batch {batch}: input '{meta.name}' has a fixed batch of {dim}; benchmark "
                                     f"other batch sizes on a model with a dynamic batch axis (bridge convert ... "
                                     f"--dynamic {meta.name}:0=batch)")
                dims.append(batch)
            elif isinstance(dim, int):
                dims.append(dim)
            elif spec is not None and spec.shape is not None and axis < len(spec.shape):
                dims.append(spec.shape[axis])
            elif file_shapes and meta.name in file_shapes and axis < len(file_shapes[meta.name]):
                dims.append(file_shapes[meta.name][axis])
            else:
                raise UsageError(f"input '{meta.name}' axis {axis} is symbolic ('{dim}'); give its size with "
                                 f"--input {meta.name}:SHAPE")
        shapes[meta.name] = tuple(dims)
    return shapes


def batch_of(array: np.ndarray, batch: int) -> np.ndarray:
    """``array`` with ``batch`` rows along axis 0: its first rows, or its rows repeated."""
    if array.ndim == 0 or array.shape[0] == batch:
        return array
    if array.shape[0] == 0:
        raise UsageError(f"--feeds: an array with no rows cannot make a batch of {batch}")
    reps = -(-batch // array.shape[0])
    return np.concatenate([array] * reps, axis=0)[:batch]


def make_feeds(proto: onnx.ModelProto, metas: Sequence[TensorMeta], batch: int, *, feeds: Path | None,
               specs: Sequence[InputSpec], seed: int, values: InputValues | None = None) -> dict[str, np.ndarray]:
    """The inputs every runner gets at ``batch``: ``--feeds`` rows (taken or repeated), or generated data
    (``values``: ``--input-kind`` / ``--input-range``)."""
    from bridge.validation.inputs import load_feeds, make_inputs

    if feeds is not None:
        loaded = load_feeds(feeds, metas)
        file_shapes = {k: tuple(v.shape) for k, v in loaded.items()}
        shapes = shapes_at(metas, batch, specs, file_shapes)
        return {m.name: batch_of(loaded[m.name], batch) if shapes[m.name][:1] == (batch,) else loaded[m.name]
                for m in metas}
    shapes = shapes_at(metas, batch, specs)
    return make_inputs(metas, specs, seed=seed, shapes=shapes, model=proto, values=values)


def _source_output_names(proto: onnx.ModelProto) -> tuple[str, ...]:
    """The outputs as the source names them (a lowered detection group stands for its source output)."""
    from bridge.validation.run import saved_detection_outputs

    group: dict[str, str] = {}
    for spec in saved_detection_outputs(proto):
        refs = spec.reference_names()
        if len(refs) == 1:
            group.update({name: refs[0] for name in spec.candidate_names()})
    return tuple(dict.fromkeys(group.get(o.name, o.name) for o in proto.graph.output))


def source_factory(source: Source, proto: onnx.ModelProto, framework: str | None) -> tuple[str, Callable[[], Runtime]]:
    """The framework name and a picklable factory of the source's reference runner."""
    from adapters import detect_adapter, get_adapter, reference_runner
    from adapters.base import ExportResult
    from adapters.onnx import graph_input_specs

    adapter = get_adapter(framework) if framework else detect_adapter(source)
    export = ExportResult(model=proto, exporter="(existing model)", inputs=tuple(graph_input_specs(proto)),
                          output_names=_source_output_names(proto))
    return adapter.framework, partial(reference_runner, adapter.framework, source, export)


def check_runtimes(names: Sequence[str]) -> None:
    from bridge.runtimes import available_runtimes

    unknown = [n for n in names if n not in available_runtimes()]
    if unknown:
        raise UsageError(f"--runtime {','.join(unknown)}: unknown runtime; choose from {', '.join(available_runtimes())}")


def _call(runtime: Runtime, fn: Callable[[Runtime, Any], Any], argument: Any = None) -> Any:
    if isinstance(runtime, IsolatedRuntime):
        return runtime.call(fn, argument)
    return fn(runtime, argument)


def _not_installed(exc: BaseException) -> bool:
    return isinstance(exc, AdapterUnavailableError)


def run_bench(
    model: Path,
    *,
    source: Source | None = None,
    framework: str | None = None,
    runtimes: Sequence[str] | None = None,
    settings: BenchSettings | None = None,
    feeds: Path | None = None,
    inputs: Sequence[InputSpec] = (),
    seed: int = 0,
    values: InputValues | None = None,
    timeout: float | None = DEFAULT_TIMEOUT_S,
    max_memory: int | None = None,
    progress: Progress | None = None,
    variants: Mapping[str, tuple[str, Path]] | None = None,
) -> BenchResult:
    """Benchmark ``model`` in ``runtimes`` (default: every registered runtime that is installed here) and
    the ``source`` framework on the same inputs. Naming a runtime that is not installed is a UsageError.

    ``variants``: label -> (runtime, file), other files of the same model (an int8 .onnx, an IR, a .tflite)
    timed in that runtime in the same interleaved rounds, on the same inputs; each is compared with the
    runtime running ``model`` itself (``BenchResult.relative``, ``ratios_vs_base`` in the report)."""
    from bridge.io import load_model
    from bridge.targets import candidate_runtime

    say = progress or (lambda _msg: None)
    proto = load_model(model)
    metas = model_inputs(proto)
    base = settings or BenchSettings(batches=())
    batches = base.batches or (default_batch(metas, inputs, feeds),)
    if any(b < 1 for b in batches):
        raise UsageError(f"--batch {','.join(map(str, batches))}: batch sizes must be positive")
    from bridge.runtimes import available_runtimes

    explicit = runtimes is not None
    names = list(runtimes) if runtimes is not None else available_runtimes()
    check_runtimes(names)
    feed_note = f"--feeds {feeds}" if feeds else f"generated (seed {seed})"
    settings = BenchSettings(batches=tuple(batches), iterations=None if base.seconds else base.iterations,
                             seconds=base.seconds, warmup=base.warmup, rounds=base.rounds, threads=base.threads,
                             isolated=base.isolated, feeds=feed_note)
    # the inputs are checked (shapes, --feeds) before any child starts
    all_feeds = {b: make_feeds(proto, metas, b, feeds=feeds, specs=inputs, seed=seed, values=values) for b in batches}
    result = BenchResult(str(model), source.describe() if source else None, settings, [], [], machine(),
                         inputs={b: {k: list(v.shape) for k, v in f.items()} for b, f in all_feeds.items()})
    factories: dict[str, tuple[str, Callable[[], Runtime]]] = {}
    with tempfile.TemporaryDirectory(prefix="bridge-bench-") as tmp:
        if source is not None:
            fw, factory = source_factory(source, proto, framework)
            # a TensorFlow source benchmarked in the tensorflow runtime too: two runners, two names
            factories[f"{fw} (source)" if fw in names else fw] = ("source", factory)
        for name in names:
            factories[name] = ("runtime", partial(candidate_runtime, name, Path(model), Path(tmp) / name))
        for label, (runtime_name, path) in (variants or {}).items():
            check_runtimes([runtime_name])
            if not Path(path).exists():
                raise UsageError(f"--variant {runtime_name}={path}: no such file")
            result.variants[label] = {"runtime": runtime_name, "model": str(path)}
            factories[label] = ("runtime", partial(candidate_runtime, runtime_name, Path(path), Path(tmp) / label,
                                                   {runtime_name: Path(path)}))
        live: dict[str, Runtime] = {}
        try:
            for name, (kind, factory) in factories.items():
                runner = Runner(name, kind)
                say(f"loading {name}")
                start = time.perf_counter()
                rt: Runtime | None = None
                try:  # in-process (isolation off) the runtime is built by isolate() itself
                    rt = isolate(partial(child.limited, settings.threads, name, factory), name=name,
                                 stage=f"the {name} {'reference' if kind == 'source' else 'runtime'}",
                                 enabled=settings.isolated and (source is None or source.obj is None or kind != "source"),
                                 timeout=timeout, max_memory=max_memory)
                    rt.activate()
                except BridgeError as exc:
                    if rt is not None:
                        with contextlib.suppress(Exception):
                            rt.deactivate()
                    if _not_installed(exc) and (explicit or kind == "source"):
                        raise UsageError(f"cannot benchmark in {name}: {exc}") from exc
                    runner.error = f"not installed: {exc}" if _not_installed(exc) else str(exc)
                    if _not_installed(exc):
                        result.notes.append(f"{name} left out: {exc}")
                    result.runners.append(runner)
                    continue
                runner.load_s = time.perf_counter() - start
                live[name] = rt
                result.runners.append(runner)
            for batch in batches:
                _bench_batch(live, batch, all_feeds[batch], settings, result, say)
            for name, rt in live.items():
                if isinstance(rt, IsolatedRuntime):
                    runner = next(r for r in result.runners if r.name == name)
                    with contextlib.suppress(BridgeError):
                        runner.peak_rss = _call(rt, child.peak_memory)
        finally:
            for rt in live.values():
                with contextlib.suppress(Exception):
                    _call(rt, child.release)
                rt.deactivate()
    result.machine["load_avg_end"] = machine()["load_avg"]
    if not any(isinstance(rt, IsolatedRuntime) for rt in live.values()) and live:
        result.notes.append("runners ran in-process: peak memory per runner is not measured")
    return result


def _bench_batch(live: dict[str, Runtime], batch: int, feeds: dict[str, np.ndarray], settings: BenchSettings,
                 result: BenchResult, say: Progress) -> None:
    """One batch size: stage + first run, warm-up, interleaved timed rounds, peak memory; per runner."""
    ready: dict[str, Cell] = {}
    for name, rt in live.items():
        cell = Cell(name, batch)
        result.cells.append(cell)
        say(f"batch {batch}: first run in {name}")
        try:
            staged = _call(rt, child.stage, (batch, feeds))
            cell.first_run_s = staged["first_run_s"]
            if settings.warmup:
                _call(rt, child.warm, (batch, settings.warmup))
        except BridgeError as exc:
            cell.error = str(exc)
            log.warning("%s at batch %d: %s", name, batch, exc)
            continue
        ready[name] = cell
    if not ready:
        return
    # --iterations N: N calls spread over the rounds; --time S: each round gets S / rounds seconds per runner
    sizes = [0] * settings.rounds if settings.seconds else split(settings.iterations or 1, settings.rounds)
    slice_s = settings.seconds / len(sizes) if settings.seconds else None
    failed: dict[str, str] = {}

    def way(name: str) -> Callable[[int], list[float]]:
        def run(n: int) -> list[float]:
            if name in failed:
                return []
            try:
                samples: list[float] = _call(live[name], child.timed, (batch, n or None, slice_s))
            except BridgeError as exc:
                failed[name] = str(exc)
                return []
            return samples
        return run

    def shown(r: int, name: str, samples: Sequence[float]) -> None:
        if samples:
            say(f"batch {batch}, round {r + 1}/{len(sizes)}: {name} {sorted(samples)[len(samples) // 2] * 1e3:.2f} ms")

    per_round = run_rounds({name: way(name) for name in ready}, sizes, on_round=shown)
    for name, cell in ready.items():
        if name in failed:
            cell.error = failed[name]
            continue
        samples = [s for r in per_round[name] for s in r]
        cell.latency = Latency(tuple(samples))
        cell.rounds = [len(r) for r in per_round[name]]
        if isinstance(live[name], IsolatedRuntime):
            with contextlib.suppress(BridgeError):
                cell.peak_rss = _call(live[name], child.peak_memory)
