"""The reduced-precision options, declared once as one group (``PRECISION_OPTIONS``): ``convert`` takes them
with its own options (``bridge.conversion.options.convert_options`` adds the group) and a migrate manifest
holds them as plain fields (``precision: int8``, ``calibration: images/``).

``precision_settings`` turns option values into ``PrecisionSettings`` (None for fp32, the default: nothing
changes). A reduced-precision variant is judged on ``--dataset`` (agreement with the source, mAP drop) with
its own budget: ``REDUCED_BUDGET`` unless ``--min-agreement`` / ``--max-map-drop`` were given (the dataset
group's defaults are fp32's, stricter than a quantized model can meet).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from bridge.config import Bounds, Option
from bridge.errors import UsageError

GROUP = "precision"
PRECISIONS = ("fp32", "fp16", "int8")
DEFAULT_CALIBRATION_IMAGES = 128
DEFAULT_FALLBACK_ROUNDS = 3
# a reduced-precision artefact passes when its detections agree with the source's at AP@0.5 >= 0.98 and its
# mAP (when --labels are given) is at most 0.01 below the source's
REDUCED_MIN_AGREEMENT = 0.98
REDUCED_MAX_MAP_DROP = 0.01


def _comma_list(text: Any) -> Any:
    return [t.strip() for t in text.split(",") if t.strip()] if isinstance(text, str) else text


PRECISION_OPTIONS: tuple[Option, ...] = tuple(replace(o, group=GROUP, debug=False) for o in (
    Option("precision", str, "fp32", "also deliver a reduced-precision variant of the target's artefact "
           "(onnx: int8 QDQ; openvino: int8 by NNCF, fp16 weights; tflite: int8 dynamic range, fp16), judged on "
           "--dataset by agreement with the source and mAP drop (default budget: agreement AP@0.5 >= "
           f"{REDUCED_MIN_AGREEMENT}, mAP drop <= {REDUCED_MAX_MAP_DROP})", choices=lambda: PRECISIONS,
           metavar="fp32|fp16|int8"),
    Option("calibration", Path | None, None, "--precision int8: calibrate on these images (same forms as --dataset; "
           "default: the first --calibration-limit images of --dataset)", metavar="IMAGES"),
    Option("calibration_limit", int, DEFAULT_CALIBRATION_IMAGES, "--precision int8: calibration images used",
           metavar="N", bounds=Bounds(gt=0, integer=True)),
    Option("fallback_rounds", int, DEFAULT_FALLBACK_ROUNDS, "--precision int8: when the variant breaks the budget, "
           "rounds that keep the layers whose quantization costs most in float and judge again (0: none)",
           metavar="N", bounds=Bounds(ge=0, integer=True)),
    Option("keep_float", list[str], [], "--precision int8: comma-separated node names that stay float besides "
           "those the region rule keeps (bridge.precision.regions)", cli_type=str | None, metavar="NODES",
           parse=_comma_list),
))
OPTION_NAMES = tuple(o.name for o in PRECISION_OPTIONS)


@dataclass(frozen=True)
class PrecisionSettings:
    """A reduced-precision delivery as the options asked for it."""

    precision: str
    calibration: Path | None = None
    calibration_limit: int = DEFAULT_CALIBRATION_IMAGES
    fallback_rounds: int = DEFAULT_FALLBACK_ROUNDS
    keep_float: tuple[str, ...] = ()
    min_agreement: float = REDUCED_MIN_AGREEMENT
    max_map_drop: float = REDUCED_MAX_MAP_DROP
    budget_origin: str = "reduced-precision defaults"
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"precision": self.precision, "calibration": None if self.calibration is None else str(self.calibration),
                "calibration_limit": self.calibration_limit, "fallback_rounds": self.fallback_rounds,
                "keep_float": list(self.keep_float),
                "budget": {"min_agreement": self.min_agreement, "max_map_drop": self.max_map_drop,
                           "origin": self.budget_origin}}


def precision_settings(values: Mapping[str, Any]) -> PrecisionSettings | None:
    """The settings from convert option values (missing ones at their defaults); None for fp32. UsageError
    for a value that cannot work: a reduced precision without --dataset (nothing would judge it), a precision
    option given with fp32, a bad count."""
    from bridge.validation.dataset.options import DATASET_OPTIONS

    v = {o.name: values.get(o.name, o.default) for o in PRECISION_OPTIONS}
    keep = tuple(_comma_list(v["keep_float"]) or ())
    precision = str(v["precision"]).lower()
    if precision not in PRECISIONS:
        raise UsageError(f"--precision {v['precision']}: choose one of {', '.join(PRECISIONS)}")
    if precision == "fp32":
        given = [o.cli_flags[0] for o in PRECISION_OPTIONS if o.name != "precision" and v[o.name] not in (None, o.default, [])]
        if given:
            raise UsageError(f"{', '.join(given)} {'needs' if len(given) == 1 else 'need'} --precision int8 (or fp16)")
        return None
    if values.get("dataset") is None:
        raise UsageError(f"--precision {precision} needs --dataset IMAGES: a reduced-precision artefact is judged on "
                         "images (detection agreement with the source, mAP drop with --labels), not elementwise")
    if int(v["calibration_limit"]) < 1:
        raise UsageError(f"--calibration-limit {v['calibration_limit']}: must be at least 1")
    if int(v["fallback_rounds"]) < 0:
        raise UsageError(f"--fallback-rounds {v['fallback_rounds']}: must be 0 or more")
    if precision != "int8":
        given = [f for f, name in (("--calibration", "calibration"), ("--keep-float", "keep_float"))
                 if v[name] not in (None, [], ())]
        if given:
            raise UsageError(f"{', '.join(given)}: only --precision int8 is calibrated")
    calibration = Path(v["calibration"]) if v["calibration"] else None
    if calibration is not None and not calibration.exists():
        raise UsageError(f"--calibration {calibration}: no such file or folder")
    defaults = {o.name: o.default for o in DATASET_OPTIONS}
    agreement, drop = values.get("min_agreement"), values.get("max_map_drop")
    given_budget = [name for name, value in (("min_agreement", agreement), ("max_map_drop", drop))
                    if value is not None and value != defaults[name]]
    return PrecisionSettings(
        precision, calibration, int(v["calibration_limit"]), int(v["fallback_rounds"]), keep,
        float(agreement) if agreement is not None and "min_agreement" in given_budget else REDUCED_MIN_AGREEMENT,
        float(drop) if drop is not None and "max_map_drop" in given_budget else REDUCED_MAX_MAP_DROP,
        "given (" + ", ".join("--" + n.replace("_", "-") for n in given_budget) + ")" if given_budget
        else "reduced-precision defaults")


__all__ = ["GROUP", "OPTION_NAMES", "PRECISIONS", "PRECISION_OPTIONS", "REDUCED_MAX_MAP_DROP",
           "REDUCED_MIN_AGREEMENT", "PrecisionSettings", "precision_settings"]
