"""The precision option group: one declaration each, refused combinations named before anything runs, the
reduced-precision budget's defaults and how --min-agreement / --max-map-drop override them."""

from __future__ import annotations

from pathlib import Path

import pytest
from dataset_models import SYMBOL

from bridge.conversion.options import convert_options
from bridge.errors import UsageError
from bridge.precision import check_precision, precision_settings
from bridge.precision.options import OPTION_NAMES, REDUCED_MAX_MAP_DROP, REDUCED_MIN_AGREEMENT


def test_the_group_is_part_of_convert_and_the_manifest() -> None:
    options = {o.name: o for o in convert_options()}
    for name in OPTION_NAMES:
        assert options[name].group == "precision" and options[name].manifest_name == name
    assert list(options["precision"].choices()) == ["fp32", "fp16", "int8"]  # type: ignore[misc]


def test_fp32_is_the_default_and_builds_nothing() -> None:
    assert precision_settings({}) is None
    with pytest.raises(UsageError, match=r"--calibration needs --precision int8"):
        precision_settings({"calibration": "x"})


def test_a_reduced_precision_needs_a_dataset_to_judge_it(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"--precision int8 needs --dataset IMAGES"):
        precision_settings({"precision": "int8"})
    settings = precision_settings({"precision": "int8", "dataset": tmp_path})
    assert settings is not None and (settings.min_agreement, settings.max_map_drop) == (REDUCED_MIN_AGREEMENT,
                                                                                       REDUCED_MAX_MAP_DROP)
    assert (REDUCED_MIN_AGREEMENT, REDUCED_MAX_MAP_DROP) == (0.98, 0.01)  # the stated defaults


def test_given_budget_values_override_the_reduced_defaults(tmp_path: Path) -> None:
    settings = precision_settings({"precision": "int8", "dataset": tmp_path, "min_agreement": 0.95})
    assert settings is not None and settings.min_agreement == 0.95 and settings.max_map_drop == REDUCED_MAX_MAP_DROP
    assert "--min-agreement" in settings.budget_origin


@pytest.mark.parametrize(("to", "precision", "message"), [
    ("onnx", "fp16", r"--precision fp16 --to onnx: onnxruntime's CPU execution provider has no float16"),
    ("tensorflow", "int8", r"--to tensorflow has no reduced-precision variant"),
])
def test_a_target_without_that_variant_is_refused_with_why(to: str, precision: str, message: str,
                                                           tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=message):
        check_precision({"precision": precision, "dataset": tmp_path, "to": to})


def test_bad_counts_and_misplaced_options_are_usage_errors(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"--calibration-limit 0"):
        precision_settings({"precision": "int8", "dataset": tmp_path, "calibration_limit": 0})
    with pytest.raises(UsageError, match=r"--keep-float: only --precision int8 is calibrated"):
        precision_settings({"precision": "fp16", "dataset": tmp_path, "keep_float": "conv1"})
    with pytest.raises(UsageError, match=r"--calibration .*no such file"):
        precision_settings({"precision": "int8", "dataset": tmp_path, "calibration": tmp_path / "missing"})
    settings = precision_settings({"precision": "int8", "dataset": tmp_path, "keep_float": "a, b"})
    assert settings is not None and settings.keep_float == ("a", "b")


def test_convert_refuses_before_exporting(tmp_path: Path) -> None:
    from bridge import api

    with pytest.raises(UsageError, match=r"--precision int8 needs --dataset"):
        api.convert(str(SYMBOL), tmp_path / "m.onnx", inputs=["data:1,3,64,64"],
                    precision="int8")
    assert not list(tmp_path.iterdir())
