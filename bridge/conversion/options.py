"""Every option of the commands that convert or check a model, declared once in groups (Polygraphy's argument
groups); the CLI, ``bridge.api``'s signatures, ``bridge debug``, the migrate manifest (and its JSON Schema) and
the migrate worker are derived from these declarations.

``CORE`` holds the options of the conversion and of its check, each in a group (``GROUPS``): ``source`` (which
framework reads it, its weights), ``inputs`` (shapes, ``--feeds``, generated values), ``tolerance``, ``check``
(detection groups, ``--strict``), ``isolation`` (child processes, time and memory limits), ``report`` and
``convert`` (the conversion's own). Adapters and targets declare their own groups in their ``options``
attribute (as Polygraphy's backends own their args), found through their registries (``convert_options``
stamps each with its owner); a command's own options are declared in its module (``command:<name>``). A
command subscribes to the groups it takes (``group_options``): ``convert`` to all of them, ``validate`` and
``bench`` to source, inputs, tolerance, check, isolation and report, the shape tools to tolerance and isolation.
Choices are read from the registries when asked, so a runtime or target added with one class and one registry
line is accepted everywhere at once; bounds (``bridge.config.Bounds``) are declared with the option and checked
for every entry point. ``build_config`` turns API keyword values into the ``ConvertConfig`` the recipe runs
(every value is also in ``ConvertConfig.values``, so a new option is one declaration here plus the code that
reads it); ``cli_parameters`` and ``api_signature`` give the typer parameters and the Python signature.

Adding an option group (``--dataset``, ``--labels``, ``--precision``): declare its options with ``group=NAME`` in
``CORE`` (or in a tuple added to ``CORE``), add NAME to ``GROUPS`` and to the ``COMMAND_GROUPS`` entries of the
commands that take it; the CLI flags, API keywords, manifest fields and worker keywords follow.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Annotated, Any

from bridge.config import (
    DEFAULT_OPSET,
    DEFAULT_TOLERANCE,
    INPUT_KINDS,
    TOLERANCE_BOUNDS,
    Bounds,
    ConvertConfig,
    DynamicAxis,
    ExportSpec,
    InputSpec,
    InputValues,
    Option,
    Source,
    Tolerance,
)
from bridge.errors import BridgeError, UsageError
from bridge.runtimes.base import TensorMeta
from bridge.runtimes.isolated import DEFAULT_TIMEOUT_S, MAX_TIMEOUT_S, check_timeout
from bridge.validation.run import FeedSource


def _frameworks() -> list[str]:
    from adapters import registered_frameworks

    return registered_frameworks()


def _runtimes() -> list[str]:
    from bridge.runtimes import available_runtimes

    return available_runtimes()


def _targets() -> list[str]:
    from bridge.targets import registered_targets

    return registered_targets()


def _detection_formats() -> Sequence[str]:
    from bridge.passes.contrib.nms import OUTPUT_FORMATS

    return OUTPUT_FORMATS


def _newest_opset() -> int:
    from opsets.conversion import newest_runtime_opset

    return newest_runtime_opset()


def _opset_range() -> str:
    from opsets.conversion import MIN_OPSET

    return (f"bridge converts between opsets {MIN_OPSET} and {_newest_opset()} (the newest the installed onnxruntime "
            "runs)")


def _comma_list(text: Any) -> Any:
    return [t.strip() for t in text.split(",") if t.strip()] if isinstance(text, str) else text


def runtime_list(text: Any) -> Any:
    """``onnxruntime,tensorflow`` -> names; ``none`` -> [] (no validation); None -> the default."""
    if isinstance(text, str) and text.strip().lower() == "none":
        return []
    return _comma_list(text)


# opsets.conversion.MIN_OPSET .. the newest the installed onnxruntime loads (what opsets.conversion.check_target asks)
OPSET_BOUNDS = Bounds(ge=7, le=_newest_opset, integer=True, text=_opset_range)
SEED_BOUNDS = Bounds(ge=0, lt=2**63, integer=True, text="must be an integer from 0 to 2**63 - 1")  # numpy: from 0 up
# a week: past that a limit is a typo (1e308), and poll() overflows; check_timeout says so (every time limit's check)
TIMEOUT_BOUNDS = Bounds(gt=0, le=MAX_TIMEOUT_S, validate=check_timeout)
COUNT_BOUNDS = Bounds(gt=0, integer=True)

# the groups a command subscribes to, in the order convert's --help lists them; adapters and targets add theirs
GROUPS = ("source", "inputs", "tolerance", "check", "dataset", "precision", "isolation", "report", "convert")
ADAPTERS, TARGETS = "adapters", "targets"  # every registered adapter's / target's own group
COMMAND_GROUPS: dict[str, tuple[str, ...]] = {
    "convert": (*GROUPS, ADAPTERS, TARGETS),
    "validate": ("source", "inputs", "tolerance", "check", "dataset", "isolation", "report"),
    "bench": ("source", "inputs", "tolerance", "check", "isolation", "report"),
    "shapes fix": ("tolerance", "isolation"),
    "shapes dynamic": ("tolerance", "isolation"),
}

CORE: tuple[Option, ...] = (
    Option("framework", str | None, None, "source framework (default: detect)", choices=_frameworks, metavar="NAME",
           group="source"),
    Option("inputs", list[str], [], "an input's shape (and dtype), e.g. images:4,3,64,64 or data:1,3,224,224:float16 "
           "(repeatable)", flags=("--input", "-i"), metavar="NAME:SHAPE[:DTYPE]", group="inputs"),
    Option("dynamic", list[str], [], "make an input axis dynamic under a name, e.g. images:0=batch (repeatable)",
           flags=("--dynamic", "-d"), metavar="NAME:AXIS=LABEL"),
    Option("opset", int | None, None, "target default-domain opset (default: the exporter's, at least "
           f"{DEFAULT_OPSET})", metavar="N", bounds=OPSET_BOUNDS),
    Option("validate", list[str] | None, None, "runtimes to validate in, comma-separated, or none (default: the "
           "target's)", cli_type=str | None, choices=_runtimes, debug=False, manifest="runtimes", metavar="RUNTIMES",
           parse=runtime_list),
    Option("atol", float, DEFAULT_TOLERANCE.atol, "absolute tolerance", manifest="tolerance", group="tolerance",
           bounds=TOLERANCE_BOUNDS),
    Option("rtol", float, DEFAULT_TOLERANCE.rtol, "relative tolerance", manifest="tolerance", group="tolerance",
           bounds=TOLERANCE_BOUNDS),
    Option("tolerance", list[str], [], "tolerances of one output, e.g. scores=1e-3,1e-2 (repeatable)",
           manifest="tolerance", metavar="NAME=ATOL,RTOL", group="tolerance"),
    Option("report", Path | None, None, "write a report (.json, .md or .html)", manifest=None, metavar="FILE",
           group="report"),
    Option("weights", Path | None, None, "state_dict (.pt) or MXNet .params", flags=("--weights", "--params"),
           metavar="FILE", source_specific=True, group="source"),
    Option("outputs", list[str] | None, None, "comma-separated internal tensor names to cut the graph at (they "
           "keep their names as the model's outputs; validate: the model is checked against the source cut there; "
           "MXNet symbols, TensorFlow GraphDefs and .tflite files)",
           cli_type=str | None, route="source", metavar="NAMES", source_specific=True, parse=_comma_list,
           group="source"),  # validate takes it too: a model of the source cut there is checked against that cut
    Option("output_names", list[str], [], "comma-separated names for the model's outputs, in order",
           cli_type=str | None, metavar="NAMES", source_specific=True, parse=_comma_list),
    Option("detection_format", str, "mxnet", "how lowered detection layers (MultiBoxDetection) emit results",
           choices=_detection_formats, metavar="FORMAT"),
    Option("max_detections", int | None, None, "rows of the boxes-scores-classes format", metavar="N",
           bounds=COUNT_BOUNDS),
    Option("feeds", Path | None, None, "validation inputs: .npz keyed by input name (default: seeded noise)",
           metavar="FILE.npz", group="inputs"),
    Option("to", str, "onnx", "delivery format; a target's artefact is validated in its runtimes", choices=_targets,
           debug=False, metavar="TARGET"),
    Option("artefact_dir", Path | None, None, "folder for the target's artefacts (default: beside the .onnx)",
           debug=False, manifest=None, metavar="DIR"),  # a migration writes them in the model's folder under --out
    Option("seed", int, 0, "seed for generated validation inputs", metavar="N", group="inputs", bounds=SEED_BOUNDS),
    Option("trust_source", bool, False, "run the source for validation even if its graph has side effects "
           "(file writes, Python callbacks)", route="source", group="source"),
    Option("isolated", bool, True, "run the source reference and each runtime in a child process with time and "
           "memory limits", flags=("--isolate/--no-isolate",), debug=False, group="isolation"),
    Option("timeout", float, DEFAULT_TIMEOUT_S, "seconds each reference/runtime step may take in its child process",
           manifest="step_timeout", metavar="SECONDS", group="isolation", bounds=TIMEOUT_BOUNDS),
    Option("strict", bool, False, "a vacuous verdict (nothing real compared: no detections, all-NaN outputs, a "
           "0-sized dim, a random output compared by shape only), dynamic axes checked at one size only, a "
           "candidate checked on one input only or a validation that could not run fails (exit 1); pinning then "
           "excuses only choices on inputs within 4 float32 ulps of the source's", debug=False, group="check"),
    Option("pinning", bool, True, "on a failed comparison of a model with selections (TopK, NMS, ArgMax, "
           "comparisons), re-run it with the source's values deciding them; a pass is proved near-ties only "
           "(README: Validation)", flags=("--pinning/--no-pinning",), debug=False, group="check"),
    Option("max_memory", str | None, None, "limit for sizes files declare and for reference/runtime children, "
           "e.g. 4G (default: half the RAM, or BRIDGE_MAX_MEMORY)", metavar="SIZE", group="isolation"),
    Option("external_data", bool | None, None, "weights in <output>.data beside the model (default: only past "
           "protobuf's 2 GiB limit)", flags=("--external-data/--inline-data",), debug=False),
    Option("detections", list[str], [], "one detector's outputs, compared detection by detection (boxes matched "
           "by class and IoU): comma-separated ROLE=OUTPUT pairs, roles boxes and scores (required), labels, "
           "batch_index and num, e.g. boxes=bb,scores=sc (repeatable; outputs "
           "fed by NMS are found without it)", metavar="ROLE=OUTPUT,...", group="check"),
    Option("input_kind", str | None, None, "generated inputs (tracing and validation): normal (default) | image "
           "(image-like, [0,1] floats / [0,255] integers)", choices=lambda: INPUT_KINDS, metavar="KIND",
           group="inputs"),
    Option("input_range", str | None, None, "generated float inputs in this range (e.g. 0,255 for a model "
           "that normalises raw pixels itself)", metavar="LO,HI", group="inputs"),
    Option("strip_provenance", bool, False, "write nodes without the metadata naming their source node and the "
           "translator or pass that made them", debug=False),
    Option("bench", bool, False, "then time the written model in the validated runtimes against the source "
           "(bridge bench; recorded in the report)", debug=False),
)


def convert_options() -> list[Option]:
    """The core options, then each registered adapter's and target's own group (stamped with its owner)."""
    return group_options(*COMMAND_GROUPS["convert"])


def group_options(*groups: str) -> list[Option]:
    """The options of ``groups`` in ``CORE``'s order; ``ADAPTERS`` / ``TARGETS`` add each registered adapter's /
    target's own group (stamped with its owner and route). Two groups claiming one name is an error: one of them
    would be unreachable."""
    from adapters import get_adapter
    from bridge.targets import get_target

    wanted = set(groups)
    unknown = wanted - {*GROUPS, ADAPTERS, TARGETS}
    if unknown:
        raise AssertionError(f"no option group {', '.join(sorted(unknown))} (groups: {', '.join(GROUPS)})")
    found: list[Option] = [o for o in CORE if o.group in wanted]
    if "dataset" in wanted:  # declared in its own package (the dataset run's options, issue 33)
        from bridge.validation.dataset.options import DATASET_OPTIONS

        found += DATASET_OPTIONS
    if "precision" in wanted:  # --precision (issue 34): its own group, judged by the dataset run's budget
        from bridge.precision.options import PRECISION_OPTIONS

        found += PRECISION_OPTIONS
    if ADAPTERS in wanted:
        for framework in _frameworks():
            found += [dataclasses.replace(o, group=f"adapter:{framework}", route="source")
                      for o in getattr(get_adapter(framework), "options", ())]
    if TARGETS in wanted:
        for name in _targets():
            found += [dataclasses.replace(o, group=f"target:{name}", route="target", debug=False)
                      for o in getattr(get_target(name), "options", ())]
    names = [o.name for o in found]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:  # two groups claiming one name would make one of them unreachable
        raise AssertionError(f"options declared twice: {', '.join(repeated)}")
    return found


def command_options(command: str, own: Sequence[Option] = ()) -> list[Option]:
    """A command's own options (stamped ``command:<name>``), then those of the groups it subscribes to."""
    return [*(dataclasses.replace(o, group=f"command:{command}") for o in own), *group_options(*COMMAND_GROUPS[command])]


def option(name: str) -> Option:
    return next(o for o in convert_options() if o.name == name)


def defaults(options: Sequence[Option] | None = None) -> dict[str, Any]:
    return {o.name: o.default for o in (convert_options() if options is None else options)}


def from_cli(values: Mapping[str, Any], options: Sequence[Option] | None = None) -> dict[str, Any]:
    """CLI values (comma-separated strings, ...) as the API takes them (each option's ``parse``)."""
    parsers = {o.name: o.parse for o in (convert_options() if options is None else options) if o.parse is not None}
    return {k: parsers[k](v) if k in parsers else v for k, v in values.items()}


def tolerance_of(values: Mapping[str, Any]) -> Tolerance:
    """The tolerance group's values (``atol``, ``rtol``, per-output ``tolerance``) as one Tolerance."""
    return _tolerance({"atol": DEFAULT_TOLERANCE.atol, "rtol": DEFAULT_TOLERANCE.rtol, "tolerance": [], **values})


# ------------------------------------------------------------------------------------------------ derived


def _api_type(o: Option) -> Any:
    return o.type if o.cli_type is None else o.type | o.cli_type


def api_signature(head: Sequence[inspect.Parameter], tail: Sequence[inspect.Parameter] = (),
                  *, debug: bool = False, options: Sequence[Option] | None = None) -> inspect.Signature:
    """``head`` (positional parameters), every option (``options``, default convert's) as a keyword (``debug``:
    those debug takes), ``tail``."""
    params = [*head, *(inspect.Parameter(o.name, inspect.Parameter.KEYWORD_ONLY, default=o.default,
                                         annotation=_api_type(o))
                       for o in (convert_options() if options is None else options) if o.debug or not debug), *tail]
    return inspect.Signature(params)


def cli_parameters(options: Sequence[Option] | None = None, *, debug: bool = False,
                   help_overrides: Mapping[str, str] | None = None) -> list[inspect.Parameter]:
    """typer parameters (``Annotated[type, typer.Option(...)]``) for ``options`` (default: convert's; ``debug``:
    those debug takes)."""
    import typer

    params = []
    for o in convert_options() if options is None else options:
        if debug and not o.debug:
            continue
        text = (help_overrides or {}).get(o.name, o.help)
        if o.choices is not None:
            text += f" (one of: {', '.join(o.choices())})"
        if o.group.startswith(("adapter:", "target:")):
            text += f" ({o.group.replace(':', ' ')} option)"
        cli_type = o.cli_type if o.cli_type is not None else o.type
        default = (None if o.cli_type is not None else list(o.default)) if isinstance(o.default, list) else o.default
        params.append(inspect.Parameter(o.name, inspect.Parameter.KEYWORD_ONLY, default=default,
                                        annotation=Annotated[cli_type, typer.Option(*o.cli_flags, help=text,
                                                                                    metavar=o.metavar)]))
    return params


# ------------------------------------------------------------------------------------------------ API words

_FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*(?:/--[a-z][a-z0-9-]*)*)(?: (?!\()(\S+))?")


# words a message puts after a flag that are its prose, not the flag's value ("give --iterations or --time")
_PROSE = frozenset({"or", "and", "nor", "not", "is", "are", "was", "with", "without", "needs", "takes", "must",
                    "cannot", "only", "also", "too", "as", "to", "for", "of", "in", "on", "at", "by",
                    # nouns a message puts after a flag to say what it takes ("pass concrete --input shapes")
                    "shape", "shapes", "size", "sizes", "value", "values", "name", "names", "file", "files",
                    "axis", "axes", "dims", "the", "a", "an", "that", "this", "here", "there", "instead"})


_NUMBERS = (int, float, int | None, float | None)


def _is_value(word: str, kind: Any) -> bool:
    """Whether ``word``, after a flag in a message, is that flag's value: not another flag, not a connective, and
    a number where the option takes one (``--iterations or`` is prose, ``--warmup -1`` a value)."""
    text = word.rstrip(":;,.)").strip("'\"")
    try:
        float(text)
        number = True
    except ValueError:
        number = False
    if (word.startswith("-") and not number) or text in _PROSE:
        return False
    return number or kind not in _NUMBERS


# a message's subject: the flag (and value) it is about, first, then ": " or " (did you mean ...)"
_SUBJECT = re.compile(r"^--[a-z][a-z0-9-]*(?:/--[a-z][a-z0-9-]*)*(?: (?!\()\S+?)?(?=: | \(did you mean )")


def api_keywords_note(message: str, options: Sequence[Option] = (), keywords: Sequence[str] = (),
                      lists: Mapping[str, str] | None = None) -> str:
    """``message`` in a Python caller's words: its subject (the flag and value it opens with, ``--input image:``)
    as the API's keyword (``inputs=['image']: no such input``), and each flag its prose names after it followed
    by the keyword (``... (from Python: --dynamic is dynamic=)``). Prose keeps its flags: rewriting them in place
    garbled sentences such as "with --dynamic if you have it"; the subject is structured (flag, value, colon),
    so it is said in the API's words outright."""
    subject = _SUBJECT.match(message)
    if subject is not None:
        said_subject = api_words(subject.group(0), options, keywords, lists)
        if said_subject != subject.group(0):
            rest = message[subject.end():]
            return said_subject + api_keywords_note(rest, options, keywords, lists)
    said: dict[str, str] = {}
    for m in _FLAG.finditer(message):
        rewritten = api_words(m.group(1), options, keywords, lists)
        if rewritten != m.group(1):
            said.setdefault(m.group(1), rewritten.split("=")[0] + "=")
    if not said:
        return message
    return f"{message} (from Python: " + ", ".join(f"{flag} is {kw}" for flag, kw in said.items()) + ")"


def api_words(message: str, options: Sequence[Option] = (), keywords: Sequence[str] = (),
              lists: Mapping[str, str] | None = None) -> str:
    """``message`` with each command-line flag of ``options`` (and of ``keywords``: parameters spelled as flags,
    ``--box-format`` for ``box_format``) in the API's words: ``--input data:1,3,H,W`` -> ``inputs=['data:1,3,H,W']``,
    ``--to 'onxx'`` -> ``to='onxx'``, ``--strict`` -> ``strict=True``, ``--no-isolate`` -> ``isolated=False``. A
    Python caller of ``bridge.api`` passed keywords, not flags; flags of no option (``--localize``) stay. ``lists``:
    flags of list keywords spelled otherwise (the shape tools' ``--input`` is ``inputs=[...]``)."""
    known: dict[str, tuple[str, Any]] = {}
    for o in options:
        for spelling in o.cli_flags:
            for flag in spelling.split("/"):
                if flag.startswith("--"):
                    known[flag] = (o.name, False if flag.startswith("--no-") and o.type is bool else o.type)
    for flag, name in (lists or {}).items():
        known[flag] = (name, list[str])
    for name in keywords:
        known.setdefault("--" + name.replace("_", "-"), (name, Any))

    def say(m: re.Match[str]) -> str:
        flags, value = m.group(1).split("/"), m.group(2)
        hit = next((known[f] for f in flags if f in known), None)
        if hit is None:
            return m.group(0)
        name, kind = hit
        if kind is False or kind is bool:
            return f"{name}={kind is bool}" + (f" {value}" if value else "")
        if not value or not _is_value(value, kind):
            return f"{name}=" + (f" {value}" if value else "")
        text, tail = value.rstrip(":;,.)"), value[len(value.rstrip(":;,.)")):]
        numeric = kind in _NUMBERS
        quoted = text if numeric or (len(text) > 1 and text[0] == text[-1] and text[0] in "'\"") else repr(text)
        listed = "list" in str(kind) or "Sequence" in str(kind)
        return f"{name}=[{quoted}]{tail}" if listed else f"{name}={quoted}{tail}"

    return _FLAG.sub(say, message)


# ------------------------------------------------------------------------------------------------ config


def _specs(items: Any) -> tuple[InputSpec, ...]:
    return tuple(i if isinstance(i, InputSpec) else InputSpec.parse(i) for i in items or ())


def _axes(items: Any) -> tuple[DynamicAxis, ...]:
    return tuple(i if isinstance(i, DynamicAxis) else DynamicAxis.parse(i) for i in items or ())


def _tolerance(values: Mapping[str, Any]) -> Tolerance:
    """``atol``/``rtol`` plus per-output ``NAME=ATOL,RTOL`` overrides, or a Tolerance given as ``tolerance``."""
    given = values["tolerance"]
    if isinstance(given, Tolerance):
        atol = given.atol if values["atol"] == DEFAULT_TOLERANCE.atol else values["atol"]
        rtol = given.rtol if values["rtol"] == DEFAULT_TOLERANCE.rtol else values["rtol"]
        return Tolerance(atol, rtol, given.per_output, given.scale_rule)
    if isinstance(given, Mapping):  # NAME -> (ATOL, RTOL)
        return Tolerance(values["atol"], values["rtol"], dict(given))
    return Tolerance.parse_override(Tolerance(values["atol"], values["rtol"]), list(given or ()))


def _source_option(value: Any) -> str | None:
    if value is None or value is False or value == []:
        return None
    if value is True:
        return "1"
    return ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)


def resolve(values: Mapping[str, Any], *, where: str = "convert",
            options: Sequence[Option] | None = None) -> dict[str, Any]:
    """Every option's value (defaults filled in; ``options``: default convert's); TypeError for a keyword no
    option declares, UsageError for a value outside its registry's choices or its bounds."""
    declared = convert_options() if options is None else list(options)
    known = defaults(declared)
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise TypeError(f"{where}() got an unexpected keyword argument '{unknown[0]}'")
    merged = {**known, **values}
    for o in declared:
        if o.choices is not None:
            o.check_choice(merged[o.name])
        if o.bounds is not None:
            o.bounds.check(merged[o.name], o.cli_flags[0].split("/")[0])
    return merged


def source_of(source: Any, values: Mapping[str, Any], options: Sequence[Option],
              raw_options: Mapping[str, str] | None = None) -> Source:
    """The ``Source`` of ``source`` (a path, ``module:factory``, a framework object or a Source) with the source
    group's values: ``--weights``, and every option routed to ``Source.options`` (the adapters' knobs, over the
    raw ``raw_options``)."""
    source_options = dict(raw_options or {})
    source_options.update({o.name: s for o in options if o.route == "source"
                           for s in [_source_option(values[o.name])] if s is not None})
    from adapters import locate_source

    weights = Path(values["weights"]) if values.get("weights") else None
    if isinstance(source, Source):
        return locate_source(dataclasses.replace(source, options={**source.options, **source_options},
                                                 weights=source.weights or weights))
    if isinstance(source, (str, Path)):  # a checkpoint prefix, folder or .params: the file it names
        return locate_source(Source(location=str(source), weights=weights, options=source_options))
    return Source(obj=source, weights=weights, options=source_options)


def build_config(source: Any, output: str | Path, values: Mapping[str, Any], *,
                 raw_options: Mapping[str, str] | None = None) -> ConvertConfig:
    """The ConvertConfig of one conversion from option values (API keywords); routes adapter options into
    ``Source.options`` and the chosen target's into ``target_options``; the target places its artefacts."""
    from bridge.targets import get_target

    v = resolve(values)
    opts = convert_options()
    target_name = v["to"]
    for o in opts:  # an option of another target would be silently unused
        if o.route == "target" and o.group != f"target:{target_name}" and v[o.name] != o.default:
            raise UsageError(f"{o.cli_flags[0]} belongs to --to {o.group.split(':', 1)[1]}, not --to {target_name}")
    src = source_of(source, v, opts, raw_options)
    target_options = {o.name: v[o.name] for o in opts if o.group == f"target:{target_name}"}
    target = get_target(target_name, **target_options)
    # a target may need settings of the conversion itself (e.g. an output layout built from a lowering's format)
    configure = getattr(target, "configure", None)
    if configure is not None:
        v = {**v, **configure(v)}
    artefact_dir = Path(v["artefact_dir"]) if v["artefact_dir"] else None
    onnx_path, artefacts = target.place(Path(output), artefact_dir, target_options)
    validate = v["validate"]
    input_values = InputValues.parse(v["input_kind"], v["input_range"])
    feeds = Path(v["feeds"]) if v["feeds"] else None
    examples = partial(example_inputs, feeds, input_values, v["seed"])
    examples.description = FeedSource(feeds, (), v["seed"], values=input_values).describe()  # type: ignore[attr-defined]
    spec = ExportSpec(_specs(v["inputs"]), _axes(v["dynamic"]), DEFAULT_OPSET if v["opset"] is None else v["opset"],
                      tuple(v["output_names"] or ()), examples=examples, opset_asked=v["opset"] is not None)
    from bridge.conversion.preflight import preflight

    preflight(src, spec, feeds)  # before any framework is imported
    return ConvertConfig(
        source=src, output=onnx_path, framework=v["framework"],
        export=spec,
        validate=tuple(validate) if validate is not None else None, tolerance=_tolerance(v),
        report=Path(v["report"]) if v["report"] else None, seed=v["seed"], detection_format=v["detection_format"],
        max_detections=v["max_detections"], feeds=feeds, to=target_name,
        target_options=target_options, artefact_dir=artefact_dir, artefacts=artefacts, isolate=v["isolated"],
        timeout=v["timeout"], detections=tuple(v["detections"] or ()),
        input_values=input_values, external_data=v["external_data"],
        strict=v["strict"], validate_given=validate is not None and len(validate) > 0, values=v,
        strip_provenance=v["strip_provenance"],
    )


def _given(o: Option, cfg: ConvertConfig) -> Any:
    """The value ``cfg`` holds for ``o`` when it is not the default (None otherwise): the option's value, a
    raw ``Source.options`` entry under its name, or (``weights``) a Source built with its side file."""
    value = cfg.values.get(o.name, o.default)
    if value != o.default and value not in (None, [], ()):
        return value
    raw = cfg.source.options.get(o.name)
    if raw not in (None, "") and raw != _source_option(o.default):
        return raw
    if o.name == "weights" and cfg.source.weights is not None:
        return cfg.source.weights
    return None


def _unread(o: Option, adapter: Any) -> list[str] | None:
    """The frameworks whose adapters read ``o`` when ``adapter`` does not (None when it does)."""
    owner = o.group.split(":", 1)[1] if o.group.startswith("adapter:") else None
    if (owner is None or owner == adapter.framework) and (not o.source_specific or o.name in
                                                          set(getattr(adapter, "honours", ()))):
        return None
    return [owner] if owner else [f for f in _frameworks() if o.name in getattr(_adapter(f), "honours", ())]


def check_applies(cfg: ConvertConfig, adapter: Any) -> None:
    """UsageError naming the option and the source for a value the chosen ``adapter`` would not read:
    another framework's own option (``--exporter`` for an MXNet symbol) or a ``source_specific`` core option
    the adapter does not list in ``honours`` (``--weights`` for an ONNX file). Accepting it and converting
    as if it had not been given would tell the user it took effect."""
    for o in convert_options():
        readers = _unread(o, adapter)
        if readers is None:
            continue
        value = _given(o, cfg)
        if value is None:
            continue
        raise UsageError(f"{o.cli_flags[0]} {_shown(value)}: {cfg.source.describe()} is converted by the "
                         f"{adapter.framework} adapter, which does not read {o.cli_flags[0]} (only "
                         f"{', '.join(readers) or 'no'} sources do); drop it")


def unread_options(names: Sequence[str], source: str, framework: str | None) -> list[str]:
    """Those of ``names`` (convert options) the adapter converting ``source`` would not read - for a batch
    migration's ``defaults:``, which apply to the entries that read them (an ``exporter`` default is for the
    PyTorch entries, not a reason to refuse the MXNet ones). [] when the adapter cannot be told yet: the
    conversion itself then names the problem."""
    from adapters import detect_adapter, get_adapter

    try:
        adapter = get_adapter(framework) if framework else detect_adapter(Source(location=source))
    except BridgeError:
        return []
    by_name = {o.name: o for o in convert_options()}
    return [n for n in names if n in by_name and _unread(by_name[n], adapter) is not None]


def _adapter(framework: str) -> Any:
    from adapters import get_adapter

    return get_adapter(framework)


def _shown(value: Any) -> str:
    text = ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)
    return text if len(text) <= 80 else text[:77] + "..."


def example_inputs(feeds: Path | None, values: InputValues, seed: int, specs: Sequence[InputSpec]) -> dict[str, Any]:
    """The arrays a tracing exporter runs the model on: the ``--feeds`` arrays, or generated ones like
    validation's (same seed and ``--input-kind/--input-range``, at the sample sizes)."""
    from bridge.validation.inputs import load_feeds, make_inputs

    metas = [TensorMeta(s.name, s.shape, s.dtype) for s in specs]
    if feeds is not None:
        return load_feeds(feeds, metas)
    return make_inputs(metas, specs, seed=seed, vary_dynamic=False, values=values)
