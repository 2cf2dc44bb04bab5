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
    ({"framework": "caffe"}, "--framework 'caffe'"),
    ({"validate": ("tensorrt",)}, "--validate tensorrt"),
    ({"to": "coreml"}, "--to 'coreml'"),
])
def test_convert_checks_names_against_the_registries_before_any_work(kwargs: dict, fragment: str,
                                                                      tmp_path: Path) -> None:
    # frameworks, runtimes and targets are listed only by their registries; convert asks them first
    from bridge.api import convert

    with pytest.raises(UsageError, match=fragment):
        convert(str(tmp_path / "missing.onnx"), tmp_path / "out.onnx", **kwargs)
    assert not any(tmp_path.iterdir())
