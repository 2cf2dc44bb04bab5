"""The Python API's errors also name its keywords (``--input image: no such input (from Python: --input is
inputs=)``), the command line's name its flags only: one message, with the words each caller used
(``bridge.api``'s ``_in_api_words``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import REPO

import bridge
from bridge.cli.main import main
from bridge.conversion.options import api_words, convert_options
from bridge.errors import BridgeError

SSD = str(REPO / "examples" / "mxnet_ssd" / "model-symbol.json")


@pytest.mark.parametrize(("keywords", "api", "cli"), [
    ({"inputs": ["image:1,3,64,64"]}, "--input is inputs=", "--input image: no such input"),
    ({"inputs": ["data:1,3,64,64"], "dynamic": ["dta:0=batch"]}, "--dynamic is dynamic=",
     "--dynamic 'dta': the model has no input"),
    ({"inputs": ["data:1,3,64,64"], "to": "onxx"}, "--to is to=", "--to 'onxx' (did you mean 'onnx'?)"),
    ({}, "--input is inputs=", "pass --input data:1,3,H,W"),
])
def test_convert_errors_name_keywords_from_python_and_flags_from_the_cli(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], keywords: dict[str, object], api: str, cli: str) -> None:
    with pytest.raises(BridgeError) as info:
        bridge.convert(SSD, tmp_path / "m.onnx", validate=[], **keywords)
    assert cli in str(info.value) and "(from Python: " in str(info.value) and api in str(info.value)
    flags = {"inputs": "--input", "dynamic": "--dynamic", "to": "--to"}
    argv = [a for k, v in keywords.items() for item in (v if isinstance(v, list) else [v]) for a in (flags[k], item)]
    assert main(["convert", SSD, *argv, "--validate", "none", "-o", str(tmp_path / "m.onnx")]) == 2
    err = capsys.readouterr().err
    assert cli in err and "from Python" not in err


def test_validate_names_its_keywords(tmp_path: Path) -> None:
    with pytest.raises(BridgeError, match=r"from Python: .*--source is source=.*--reference is reference="):
        bridge.validate(tmp_path / "m.onnx")


@pytest.mark.parametrize(("message", "said"), [
    ("--strict fails it", "strict=True fails it"),
    ("run with --no-isolate", "run with isolated=False"),
    ("--weights/--params nope.params: no such file", "weights='nope.params': no such file"),
    ("--tolerance 'boxes': no output", "tolerance=['boxes']: no output"),
    ("add --localize to name the node", "add --localize to name the node"),  # no API keyword: kept
    ("pass concrete --input shapes", "pass concrete inputs= shapes"),  # a noun after the flag is prose
    ("--input data:1,3,H,W", "inputs=['data:1,3,H,W']"),
])
def test_api_words(message: str, said: str) -> None:
    assert api_words(message, convert_options()) == said


@pytest.mark.parametrize(("message", "said"), [
    ("give --iterations or --time, not both", "give iterations= or seconds=, not both"),  # prose, not values
    ("--iterations 0: must be positive", "iterations=0: must be positive"),
    ("--iterations many: not a number", "iterations= many: not a number"),  # an int option's value is a number
])
def test_api_words_tell_a_flags_value_from_the_prose_after_it(message: str, said: str) -> None:
    from bridge.bench.command import bench_options

    assert api_words(message, bench_options()) == said
