"""Parsing of the CLI's small languages (NAME:SHAPE[:DTYPE], NAME:AXIS=LABEL, OUT=ATOL,RTOL) and config checks."""

from pathlib import Path

import pytest

from bridge.config import ConvertConfig, DynamicAxis, InputSpec, Source, Tolerance
from bridge.errors import UsageError


@pytest.mark.parametrize(("text", "expected"), [
    ("images:4,3,64,64", InputSpec("images", (4, 3, 64, 64), "float32")),
    ("ids:2,7:int64", InputSpec("ids", (2, 7), "int64")),
    ("x:1x3x8x8:f16", InputSpec("x", (1, 3, 8, 8), "float16")),
    ("x", InputSpec("x", None, "float32")),
])
def test_input_spec_parses(text: str, expected: InputSpec) -> None:
    assert InputSpec.parse(text) == expected


@pytest.mark.parametrize("text", ["", ":4,3", "x:4,a", "x:4,0", "x:4:int64:extra", "x:4:complex"])
def test_input_spec_rejects(text: str) -> None:
    with pytest.raises(UsageError):
        InputSpec.parse(text)


@pytest.mark.parametrize(("text", "expected"), [
    ("images:0=batch", DynamicAxis("images", 0, "batch")),
    ("x:-1=width", DynamicAxis("x", -1, "width")),
])
def test_dynamic_axis_parses(text: str, expected: DynamicAxis) -> None:
    assert DynamicAxis.parse(text) == expected


@pytest.mark.parametrize("text", ["images:0", "images=batch", "images:a=batch", "images:0=1abc"])
def test_dynamic_axis_rejects(text: str) -> None:
    with pytest.raises(UsageError):
        DynamicAxis.parse(text)


def test_tolerance_overrides_per_output() -> None:
    tol = Tolerance.parse_override(Tolerance(), ["scores=1e-2,0"])
    assert tol.for_output("scores") == (1e-2, 0.0)
    assert tol.for_output("boxes") == (1e-4, 1e-3)
    with pytest.raises(UsageError):
        Tolerance.parse_override(Tolerance(), ["scores=abc"])


@pytest.mark.parametrize(("kwargs", "fragment"), [
    ({"output": Path("model.pb")}, ".onnx"),
])
def test_convert_config_rejects(kwargs: dict, fragment: str) -> None:
    base = {"source": Source("m.pt"), "output": Path("out.onnx")}
    with pytest.raises(UsageError, match=fragment):
        ConvertConfig(**{**base, **kwargs})


@pytest.mark.parametrize(("kwargs", "fragment"), [
    ({"framework": "caffe"}, "framework='caffe'"),  # the API's keyword: a Python caller passed that
    ({"validate": ("tensorrt",)}, r"validate=\['tensorrt'\]"),
    ({"to": "coreml"}, "to='coreml'"),
])
def test_convert_checks_names_against_the_registries_before_any_work(kwargs: dict, fragment: str,
                                                                      tmp_path: Path) -> None:
    # frameworks, runtimes and targets are listed only by their registries; convert asks them first
    from bridge.api import convert

    with pytest.raises(UsageError, match=fragment):
        convert(str(tmp_path / "missing.onnx"), tmp_path / "out.onnx", **kwargs)
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("kwargs", [
    {"atol": float("nan")}, {"rtol": float("nan")}, {"atol": float("inf")}, {"rtol": float("-inf")},
    {"atol": -1e-4}, {"rtol": -1.0}, {"per_output": {"y": (float("nan"), 0.0)}}, {"per_output": {"y": (0.0, -1.0)}},
    {"per_output": {"y": (1e-3,)}}, {"atol": "abc"},
])
def test_tolerance_rejects_nan_inf_and_negative_values(kwargs: dict) -> None:
    """--atol nan made every |err| <= tol comparison false, so a 1.2e4 error passed."""
    with pytest.raises(UsageError, match=r"--(atol|rtol|tolerance)") as info:
        Tolerance(**kwargs)
    assert info.value.exit_code == 2


@pytest.mark.parametrize("text", ["y=nan,0", "y=0,nan", "y=inf,0", "y=-1e-3,0", "y=1e-3,-0.5", "y=1e-3,inf"])
def test_tolerance_override_rejects_nan_inf_and_negative_values(text: str) -> None:
    with pytest.raises(UsageError, match="finite number >= 0") as info:
        Tolerance.parse_override(Tolerance(), [text])
    assert text in str(info.value)


def test_tolerance_accepts_zero_and_numeric_strings() -> None:
    assert Tolerance(atol=0, rtol=0).for_output("y") == (0.0, 0.0)
    assert Tolerance.parse_override(Tolerance(), ["y= 1e-2 , 0 "]).for_output("y") == (1e-2, 0.0)
