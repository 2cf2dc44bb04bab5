"""Fast consistency checks of the pinned images: locks vs constraints.txt / pyproject, Dockerfile vs locks.

The images install docker/locks/<toolchain>.txt with `pip install --require-hashes --no-deps`, so a
lock that drifts from constraints.txt (or misses a dependency pyproject.toml gained) ships a different
environment than the one the test suite ran in; these tests catch that without building anything.
"""

from __future__ import annotations

import hashlib
import os
import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from support import REPO

from bridge.errors import DISTRIBUTION

DOCKER = REPO / "docker"
LOCKS = DOCKER / "locks"
# toolchain -> pyproject extras; docker/locks/compile holds the same table (checked below)
TOOLCHAINS: dict[str, list[str]] = {
    "core": [],
    "mxnet": ["mxnet"],
    "tensorflow": ["tensorflow"],
    "torch": ["torch"],
    "all": ["all"],
}


def parse_pins(path: Path) -> dict[str, tuple[str, list[str]]]:
    """name -> (version, sha256 hashes) of a pip requirements file (continuations joined)."""
    text = re.sub(r"\\\n", " ", path.read_text())
    pins: dict[str, tuple[str, list[str]]] = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        spec, *options = re.split(r"\s+(?=--)", line)
        req = Requirement(spec)
        (specifier,) = req.specifier
        assert specifier.operator == "==", f"{path.name}: {spec} is not pinned with =="
        hashes = [o.split("sha256:", 1)[1] for o in options if o.startswith("--hash=sha256:")]
        pins[canonicalize_name(req.name)] = (specifier.version, hashes)
    return pins


def constraints() -> dict[str, str]:
    return {name: version for name, (version, _) in parse_pins(REPO / "constraints.txt").items()}


def extra_requirements(extras: list[str]) -> list[Requirement]:
    """The direct requirements of bridge with EXTRAS, self-references (bridge-convert[a,b]) expanded."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    todo = list(extras)
    while todo:
        for r in map(Requirement, project["optional-dependencies"][todo.pop()]):
            if canonicalize_name(r.name) == DISTRIBUTION:
                todo.extend(r.extras)
            else:
                reqs.append(r)
    return reqs


def dockerfile_stages() -> dict[str, tuple[str, dict[str, str], str]]:
    """stage name -> (parent, its own LABELs, body text) of docker/Dockerfile."""
    text = re.sub(r"\\\n", " ", (DOCKER / "Dockerfile").read_text())
    stages: dict[str, tuple[str, dict[str, str], str]] = {}
    for chunk in re.split(r"^FROM\s+", text, flags=re.M)[1:]:
        header, _, body = chunk.partition("\n")
        parent, _, name = header.partition(" AS ")
        labels: dict[str, str] = {}
        for line in re.findall(r"^LABEL\s+(.*)$", body, re.M):
            labels.update(re.findall(r'([\w.\-]+)="([^"]*)"', line))
        stages[name.strip()] = (parent.strip(), labels, body)
    return stages


def image_labels(stage: str) -> dict[str, str]:
    """Labels an image built from STAGE carries: its own over its parents'."""
    stages = dockerfile_stages()
    chain = []
    while stage in stages:
        chain.append(stages[stage][1])
        stage = stages[stage][0]
    labels: dict[str, str] = {}
    for own in reversed(chain):
        labels.update(own)
    return labels


@pytest.mark.parametrize("toolchain", TOOLCHAINS)
def test_lock_is_hash_pinned_and_matches_constraints(toolchain: str) -> None:
    pins = parse_pins(LOCKS / f"{toolchain}.txt")
    build = parse_pins(LOCKS / "build.in")  # packaging tools: pinned there, not in constraints.txt
    pinned = constraints() | {name: version for name, (version, _) in build.items()}
    assert pins, f"{toolchain}.txt pins nothing"
    for name, (version, hashes) in pins.items():
        assert hashes, f"{toolchain}.txt: {name} has no --hash"
        assert all(re.fullmatch(r"[0-9a-f]{64}", h) for h in hashes), f"{toolchain}.txt: {name} has a malformed hash"
        assert name in pinned, f"{toolchain}.txt: {name} is not pinned in constraints.txt (or docker/locks/build.in)"
        assert version == pinned[name], f"{toolchain}.txt: {name}=={version} but constraints say {pinned[name]}"


@pytest.mark.parametrize("toolchain", TOOLCHAINS)
def test_lock_covers_pyproject_requirements(toolchain: str) -> None:
    """Every direct requirement of the toolchain's extras is locked at a version it allows."""
    pins = parse_pins(LOCKS / f"{toolchain}.txt")
    for req in extra_requirements(TOOLCHAINS[toolchain]):
        name = canonicalize_name(req.name)
        assert name in pins, f"{toolchain}.txt lacks {req} (pyproject.toml): run docker/locks/compile {toolchain}"
        assert req.specifier.contains(pins[name][0], prereleases=True), (
            f"{toolchain}.txt: {name}=={pins[name][0]} does not satisfy {req}"
        )


def _all_extras() -> set[str]:
    """The extras ``bridge-convert[all]`` names (its one self-reference ``bridge-convert[a,b,...]``)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    (req,) = map(Requirement, project["optional-dependencies"]["all"])
    assert canonicalize_name(req.name) == DISTRIBUTION, f"all should be one self-reference {DISTRIBUTION}[...]"
    return set(req.extras)


def test_all_extra_is_every_runtime_extra() -> None:
    """`all` (the test command's install and the all image) names every extra but the dev tools, so a new
    runtime's extra (openvino, litert, ...) cannot be left out of the image or the test environment."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert _all_extras() == set(project["optional-dependencies"]) - {"all", "dev"}
    assert {"openvino", "litert"} <= _all_extras()
    test_script = (REPO / "scripts" / "test").read_text()
    assert re.search(r'_venv\.sh" "all,dev"', test_script), "scripts/test should install exactly all,dev"


@pytest.mark.parametrize("extra", ["openvino", "litert"])
def test_deploy_runtimes_are_locked_with_hashes_and_imported_by_the_all_image(extra: str) -> None:
    """OpenVINO and LiteRT (and every package they pull in) are in the all image's lock, hash-pinned at the
    constraints' versions, and its build imports them (a missing system library fails the build)."""
    pins, pinned = parse_pins(LOCKS / "all.txt"), constraints()
    (req,) = [r for r in extra_requirements([extra]) if r not in extra_requirements([])]
    name = canonicalize_name(req.name)
    assert name in pins and pins[name][1], f"all.txt lacks a hashed {name}: run docker/locks/compile all"
    assert pins[name][0] == pinned[name]
    module = {"openvino": "import openvino", "litert": "from ai_edge_litert.interpreter import"}[extra]
    assert module in dockerfile_stages()["deps-all"][2]
    assert f"io.bridge.versions.{name}" in image_labels("all")


@pytest.mark.parametrize("toolchain", [t for t in TOOLCHAINS if t != "core"])
def test_toolchain_lock_extends_core(toolchain: str) -> None:
    """Toolchain stages install their lock over deps-core: the core packages must agree."""
    core, pins = parse_pins(LOCKS / "core.txt"), parse_pins(LOCKS / f"{toolchain}.txt")
    assert {n: v for n, (v, _) in core.items()} == {n: pins[n][0] for n in core if n in pins}
    assert set(core) <= set(pins)


def test_compile_script_uses_the_same_toolchains() -> None:
    script = (LOCKS / "compile").read_text()
    table = dict(re.findall(r'\[(\w+)\]="([^"]*)"', script))
    assert {tc: extras.split() for tc, extras in table.items()} == TOOLCHAINS


@pytest.mark.parametrize("toolchain", TOOLCHAINS)
def test_dockerfile_stage_installs_its_lock(toolchain: str) -> None:
    stages = dockerfile_stages()
    assert stages[toolchain][0] == f"deps-{toolchain}", f"image {toolchain} is not built on deps-{toolchain}"
    deps_body = stages[f"deps-{toolchain}"][2]
    assert f"COPY docker/locks/{toolchain}.txt" in deps_body
    assert f"--require-hashes --no-deps --only-binary=:all: --find-links /wheels -r /opt/bridge/locks/{toolchain}.txt" in " ".join(
        deps_body.split()
    )
    assert "USER bridge" in stages[toolchain][2], f"image {toolchain} would run as root"


@pytest.mark.parametrize("toolchain", TOOLCHAINS)
def test_dockerfile_labels_state_the_locked_versions(toolchain: str) -> None:
    labels = image_labels(toolchain)
    pins = parse_pins(LOCKS / f"{toolchain}.txt")
    version_labels = {k.removeprefix("io.bridge.versions."): v for k, v in labels.items()
                      if k.startswith("io.bridge.versions.") and k != "io.bridge.versions.python"}
    for name, value in version_labels.items():
        assert name in pins, f"image {toolchain} labels {name}={value} but its lock has no {name}"
        assert value == pins[name][0], f"image {toolchain}: label {name}={value}, lock {pins[name][0]}"
    wanted = {canonicalize_name(r.name) for r in extra_requirements(TOOLCHAINS[toolchain])} - {"typer", "rich", "pyyaml",
                                                                                                 "pydantic"}
    assert wanted <= set(version_labels), f"image {toolchain} has no version label for {wanted - set(version_labels)}"
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert labels["org.opencontainers.image.version"] == project["version"]
    assert labels["io.bridge.toolchain"] == toolchain
    assert labels["io.bridge.lock"] == f"docker/locks/{toolchain}.txt"


def test_torch_hash_is_the_local_cpu_wheel() -> None:
    """torch==2.13.0+cpu is not on PyPI: the locks hash the local wheel file, which must still match."""
    wheel_dir = Path(os.environ.get("TORCH_WHEEL_DIR", "/opt/wheels"))
    wheels = sorted(wheel_dir.glob("torch-2.13.0+cpu-cp311-cp311-*.whl"))
    if not wheels:
        pytest.skip(f"no torch-2.13.0+cpu wheel in {wheel_dir} (set TORCH_WHEEL_DIR) to check the lock's hash against")
    digest = hashlib.sha256()
    with wheels[0].open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    for toolchain in ("torch", "all"):
        assert parse_pins(LOCKS / f"{toolchain}.txt")["torch"] == ("2.13.0+cpu", [digest.hexdigest()])
