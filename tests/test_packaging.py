"""bridge as a distribution: its name on the package index (``bridge-convert``; the import package and the command
are ``bridge``), a wheel that installs and runs, and "not installed" hints that work for how bridge was installed -
the editable checkout's pinned install named with its folder, an installed wheel's ``pip install
'bridge-convert[EXTRA]'``.

The wheel is built here, offline (``pip wheel --no-deps --no-build-isolation --no-index``), and installed without
its dependencies into a fresh virtualenv that reads them from the test environment's own site-packages, so nothing
is downloaded.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest
from support import REPO, env_without

from bridge.errors import DISTRIBUTION, install_command


def test_the_distribution_name_is_claimed_in_pyproject() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["name"] == DISTRIBUTION == "bridge-convert"
    assert project["scripts"] == {"bridge": "bridge.cli.main:main"}  # the command keeps its name


def test_in_the_checkout_the_hint_is_the_pinned_editable_install_in_its_folder() -> None:
    hint = install_command("torch")
    assert hint == f"cd {REPO} && pip install -c constraints.txt -e '.[torch]'"


def test_the_docs_name_the_distribution_not_bridge() -> None:
    """Every install line of the README and the package's own hints names bridge-convert (or the checkout)."""
    import re

    texts = {p: p.read_text(encoding="utf-8") for p in [REPO / "README.md", *REPO.glob("bridge/**/*.py"),
                                                         *REPO.glob("adapters/**/*.py")]}
    stale = [f"{p.relative_to(REPO)}: {m.group(0)}" for p, text in texts.items()
             for m in re.finditer(r"pip install[^\n]*'bridge\[", text)]
    assert not stale, stale


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv holding bridge installed from its wheel, its dependencies read from this environment."""
    folder = tmp_path_factory.mktemp("wheel")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
                    "-w", str(folder / "dist"), str(REPO)], check=True, env=env, capture_output=True, timeout=600)
    (wheel,) = (folder / "dist").glob("*.whl")
    assert wheel.name.startswith("bridge_convert-")
    venv = folder / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--no-deps",
                    "--no-index", "-q", str(wheel)], check=True, env=env, capture_output=True, timeout=600)
    purelib = subprocess.run([str(venv / "bin" / "python"), "-c",
                              "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True, env=env).stdout.strip()
    # the dependencies (numpy, onnx, typer, ...) from this environment, after the wheel's own files
    deps = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    Path(purelib, "test_environment.pth").write_text("\n".join(sorted(deps)) + "\n", encoding="utf-8")
    return venv


def _installed_env(tmp: Path, *blocked: str) -> dict[str, str]:
    """The wheel venv's environment: its own ``bridge`` first (no PYTHONPATH to the checkout)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return env_without(tmp, *blocked, base={**env, "PYTHONPATH": ""}) if blocked else env


def test_the_wheel_installs_the_bridge_command(wheel_venv: Path, tmp_path: Path) -> None:
    env = _installed_env(tmp_path)
    where = subprocess.run([str(wheel_venv / "bin" / "python"), "-c", "import bridge; print(bridge.__file__)"],
                           capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert where.returncode == 0 and where.stdout.startswith(str(wheel_venv)), where.stdout + where.stderr
    proc = subprocess.run([str(wheel_venv / "bin" / "bridge"), "--help"], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "convert" in proc.stdout and "Exit codes" in proc.stdout
    schema = Path(where.stdout.strip()).parent / "migrate" / "manifest.schema.json"
    assert schema.is_file()  # the manifest's published schema, which its errors point to, ships in the wheel


def test_an_installed_wheel_hints_the_wheel_install(wheel_venv: Path, tmp_path: Path) -> None:
    """A missing extra, from the installed command: exit 4 and ``pip install 'bridge-convert[torch]'``."""
    (tmp_path / "model.py").write_text("def build():\n    return None\n", encoding="utf-8")
    env = _installed_env(tmp_path / "site", "torch")
    proc = subprocess.run([str(wheel_venv / "bin" / "bridge"), "convert", "model.py:build", "--input", "x:1,3",
                           "-o", "out.onnx"], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "PyTorch is not installed" in proc.stderr
    assert "pip install 'bridge-convert[torch]'" in proc.stderr and "constraints.txt" not in proc.stderr
