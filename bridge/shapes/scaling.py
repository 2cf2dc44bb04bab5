"""The settings of ``bridge shapes buckets`` as one checked value: from a YAML file, options, or both.

``ScalingConfig`` holds every statistics parameter under the name of its command-line option
(``--n-std`` is ``n_std``; a YAML key may spell it either way; the source workflow's names in
``ALIASES``, e.g. MindSpore Lite's ``max_scaling_num``, are accepted too). A YAML file (``--config
auto_scaling.yaml``) gives a base; options given on the command line (or keyword arguments of
``bridge.shapes.buckets``) override it key by key. Unknown keys and values of the wrong type are
usage errors naming the key, so a typo never silently falls back to a default.

Values are normalised on the way in, so YAML and option strings mean the same thing:
``batch_choices: [1, 4, 8]`` or ``"1,4,8"``; ``height_range: [32, 1024]`` or ``"32,1024"``;
``default_scaling: ["320x320", "320x480"]``, ``[[320, 320], [320, 480]]`` or ``"320x320,320x480"``.
A relative ``data`` path in a YAML file is taken relative to the file's folder.

Built-in default scaling (no ``--data``, no ``--default-scaling``): detectors resize the long side of
an image to one size S (``limit_side_len``) keeping the aspect ratio, so the common images are
S x S, 4:3, 3:4, 16:9 and 9:16 with a long side of S. ``default_scaling_for(S, interval)`` gives
those five (height, width) pairs, the short side rounded up to ``interval``; see ``DEFAULT_SCALING``
for common sizes (README, shapes section).
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from bridge.errors import BadConfigFileError, SourceNotFoundError, UsageError
from bridge.runtimes.isolated import DEFAULT_TIMEOUT_S, check_timeout

LAYOUTS = ("static", "per-batch")
STRATEGIES = ("mean_std", "max_min")
# image folder (no box counts) and no --batch-choices: the batch buckets TensorRT-style profiles commonly use
DEFAULT_BATCH_CHOICES: tuple[int, ...] = (1, 2, 4, 8)
# long side : short side of the common photo / video frames (square, 4:3, 16:9)
ASPECTS: tuple[tuple[int, int], ...] = ((1, 1), (4, 3), (16, 9))
# largest values that can mean something: past them a setting is a typo (1e12 buckets would loop for ever)
LIMITS: dict[str, float] = {"n_std": 1000.0, "expand_ratio": 1000.0, "interval": 2**16, "max_buckets": 1024,
                            "limit_side_len": 2**20, "size": 2**20}
# key names of the source workflow (MindSpore Lite / MindOCR auto_scaling.yaml) accepted for ours
ALIASES: dict[str, str] = {"max_scaling_num": "max_buckets"}


def default_scaling_for(long_side: int, interval: int = 32) -> list[tuple[int, int]]:
    """(height, width) buckets for images resized to ``long_side``: square, 4:3, 3:4, 16:9, 9:16."""
    if long_side < 1 or interval < 1:
        raise UsageError("the long side and --interval must be positive")
    pairs: set[tuple[int, int]] = set()
    for long, short in ASPECTS:
        s = max(interval, math.ceil(long_side * short / long / interval) * interval)
        s = min(s, max(long_side, interval))
        pairs |= {(long_side, s), (s, long_side)}
    return sorted(pairs)


DEFAULT_SCALING: dict[int, list[tuple[int, int]]] = {s: default_scaling_for(s) for s in (320, 640, 960, 1280)}


def _ints(value: Any, key: str) -> list[int]:
    if isinstance(value, str):
        parts: Sequence[Any] = [t for t in value.replace(" ", "").split(",") if t]
    elif isinstance(value, Sequence):
        parts = value
    else:
        raise UsageError(f"{key}: expected comma-separated integers or a list, got {value!r}")
    out = []
    for p in parts:
        if isinstance(p, bool):
            raise UsageError(f"{key}: {p!r} is not an integer")
        try:
            v = int(p)
        except (TypeError, ValueError):
            raise UsageError(f"{key}: {p!r} is not an integer") from None
        if isinstance(p, float) and p != v:
            raise UsageError(f"{key}: {p!r} is not an integer")
        out.append(v)
    return out


def parse_range(value: Any, key: str) -> tuple[int, int] | None:
    """``MIN,MAX`` (or a two-item list) of positive sizes, MIN <= MAX."""
    if value is None:
        return None
    v = _ints(value, key)
    if len(v) != 2 or v[0] < 1 or v[0] > v[1] or v[1] > LIMITS["size"]:
        raise UsageError(f"{key} {value!r}: give MIN,MAX with 1 <= MIN <= MAX, e.g. 32,1024")
    return v[0], v[1]


def parse_pairs(value: Any, key: str) -> list[tuple[int, int]] | None:
    """``H1xW1,H2xW2`` (or a list of "HxW" strings / [H, W] pairs) of positive sizes."""
    if value is None:
        return None
    items: Sequence[Any] = value.replace(" ", "").split(",") if isinstance(value, str) else value
    if not isinstance(items, Sequence) or not items:
        raise UsageError(f"{key}: give HxW pairs, e.g. 320x320,320x480")
    pairs = []
    for item in items:
        if isinstance(item, str):
            m = re.fullmatch(r"(\d+)[xX](\d+)", item.strip())
            hw = [int(m.group(1)), int(m.group(2))] if m else []
        else:
            hw = _ints(item, key)
        if len(hw) != 2 or min(hw) < 1 or max(hw) > LIMITS["size"]:
            raise UsageError(f"{key}: {item!r} is not HxW with positive sizes up to {LIMITS['size']:g} (e.g. 320x480)")
        pairs.append((hw[0], hw[1]))
    return sorted(set(pairs))


@dataclass(frozen=True)
class ScalingConfig:
    """Every setting of ``bridge shapes buckets``; names are the option names (``--n-std`` -> ``n_std``)."""

    input_shape: str | None = None  # -1 on the bucketed axes; no -1 = one static model
    input_name: str | None = None
    data: str | None = None  # image folder or COCO-like annotation JSON
    strategy: str = "mean_std"
    n_std: float = 3.0
    expand_ratio: float = 0.2
    interval: int = 32
    max_buckets: int = 4
    batch_choices: tuple[int, ...] | None = None
    limit_side_len: int | None = None
    height_range: tuple[int, int] | None = None
    width_range: tuple[int, int] | None = None
    default_scaling: tuple[tuple[int, int], ...] | None = None
    layout: str = "static"
    validate: bool = True
    timeout: float | None = DEFAULT_TIMEOUT_S  # seconds for each validation run in its child process

    @classmethod
    def keys(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any], where: str = "options") -> ScalingConfig:
        """A config from ``values`` (keys with ``-`` or ``_``); unknown keys and bad values are UsageErrors."""
        return cls().override(values, where)

    @classmethod
    def load(cls, path: str | Path) -> ScalingConfig:
        """Read a YAML mapping of settings; a relative ``data`` is resolved against the file's folder."""
        import yaml

        path = Path(path)
        if not path.is_file():
            raise SourceNotFoundError(f"--config {path}: no such file")
        try:
            doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            raise BadConfigFileError(f"--config {path}: not readable YAML ({exc})") from exc
        except RecursionError:
            raise BadConfigFileError(f"--config {path}: nested too deeply to be a settings file") from None
        if doc is None:
            doc = {}
        if not isinstance(doc, dict):
            raise UsageError(f"--config {path}: expected a mapping of settings (key: value), got {type(doc).__name__}")
        config = cls.from_mapping(doc, f"--config {path}")
        if config.data is not None and not Path(config.data).is_absolute():
            config = replace(config, data=str(path.parent / config.data))
        return config

    def override(self, values: Mapping[str, Any], where: str = "options") -> ScalingConfig:
        """This config with ``values`` replacing its settings (None values are ignored: not given)."""
        known = self.keys()
        changes: dict[str, Any] = {}
        spelled: dict[str, str] = {}
        for raw_key, value in values.items():
            key = str(raw_key).replace("-", "_")
            key = ALIASES.get(key, key)
            if key in spelled:
                raise UsageError(f"{where}: '{spelled[key]}' and '{raw_key}' both set {key}; give one")
            spelled[key] = str(raw_key)
            if key not in known:
                close = difflib.get_close_matches(key, known, n=1)
                hint = f" (did you mean '{close[0]}'?)" if close else ""
                raise UsageError(f"{where}: unknown setting '{raw_key}'{hint}; known: {', '.join(known)}")
            if value is not None:
                changes[key] = _convert(key, value, where)
        config = replace(self, **changes)
        config.check()
        return config

    def check(self) -> None:
        """Usage errors for values that cannot work, whatever their source."""
        if self.strategy not in STRATEGIES:
            raise UsageError(f"strategy '{self.strategy}': choose {' or '.join(STRATEGIES)}")
        if self.layout not in LAYOUTS:
            raise UsageError(f"layout '{self.layout}': choose {' or '.join(LAYOUTS)}")
        if self.interval < 1 or self.max_buckets < 1 or self.expand_ratio < 0 or self.n_std < 0:
            raise UsageError("interval and max_buckets must be >= 1, expand_ratio and n_std >= 0")
        if self.limit_side_len is not None and self.limit_side_len < 1:
            raise UsageError("limit_side_len must be positive")
        if self.batch_choices is not None and (not self.batch_choices or min(self.batch_choices) < 1
                                               or max(self.batch_choices) > LIMITS["size"]):
            raise UsageError(f"batch_choices {list(self.batch_choices)[:8]}: positive integers up to {LIMITS['size']:g}")
        for key, top in LIMITS.items():
            value = getattr(self, key, None)
            if value is not None and not value <= top:
                raise UsageError(f"{key} {value!r}: at most {top:g}")
        check_timeout(self.timeout, "timeout")

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            out[f.name] = [list(p) for p in v] if f.name == "default_scaling" and v else (
                list(v) if isinstance(v, tuple) else v)
        return out


_NUMBERS = {"n_std": float, "expand_ratio": float, "interval": int, "max_buckets": int, "limit_side_len": int}


def _convert(key: str, value: Any, where: str) -> Any:
    if key in _NUMBERS:
        kind = _NUMBERS[key]
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise UsageError(f"{where}: {key} must be a number, got {value!r}")
        try:
            number = float(value)
        except (ValueError, OverflowError):
            raise UsageError(f"{where}: {key} must be a number, got {str(value)[:40]!r}") from None
        if not math.isfinite(number) or abs(number) > LIMITS.get(key, 0) * 1e6:
            raise UsageError(f"{where}: {key} must be a finite number up to {LIMITS[key]:g}, got {str(value)[:40]!r}")
        if kind is int and number != int(number):
            raise UsageError(f"{where}: {key} must be an integer, got {value!r}")
        return int(number) if kind is int else number
    if key == "timeout":
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise UsageError(f"{where}: timeout must be a number of seconds, got {value!r}")
        try:
            return check_timeout(float(value), f"{where}: timeout")
        except ValueError:
            raise UsageError(f"{where}: timeout must be a number of seconds, got {str(value)[:40]!r}") from None
    if key == "validate":
        if not isinstance(value, bool):
            raise UsageError(f"{where}: validate must be true or false, got {value!r}")
        return value
    if key == "batch_choices":
        return tuple(sorted(set(_ints(value, f"{where}: batch_choices"))))
    if key in ("height_range", "width_range"):
        return parse_range(value, f"{where}: {key}")
    if key == "default_scaling":
        pairs = parse_pairs(value, f"{where}: default_scaling")
        return tuple(pairs) if pairs else None
    if key == "input_shape":
        if isinstance(value, Sequence) and not isinstance(value, str):
            return ",".join(str(v) for v in _ints(value, f"{where}: input_shape"))
        return str(value)
    if not isinstance(value, str | Path):
        raise UsageError(f"{where}: {key} must be a string, got {value!r}")
    return str(value)
