"""`--help` of every command: readable placeholders (no typer type tags), nothing cut, examples below,
in both help styles (rich panels on a wide terminal, plain text when piped); and `bridge --help` /
`--version` start without importing the conversion stack."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest
from support import REPO

TYPE_TAG = re.compile(r"<(?:int|str|float|bool|path|file|dir|list\[[^\]]*\]|[a-z_]+(?:\|[a-z_]+)+)>"
                      r"|\b(?:TEXT|INTEGER|FLOAT|BOOLEAN|PATH)\b")


def _commands() -> list[str]:
    from bridge.cli.main import COMMANDS, load_command

    paths = []
    for name in COMMANDS:
        paths.append(name)
        paths += [f"{name} {sub}" for sub in getattr(load_command(name), "commands", {})]
    return paths


COMMAND_PATHS = _commands()


def _walk(command: Any, words: list[str]) -> Iterator[Any]:
    yield command
    for w in words:
        command = command.commands[w]
        yield command


def _help(path: str, mode: str | None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
          columns: int = 100) -> tuple[str, Any]:
    """The help of ``bridge PATH`` rendered in ``mode`` (rich or plain) at ``columns``, without ANSI codes."""
    import typer

    from bridge.cli import helptext, main

    monkeypatch.setenv("COLUMNS", str(columns))
    monkeypatch.setenv("TERMINAL_WIDTH", str(columns))
    monkeypatch.setattr(main, "markup_mode", lambda: mode)
    monkeypatch.setattr(helptext, "markup_mode", lambda: mode)
    words = path.split()
    command = main.load_command(words[0])
    for w in words[1:]:
        command = command.commands[w]
    info = typer._click.Context(command, info_name=f"bridge {path}", max_content_width=columns, terminal_width=columns)
    capsys.readouterr()
    text = command.get_help(info)  # plain: returned; rich: printed
    text += capsys.readouterr().out
    return re.sub(r"\x1b\[[0-9;]*m", "", text), command


def _flat(text: str) -> str:
    """The words of a help text in order: panel borders dropped, wrapped lines (and hyphenated words) joined."""
    return re.sub(r"(?<=\w)- (?=\w)", "-", " ".join(text.replace("│", " ").split()))


@pytest.mark.parametrize("mode", ["rich", None], ids=["rich", "plain"])
@pytest.mark.parametrize("path", COMMAND_PATHS)
def test_help_shows_placeholders_and_keeps_every_word(path: str, mode: str | None, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    text, command = _help(path, mode, monkeypatch, capsys)
    assert not TYPE_TAG.search(text), f"bridge {path} --help shows a type tag: {TYPE_TAG.search(text)}"
    assert "…" not in text, f"bridge {path} --help cuts a cell:\n{text}"
    flat = _flat(text)
    for param in command.params:
        if getattr(param, "help", None):
            assert " ".join(param.help.split()) in flat, f"{param.name}'s help is incomplete in bridge {path} --help"
        if param.param_type_name == "option" and not (param.is_flag or param.count):
            assert param.metavar and param.metavar in text, f"{param.opts[0]} has no placeholder"


def test_detections_help_is_complete_everywhere(monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """The option that was cut: its whole syntax, each role and the note on NMS-fed outputs are shown."""
    for path in ("convert", "validate", "debug"):
        for mode in ("rich", None):
            text, _ = _help(path, mode, monkeypatch, capsys, columns=100 if mode else 80)
            flat = _flat(text)
            assert "--detections ROLE=OUTPUT,..." in flat or ("--detections" in flat and "ROLE=OUTPUT,..." in flat)
            for word in ("boxes and scores (required)", "labels, batch_index and num", "outputs fed by NMS are found"):
                assert word in flat, (path, mode, word)


@pytest.mark.parametrize("path", [p for p in COMMAND_PATHS if p != "shapes"])
def test_every_command_help_ends_with_examples(path: str, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    for mode in ("rich", None):
        text, _ = _help(path, mode, monkeypatch, capsys)
        after = text.split("Examples:", 1)
        assert len(after) == 2, f"bridge {path} --help has no examples"
        lines = [line.strip(" │") for line in after[1].splitlines()]
        assert any(line.startswith(f"bridge {path} ") for line in lines), f"no example runs bridge {path}"


def test_root_help_lists_every_command_from_the_registry() -> None:
    """Commands are listed from ``COMMANDS``; every command module of bridge/cli is in it."""
    from bridge.cli.main import COMMANDS

    modules = {p.stem for p in (REPO / "bridge" / "cli").glob("*.py")
               if re.search(r"^def register\(", p.read_text(encoding="utf-8"), re.M)}
    assert modules == {e.module.rsplit(".", 1)[1] for e in COMMANDS.values()}
    proc = subprocess.run([sys.executable, "-m", "bridge", "--help"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    flat = " ".join(proc.stdout.split())
    for name, entry in COMMANDS.items():
        assert f"{name} {' '.join(entry.summary.split())}" in flat


HEAVY = ("onnx", "onnx_ir", "numpy", "onnxruntime", "bridge.conversion", "bridge.api", "adapters", "rich.markdown")


@pytest.mark.parametrize(("args", "exit_code"), [(["--help"], "0"), (["--version"], "0"), ([], "2"),
                                                (["inspect", "--help"], "0"), (["graft-nms", "--help"], "0"),
                                                (["migrate", "--help"], "0")],
                         ids=["help", "version", "no-args", "inspect-help", "graft-help", "migrate-help"])
def test_root_help_and_version_import_no_conversion_stack(args: list[str], exit_code: str) -> None:
    """``bridge --help`` / ``--version`` (what a newcomer types first) import typer and the command registry only:
    onnx, numpy and the conversion layer load when a command runs."""
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        import sys
        from bridge.cli.main import main
        code = main({args!r})
        print(code, sorted(m for m in {HEAVY!r} if m in sys.modules), file=sys.stderr)
    """)], cwd=REPO, capture_output=True, text=True, timeout=120)
    code, loaded = proc.stderr.strip().splitlines()[-1].split(" ", 1)
    assert code == exit_code and loaded == "[]", proc.stderr


def test_a_command_still_loads_when_it_runs(tmp_path: Any) -> None:
    """The lazy registry hands the real command over: options parse and errors map to exit codes."""
    proc = subprocess.run([sys.executable, "-m", "bridge", "inspect", str(tmp_path / "missing.onnx")], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "missing.onnx" in proc.stderr, proc.stdout + proc.stderr
    proc = subprocess.run([sys.executable, "-m", "bridge", "inspect", "--no-such-option", "x.onnx"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--no-such-option" in proc.stderr, proc.stdout + proc.stderr
