"""scripts/_venv.sh (scripts/demo, scripts/test): pip shows one line per package, not minutes of silence."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# what pip prints for a first install (no progress bars: --progress-bar off)
PIP_TRANSCRIPT = """Obtaining file:///src
Collecting onnx==1.17.0 (from bridge==0.1)
  Downloading onnx-1.17.0-cp311-manylinux.whl.metadata (16 kB)
  Downloading onnx-1.17.0-cp311-manylinux.whl (16.0 MB)
Requirement already satisfied: numpy==1.26.4 in ./lib
Requirement already satisfied: pip in ./lib
Collecting mxnet==1.9.1
  Using cached mxnet-1.9.1-py3-none-manylinux2014_x86_64.whl (49.1 MB)
Building wheels for collected packages: bridge
Installing collected packages: onnx, mxnet, bridge
Successfully installed bridge-0.1 mxnet-1.9.1 onnx-1.17.0
"""


def _run(tmp_path: Path, rc: int) -> subprocess.CompletedProcess[str]:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (tmp_path / "transcript").write_text(PIP_TRANSCRIPT)
    fake = venv / "bin" / "python"  # stands in for the venv's python: records its arguments, prints pip's lines
    fake.write_text(f'#!/bin/sh\necho "$@" > {tmp_path}/args\ncat {tmp_path}/transcript\nexit {rc}\n')
    fake.chmod(0o755)
    env = {**os.environ, "BRIDGE_VENV": str(venv)}
    return subprocess.run(["bash", "-c", f"source {ROOT / 'scripts' / '_venv.sh'} mxnet && echo READY"],
                          capture_output=True, text=True, env=env, timeout=60)


def test_install_shows_one_line_per_package(tmp_path: Path) -> None:
    done = _run(tmp_path, 0)
    assert done.returncode == 0, done.stderr
    args = (tmp_path / "args").read_text().split()
    assert "--quiet" not in args and "-q" not in args and args[args.index("--progress-bar"):][:2] == ["--progress-bar", "off"]
    lines = done.stdout.splitlines()
    assert "[bridge]   onnx==1.17.0 (from bridge==0.1)" in lines and "[bridge]   mxnet==1.9.1" in lines
    assert "[bridge]     downloading (16.0 MB)" in lines and not any("16 kB" in line for line in lines)
    assert "[bridge]   installing 3 package(s)..." in lines and "[bridge]   2 requirement(s) already installed" in lines
    assert lines[-1] == "READY" and len(lines) <= 9  # one line per package, not pip's every line
    assert (tmp_path / "venv" / "pip-install.log").read_text() == PIP_TRANSCRIPT  # pip's full output is kept


@pytest.mark.parametrize("rc", [1, 2])
def test_failed_install_stops_and_shows_pip_output(tmp_path: Path, rc: int) -> None:
    done = _run(tmp_path, rc)
    assert done.returncode != 0 and "READY" not in done.stdout
    assert "pip install failed" in done.stderr and "Requirement already satisfied: pip" in done.stderr
