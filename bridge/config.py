"""Typed configuration shared by the Python API and the CLI.

The CLI only parses strings into these objects (``InputSpec.parse``, ``DynamicAxis.parse``, ...);
the library entry points in ``bridge.api`` take them (or the same strings) and never see argv.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bridge.errors import UsageError, did_you_mean
from bridge.limits import check_allocation, default_max_memory, memory_limit, parse_size  # noqa: F401 - re-exported

# --max-memory default: a fraction of RAM (see bridge.limits); sizes declared by files are checked against it
DEFAULT_MAX_MEMORY = default_max_memory()

DEFAULT_OPSET = 17
# Custom domain for layers ONNX has no op for (MultiBoxPrior, ...): adapters emit it, ONNX-stage passes lower it.
CONTRIB_DOMAIN = "bridge.contrib"
# Model metadata key: graph outputs holding detections (output name -> the format they are emitted in),
# written by the pass that produces them, read by validation to compare them detection by detection.
DETECTION_META = "bridge.detection_outputs"
# metadata_props key: JSON list of graph outputs computed from random ops (validation compares shape and dtype only)
NONDETERMINISTIC_OUTPUTS_META = "bridge.nondeterministic_outputs"
REPORT_SUFFIXES = (".json", ".md", ".markdown", ".html", ".htm")  # what bridge.report.write_report writes

_DTYPES = {
    "float32": np.float32, "float": np.float32, "f32": np.float32,
    "float16": np.float16, "f16": np.float16, "float64": np.float64, "double": np.float64,
    "int64": np.int64, "long": np.int64, "int32": np.int32, "int": np.int32,
    "int8": np.int8, "uint8": np.uint8, "bool": np.bool_,
}


def canonical_dtype(name: str) -> str:
    """Normalise a dtype spelling ('f32', 'long', ...) to numpy's name; UsageError for unknown ones."""
    try:
        return np.dtype(_DTYPES[name.lower()]).name
    except KeyError:
        raise UsageError(f"unknown dtype '{name}'; use one of {sorted(set(_DTYPES))}") from None


def check_names(option: str, given: Iterable[str], known: Iterable[str], what: str) -> None:
    """UsageError for names in ``given`` that are not in ``known``, listing the known ones (a typo in
    --input / --dynamic / --tolerance must not be silently ignored)."""
    known_list = list(dict.fromkeys(known))
    for name in given:
        if name not in known_list:
            hint = did_you_mean(name, known_list)
            raise UsageError(f"{option} '{name}': the model has no {what} of that name{hint}; "
                             f"its {what}s: {', '.join(known_list) or '(none)'}")


def check_unique(option: str, names: Iterable[str]) -> None:
    """UsageError when a name repeats in an option's list (``--output-names a,a``)."""
    seen: set[str] = set()
    for n in names:
        if n in seen:
            raise UsageError(f"{option}: '{n}' is given twice")
        seen.add(n)


@dataclass(frozen=True)
class InputSpec:
    """One model input: name, concrete sample shape (None = take it from the source) and dtype."""

    name: str
    shape: tuple[int, ...] | None = None
    dtype: str = "float32"
    dtype_given: bool = field(default=False, compare=False)  # NAME:SHAPE:DTYPE said it (a model may contradict it)

    @classmethod
    def parse(cls, text: str) -> InputSpec:
        """Parse ``NAME:4,3,64,64[:DTYPE]``, or ``NAME=4,3,64,64[:DTYPE]`` for names that hold colons.

        Frameworks spell tensor names with colons (TF / tflite ``serving_default_x:0``), so the shape
        and dtype are taken from the right: ``serving_default_x:0:1,4`` is name ``serving_default_x:0``
        with shape [1, 4], ``serving_default_x:0`` alone is a name (a one-dim shape of 0 means nothing).
        The ``=`` form is never ambiguous (``NAME=SHAPE``, ``NAME=`` for no shape). The forms users bring from
        tf2onnx (``NAME[4,3,64,64]``) and Polygraphy (``NAME:[4,3,64,64]``) are read too.
        """
        usage = (f"--input '{text}': expected NAME:SHAPE[:DTYPE] or NAME=SHAPE[:DTYPE], e.g. images:4,3,64,64 "
                 "or serving_default_x:0=1,224,224,3")
        bracket = _BRACKETED.fullmatch(text.strip())
        if bracket:  # tf2onnx's NAME[4,3,64,64] and Polygraphy's NAME:[4,3,64,64]
            name, dtype_text = bracket["name"], bracket["dtype"]
            if dtype_text is not None and dtype_text.strip().lower() not in _DTYPES:
                raise UsageError(usage + f" (dtypes: {', '.join(sorted(set(_DTYPES)))})")
            if not bracket["shape"].strip():
                raise UsageError(f"--input '{text}': the shape in [] is empty; give every dim, e.g. {name}[1,3,224,224]")
            dims = _parse_shape(bracket["shape"], text)
            return cls(name, dims, canonical_dtype(dtype_text) if dtype_text else "float32",
                       dtype_given=dtype_text is not None)
        if "=" in text:
            name, _, rest = text.rpartition("=")
            tail = rest.split(":") if rest else []
            if not name or len(tail) > 2:
                raise UsageError(usage)
            shape_text, dtype_text = [*tail, None, None][:2]
            shape = _parse_shape(shape_text, text) if shape_text and shape_text.strip() else None
        else:
            parts = text.split(":")
            dtype_text = None
            if len(parts) > 1 and parts[-1].strip().lower() in _DTYPES:
                dtype_text = parts.pop()
            shape = None
            if len(parts) > 1 and _looks_like_shape(parts[-1]):
                shape = _parse_shape(parts.pop(), text)
            elif len(parts) > 1 and dtype_text is not None and not parts[-1].strip():
                parts.pop()  # NAME::DTYPE
            name = ":".join(parts)
            if not name or any(_looks_like_shape(p) for p in parts[1:]):  # NAME:SHAPE:<not a dtype>
                raise UsageError(usage + f" (dtypes: {', '.join(sorted(set(_DTYPES)))})")
        if not name:
            raise UsageError(usage)
        dtype = canonical_dtype(dtype_text) if dtype_text else "float32"
        return cls(name, shape, dtype, dtype_given=dtype_text is not None)


# NAME[SHAPE] (tf2onnx --inputs) or NAME:[SHAPE] (Polygraphy --input-shapes), then an optional :DTYPE; NAME may
# hold colons itself (serving_default_x:0[1,4])
_BRACKETED = re.compile(r"(?P<name>[^\[\]=]+?)[:=]?\[(?P<shape>[^\[\]]*)\](?::(?P<dtype>[A-Za-z0-9_]+))?")


def _looks_like_shape(text: str) -> bool:
    """A shape was meant: dims separated by ``,`` (or ``x``), or one positive integer; a lone ``0`` is the
    output index of a TF tensor name (``x:0``), not a shape (a 0-sized input would be an error anyway)."""
    text = text.strip()
    if not text:
        return False
    if "," in text or re.fullmatch(r"\d+(x\d+)+", text):
        return True
    return text.isdigit() and int(text) > 0


def _parse_shape(text: str, where: str) -> tuple[int, ...]:
    try:
        shape = tuple(int(d) for d in text.replace("x", ",").split(","))
    except ValueError:
        raise UsageError(f"--input '{where}': shape must be comma-separated integers") from None
    if any(d <= 0 for d in shape):
        raise UsageError(f"--input '{where}': every dim must be a positive integer (use --dynamic for symbolic ones)")
    return shape


@dataclass(frozen=True)
class DynamicAxis:
    """A named dynamic axis: ``input`` axis ``axis`` is called ``label`` on inputs and outputs."""

    input: str
    axis: int
    label: str

    @classmethod
    def parse(cls, text: str) -> DynamicAxis:
        """Parse ``NAME:AXIS=LABEL``, e.g. ``images:0=batch``."""
        m = re.fullmatch(r"([^:]+):(-?\d+)=([A-Za-z_][A-Za-z0-9_]*)", text.strip())
        if not m:
            raise UsageError(f"--dynamic '{text}': expected NAME:AXIS=LABEL, e.g. images:0=batch")
        return cls(m.group(1), int(m.group(2)), m.group(3))


@dataclass(frozen=True)
class Tolerance:
    """Allowed difference per output: |cand - ref| <= atol + rtol * scale, where an element's scale is the
    largest |ref| of the slices of the output it lies in (the scale rule, ``bridge.validation.tolerance``: float32
    rounding follows the magnitude summed, not the element's own). An output named in ``per_output`` is judged
    elementwise with its own values, |cand - ref| <= atol + rtol * |ref| (numpy.isclose semantics), as is every
    output with ``scale_rule=False``. With atol and rtol at their defaults, an output whose reference is float16 is
    judged at float16's numbers (``bridge.validation.tolerance.float16_tolerance``: atol 2**-13, rtol 2**-8).

    Every value must be a finite number >= 0 (UsageError otherwise, so every entry point rejects
    ``--atol nan``: a NaN tolerance makes every comparison false and turned errors into PASS).
    """

    atol: float = 1e-4
    rtol: float = 1e-3
    per_output: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    scale_rule: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "atol", check_tolerance(self.atol, "--atol"))
        object.__setattr__(self, "rtol", check_tolerance(self.rtol, "--rtol"))
        per = {}
        for name, pair in dict(self.per_output).items():
            try:
                atol, rtol = pair
            except (TypeError, ValueError):
                raise UsageError(f"--tolerance {name}: expected (ATOL, RTOL), got {pair!r}") from None
            per[name] = (check_tolerance(atol, f"--tolerance {name} ATOL"), check_tolerance(rtol, f"--tolerance {name} RTOL"))
        object.__setattr__(self, "per_output", per)

    def for_output(self, name: str) -> tuple[float, float]:
        return self.per_output.get(name, (self.atol, self.rtol))

    @classmethod
    def parse_override(cls, base: Tolerance, texts: Iterable[str]) -> Tolerance:
        """Apply ``NAME=ATOL,RTOL`` overrides from the CLI."""
        per = dict(base.per_output)
        for text in texts:
            m = re.fullmatch(r"([^=]+)=([^,]+),(.+)", text)
            if not m:
                raise UsageError(f"--tolerance '{text}': expected OUTPUT=ATOL,RTOL")
            per[m.group(1)] = (check_tolerance(m.group(2), f"--tolerance '{text}': ATOL"),
                               check_tolerance(m.group(3), f"--tolerance '{text}': RTOL"))
        return cls(base.atol, base.rtol, per, base.scale_rule)


def check_tolerance(value: object, what: str) -> float:
    """``value`` as a float if it is a finite number >= 0; UsageError naming ``what`` otherwise."""
    try:
        number = float(value.strip() if isinstance(value, str) else value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise UsageError(f"{what} {value!r}: must be a number") from None
    if not math.isfinite(number) or number < 0:
        raise UsageError(f"{what} {value!r}: must be a finite number >= 0 (NaN, inf and negative tolerances "
                         "would make the check meaningless)")
    return number


DEFAULT_TOLERANCE = Tolerance()


INPUT_KINDS = ("normal", "image")


@dataclass(frozen=True)
class Bounds:
    """The values a number option accepts, declared once with the option: checked for every entry point (CLI, API,
    manifest) and written into the manifest's JSON Schema. ``gt`` / ``ge`` / ``lt`` / ``le`` are bounds (``le``
    may be a callable read when asked: the newest opset the installed onnx knows); ``finite``: NaN and inf are
    refused (a NaN tolerance makes every comparison false; an infinite one passes anything); ``integer``: a
    whole number (not a bool)."""

    gt: float | None = None
    ge: float | None = None
    lt: float | None = None
    le: float | Callable[[], float] | None = None
    finite: bool = True
    integer: bool = False
    # the sentence after "--flag VALUE: " when "must be an integer >= 0 and < 9223372036854775808" says it worse
    text: str | Callable[[], str] | None = None
    # an existing checker of the same rule (``check_timeout``), called as ``validate(value, flag)`` instead of the
    # generic comparison: its messages stay; the numbers above still make the manifest schema
    validate: Callable[[Any, str], Any] | None = None

    def upper(self) -> float | None:
        return self.le() if callable(self.le) else self.le

    def describe(self) -> str:
        """What the bounds accept, in words."""
        noun = "integer" if self.integer else "number"
        adjective = "positive" if self.gt == 0 else "finite" if self.finite and not self.integer else ""
        limits = [f"{op} {_number(v)}" for op, v in ((">", None if self.gt == 0 else self.gt), (">=", self.ge),
                                                     ("<", self.lt), ("<=", self.upper())) if v is not None]
        head = f"{adjective} {noun}".strip()
        return f"{'an' if head[0] in 'aeiou' else 'a'} {head}" + (f" {' and '.join(limits)}" if limits else "")

    def check(self, value: Any, flag: str) -> Any:
        """``value`` if it is within the bounds (None passes: the option's "not given"); UsageError naming
        ``flag`` otherwise."""
        if value is None:
            return value
        if self.validate is not None and not isinstance(value, bool):
            self.validate(value, flag)
            return value
        if not isinstance(value, bool) and (not self.integer or isinstance(value, (int, np.integer))):
            try:
                number = float(value)
            except (TypeError, ValueError, OverflowError):
                number = math.nan
            top = self.upper()
            if not ((self.finite and not math.isfinite(number)) or math.isnan(number)
                    or (self.gt is not None and not number > self.gt) or (self.ge is not None and not number >= self.ge)
                    or (self.lt is not None and not number < self.lt) or (top is not None and not number <= top)):
                return value
        text = self.text() if callable(self.text) else self.text
        raise UsageError(f"{flag} {value!r}: {text or 'must be ' + self.describe()}")

    def schema(self) -> dict[str, Any]:
        """The bounds as pydantic ``Field`` keywords (the manifest's validation and its JSON Schema)."""
        keywords: dict[str, Any] = {k: v for k, v in (("gt", self.gt), ("ge", self.ge), ("lt", self.lt),
                                                      ("le", self.upper())) if v is not None}
        if self.finite and not self.integer:
            keywords["allow_inf_nan"] = False
        return keywords


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


TOLERANCE_BOUNDS = Bounds(ge=0)  # every atol / rtol, global or per output (Tolerance checks its own values too)


@dataclass(frozen=True)
class Option:
    """One option, declared once: ``bridge.conversion.options`` derives the CLI flag, the keyword of
    ``bridge.api.convert`` (and of every command subscribing to its group), the manifest field (and its JSON
    Schema) and ``bridge debug``'s flag from it.

    ``name`` is the API keyword and the manifest key (``manifest`` when the manifest spells it otherwise);
    ``type`` the API/manifest type; ``flags`` the CLI spellings (default ``--name-with-dashes``) and
    ``cli_type`` what the CLI parses when it differs (a comma-separated string for a list, ...);
    ``choices`` reads the allowed values from a registry when asked (never a second list); ``group``
    names the group a command subscribes to (``source``, ``inputs``, ``tolerance``, ``check``, ``isolation``,
    ``report``, ``convert``: ``bridge.conversion.options.GROUPS``), or the owner ``adapter:<framework>`` /
    ``target:<name>`` (adapters and targets declare their own options in their ``options`` attribute), or a
    command's own (``command:<name>``). ``route`` says where the value goes: ``config`` (a ConvertConfig field),
    ``source`` (``Source.options``, the adapters' knobs) or ``target`` (``ConvertConfig.target_options``).
    ``debug``: ``bridge debug`` takes it too. ``metavar`` is the placeholder ``--help`` shows after the flag
    (default: the name in capitals). ``source_specific``: a core option only some adapters read; those list its
    name in their ``honours`` attribute, the others refuse a value for it
    (``bridge.conversion.options.check_applies``) rather than ignore it. ``bounds``: the numbers it accepts
    (checked everywhere, written into the manifest schema). ``parse``: turns the CLI's text into the API value
    (``onnxruntime,openvino`` -> a list).
    """

    name: str
    type: Any
    default: Any
    help: str
    flags: tuple[str, ...] = ()
    cli_type: Any = None
    choices: Callable[[], Sequence[str]] | None = None
    group: str = "convert"
    route: str = "config"
    debug: bool = True
    manifest: str | None = ""  # "" = same as name; None = not a manifest field (the migrate worker sets it)
    metavar: str | None = None
    source_specific: bool = False
    bounds: Bounds | None = None
    parse: Callable[[Any], Any] | None = None

    @property
    def cli_flags(self) -> tuple[str, ...]:
        return self.flags or ("--" + self.name.replace("_", "-"),)

    @property
    def manifest_name(self) -> str | None:
        return self.name if self.manifest == "" else self.manifest

    def check_choice(self, value: Any) -> None:
        """UsageError naming the flag and the choices when ``value`` is not one of them."""
        if self.choices is None or value is None:
            return
        known = list(self.choices())
        for v in value if isinstance(value, (list, tuple)) else [value]:
            if v not in known:
                raise UsageError(f"{self.cli_flags[0]} '{v}'{did_you_mean(str(v), known)}: choose one of "
                                 f"{', '.join(known)}")


@dataclass(frozen=True)
class InputValues:
    """What generated inputs look like (``--input-kind``, ``--input-range``), for tracing and validation alike.

    ``normal``: standard normal floats; ``image``: image-like arrays (smooth gradients, flat
    rectangles, fine texture) in [0, 1] for float inputs and [0, 255] for integer ones. ``range``
    rescales floats to [LO, HI] (e.g. 0,255 for a model that normalises raw pixels itself).
    """

    kind: str = "normal"
    range: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        if self.kind not in INPUT_KINDS:
            raise UsageError(f"--input-kind '{self.kind}'{did_you_mean(self.kind, INPUT_KINDS)}: choose one of "
                             f"{', '.join(INPUT_KINDS)}")
        if self.range is not None:
            lo, hi = (float(v) for v in self.range)
            if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
                raise UsageError(f"--input-range {lo},{hi}: expected LO,HI with finite LO < HI")
            object.__setattr__(self, "range", (lo, hi))

    @classmethod
    def parse(cls, kind: str | None, range_text: str | tuple[float, float] | None) -> InputValues:
        """``--input-kind`` and ``--input-range LO,HI`` (either may be None)."""
        rng: tuple[float, float] | None = None
        if isinstance(range_text, str):
            try:
                lo, hi = (float(v) for v in range_text.split(","))
            except ValueError:
                raise UsageError(f"--input-range '{range_text}': expected LO,HI, e.g. 0,1 or 0,255") from None
            rng = (lo, hi)
        elif range_text is not None:
            rng = (float(range_text[0]), float(range_text[1]))
        return cls(kind or "normal", rng)

    def describe(self) -> str:
        base = {"normal": "standard normal", "image": "image-like"}[self.kind]
        return base + (f" in [{self.range[0]:g}, {self.range[1]:g}]" if self.range else
                       (" in [0, 1] (floats) / [0, 255] (integers)" if self.kind == "image" else ""))


@dataclass(frozen=True)
class ExportSpec:
    """What an adapter is asked to produce: input shapes/dtypes, named dynamic axes, target opset,
    and optionally the names to give the model's outputs (in the order the model returns them).

    ``examples`` makes the arrays a tracing exporter runs the model on (the same inputs validation
    uses: ``--feeds`` or generated per ``--input-kind/--input-range``), given the resolved input specs;
    None = the adapter's own.
    """

    inputs: tuple[InputSpec, ...] = ()
    dynamic: tuple[DynamicAxis, ...] = ()
    opset: int = DEFAULT_OPSET
    output_names: tuple[str, ...] = ()
    examples: Any = field(default=None, compare=False)  # Callable[[Sequence[InputSpec]], dict[str, np.ndarray]]
    # False: no opset was asked; ``opset`` is only what exporters are asked for, the ONNX stage keeps the
    # exporter's opset (``opsets.target``)
    opset_asked: bool = field(default=True, compare=False)

    def input(self, name: str) -> InputSpec | None:
        return next((s for s in self.inputs if s.name == name), None)


@dataclass(frozen=True)
class Source:
    """What the user pointed at: a path or ``module:factory`` string, or a live Python object.

    ``weights`` is a side file (PyTorch state_dict, MXNet .params); ``options`` carries
    framework-specific knobs (e.g. a TF signature name) without widening this class.
    """

    location: str | None = None
    obj: Any = None
    weights: Path | None = None
    options: Mapping[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        if self.location:
            return self.location
        return f"<{type(self.obj).__module__}.{type(self.obj).__qualname__} object>"

    @property
    def path(self) -> Path | None:
        """The source as a filesystem path, when it is one (``module:factory`` strings are not)."""
        if self.location is None:
            return None
        p = Path(self.location)
        return p if p.exists() else None


@dataclass(frozen=True)
class ConvertConfig:
    """Everything the conversion recipe needs, built from the declared options by
    ``bridge.conversion.options.build_config`` (choices are checked there, against the registries: the
    registries are the only lists); the checks below are those that relate several options."""

    source: Source
    output: Path
    framework: str | None = None
    export: ExportSpec = ExportSpec()
    validate: tuple[str, ...] | None = None  # None = default (onnxruntime when the source is runnable)
    tolerance: Tolerance = DEFAULT_TOLERANCE
    report: Path | None = None
    seed: int = 0
    detection_format: str = "mxnet"  # how lowered detection layers emit results (bridge.passes.contrib.nms)
    max_detections: int | None = None
    feeds: Path | None = None  # validation inputs (.npz by input name) instead of seeded random data
    to: str = "onnx"  # the delivery target (bridge.targets); its own options are in target_options
    target_options: Mapping[str, Any] = field(default_factory=dict)  # the target's option group, by name
    artefact_dir: Path | None = None  # where target artefacts go (default: beside the .onnx)
    artefacts: Mapping[str, Path] = field(default_factory=dict)  # the target's artefacts: name -> path (its place())
    isolate: bool = True  # run the source reference and each runtime in a child process (bridge.runtimes.isolated)
    timeout: float | None = 600.0  # seconds per reference/runtime step in that child
    detections: tuple[str, ...] = ()  # --detections ROLE=OUTPUT,... groups (parsed by bridge.validation.detection.layouts)
    input_values: InputValues = InputValues()  # what generated tracing/validation inputs look like
    external_data: bool | None = None  # weights to <output>.data (None: only past protobuf's 2 GiB limit)
    strict: bool = False  # a vacuous or skipped validation fails
    validate_given: bool = False  # --validate was given explicitly: a validation that cannot run fails
    values: Mapping[str, Any] = field(default_factory=dict, compare=False)  # every convert option's value, by name
    strip_provenance: bool = False  # write nodes without their provenance metadata (bridge.provenance)

    def __post_init__(self) -> None:
        if self.max_detections is not None and self.max_detections <= 0:
            raise UsageError(f"--max-detections {self.max_detections}: must be a positive number")
        names = [s.name for s in self.export.inputs]
        if len(names) != len(set(names)):
            raise UsageError(f"--input names repeat: {names}")
        seen: set[tuple[str, int]] = set()
        for d in self.export.dynamic:
            if (d.input, d.axis) in seen:
                raise UsageError(f"--dynamic names {d.input} axis {d.axis} twice")
            seen.add((d.input, d.axis))
        if self.output.suffix.lower() != ".onnx":
            raise UsageError(f"-o '{self.output}': the output of convert is an .onnx file")
        check_unique("--output-names", self.export.output_names)
        if any(not n.strip() for n in self.export.output_names):
            raise UsageError("--output-names: names cannot be empty")
        if self.report is not None and self.report.suffix.lower() not in REPORT_SUFFIXES:
            raise UsageError(f"--report {self.report}: use a .json, .md or .html file")
        # checked before anything runs or is written: an output must not destroy an input
        from bridge.io import refuse_overwriting_inputs

        inputs = [self.source.path, self.weights_path, self.feeds]
        refuse_overwriting_inputs(self.output, inputs, "-o")
        if self.report is not None:
            refuse_overwriting_inputs(self.report, [*inputs, self.output], "--report")

    @property
    def weights_path(self) -> Path | None:
        return Path(self.source.weights) if self.source.weights else None
