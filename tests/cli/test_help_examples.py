"""Every example of every ``--help`` runs as written, in a folder as a fresh clone has it (the bundled
``examples/``), in the order ``ORDER`` gives: each uses the bundled files or what an earlier example wrote under
``out/``. A ``# exit N`` comment on an example is the exit code it must end with (else 0).

One test per example (``test_help_example[convert-2]``); those that take minutes (PyTorch, TensorFlow, OpenVINO,
bench, debug, migrate) are marked ``slow``: with ``-m slow`` every earlier example runs first, in order.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
from support import REPO

# the commands whose examples run, in the order files flow between them ("" is `bridge --help` itself)
ORDER = ("", "convert", "inspect", "validate", "debug", "bench", "graft-nms", "shapes", "shapes fix",
         "shapes dynamic", "shapes buckets", "migrate")
SLOW = (r"\.py:build", r"--to tensorflow", r"openvino", r"^bridge (bench|debug|migrate)\b", r"build_models\.py",
        r"\btiny", r"--runtime \S*tensorflow")


@dataclass(frozen=True)
class Example:
    command: str
    index: int
    text: str
    exit_code: int
    reads_slow_output: bool = False  # uses what an earlier slow example writes: runs only where that one ran

    @property
    def id(self) -> str:
        return f"{self.command.replace(' ', '-') or 'bridge'}-{self.index}"

    @property
    def slow(self) -> bool:
        return self.reads_slow_output or any(re.search(p, self.text) for p in SLOW)

    @property
    def writes(self) -> list[str]:
        """The paths under ``out/`` this example writes (its -o, --report, --save-reference)."""
        return re.findall(r"(?:-o|--output|--report|--save-reference) (out/\S*)", self.text)

    def mentions(self, path: str) -> bool:
        return any(t == path or t.startswith(path.rstrip("/") + "/") for t in re.findall(r"out/\S*", self.text))


def _epilogs() -> dict[str, str]:
    """Command path -> its --help epilog, read from the commands as the CLI builds them."""
    from bridge.cli.main import COMMANDS, app, load_command

    found = {"": app.info.epilog or ""}
    for name in COMMANDS:
        command: Any = load_command(name)
        found[name] = command.epilog or ""
        for sub, child in getattr(command, "commands", {}).items():
            found[f"{name} {sub}"] = child.epilog or ""
    return found


def _examples(epilog: str, command: str) -> list[Example]:
    lines = [line.strip() for line in epilog.split("Examples:", 1)[-1].splitlines()]
    runnable = [line for line in lines if line.startswith(("bridge ", "python "))]
    out = []
    for i, line in enumerate(runnable, 1):
        text, _, comment = line.partition("#")
        code = re.search(r"\bexit (\d+)", comment)
        out.append(Example(command, i, text.strip(), int(code.group(1)) if code else 0))
    return out


def _in_order(examples: list[Example]) -> list[Example]:
    """``examples`` with those that use an earlier slow example's output marked slow as well (in the fast run that
    output does not exist)."""
    slow_writes: list[str] = []
    marked = []
    for e in examples:
        if not e.slow and any(e.mentions(path) for path in slow_writes):
            e = replace(e, reads_slow_output=True)
        if e.slow:
            slow_writes += e.writes
        marked.append(e)
    return marked


EPILOGS = _epilogs()
EXAMPLES = _in_order([e for command in ORDER for e in _examples(EPILOGS.get(command, ""), command)])


def test_every_command_with_examples_is_run() -> None:
    """A command's examples cannot be left out of the run (nor a command be listed here that has none)."""
    with_examples = {c for c, text in EPILOGS.items() if "Examples:" in text}
    assert with_examples == set(ORDER), sorted(with_examples ^ set(ORDER))
    assert len(EXAMPLES) >= 25 and sum(not e.slow for e in EXAMPLES) >= 5


@dataclass
class Workspace:
    folder: Path
    done: dict[int, subprocess.CompletedProcess[str]] = field(default_factory=dict)

    def run(self, example: Example) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
               "PYTHONPATH": str(REPO), "COLUMNS": "200"}
        env.pop("BRIDGE_TEST_BREAK", None)
        return subprocess.run(["bash", "-c", f"set -e; {example.text}"], cwd=self.folder, env=env,
                              capture_output=True, text=True, timeout=1800)

    def run_through(self, index: int, with_slow: bool) -> subprocess.CompletedProcess[str]:
        """Every earlier example that runs in this mode (once), then example ``index``."""
        for j, example in enumerate(EXAMPLES[: index + 1]):
            if j not in self.done and (with_slow or not example.slow or j == index):
                self.done[j] = self.run(example)
        return self.done[index]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    """A folder as a fresh clone has it: the bundled examples, nothing built from them."""
    folder = tmp_path_factory.mktemp("help")
    built = REPO / "examples" / "migration" / "models"  # written by build_models.py: not in a clone
    shutil.copytree(REPO / "examples", folder / "examples",
                    ignore=lambda d, names: [n for n in names if n == "__pycache__" or Path(d, n) == built])
    return Workspace(folder)


@pytest.mark.parametrize("index", [pytest.param(i, id=e.id, marks=[pytest.mark.slow] if e.slow else [])
                                   for i, e in enumerate(EXAMPLES)])
def test_help_example(index: int, workspace: Workspace, request: pytest.FixtureRequest) -> None:
    example = EXAMPLES[index]
    with_slow = "slow" in (request.config.getoption("markexpr") or "")
    if example.slow and not with_slow:
        pytest.skip("takes minutes: run with -m slow (every earlier example runs first)")
    proc = workspace.run_through(index, with_slow)
    assert proc.returncode == example.exit_code, (
        f"`bridge {example.command} --help` example {example.index} exited {proc.returncode} (expected "
        f"{example.exit_code}):\n{example.text}\n--- stdout\n{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-3000:]}")
