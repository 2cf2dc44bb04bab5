"""Every convert option, declared once in bridge.conversion.options (or an adapter's or target's group), exists
in each place derived from it: the CLI help of convert (and of debug when debug takes it), the signature of
bridge.api.convert (and api.debug), the manifest's JSON Schema and the migrate worker's keywords."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bridge import api
from bridge.cli.main import app
from bridge.conversion.options import build_config, convert_options
from bridge.migrate.manifest import load_manifest, manifest_schema
from bridge.migrate.worker import convert_kwargs

OPTIONS = convert_options()


def _help(command: str) -> str:
    text = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "400", "TERMINAL_WIDTH": "400"}).output
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


@pytest.fixture(scope="module")
def places(tmp_path_factory: pytest.TempPathFactory) -> dict[str, set[str]]:
    """Per place, the option names (or flags) found there."""
    schema = manifest_schema()["$defs"]["EntryFields"]["properties"]
    (entry,) = load_manifest([{"name": "m", "source": "m.onnx"}], base_dir=tmp_path_factory.mktemp("m"))
    _src, _out, kwargs = convert_kwargs(entry.to_dict(), Path("/tmp/m"))
    convert_help, debug_help = _help("convert"), _help("debug")
    return {
        "convert --help": {o.name for o in OPTIONS if all(f.split("/")[0] in convert_help for f in o.cli_flags)},
        "debug --help": {o.name for o in OPTIONS if all(f.split("/")[0] in debug_help for f in o.cli_flags)},
        "api.convert signature": set(inspect.signature(api.convert).parameters),
        "api.debug signature": set(inspect.signature(api.debug).parameters),
        "manifest schema": {o.name for o in OPTIONS if o.manifest_name in schema},
        "migrate worker keywords": set(kwargs),
    }


@pytest.mark.parametrize("opt", OPTIONS, ids=[o.name for o in OPTIONS])
def test_every_option_is_in_every_place(opt: object, places: dict[str, set[str]]) -> None:
    wanted = ["convert --help", "api.convert signature", "migrate worker keywords"]
    if opt.debug:  # type: ignore[attr-defined]
        wanted += ["debug --help", "api.debug signature"]
    if opt.manifest_name is not None:  # type: ignore[attr-defined]
        wanted.append("manifest schema")
    missing = [place for place in wanted if opt.name not in places[place]]  # type: ignore[attr-defined]
    assert not missing, f"option {opt.name} is missing from: {', '.join(missing)}"  # type: ignore[attr-defined]


def test_options_the_manifest_used_to_lack_are_there() -> None:
    props = manifest_schema()["$defs"]["EntryFields"]["properties"]
    for name in ("exporter", "input_kind", "input_range", "detections", "strict", "external_data"):
        assert name in props, name


def test_unknown_keyword_is_a_type_error(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="exportr"):
        api.convert(tmp_path / "m.onnx", tmp_path / "o.onnx", exportr="dynamo")


@pytest.mark.parametrize("name, value, flag", [("to", "coreml", "--to"), ("validate", ["nope"], "--validate"),
                                              ("detection_format", "yolo", "--detection-format"),
                                              ("exporter", "jit", "--exporter"), ("framework", "caffe", "--framework")])
def test_choices_come_from_the_registries(tmp_path: Path, name: str, value: object, flag: str) -> None:
    from bridge.errors import UsageError

    with pytest.raises(UsageError, match=f"^{name}=.*choose one of"):  # from Python: the keyword
        api.convert(tmp_path / "m.onnx", tmp_path / "o.onnx", **{name: value})
    with pytest.raises(UsageError, match=f"^{flag} .*choose one of"):  # the declaration itself speaks flags
        build_config("m.onnx", "o.onnx", {name: value})


def test_a_new_option_is_one_declaration(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Declared once, an option reaches the CLI, the manifest (schema and worker) and the recipe's config."""
    from bridge.config import Option
    from bridge.conversion import options
    from bridge.conversion.options import build_config, cli_parameters

    monkeypatch.setattr(options, "CORE", (*options.CORE, Option("frobnicate", int, 3, "how hard to frobnicate")))
    assert "frobnicate" in [p.name for p in cli_parameters()] and "frobnicate" in [p.name for p in
                                                                                     cli_parameters(debug=True)]
    assert "frobnicate" in manifest_schema()["$defs"]["EntryFields"]["properties"]
    (entry,) = load_manifest([{"name": "m", "source": "m.onnx", "frobnicate": 5}], base_dir=tmp_path)
    _src, _out, kwargs = convert_kwargs(entry.to_dict(), tmp_path)
    assert kwargs["frobnicate"] == 5
    (tmp_path / "m.onnx").touch()  # build_config checks the source exists before anything else
    assert build_config(tmp_path / "m.onnx", tmp_path / "o.onnx", {"frobnicate": 7}).values["frobnicate"] == 7
