"""The README's examples cannot drift: its command lines name real options, its Python blocks are
complete scripts, its one `docker build` line works in a fresh clone, and every command and Python block
RUNS, in README order, in a fresh folder holding a copy of `examples/` (what a clone has), each using the
bundled files or what an earlier one wrote.

The runs are one test per step (``test_readme_step[L<line>]``). Steps that take minutes (framework
targets, migrations, bench, debug, the builds of the legacy models) are marked ``slow`` and run with
``-m slow`` (then every earlier step runs first, in order); the default run runs the others. Not run, with
the reason: the two set-up commands (they install the venv and run this suite), Docker and a Dask cluster.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
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


# ------------------------------------------------------------------------------------ running the README


@dataclass(frozen=True)
class Step:
    line: int  # where it starts in README.md
    kind: str  # "shell" or "python"
    text: str
    exit_code: int = 0
    slow: bool = False
    not_run: str = ""  # why it is not run here

    @property
    def id(self) -> str:
        return f"L{self.line}"


NOT_RUN = {  # (pattern, reason): every other command of the README runs
    r"^\./scripts/(demo|test)$": "a set-up command: it creates .venv and installs (scripts/demo's steps are the "
                                "tour's first commands; scripts/test runs this suite)",
    r"^docker ": "needs a Docker engine (the images are built and smoke-tested by tests/docker with -m slow)",
    r"dask://": "needs a running Dask scheduler (the Dask executor is tested against a local cluster in tests/bridge/migrate)",
}
SLOW = (r"--to (tensorflow|openvino|tflite)", r"--runtime \S*tensorflow", r"build_models\.py", r"keras_cnn",
        r"old_upsample", r"^bridge (migrate|bench|debug)\b", r"\bbridge debug\b", r"--bench\b", r"sweep\.py",
        r"bridge\.(debug|bench|migrate)\(", r"--precision\b")


def _steps() -> list[Step]:
    steps: list[Step] = []
    for m in re.finditer(r"^```(\w+)\n(.*?)^```", README, re.S | re.M):
        lang, body = m.group(1), m.group(2)
        start = README.count("\n", 0, m.start(2)) + 1
        if lang == "python":
            steps.append(Step(start, "python", body))
        elif lang == "bash":
            steps += _shell_steps(body, start)
        elif lang == "console":
            steps += _console_steps(body, start)
    return [_classify(s) for s in steps]


def _shell_steps(body: str, start: int) -> list[Step]:
    out: list[Step] = []
    lines = body.split("\n")
    i = 0
    while i < len(lines):
        first, text = i, lines[i]
        while text.endswith("\\") and i + 1 < len(lines):
            i += 1
            text = text[:-1] + " " + lines[i].strip()
        i += 1
        parts = re.split(r"(?:^|\s)#", text, maxsplit=1)
        command, comment = parts[0].strip(), parts[1] if len(parts) > 1 else ""
        if command:
            code = re.search(r"\bexit (\d+)", comment)
            out.append(Step(start + first, "shell", command, int(code.group(1)) if code else 0))
    return out


def _console_steps(body: str, start: int) -> list[Step]:
    """``$ command`` lines of a transcript; the exit code is what its ``$ echo $?`` printed (else 0)."""
    out: list[Step] = []
    lines = body.split("\n")
    for i, line in enumerate(lines):
        if not line.startswith("$ ") or line == "$ echo $?":
            continue
        text, j = line[2:], i
        while text.endswith("\\"):
            j += 1
            text = text[:-1] + " " + lines[j].strip()
        echo = next((k for k in range(j + 1, len(lines)) if lines[k] == "$ echo $?"), None)
        code = int(lines[echo + 1]) if echo is not None else 0
        out.append(Step(start + i, "shell", text, code))
    return out


def _classify(step: Step) -> Step:
    for pattern, reason in NOT_RUN.items():
        if step.kind == "shell" and re.search(pattern, step.text):
            return Step(step.line, step.kind, step.text, step.exit_code, not_run=reason)
    slow = any(re.search(p, step.text, re.M) for p in SLOW)
    return Step(step.line, step.kind, step.text, step.exit_code, slow=slow)


STEPS = _steps()


@dataclass
class Workspace:
    folder: Path
    done: dict[int, subprocess.CompletedProcess[str]] = field(default_factory=dict)

    def run(self, step: Step) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
               "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
        env.pop("BRIDGE_TEST_BREAK", None)
        if step.kind == "python":
            script = self.folder / f"readme_{step.id}.py"
            script.write_text(step.text, encoding="utf-8")
            argv = [sys.executable, script.name]
        else:
            argv = ["bash", "-c", f"set -e; {step.text}"]
        return subprocess.run(argv, cwd=self.folder, env=env, capture_output=True, text=True, timeout=1800)

    def run_through(self, index: int, with_slow: bool) -> subprocess.CompletedProcess[str]:
        """Every earlier step that runs in this mode (once), then step ``index``."""
        for j, step in enumerate(STEPS[: index + 1]):
            if j not in self.done and not step.not_run and (with_slow or not step.slow or j == index):
                self.done[j] = self.run(step)
        return self.done[index]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    """A folder as a fresh clone has it: the bundled examples (nothing built from them) and the hostile corpus."""
    folder = tmp_path_factory.mktemp("readme")
    built = ROOT / "examples" / "migration" / "models"  # written by build_models.py: not in a clone
    shutil.copytree(ROOT / "examples", folder / "examples",
                    ignore=lambda d, names: [n for n in names if n == "__pycache__" or Path(d, n) == built])
    shutil.copytree(ROOT / "tests" / "hostile", folder / "tests" / "hostile",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return Workspace(folder)


def test_every_readme_block_is_a_step() -> None:
    """Nothing is silently left out: every command of every bash/console block and every Python block."""
    assert sum(s.kind == "python" for s in STEPS) == len(PYTHON_BLOCKS)
    assert {s.text for s in STEPS if s.kind == "shell" and s.text.startswith("bridge ")} >= set(BRIDGE_LINES)
    assert sum(not s.not_run for s in STEPS) >= 30 and sum(not s.slow and not s.not_run for s in STEPS) >= 10


def test_the_two_set_up_commands_stay() -> None:
    setup = README.split("## Set-up", 1)[1].split("\n## ", 1)[0]
    assert re.findall(r"^```bash\n(.*?)```", setup, re.S | re.M) == ["./scripts/demo\n", "./scripts/test\n"]


def test_the_readme_auto_scaling_yaml_is_the_bundled_file() -> None:
    block = next(body for lang, body in BLOCKS if lang == "yaml" and body.startswith("input_shape:"))
    assert block == (ROOT / "examples" / "buckets" / "auto_scaling.yaml").read_text(encoding="utf-8")


@pytest.mark.parametrize("index", [pytest.param(i, id=s.id, marks=[pytest.mark.slow] if s.slow else [])
                                   for i, s in enumerate(STEPS)])
def test_readme_step(index: int, workspace: Workspace, request: pytest.FixtureRequest) -> None:
    step = STEPS[index]
    if step.not_run:
        pytest.skip(f"not run here: {step.not_run}")
    with_slow = "slow" in (request.config.getoption("markexpr") or "")
    if step.slow and not with_slow:
        pytest.skip("takes minutes: run with -m slow (every earlier README step runs first)")
    proc = workspace.run_through(index, with_slow)
    assert proc.returncode == step.exit_code, (
        f"README line {step.line} exited {proc.returncode} (expected {step.exit_code}):\n{step.text}\n"
        f"--- stdout\n{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-3000:]}")
