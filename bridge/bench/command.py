"""``bridge bench MODEL``: its options (its own, then the groups it subscribes to) and the command itself.

With ``--verify`` the model is first checked as ``bridge validate`` checks it (one
``bridge.conversion.check.Check``: against ``--source`` run now, or a saved ``--reference``, in the runtimes to
be timed, with the same inputs, tolerance and detection groups): timing a model that computes something else is
worthless, so a failing check raises ``ValidationMismatch`` (exit 1) and nothing is timed. The check's verdict
is recorded in the result (``BenchResult.verification``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from bridge.config import InputSpec, InputValues, Option
from bridge.conversion.options import command_options, resolve, runtime_list, source_of
from bridge.errors import UsageError

Progress = Callable[[str], None]


def _ints(text: Any) -> Any:
    if not isinstance(text, str):
        return text
    try:
        return [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise UsageError(f"--batch {text}: expected comma-separated integers, e.g. 1,4,8") from None


# bench's own options; it subscribes to the groups COMMAND_GROUPS["bench"] names for the rest
OWN: tuple[Option, ...] = (
    Option("source", Any, None, "the source model, run on the same inputs as the reference (and checked against "
           "with --verify)", cli_type=str | None, metavar="SOURCE"),
    Option("reference", Path | None, None, "with --verify: a saved RunResults .npz to check MODEL against "
           "(instead of --source)", metavar="FILE.npz"),
    Option("verify", bool, False, "before timing, check MODEL against --source or --reference as bridge validate "
           "does (in the runtimes timed); a failing check exits 1 and nothing is timed"),
    # names checked by run_bench (an unknown one, and one that is not installed here, each said as such)
    Option("runtime", list[str] | None, None, "runtimes, comma-separated (default: every installed one)",
           cli_type=str | None, parse=runtime_list, metavar="RUNTIMES"),
    Option("batch", list[int], [], "batch sizes, comma-separated, e.g. 1,4,8 (sizes other than the model's need a "
           "dynamic batch axis; default: the model's)", cli_type=str | None, parse=_ints, metavar="SIZES"),
    Option("threads", int | None, None, "CPU threads per runner (default: each runtime's own)", metavar="N"),
    Option("warmup", int, 3, "untimed calls per runner and batch size after the first run", metavar="N"),
    Option("iterations", int | None, None, "timed calls per runner and batch size (default 50)", metavar="N"),
    Option("seconds", float | None, None, "timed seconds per runner and batch size (instead of --iterations)",
           flags=("--time",), metavar="SECONDS"),
    Option("rounds", int, 10, "interleaved rounds the timed calls are spread over", metavar="N"),
    # --precision's side by side (issue 34): label -> (runtime, file) from the API, RUNTIME=FILE strings from the CLI
    Option("variants", Any, None, "also time another file of the model in RUNTIME in the same rounds (an int8 "
           ".onnx, an IR .xml, a .tflite), compared with RUNTIME on MODEL (repeatable)", cli_type=list[str] | None,
           flags=("--variant",), metavar="RUNTIME=FILE"),
)
REPORT_HELP = "write a report: .json, .md or .html (latency plots)"


def bench_options() -> list[Option]:
    """Every option ``bench`` takes: its own, then those of its groups."""
    return command_options("bench", OWN)


def parse_variants(given: Mapping[str, tuple[str, str | Path]] | Sequence[str] | None) -> dict[str, tuple[str, Path]]:
    """``bench``'s variants as label -> (runtime, file); ``RUNTIME=FILE`` strings are labelled ``RUNTIME [FILE]``."""
    if isinstance(given, Mapping):
        return {label: (runtime, Path(path)) for label, (runtime, path) in given.items()}
    found: dict[str, tuple[str, Path]] = {}
    for text in given or ():
        runtime, sep, path = text.partition("=")
        if not sep or not runtime or not path:
            raise UsageError(f"--variant {text}: expected RUNTIME=FILE, e.g. onnxruntime=model.int8.onnx")
        found[f"{runtime} [{Path(path).name}]"] = (runtime, Path(path))
    return found


def bench(model: str | Path, *, progress: Progress | None = None, options: Mapping[str, str] | None = None,
          **values: Any) -> Any:
    """``bridge.api.bench`` (see there)."""
    from bridge.bench.report import report_format, write_bench_report
    from bridge.bench.run import DEFAULT_ITERATIONS, BenchFailedError, BenchSettings, run_bench
    from bridge.conversion.recipe import child_memory_limit
    from bridge.io import check_writable
    from bridge.limits import memory_limit

    declared = bench_options()
    v = resolve(values, where="bench", options=declared)
    if v["iterations"] is not None and v["seconds"] is not None:
        raise UsageError("give --iterations or --time, not both")
    if v["reference"] is not None and not v["verify"]:
        raise UsageError("--reference is read by --verify only (bench times the model against --source)")
    if v["verify"] and (v["source"] is None) == (v["reference"] is None):
        raise UsageError("--verify needs exactly one of --source (run the source model) or --reference (saved results)")
    if v["report"]:
        report_format(Path(v["report"]))
        check_writable(Path(v["report"]), "--report")  # before the work: a read-only folder fails now
    # the settings' own checks (--iterations 0, --time nan, ...) are usage errors before any work
    settings = BenchSettings(batches=tuple(v["batch"] or ()),
                             iterations=DEFAULT_ITERATIONS if v["iterations"] is None else v["iterations"],
                             seconds=v["seconds"], warmup=v["warmup"], rounds=v["rounds"], threads=v["threads"],
                             isolated=v["isolated"])
    runtime = v["runtime"]
    runtimes = [runtime] if isinstance(runtime, str) else runtime
    variants = parse_variants(v["variants"])  # a malformed --variant is a usage error before any work
    with memory_limit(v["max_memory"]):
        if v["verify"]:  # in the runtimes about to be timed: every installed one unless --runtime names some
            from bridge.runtimes import available_runtimes

            verification = _verify(model, v, runtimes or available_runtimes(), options, progress)
        else:
            verification = None
        source = source_of(v["source"], v, declared, options) if v["source"] is not None else None
        result = run_bench(Path(model), source=source, framework=v["framework"], runtimes=runtimes, settings=settings,
                           feeds=Path(v["feeds"]) if v["feeds"] else None,
                           inputs=tuple(i if isinstance(i, InputSpec) else InputSpec.parse(i) for i in v["inputs"]),
                           seed=v["seed"], values=InputValues.parse(v["input_kind"], v["input_range"]),
                           timeout=v["timeout"], max_memory=child_memory_limit(), progress=progress,
                           variants=variants)
    result.verification = verification
    if v["report"]:
        write_bench_report(result.to_dict(), Path(v["report"]))
    if not result.measured:  # every figure would be '-': a failed benchmark, not a result (exit 3)
        raise BenchFailedError(f"no runtime ran {model}: {result.failure()}", result=result)
    return result


def _verify(model: str | Path, v: Mapping[str, Any], runtimes: list[str] | None, options: Mapping[str, str] | None,
            progress: Progress | None) -> dict[str, Any]:
    """``--verify``: the model checked as ``bridge validate`` checks it, in the runtimes about to be timed (raises
    ``ValidationMismatch`` when it fails: nothing is timed then); its verdict as plain data."""
    from bridge.conversion.validate import validate, validate_options

    say = progress or (lambda _m: None)
    say("verifying the model before timing it")
    taken = {o.name for o in validate_options()} - {"report", "save_reference", "runtime"}
    checked = validate(model, progress=progress, options=options, runtime=runtimes,
                       **{k: v[k] for k in taken if k in v})
    return {"passed": checked.passed, "reference": checked.reference, "vacuous": checked.vacuous,
            "comparisons": [c.summary() for c in checked.comparisons], "warnings": checked.warnings}
