"""What ``--anchors`` names, resolved to anchors: a tensor of the model, a file of anchors (.npy / .csv), or an
anchor generator declared in a small YAML (or JSON) file or by name with ``--anchor-option KEY=VALUE``.

Generators (``bridge.passes.contrib.anchor_generators``): ``ssd`` (MediaPipe's SsdAnchorsCalculator; its
pbtxt field names are accepted as written there: input_size_height / input_size_width, anchor_offset_x /
anchor_offset_y, feature_map_height / feature_map_width), ``multibox_prior`` (MXNet MultiBoxPrior per feature
map) and ``yolo`` (a YOLO grid). A YAML may also point at a file: ``file: anchors.npy`` (relative to the YAML)
with ``format: center-size | corners`` and ``order: x-first | y-first``.

A bare file is read in ``--box-format``'s layout: [N, 4] corners (xyxy / yxyx) or centre-size (cxcywh /
cycxhw) in that axis order; [N, 6] adds the YOLO strides (x, y order as the boxes). Its values are used as
they are (normalised or pixels: whatever the head was trained with).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from bridge.errors import UsageError
from bridge.passes.contrib.anchor_generators import (
    AnchorSet,
    corners_to_centers,
    multibox_prior_anchors,
    ssd_anchors,
    yolo_anchors,
)

BOX_FORMATS = ("xyxy", "yxyx", "cxcywh", "cycxhw")  # x or y first; corners or centre-size
SPEC_SUFFIXES = (".yaml", ".yml", ".json")
FILE_SUFFIXES = (".npy", ".csv")
MAX_SPEC_BYTES = 1 << 20


def _pair(value: Any) -> Any:
    """A scalar given for a (height, width) or (x, y) pair stands for both."""
    return [value, value] if isinstance(value, (int, float)) and not isinstance(value, bool) else value


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SsdSpec(_Spec):
    """MediaPipe SsdAnchorsCalculatorOptions (ssd_anchors_calculator.proto; its defaults)."""

    generator: Literal["ssd"]
    num_layers: int = Field(ge=1)
    input_size: tuple[int, int]  # height, width
    min_scale: float
    max_scale: float
    strides: list[int]
    feature_maps: list[tuple[int, int]] = []  # height, width per layer
    aspect_ratios: list[float] = []
    anchor_offset: tuple[float, float] = (0.5, 0.5)  # x, y
    interpolated_scale_aspect_ratio: float = 1.0
    fixed_anchor_size: bool = False
    reduce_boxes_in_lowest_layer: bool = False

    @model_validator(mode="before")
    @classmethod
    def _mediapipe_names(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        if "input_size_height" in data or "input_size_width" in data:
            data["input_size"] = (data.pop("input_size_height", None), data.pop("input_size_width", None))
        if "anchor_offset_x" in data or "anchor_offset_y" in data:
            data["anchor_offset"] = (data.pop("anchor_offset_x", 0.5), data.pop("anchor_offset_y", 0.5))
        if "feature_map_height" in data or "feature_map_width" in data:
            heights, widths = data.pop("feature_map_height", []), data.pop("feature_map_width", [])
            data["feature_maps"] = list(zip(_listed(heights), _listed(widths), strict=False))
        for key in ("input_size", "anchor_offset"):
            if key in data:
                data[key] = _pair(data[key])
        for key in ("strides", "aspect_ratios"):
            if key in data:
                data[key] = _listed(data[key])
        return data

    def generate(self) -> AnchorSet:
        return ssd_anchors(num_layers=self.num_layers, input_size=self.input_size, min_scale=self.min_scale,
                           max_scale=self.max_scale, strides=self.strides, feature_maps=self.feature_maps,
                           aspect_ratios=self.aspect_ratios, anchor_offset=self.anchor_offset,
                           interpolated_scale_aspect_ratio=self.interpolated_scale_aspect_ratio,
                           fixed_anchor_size=self.fixed_anchor_size,
                           reduce_boxes_in_lowest_layer=self.reduce_boxes_in_lowest_layer)


class PriorLayer(_Spec):
    feature_map: tuple[int, int]  # height, width
    sizes: list[float]
    ratios: list[float] = [1.0]
    steps: tuple[float, float] = (-1.0, -1.0)  # y, x; <= 0: 1 / feature-map size
    offsets: tuple[float, float] = (0.5, 0.5)  # y, x

    @field_validator("feature_map", "steps", "offsets", mode="before")
    @classmethod
    def _pairs(cls, value: Any) -> Any:
        return _pair(value)


class MultiBoxPriorSpec(_Spec):
    generator: Literal["multibox_prior"]
    layers: list[PriorLayer] = Field(min_length=1)
    clip: bool = False

    def generate(self) -> AnchorSet:
        return multibox_prior_anchors([la.feature_map for la in self.layers], [la.sizes for la in self.layers],
                                      [la.ratios for la in self.layers], [la.steps for la in self.layers],
                                      [la.offsets for la in self.layers], self.clip)


class YoloSpec(_Spec):
    generator: Literal["yolo"]
    input_size: tuple[int, int]  # height, width
    strides: list[int]
    priors: list[list[tuple[float, float]]]  # per level: (w, h) in pixels
    offset: float = 0.5
    order: Literal["cell-major", "prior-major"] = "cell-major"

    @field_validator("input_size", mode="before")
    @classmethod
    def _size(cls, value: Any) -> Any:
        return _pair(value)

    def generate(self) -> AnchorSet:
        return yolo_anchors(input_size=self.input_size, strides=self.strides, priors=self.priors, offset=self.offset,
                            order=self.order)


class FileSpec(_Spec):
    file: Path
    format: Literal["center-size", "corners"] = "center-size"
    order: Literal["x-first", "y-first"] = "x-first"


GeneratorSpec = Annotated[SsdSpec | MultiBoxPriorSpec | YoloSpec, Field(discriminator="generator")]


class _Generator(BaseModel):
    spec: GeneratorSpec


GENERATOR_NAMES = ("ssd", "multibox_prior", "yolo")


def _listed(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else [value]


@dataclass(frozen=True)
class AnchorSource:
    """What ``--anchors`` resolved to: numpy anchors (generated or read from a file), or a tensor of the model."""

    anchors: AnchorSet | None = None
    tensor: str | None = None
    origin: str = ""  # how the user gave them, for messages: "ssd generator (blazeface.yaml)", "anchors.npy"


def resolve_anchors(text: str, options: dict[str, str] | None, *, tensors: set[str], box_format: str) -> AnchorSource:
    """``--anchors TEXT`` (with ``--anchor-option`` pairs for a generator named by TEXT) as an ``AnchorSource``.

    ``box_format`` gives a bare file's layout and axis order (module docstring)."""
    options = dict(options or {})
    if text in tensors and not options:
        return AnchorSource(tensor=text, origin=f"tensor '{text}'")
    if text in GENERATOR_NAMES:
        spec = {"generator": text, **{k: _option_value(v) for k, v in options.items()}}
        return AnchorSource(anchors=_generate(spec, f"--anchors {text}"), origin=f"{text} generator (--anchor-option)")
    if options:
        raise UsageError(f"--anchor-option applies to a generator named by --anchors ({', '.join(GENERATOR_NAMES)}); "
                         f"--anchors '{text}' is not one")
    path = Path(text)
    suffix = path.suffix.lower()
    if suffix in SPEC_SUFFIXES:
        return _from_spec_file(path, box_format)
    if suffix in FILE_SUFFIXES or path.is_file():
        if not path.is_file():
            raise UsageError(f"--anchors {text}: no such file")
        corners = box_format in ("xyxy", "yxyx")
        y_first = box_format in ("yxyx", "cycxhw")
        return AnchorSource(anchors=read_anchor_file(path, corners=corners, y_first=y_first, what=f"--anchors {text}"),
                            origin=str(path))
    raise UsageError(f"--anchors '{text}' is neither a tensor of the model, a generator ({', '.join(GENERATOR_NAMES)}), "
                     f"an anchor file ({', '.join(FILE_SUFFIXES)}) nor a generator spec ({', '.join(SPEC_SUFFIXES)})")


def _option_value(text: str) -> Any:
    """An ``--anchor-option`` value: YAML (numbers, true/false, [lists]); a bare ``8,16,16`` is a list."""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise UsageError(f"--anchor-option value '{text}' is not valid YAML ({exc})") from None
    if isinstance(value, str) and "," in value:
        return [_option_value(part) for part in value.split(",") if part.strip()]
    return value


def _from_spec_file(path: Path, box_format: str) -> AnchorSource:
    where = f"--anchors {path}"
    if not path.is_file():
        raise UsageError(f"{where}: no such file")
    if path.stat().st_size > MAX_SPEC_BYTES:
        raise UsageError(f"{where}: {path.stat().st_size:,} bytes is not a small anchor spec")
    text = path.read_text(encoding="utf-8", errors="replace")
    try:
        data = json.loads(text) if path.suffix.lower() == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise UsageError(f"{where}: not valid {path.suffix.lstrip('.').upper()} ({exc})") from None
    if not isinstance(data, dict):
        raise UsageError(f"{where}: expected a mapping (generator: ssd | multibox_prior | yolo, or file: ...)")
    if "file" in data:
        try:
            spec = FileSpec.model_validate(data)
        except ValidationError as exc:
            raise UsageError(f"{where}: {_errors(exc)}") from None
        file = spec.file if spec.file.is_absolute() else path.parent / spec.file
        if not file.is_file():
            raise UsageError(f"{where}: file {file} not found")
        anchors = read_anchor_file(file, corners=spec.format == "corners", y_first=spec.order == "y-first",
                                   what=f"{where} (file {file})")
        return AnchorSource(anchors=anchors, origin=f"{file} (via {path})")
    return AnchorSource(anchors=_generate(data, where), origin=f"{data.get('generator')} generator ({path})")


def _generate(data: dict[str, Any], where: str) -> AnchorSet:
    if data.get("generator") not in GENERATOR_NAMES:
        raise UsageError(f"{where}: generator must be one of {', '.join(GENERATOR_NAMES)} "
                         f"(got {data.get('generator')!r})")
    try:
        spec = _Generator.model_validate({"spec": data}).spec
    except ValidationError as exc:
        raise UsageError(f"{where}: {_errors(exc)}") from None
    return spec.generate()


def _errors(exc: ValidationError) -> str:
    """pydantic's errors in one line each: ``strides: Field required``."""
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"] if p not in ("spec", "ssd", "multibox_prior", "yolo"))
        parts.append(f"{loc or 'spec'}: {err['msg']}")
    return "; ".join(parts)


def read_anchor_file(path: Path, *, corners: bool, y_first: bool, what: str) -> AnchorSet:
    """Anchors [N, 4] (or [N, 6] with YOLO strides) from .npy or .csv, as centre-size rows x-first."""
    try:
        if path.suffix.lower() == ".csv":
            array = np.loadtxt(path, delimiter=",", dtype=np.float64, ndmin=2, comments="#")
        else:
            array = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise UsageError(f"{what}: not a readable anchor array ({exc})") from None
    array = np.asarray(array)
    if array.dtype.kind not in "fiu" or array.size == 0 or array.shape[-1] not in (4, 6):
        raise UsageError(f"{what}: shape {list(array.shape)} ({array.dtype}) is not numbers [..., N, 4] (or [N, 6] "
                         "with YOLO strides)")
    rows = array.reshape(-1, array.shape[-1]).astype(np.float32)
    if not np.isfinite(rows).all():
        raise UsageError(f"{what}: holds NaN or infinite values")
    boxes, strides = rows[:, :4], (rows[:, 4:6] if rows.shape[1] == 6 else None)
    if y_first:
        boxes = boxes[:, [1, 0, 3, 2]]
        strides = strides[:, [1, 0]] if strides is not None else None
    if corners:
        boxes = corners_to_centers(boxes)
    return AnchorSet(np.ascontiguousarray(boxes), None if strides is None else np.ascontiguousarray(strides),
                     ((f"file {path.name}", rows.shape[0]),))


__all__ = ["BOX_FORMATS", "GENERATOR_NAMES", "AnchorSource", "read_anchor_file", "resolve_anchors"]
