"""The Python API's errors speak its keywords: the subject a message opens with in the API's words
(``inputs=['image']: no such input``), a flag its prose names followed by the keyword (``pass --input
data:1,3,H,W (from Python: --input is inputs=)``); the command line's errors name flags only: one message, with
the words each caller used (``bridge.api``'s ``_in_api_words``, ``conversion.options.api_keywords_note``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import REPO

import bridge
from bridge.cli.main import main
from bridge.conversion.options import api_keywords_note, api_words, convert_options
from bridge.errors import BridgeError

SSD = str(REPO / "examples" / "mxnet_ssd" / "model-symbol.json")


@pytest.mark.parametrize(("keywords", "api", "cli"), [
    ({"inputs": ["image:1,3,64,64"]}, "inputs=['image']: no such input", "--input image: no such input"),
    ({"inputs": ["data:1,3,64,64"], "dynamic": ["dta:0=batch"]}, "dynamic=['dta']: the model has no input",
     "--dynamic 'dta': the model has no input"),
    ({"inputs": ["data:1,3,64,64"], "to": "onxx"}, "to='onxx' (did you mean 'onnx'?)",
     "--to 'onxx' (did you mean 'onnx'?)"),
    ({}, "(from Python: --input is inputs=)", "pass --input data:1,3,H,W"),  # a flag in prose: named after
])
def test_convert_errors_speak_keywords_from_python_and_flags_from_the_cli(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], keywords: dict[str, object], api: str, cli: str) -> None:
    with pytest.raises(BridgeError) as info:
        bridge.convert(SSD, tmp_path / "m.onnx", validate=[], **keywords)
    assert api in str(info.value) and not str(info.value).startswith("--")
    flags = {"inputs": "--input", "dynamic": "--dynamic", "to": "--to"}
    argv = [a for k, v in keywords.items() for item in (v if isinstance(v, list) else [v]) for a in (flags[k], item)]
    assert main(["convert", SSD, *argv, "--validate", "none", "-o", str(tmp_path / "m.onnx")]) == 2
    err = capsys.readouterr().err
    assert cli in err and "from Python" not in err and api not in err


def test_validate_names_its_keywords(tmp_path: Path) -> None:
    with pytest.raises(BridgeError, match=r"from Python: .*--source is source=.*--reference is reference="):
        bridge.validate(tmp_path / "m.onnx")


@pytest.mark.parametrize(("message", "said"), [
    # the subject (flag, value, then ": " or a did-you-mean) is said in keywords; prose after it keeps its flags
    ("--input image: no such input; pass --dynamic", "inputs=['image']: no such input; pass --dynamic "
                                                      "(from Python: --dynamic is dynamic=)"),
    ("--input data:1,3: not 4 dims", "inputs=['data:1,3']: not 4 dims"),
    ("--strict: a vacuous check fails", "strict=True: a vacuous check fails"),
    ("--to 'onxx' (did you mean 'onnx'?)", "to='onxx' (did you mean 'onnx'?)"),
    ("with --dynamic if you have it", "with --dynamic if you have it (from Python: --dynamic is dynamic=)"),
    ("--localize: no keyword", "--localize: no keyword"),  # a flag of no API keyword stays as it is
])
def test_api_keywords_note_says_the_subject_in_keywords(message: str, said: str) -> None:
    assert api_keywords_note(message, convert_options()) == said


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
