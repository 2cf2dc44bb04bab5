"""A runtime and a target added with one class and one registry line each work everywhere: convert, validate,
a migrate manifest (its JSON Schema included) and debug - no second list anywhere to update."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bridge import api
from bridge.conversion.options import cli_parameters, convert_options
from bridge.migrate.manifest import load_manifest, manifest_schema
from bridge.migrate.worker import _convert_one, callable_ref


@pytest.fixture
def toys(monkeypatch: pytest.MonkeyPatch) -> None:
    from bridge import runtimes, targets

    monkeypatch.setitem(runtimes._REGISTRY.entries, "toy", "tests.bridge.conversion.toys:ToyRuntime")
    monkeypatch.setitem(targets._REGISTRY.entries, "toy", "tests.bridge.conversion.toys:ToyTarget")


def test_toy_runtime_and_target_in_convert(toys: None, relu: Path, tmp_path: Path) -> None:
    result = api.convert(relu, tmp_path / "out.onnx", to="toy", isolated=False, artefact_dir=tmp_path / "art")
    assert result.passed and result.written and [c.candidate for c in result.validation] == ["toy"]
    files = {f["kind"]: f for f in result.files}
    assert files["toy_model"]["path"] == str(tmp_path / "art" / "out.toy") and (tmp_path / "art" / "out.toy").is_file()
    assert files["toy_model"]["validated_by"] == ["toy"] and files["onnx"]["verdict"] == "not validated"
    both = api.convert(relu, tmp_path / "out2.onnx", to="toy", isolated=False, validate=["onnxruntime", "toy"],
                       toy_file=tmp_path / "mine.toy")
    verdicts = {f["kind"]: (f["validated_by"], f["verdict"]) for f in both.files}
    assert verdicts == {"onnx": (["onnxruntime"], "pass"), "toy_model": (["toy"], "pass")}
    assert (tmp_path / "mine.toy").is_file()


def test_toy_runtime_in_validate_and_debug(toys: None, relu: Path) -> None:
    assert api.validate(relu, source=relu, runtime="toy", isolated=False).passed
    assert api.debug(relu).passed  # debug takes the same options; the toy target is a valid --to everywhere


def test_toy_names_in_the_manifest_schema_and_worker(toys: None, relu: Path, tmp_path: Path) -> None:
    props = manifest_schema()["$defs"]["EntryFields"]["properties"]
    assert "toy" in props["to"]["anyOf"][0]["enum"] and "toy" in props["runtimes"]["anyOf"][0]["items"]["enum"]
    assert "toy_file" in props  # the target's own option group
    (entry,) = load_manifest([{"name": "m", "source": str(relu), "to": "toy", "runtimes": ["toy"],
                               "isolated": False}], base_dir=tmp_path)
    outcome = _convert_one({"entry": entry.to_dict(), "out_dir": str(tmp_path / "out"),
                            "convert": callable_ref(api.convert)})
    assert outcome["status"] == "passed", outcome["reason"]
    files = {f["kind"]: f["path"] for f in outcome["conversion"]["files"]}
    assert files == {"onnx": "models/m/model.onnx", "toy_model": "models/m/model.toy"}


def test_toy_target_option_in_the_cli(toys: None) -> None:
    toy = next(p for p in cli_parameters() if p.name == "toy_file")
    assert "target toy option" in toy.annotation.__metadata__[0].help
    assert "toy" in next(o for o in convert_options() if o.name == "to").choices()  # type: ignore[misc]


def test_an_option_of_another_target_is_refused(toys: None, relu: Path, tmp_path: Path) -> None:
    from bridge.errors import UsageError

    with pytest.raises(UsageError, match="--toy-file belongs to --to toy"):
        api.convert(relu, tmp_path / "o.onnx", toy_file=tmp_path / "x.toy", isolated=False)
    assert not json.dumps(manifest_schema()).count("coreml")
