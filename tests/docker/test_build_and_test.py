"""Builds every image with docker/build-and-test and runs its smoke tests (minutes: marked slow).

Not part of the default run: select it with `-m slow`, e.g.
    .venv/bin/python -m pytest -m slow tests/docker -s
It needs a Docker engine or buildah (+ debootstrap for the local base), and skips saying so otherwise.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest
from support import REPO

SCRIPT = REPO / "docker" / "build-and-test"


def engine() -> str | None:
    """'docker' when an engine answers, 'buildah' when installed, else None (what the script picks)."""
    if shutil.which("docker") and subprocess.run(["docker", "info"], capture_output=True, timeout=60).returncode == 0:
        return "docker"
    return "buildah" if shutil.which("buildah") else None


@pytest.mark.slow
def test_build_and_smoke_test_every_image(request: pytest.FixtureRequest) -> None:
    if "slow" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("builds five images (many minutes): run with `pytest -m slow tests/docker`")
    found = engine()
    if found is None:
        pytest.skip("neither a Docker engine (docker info) nor buildah is available to build the images")
    if found == "buildah" and not (shutil.which("debootstrap") or _local_base_cached()):
        pytest.skip("buildah needs debootstrap to make the local Debian base (no registry here)")
    proc = subprocess.run([str(SCRIPT)], cwd=REPO, capture_output=True, text=True, timeout=4 * 3600)
    summary = (REPO / "docker" / ".cache" / "summary.txt").read_text() if proc.returncode != 77 else ""
    print(summary)
    assert proc.returncode == 0, f"docker/build-and-test exited {proc.returncode}\n{summary}\n{proc.stdout[-8000:]}"
    rows = {line.split()[0]: line for line in summary.splitlines()[1:] if line.strip()}
    assert set(rows) == {"core", "mxnet", "tensorflow", "torch", "all"}
    assert all(" ok " in row for row in rows.values()), summary
    assert "cross-image:" in rows["tensorflow"], "the TF image did not validate against the MXNet image's reference"
    for target, runtime in (("openvino", "openvino"), ("tflite", "litert")):  # the deploy targets, in the all image
        assert f"deploy: --to {target}: {runtime} vs mxnet: pass" in rows["all"], rows["all"]


def _local_base_cached() -> bool:
    return (REPO / "docker" / ".cache" / "base" / "bookworm-py3.11.tar").is_file()


def test_script_is_executable_shell() -> None:
    """Cheap guard for the default run: the script parses and is executable."""
    assert SCRIPT.stat().st_mode & 0o111
    assert subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True).returncode == 0
