"""Batch-migration manifests: YAML text -> validated, fully resolved per-model entries.

A manifest lists the models of a zoo (``models:``) with the options ``bridge convert`` takes, plus a
``defaults:`` block merged into every entry (dicts such as ``tolerance`` merge key by key). A source
with glob characters (``zoo/*/model-symbol.json``) expands into one entry per match. Relative paths
are taken from the manifest's folder. Validation reports *every* bad field of every entry at once, one
line each, before any model runs. The pydantic models below are the single definition of the format:
the published JSON Schema (``manifest.schema.json``) is generated from them (``write_schema``).
"""

from __future__ import annotations

import copy
import glob as globlib
import hashlib
import json
import re
import typing
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)

from bridge.config import DEFAULT_TOLERANCE, TOLERANCE_BOUNDS, DynamicAxis, InputSpec, Option, canonical_dtype
from bridge.errors import UsageError
from bridge.io import require_file
from bridge.limits import parse_size as limits_parse_size
from bridge.migrate.loading import check_raw, read_yaml

SCHEMA_PATH = Path(__file__).with_name("manifest.schema.json")
SCHEMA_ID = "https://github.com/bridge/bridge/manifest.schema.json"
_GLOB = re.compile(r"[*?\[]")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")  # used as a folder name under --out

class ManifestError(UsageError):
    """A manifest that does not parse or validate; the message lists every problem, one per line."""

    def __init__(self, where: str, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__(f"{where}: {len(self.problems)} problem(s):\n" + "\n".join(f"  {p}" for p in self.problems))


class _Strict(BaseModel):
    # no NaN or infinity in any number (tolerances, timeouts): YAML's .inf would pass ``ge=0`` and then travel
    # to the worker as JSON null ("--atol None"); the Tolerance type refuses it too, whichever layer builds one
    model_config = ConfigDict(extra="forbid", populate_by_name=True, allow_inf_nan=False)


_TOL = TOLERANCE_BOUNDS.schema()  # the bounds the atol / rtol options declare: finite, >= 0


class OutputTolerance(_Strict):
    """Tolerance of one output: |candidate - reference| <= atol + rtol * |reference|; unset = the global one."""

    atol: Annotated[float, Field(**_TOL)] | None = None
    rtol: Annotated[float, Field(**_TOL)] | None = None


class ToleranceSpec(_Strict):
    """Global tolerance plus per-output overrides (``outputs: {boxes: {atol: 1e-3}}``)."""

    atol: Annotated[float, Field(description="absolute tolerance for every output", **_TOL)] = DEFAULT_TOLERANCE.atol
    rtol: Annotated[float, Field(description="relative tolerance for every output", **_TOL)] = DEFAULT_TOLERANCE.rtol
    outputs: dict[str, OutputTolerance] = Field(default_factory=dict, description="per output name")


class InputEntry(_Strict):
    """One model input: its sample shape, dtype and named dynamic axes (``{0: batch}``)."""

    name: Annotated[str, Field(min_length=1)]
    shape: list[Annotated[int, Field(gt=0)]] | None = None
    dtype: str = "float32"
    dynamic: dict[int, str] = Field(default_factory=dict, description="axis -> label, e.g. {0: batch}")

    @field_validator("dtype")
    @classmethod
    def _dtype(cls, v: str) -> str:
        return str(_usage_to_value(canonical_dtype, v))

    @field_validator("dynamic")
    @classmethod
    def _labels(cls, v: dict[int, str]) -> dict[int, str]:
        for axis, label in v.items():
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", label):
                raise ValueError(f"axis {axis}: label '{label}' must be an identifier, e.g. batch")
        return v


# --- dataset validation (issue 33): the dataset option group as one ``dataset:`` object ---
class PreprocessingEntry(_Strict):
    """How the dataset's images become inputs (unset: the source framework's defaults, stated in the report)."""

    resize: str | None = Field(default=None, description="stretch | letterbox | shorter | none")
    channel_order: str | None = Field(default=None, description="RGB | BGR")
    layout: str | None = Field(default=None, description="NCHW | NHWC")
    dtype: str | None = None
    mean: list[float] | str | None = Field(default=None, description="per channel, subtracted after scale")
    std: list[float] | str | None = Field(default=None, description="per channel, divided by last")
    scale: float | str | None = Field(default=None, description="pixels (0..255) multiplied first, e.g. 1/255")

    @field_validator("resize", "channel_order", "layout")
    @classmethod
    def _choice(cls, v: str | None, info: Any) -> str | None:
        """One of the values ``--resize`` / ``--channel-order`` / ``--layout`` take (declared with them)."""
        from bridge.validation.dataset.preprocess import CHANNEL_ORDERS, LAYOUTS, RESIZE_MODES

        choices = {"resize": RESIZE_MODES, "channel_order": CHANNEL_ORDERS, "layout": LAYOUTS}[info.field_name]
        if v is not None and v not in choices:
            raise ValueError(f"'{v}': choose one of {', '.join(choices)}")
        return v

    @field_validator("mean", "std", "scale")
    @classmethod
    def _numbers(cls, v: Any, info: Any) -> Any:
        from bridge.validation.dataset.preprocess import parse_floats

        if v is not None:
            text = ",".join(map(str, v)) if isinstance(v, list) else str(v)
            _usage_to_value(lambda t: parse_floats(t, info.field_name), text)
        return v


class DatasetEntry(_Strict):
    """Validate on these images too (``bridge convert --dataset``): agreement with the source and mAP per
    runtime, judged by the accuracy budget."""

    path: str = Field(description="a folder of images (jpg/png, recursively), an image-list file or an .npz")
    labels: str | None = Field(default=None, description="COCO json or a folder of VOC xml")
    limit: Annotated[int, Field(gt=0)] | None = Field(default=None, description="the first N images")
    batch: Annotated[int, Field(gt=0)] = 8
    classes: str = Field(default="index", description="index | id | category names in class order")
    agreement_score: Annotated[float, Field(ge=0, le=1)] = 0.5
    min_agreement: Annotated[float, Field(ge=0, le=1)] = 0.99
    max_map_drop: Annotated[float, Field(ge=0, le=1)] = 0.005
    min_agreement_ap50_95: Annotated[float, Field(ge=0, le=1)] = 0.95
    min_keypoint_agreement: Annotated[float, Field(ge=0, le=1)] = 0.99
    shard_size: Annotated[int, Field(ge=0)] = Field(
        default=2000, description="images per shard: a dataset of more images runs in shards on the executor "
        "(bridge.migrate.shards), resumable shard by shard; 0: never sharded")
    preprocessing: PreprocessingEntry | None = None

    def option_values(self, base: Path) -> dict[str, Any]:
        """The dataset options (``bridge.validation.dataset.options``) this object stands for."""
        pre = self.preprocessing or PreprocessingEntry()

        def listed(value: Any) -> Any:
            return ",".join(str(v) for v in value) if isinstance(value, list) else value

        return {"dataset": _resolve_path(base, self.path), "labels": _resolve_path(base, self.labels),
                "dataset_limit": self.limit, "dataset_batch": self.batch, "classes": self.classes,
                "agreement_score": self.agreement_score, "min_agreement": self.min_agreement,
                "max_map_drop": self.max_map_drop, "min_agreement_ap50_95": self.min_agreement_ap50_95,
                "min_keypoint_agreement": self.min_keypoint_agreement, "resize": pre.resize, "channel_order": pre.channel_order,
                "layout": pre.layout, "dataset_dtype": pre.dtype, "mean": listed(pre.mean), "std": listed(pre.std),
                "scale": None if pre.scale is None else str(pre.scale)}
# --- end dataset validation ---


# manifest fields whose form differs from the option's API type (objects, lists); every other convert option
# appears under its manifest name with its declared type and bounds (bridge.conversion.options: one declaration
# each; ``Option.bounds`` become the field's constraints)
_FIELD_TYPES: dict[str, Any] = {
    "inputs": list[str | InputEntry],
    "tolerance": ToleranceSpec,
    "outputs": list[str],
    "runtimes": list[str],
    "max_memory": int | str,
    "dataset": DatasetEntry,  # --dataset (issue 33)
}
_FIELD_HELP = {"tolerance": "global atol/rtol plus per-output overrides ({outputs: {boxes: {atol: 1e-3}}})",
               "inputs": "NAME:SHAPE[:DTYPE] strings or objects",
               "dataset": "validate on these images too: {path, labels, limit, preprocessing: {...}, min_agreement, "
                          "max_map_drop} (agreement and mAP per runtime)",
               "max_memory": "memory limit of the worker (its address space, and the sizes bridge's readers "
                             "accept): bytes, 4GiB, 512MB, 0.25ram"}
# the migration's own fields (not convert options)
_OWN_FIELDS: dict[str, Any] = {
    "name": (str | None, Field(default=None, description="unique name (a folder under --out); with a glob source, "
                               "may use {stem} and {parent} of each match (default: {parent})")),
    "source": (str | None, Field(default=None, description="model file/folder, file.py:factory or module:factory; "
                                 "glob characters expand into one entry per match")),
    "params": (str | None, Field(default=None, description="MXNet .params (alias of weights)")),
    "options": (dict[str, str] | None, Field(default=None, description="framework knobs, e.g. {signature: "
                                             "serving_default}")),
    "disabled": (bool | None, Field(default=None, description="listed but not run (reported as disabled)")),
    "timeout": (Annotated[float, Field(gt=0)] | None, Field(default=None, description="seconds before the worker is "
                                                            "killed")),
}


# convert options a manifest cannot set: the migration decides where each model's files go
_PLACED = {
    "artefact_dir": "a migration writes each model's artefacts into its own folder under --out "
                    "(models/<name>/), so a manifest cannot place them elsewhere",
    "report": "a migration writes each model's report as models/<name>/conversion.json under --out",
}


def _not_none(kind: Any) -> Any:
    """``int | None`` -> ``int`` (the field is optional anyway; the bounds constrain the value)."""
    args = [a for a in typing.get_args(kind) if a is not type(None)]
    return args[0] if len(args) == 1 and type(None) in typing.get_args(kind) else kind


def _plain(kind: Any) -> Any:
    """An option's API type as a manifest (YAML / JSON) type: paths are strings."""
    return str if kind is Path else str | None if kind == (Path | None) else kind


def manifest_fields() -> dict[str, list[Option]]:
    """Manifest field -> the convert options it holds (``tolerance`` holds atol, rtol and per-output ones)."""
    from bridge.conversion.options import convert_options

    fields: dict[str, list[Option]] = {}
    for o in convert_options():
        if o.manifest_name is not None:
            fields.setdefault(o.manifest_name, []).append(o)
    return fields


def _entry_fields() -> type[BaseModel]:
    """The model of one entry's options, built from the option declarations and the registries now."""
    definitions: dict[str, Any] = dict(_OWN_FIELDS)
    for field, opts in manifest_fields().items():
        first = opts[0]
        kind = _FIELD_TYPES.get(field, _plain(first.type))
        if first.choices is not None:  # the registry's names now, as the schema's enum
            choice = Literal[tuple(first.choices())]  # type: ignore[misc, valid-type]
            kind = list[choice] if "list" in str(kind) else choice  # type: ignore[valid-type]
        if first.bounds is not None and field not in _FIELD_TYPES:
            kind = Annotated[_not_none(kind), Field(**first.bounds.schema())]
        definitions[field] = (kind | None, Field(default=None, description=_FIELD_HELP.get(field, first.help)))
    return create_model("EntryFields", __base__=_EntryBase, **definitions)  # type: ignore[call-overload, no-any-return]


class _EntryBase(_Strict):
    """Every option of one model; all optional here so ``defaults:`` can hold any subset."""

    @field_validator("inputs", check_fields=False)
    @classmethod
    def _inputs(cls, v: list[Any] | None) -> list[Any] | None:
        for item in v or ():
            if isinstance(item, str):
                _usage_to_value(InputSpec.parse, item)
        return v

    @field_validator("dynamic", check_fields=False)
    @classmethod
    def _dynamic(cls, v: list[str] | None) -> list[str] | None:
        for item in v or ():
            _usage_to_value(DynamicAxis.parse, item)
        return v

    @field_validator("max_memory", check_fields=False)
    @classmethod
    def _memory(cls, v: int | str | None) -> int | str | None:
        if v is not None:
            parse_size(v)
        return v

    @model_validator(mode="before")
    @classmethod
    def _placed_by_the_migration(cls, data: Any) -> Any:
        """Where outputs go is the migration's: refused by name rather than as an unknown field (or, as
        before, accepted and ignored)."""
        if isinstance(data, Mapping):
            for key, why in _PLACED.items():
                if key in data:
                    raise ValueError(f"{key}: {why}; remove it")
        return data

    @model_validator(mode="after")
    def _one_weights(self) -> Any:
        if getattr(self, "params", None) and getattr(self, "weights", None):
            raise ValueError("give params or weights, not both (they are the same field)")
        return self


def _models() -> tuple[type[BaseModel], type[BaseModel], type[BaseModel], type[BaseModel]]:
    """EntryFields, Entry (name and source required), Manifest and the published schema's model."""
    fields = _entry_fields()

    class Entry(fields):  # type: ignore[valid-type, misc]
        """A model entry after ``defaults:`` are merged in: ``name`` and ``source`` are required."""

        name: str = Field(description=_OWN_FIELDS["name"][1].description)  # type: ignore[assignment]
        source: str = Field(description=_OWN_FIELDS["source"][1].description)  # type: ignore[assignment]

        @field_validator("name")
        @classmethod
        def _folder_name(cls, v: str) -> str:
            if not _NAME.match(v):
                raise ValueError(f"'{v}' must be letters, digits and _ . + - (it names a folder under --out)")
            return v

    class Manifest(_Strict):
        """The manifest file: ``defaults:`` merged into every entry of ``models:``."""

        model_config = ConfigDict(extra="forbid", json_schema_extra={"$id": SCHEMA_ID,
                                                                     "title": "bridge batch-migration manifest"})
        version: Literal[1] = 1
        defaults: fields = Field(default_factory=lambda: fields())  # type: ignore[valid-type]
        models: list[Any] = Field(description="model entries: the fields of EntryFields; name and source "
                                             "required once defaults are merged")

    class ManifestSchema(Manifest):
        """Manifest as published: entries typed (validation merges ``defaults:`` into raw entries first)."""

        models: list[fields] = Field(description="model entries; name and source required once defaults "  # type: ignore[valid-type, assignment]
                                                 "are merged")

    ManifestSchema.__name__ = "Manifest"
    return fields, Entry, Manifest, ManifestSchema


def _usage_to_value(parse: Any, text: str) -> Any:
    """Run a bridge.config parser, turning its UsageError into the ValueError pydantic collects."""
    try:
        return parse(text)
    except UsageError as exc:
        raise ValueError(str(exc)) from None


def parse_size(value: int | str) -> int:
    """Bytes from ``2147483648``, ``4GiB``, ``4G``, ``512MB``, ``0.25ram``: ``--max-memory``'s syntax
    (``bridge.limits.parse_size``; ``ram`` is this machine's, resolved where the manifest is read)."""
    return int(_usage_to_value(lambda text: limits_parse_size(text, "max_memory"), str(value)))


# ----------------------------------------------------------------------------------------- resolved form


class ResolvedEntry(BaseModel):
    """One model to run: the migration's own fields, and every convert option as ``bridge.convert`` takes it
    (``convert``: option name -> value, paths absolute; ``options``: raw framework knobs)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    source: str
    disabled: bool = False
    timeout: float | None = 3600.0
    max_memory: int | None = None
    options: dict[str, str] = Field(default_factory=dict)
    convert: dict[str, Any] = Field(default_factory=dict)
    # convert options whose value came from ``defaults:`` (not set on the entry): applied where the entry's
    # adapter reads them, dropped with a note where it does not (``bridge.migrate.worker.convert_kwargs``)
    inherited: list[str] = Field(default_factory=list)
    dataset_shard_size: int = 0  # dataset: shard_size (bridge.migrate.shards); 0: not sharded

    def __getattr__(self, name: str) -> Any:  # entry.opset, entry.framework, ...: the convert option's value
        convert = self.__dict__.get("convert") or {}
        if name in convert:
            return convert[name]
        raise AttributeError(name)

    def to_dict(self) -> dict[str, Any]:
        return json.loads(self.model_dump_json())

    def files(self) -> list[Path]:
        """Files whose content decides the result (source file or folder, weights, feeds)."""
        paths = [_source_file(self.source), self.convert.get("weights"), self.convert.get("feeds"),
                 self.convert.get("dataset"), self.convert.get("labels")]
        return [Path(p) for p in paths if p]

    def fingerprint(self) -> str:
        """Changes whenever the entry or the content of any file it names changes (resume redoes it)."""
        fields = {k: v for k, v in self.to_dict().items() if k != "inherited"}  # decided by the fields themselves
        h = hashlib.sha256(json.dumps(fields, sort_keys=True).encode())
        for path in self.files():
            h.update(str(path).encode())
            for f in sorted(path.rglob("*")) if path.is_dir() else [path]:
                if f.is_file():
                    h.update(str(f.relative_to(path) if path.is_dir() else f.name).encode())
                    with f.open("rb") as fh:
                        h.update(hashlib.file_digest(fh, "sha256").digest())
                elif not f.exists():
                    h.update(b"<missing>")
        return h.hexdigest()


def _source_file(source: str) -> str | None:
    """The file behind a source: the path itself, or the .py of ``file.py:factory``; None for module:factory."""
    if ":" in source and source.rsplit(":", 1)[0].endswith(".py"):
        return source.rsplit(":", 1)[0]
    if ":" in source and not Path(source).exists():
        return None
    return source


def _resolve_path(base: Path, value: str | None) -> str | None:
    if value is None:
        return None
    p = Path(value).expanduser()
    return str(p if p.is_absolute() else (base / p).resolve())


def _resolve_source(base: Path, source: str) -> str:
    file = _source_file(source)
    if file is None:
        return source  # an importable module:factory
    if file != source:
        return f"{_resolve_path(base, file)}:{source.rsplit(':', 1)[1]}"
    return _resolve_path(base, source) or source


def _merge(defaults: Mapping[str, Any], entry: Mapping[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(dict(defaults))
    for key, value in entry.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _format_errors(where: str, exc: ValidationError, skip: Iterable[str] = ()) -> list[str]:
    """One line per error; ``skip``: top-level fields whose errors were already reported (from defaults:)."""
    lines = []
    skip = set(skip)
    for err in exc.errors(include_url=False):
        if err["loc"] and err["loc"][0] in skip:
            continue
        if err["type"] == "string_type" and "str" in err["loc"]:
            continue  # a union's "not a string" branch when an object was given: the object's errors say more
        loc = ".".join(str(p) for p in err["loc"] if not str(p).startswith(("function-after", "str", "InputEntry")))
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown field (check the spelling; see manifest.schema.json)"
        lines.append(f"{where}{'.' if where and loc else ''}{loc}: {msg}")
    return lines


def _resolve(entry: Any, base: Path, inherited: set[str] = frozenset()) -> ResolvedEntry:  # type: ignore[assignment]
    """Manifest values as ``bridge.convert``'s keywords (relative paths from the manifest's folder);
    ``inherited``: the manifest fields the entry took from ``defaults:``."""
    inputs: list[str] = []
    dynamic = list(entry.dynamic or ())
    for item in entry.inputs or ():
        if isinstance(item, str):
            inputs.append(item)
            continue
        shape = ",".join(str(d) for d in item.shape) if item.shape else ""
        inputs.append(f"{item.name}:{shape}:{item.dtype}")
        dynamic.extend(f"{item.name}:{axis}={label}" for axis, label in item.dynamic.items())
    tol = entry.tolerance or ToleranceSpec()
    special: dict[str, Any] = {
        "inputs": inputs, "dynamic": list(dict.fromkeys(dynamic)), "atol": tol.atol, "rtol": tol.rtol,
        "tolerance": [f"{k}={tol.atol if v.atol is None else v.atol},{tol.rtol if v.rtol is None else v.rtol}"
                      for k, v in tol.outputs.items()],
        "weights": _resolve_path(base, entry.weights or entry.params),
        "max_memory": parse_size(entry.max_memory) if entry.max_memory is not None else None,
        **(entry.dataset.option_values(base) if entry.dataset is not None else {}),  # --dataset (issue 33)
    }
    convert: dict[str, Any] = {}
    for field, opts in manifest_fields().items():
        for o in opts:
            value = special[o.name] if o.name in special else getattr(entry, field)
            if value is not None and o.type in (Path, Path | None):
                value = _resolve_path(base, value)
            convert[o.name] = o.default if value is None else value
    return ResolvedEntry(
        name=entry.name, source=_resolve_source(base, entry.source), disabled=bool(entry.disabled),
        timeout=entry.timeout if entry.timeout is not None else 3600.0,
        max_memory=special["max_memory"], options=dict(entry.options or {}), convert=convert,
        inherited=sorted(o.name for f, opts in manifest_fields().items() if f in inherited for o in opts),
        dataset_shard_size=entry.dataset.shard_size if entry.dataset is not None else 0,
    )


def _expand(raw: dict[str, Any], base: Path) -> list[dict[str, Any]]:
    """One raw entry per glob match (name from its template); a plain source gives itself."""
    source = raw.get("source")
    if not isinstance(source, str) or not _GLOB.search(source) or ":" in source:
        return [raw]
    pattern = source if Path(source).is_absolute() else str(base / source)
    matches = sorted(globlib.glob(pattern, recursive=True))
    if not matches:
        raise ValueError(f"source '{source}' matches no file")
    template = raw.get("name") or "{parent}"
    if len(matches) > 1 and "{" not in template:
        template += "-{parent}"
    out = []
    for m in matches:
        p = Path(m)
        try:
            name = template.format(stem=p.stem, parent=p.parent.name, name=p.name)
        except (KeyError, IndexError) as exc:
            raise ValueError(f"name template '{template}': unknown placeholder {exc}; use {{stem}}, {{parent}}") from None
        out.append({**raw, "name": name, "source": str(p)})
    return out


def load_manifest(manifest: str | Path | Mapping[str, Any] | Sequence[Mapping[str, Any]],
                  base_dir: str | Path | None = None) -> list[ResolvedEntry]:
    """Validate and resolve a manifest (a YAML file, its parsed dict, or a list of entry dicts).

    Raises ManifestError listing every problem (unknown fields, bad values, duplicate names, empty
    globs) with where it is: ``models[2] 'ssd'.opset: ...``.
    """
    where = "manifest"
    if isinstance(manifest, (str, Path)):
        path = Path(manifest)
        where = str(path)
        require_file(path, "manifest", missing=f"no such manifest: {path}")  # a FIFO or a folder named as such
        try:
            data = read_yaml(path)  # bounded and decoded before the schema sees it (bridge.migrate.loading)
        except yaml.YAMLError as exc:
            raise ManifestError(where, [f"not valid YAML: {exc}"]) from None
        base = Path(base_dir) if base_dir else path.resolve().parent
    else:
        data = {"models": list(manifest)} if isinstance(manifest, Sequence) else dict(manifest)
        base = Path(base_dir) if base_dir else Path.cwd()
    if not isinstance(data, Mapping):
        raise ManifestError(where, ["expected a mapping with 'models:' (and optionally 'defaults:')"])
    check_raw(data, where)
    problems: list[str] = []
    _fields, Entry, Manifest, _schema = _models()
    try:
        Manifest.model_validate(data)
    except ValidationError as exc:  # listed with the entries' problems below, not instead of them
        problems.extend(_format_errors("", exc))
    raw_defaults = data.get("defaults")  # validated above (Manifest.defaults); merged raw so entries can override
    raw_defaults = raw_defaults if isinstance(raw_defaults, Mapping) else {}
    raw_defaults = {k: v for k, v in raw_defaults.items() if k not in _PLACED}  # refused once, there
    models = data.get("models")
    if not isinstance(models, list):
        raise ManifestError(where, problems or ["models: expected a list of model entries"])
    entries: list[ResolvedEntry] = []
    for i, raw in enumerate(models):
        label = f"models[{i}]" + (f" '{raw.get('name')}'" if isinstance(raw, Mapping) and raw.get("name") else "")
        if not isinstance(raw, Mapping):
            problems.append(f"{label}: expected a mapping of options, got {type(raw).__name__}")
            continue
        merged = _merge(raw_defaults, raw)
        try:
            expanded = _expand(merged, base)
        except ValueError as exc:
            problems.append(f"{label}.source: {exc}")
            continue
        for item in expanded:
            try:
                entry = Entry.model_validate(item)
            except ValidationError as exc:  # fields taken from a bad defaults: block were reported there
                problems.extend(_format_errors(label, exc, skip=set(raw_defaults) - set(raw)))
                continue
            entries.append(_resolve(entry, base, inherited=set(raw_defaults) - set(raw)))
    seen: dict[str, int] = {}
    for e in entries:
        seen[e.name] = seen.get(e.name, 0) + 1
    problems.extend(f"name '{n}' is used by {k} entries; names must be unique" for n, k in seen.items() if k > 1)
    if not entries and not problems:
        problems.append("models: the manifest lists no model")
    if problems:
        raise ManifestError(where, problems)
    return entries


def select(entries: Iterable[ResolvedEntry], only: Sequence[str] | None) -> list[ResolvedEntry]:
    """Keep the entries named in ``only`` (all when empty); UsageError naming unknown names."""
    entries = list(entries)
    if not only:
        return entries
    names = {e.name for e in entries}
    unknown = [n for n in only if n not in names]
    if unknown:
        raise UsageError(f"--only: no model named {', '.join(repr(n) for n in unknown)} in the manifest "
                         f"(models: {', '.join(sorted(names))})")
    return [e for e in entries if e.name in set(only)]


def manifest_schema() -> dict[str, Any]:
    """The JSON Schema of the manifest format, generated from the models that validate it."""
    schema = _models()[3].model_json_schema()
    schema["title"] = "bridge batch-migration manifest"
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return schema


def schema_text() -> str:
    return json.dumps(manifest_schema(), indent=2, sort_keys=True) + "\n"


def write_schema(path: Path = SCHEMA_PATH) -> Path:
    """Regenerate the published schema (run after changing the models above):
    ``python -c "from bridge.migrate.manifest import write_schema; write_schema()"``."""
    from bridge.io import atomic_write_text

    atomic_write_text(path, schema_text())
    return path
