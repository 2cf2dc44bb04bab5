"""The README's examples cannot drift: its command lines name real options, its Python blocks are
complete scripts, and its one `docker build` line works in a fresh clone."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
BLOCKS: list[tuple[str, str]] = re.findall(r"^```(\w+)\n(.*?)^```", README, re.S | re.M)


def _lines(lang: str) -> list[str]:
    """Command lines of the ``lang`` blocks: continuations joined, comments dropped."""
    out = []
    for block_lang, body in BLOCKS:
        if block_lang == lang:
            for line in re.sub(r"\\\n\s*", " ", body).splitlines():
                line = re.split(r"(?:^|\s)#", line, maxsplit=1)[0].strip()
                if line:
                    out.append(line)
    return out


BRIDGE_LINES = [line for line in _lines("bash") if line.startswith("bridge ") and " ... " not in line]
PYTHON_BLOCKS = [body for lang, body in BLOCKS if lang == "python"]


def test_readme_has_examples() -> None:
    assert len(BRIDGE_LINES) >= 15 and len(PYTHON_BLOCKS) >= 3


@pytest.mark.parametrize("line", BRIDGE_LINES)
def test_bridge_commands_name_real_commands_and_options(line: str) -> None:
    import typer.main

    from bridge.cli.main import app

    command: Any = typer.main.get_command(app)
    words = shlex.split(line)[1:]
    path = ["bridge"]
    while hasattr(command, "commands"):  # a group: the next word is its subcommand
        assert words and words[0] in command.commands, f"{' '.join(path)}: no subcommand in {line!r}"
        path.append(words[0])
        command = command.commands[words.pop(0)]
    known = {opt for p in command.params for opt in (*p.opts, *p.secondary_opts)}
    named = {w.split("=", 1)[0] for w in words if w.startswith("-") and not re.fullmatch(r"-\d[-\d,]*", w)}
    assert named <= known, f"{' '.join(path)} has no option(s) {sorted(named - known)}: {line!r}"


@pytest.mark.parametrize("index", range(len(PYTHON_BLOCKS)))
def test_python_blocks_are_complete_scripts(index: int) -> None:
    """Every name a block uses is defined in it (imports included): it runs when pasted into a file."""
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--isolated", "--select", "F821,F822,E9",
                           "--stdin-filename", f"readme_block_{index}.py", "-"],
                          input=PYTHON_BLOCKS[index], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_docker_build_line_works_in_a_fresh_clone() -> None:
    """Folders the Dockerfile bind-mounts that a clone lacks (untracked) are made before `docker build`."""
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text(encoding="utf-8")
    mounted = set(re.findall(r"--mount=type=bind,source=([^,\s]+)", dockerfile))
    tracked = subprocess.run(["git", "ls-files", *mounted], cwd=ROOT, capture_output=True, text=True).stdout
    missing = {m for m in mounted if not any(f.startswith(m.rstrip("/") + "/") for f in tracked.splitlines())}
    lines = _lines("bash")
    builds = [i for i, line in enumerate(lines) if line.startswith("docker build")]
    assert builds, "the README has no docker build line"
    for i in builds:
        made = " ".join(line for line in lines[:i] if line.startswith("mkdir"))
        assert all(m in made.split() for m in missing), f"{sorted(missing)} are mounted but absent in a clone"
