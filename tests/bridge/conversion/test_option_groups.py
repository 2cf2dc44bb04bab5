"""Option groups (bridge.conversion.options): each command subscribes to the groups it takes, so an option is declared
once - flag, help, parser, bounds - and means the same in convert, validate, bench and the shape tools; its bounds
are checked for every entry point (CLI, API, manifest: issue 38 item 8, ``tolerance: {atol: .inf}`` is refused by
the manifest check, not by the worker later); a new group is one declaration plus the commands that take it."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from support import make_model

from bridge import api
from bridge.errors import UsageError
from bridge.migrate.manifest import ManifestError, load_manifest

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def model(tmp_path: Path) -> Path:
    onnx.save(make_model([helper.make_node("Mul", ["x", "s"], ["y"])],
                         [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                         [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
                         initializers=[numpy_helper.from_array(np.float32(2), "s")]), tmp_path / "m.onnx")
    return tmp_path / "m.onnx"


@pytest.mark.parametrize("field, value", [("tolerance", {"atol": float("inf")}), ("tolerance", {"rtol": float("nan")}),
                                          ("tolerance", {"outputs": {"y": {"atol": float("inf")}}}),
                                          ("step_timeout", float("nan")), ("seed", -1), ("max_detections", 0)])
def test_the_manifest_check_refuses_what_the_bounds_refuse(tmp_path: Path, field: str, value: Any) -> None:
    with pytest.raises(ManifestError, match=field):
        load_manifest([{"name": "m", "source": "m.onnx", field: value}], base_dir=tmp_path)


def test_a_yaml_infinite_tolerance_is_refused_before_any_model_runs(tmp_path: Path) -> None:
    (tmp_path / "manifest.yaml").write_text("models:\n  - name: m\n    source: m.onnx\n    tolerance: {atol: .inf}\n")
    with pytest.raises(ManifestError, match=r"tolerance\.atol: Input should be a finite number"):
        load_manifest(tmp_path / "manifest.yaml")


@pytest.mark.parametrize("command", ["validate", "bench"])
@pytest.mark.parametrize("keyword, value, flag", [("seed", -1, "--seed"), ("timeout", float("nan"), "--timeout"),
                                                  ("timeout", 0.0, "--timeout"), ("atol", float("inf"), "--atol")])
def test_bounds_are_checked_for_every_command_taking_the_option(model: Path, command: str, keyword: str,
                                                                value: Any, flag: str,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    call = {"validate": lambda **kw: api.validate(model, source=model, **kw),
            "bench": lambda **kw: api.bench(model, runtime="onnxruntime", iterations=1, rounds=1, **kw)}[command]
    with pytest.raises(UsageError, match=f"^{keyword}="):  # a Python caller is told its keyword
        call(**{keyword: value})
    _cli_says_the_flag(capsys, command, model, flag, value)


@pytest.mark.parametrize("keyword, value, flag", [("opset", 3, "--opset"), ("max_detections", 0, "--max-detections"),
                                                  ("seed", 2**63, "--seed")])
def test_convert_options_keep_their_bounds(model: Path, tmp_path: Path, keyword: str, value: Any, flag: str,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(UsageError, match=f"^{keyword}="):  # a Python caller is told its keyword
        api.convert(model, tmp_path / "o.onnx", **{keyword: value})
    _cli_says_the_flag(capsys, "convert", model, flag, value, "-o", str(tmp_path / "o.onnx"))


def _cli_says_the_flag(capsys: pytest.CaptureFixture[str], command: str, model: Path, flag: str, value: Any,
                       *more: str) -> None:
    """The same bound on the command line: exit 2, the message names the flag (a CLI user typed that)."""
    from bridge.cli.main import main

    capsys.readouterr()
    args = [command, str(model), *(["--source", str(model)] if command == "validate" else []),
            *(["--runtime", "onnxruntime"] if command == "bench" else []), *more, flag, str(value)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert f"{flag} " in err and f"{flag.lstrip('-').replace('-', '_')}=" not in err, err


def test_the_cli_options_module_declares_no_option_of_the_groups() -> None:
    """``bridge/cli/options.py`` keeps the CLI's presentation flags only: every option reaching the API is declared
    in ``bridge.conversion.options``; no second seed check or runtime-list parser."""
    tree = ast.parse((ROOT / "bridge" / "cli" / "options.py").read_text())
    flags = [a.value for node in ast.walk(tree) if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "Option"
             for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("-")]
    assert sorted(flags) == ["--json", "--output", "-o"], flags
    functions = [n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
    assert functions == [], functions


@pytest.mark.parametrize("command, groups", [("validate", ("source", "inputs", "tolerance", "check", "isolation")),
                                             ("bench", ("source", "inputs", "tolerance", "check", "isolation")),
                                             ("shapes fix", ("tolerance", "isolation")),
                                             ("shapes dynamic", ("tolerance", "isolation"))])
def test_commands_take_every_option_of_their_groups(command: str, groups: tuple[str, ...]) -> None:
    from typer.testing import CliRunner

    from bridge.cli.main import app
    from bridge.conversion.options import group_options

    text = CliRunner().invoke(app, [*command.split(), "--help"], env={"COLUMNS": "400", "TERMINAL_WIDTH": "400"}).output
    missing = [o.cli_flags[0].split("/")[0] for o in group_options(*groups)
               if o.cli_flags[0].split("/")[0] not in text]
    assert not missing, f"{command} --help lacks {missing}"


def test_a_new_group_is_one_declaration(monkeypatch: pytest.MonkeyPatch, model: Path) -> None:
    """An option in a new group reaches the CLI and the API of every command subscribing to it, bounds included."""
    from bridge.config import Bounds, Option
    from bridge.conversion import options

    monkeypatch.setattr(options, "CORE", (*options.CORE, Option("samples", int, 8, "images per class",
                                                                  group="dataset", bounds=Bounds(gt=0, integer=True))))
    monkeypatch.setattr(options, "GROUPS", (*options.GROUPS, "dataset"))
    monkeypatch.setattr(options, "COMMAND_GROUPS", {**options.COMMAND_GROUPS,
                                                    "validate": (*options.COMMAND_GROUPS["validate"], "dataset")})
    from bridge.cli import validate as cli_validate
    from bridge.conversion.validate import validate_options

    assert "samples" in [o.name for o in validate_options()]
    assert "samples" in cli_validate._signature().parameters
    with pytest.raises(UsageError, match=r"^samples=0: must be a positive integer"):
        api.validate(model, source=model, samples=0)
