"""Typed configuration shared by the Python API and the CLI.

The CLI only parses strings into these objects (``InputSpec.parse``, ``DynamicAxis.parse``, ...);
the library entry points in ``bridge.api`` take them (or the same strings) and never see argv.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bridge.errors import UsageError
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
DETECTION_FORMATS = ("mxnet", "boxes-scores-classes", "indices")

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


@dataclass(frozen=True)
class InputSpec:
    """One model input: name, concrete sample shape (None = take it from the source) and dtype."""

    name: str
    shape: tuple[int, ...] | None = None
    dtype: str = "float32"

    @classmethod
    def parse(cls, text: str) -> InputSpec:
        """Parse ``NAME:4,3,64,64`` or ``NAME:4,3,64,64:int64`` (shape may be empty: ``NAME``)."""
        parts = text.split(":")
        if not parts[0] or len(parts) > 3:
            raise UsageError(f"--input '{text}': expected NAME:SHAPE[:DTYPE], e.g. images:4,3,64,64")
        shape: tuple[int, ...] | None = None
        if len(parts) >= 2 and parts[1].strip():
            try:
                shape = tuple(int(d) for d in parts[1].replace("x", ",").split(","))
            except ValueError:
                raise UsageError(f"--input '{text}': shape must be comma-separated integers") from None
            if any(d <= 0 for d in shape):
                raise UsageError(f"--input '{text}': every dim must be a positive integer (use --dynamic for symbolic ones)")
        dtype = canonical_dtype(parts[2]) if len(parts) == 3 else "float32"
        return cls(parts[0], shape, dtype)


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
    """Allowed difference per output: |cand - ref| <= atol + rtol * |ref| (numpy.isclose semantics).

    Every value must be a finite number >= 0 (UsageError otherwise, so every entry point rejects
    ``--atol nan``: a NaN tolerance makes every comparison false and turned errors into PASS).
    """

    atol: float = 1e-4
    rtol: float = 1e-3
    per_output: Mapping[str, tuple[float, float]] = field(default_factory=dict)

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
        return cls(base.atol, base.rtol, per)


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


@dataclass(frozen=True)
class ExportSpec:
    """What an adapter is asked to produce: input shapes/dtypes, named dynamic axes, target opset,
    and optionally the names to give the model's outputs (in the order the model returns them)."""

    inputs: tuple[InputSpec, ...] = ()
    dynamic: tuple[DynamicAxis, ...] = ()
    opset: int = DEFAULT_OPSET
    output_names: tuple[str, ...] = ()

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
    """Everything ``bridge.api.convert`` needs, validated on construction (names of frameworks, targets and
    runtimes are checked against their registries by ``bridge.api``: the registries are the only lists)."""

    source: Source
    output: Path
    framework: str | None = None
    export: ExportSpec = ExportSpec()
    validate: tuple[str, ...] | None = None  # None = default (onnxruntime when the source is runnable)
    tolerance: Tolerance = DEFAULT_TOLERANCE
    report: Path | None = None
    seed: int = 0
    detection_format: str = "mxnet"  # how lowered detection layers emit results (see bridge.validation.detection)
    max_detections: int | None = None
    feeds: Path | None = None  # validation inputs (.npz by input name) instead of seeded random data
    to: str = "onnx"  # "tensorflow" also writes a SavedModel (via onnx-tf) next to the .onnx
    saved_model: Path | None = None  # where the SavedModel goes (default: <output stem>_saved_model)
    isolate: bool = True  # run the source reference and each runtime in a child process (bridge.runtimes.isolated)
    timeout: float | None = 600.0  # seconds per reference/runtime step in that child

    @property
    def saved_model_dir(self) -> Path:
        return self.saved_model or self.output.with_name(self.output.stem + "_saved_model")

    def __post_init__(self) -> None:
        if self.detection_format not in DETECTION_FORMATS:
            raise UsageError(f"--detection-format '{self.detection_format}': choose one of {', '.join(DETECTION_FORMATS)}")
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
