"""Hostile manifests and executor addresses end in a usage error naming the file, field or URL - never
an internal error, a hang or a message that prints an alias-expanded value."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from bridge.errors import EXIT_USAGE, BridgeError, UsageError
from bridge.migrate.executors import make_executor
from bridge.migrate.manifest import load_manifest

LAUGHS = "a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n" + "".join(
    f"{chr(98 + k)}: &{chr(98 + k)} [*{chr(97 + k)},*{chr(97 + k)},*{chr(97 + k)},*{chr(97 + k)},*{chr(97 + k)},"
    f"*{chr(97 + k)},*{chr(97 + k)},*{chr(97 + k)},*{chr(97 + k)}]\n" for k in range(8)) + \
    "models:\n  - name: *i\n    source: m.onnx\n"


@pytest.mark.parametrize(("text", "expected"), [
    (b"models:\n  - name: \xff\xfe\n    source: m.onnx\n", "not UTF-8"),
    (b"models: [\n", "not valid YAML"),
    (b"models: " + b"[" * 5000 + b"]" * 5000 + b"\n", "nested"),
    (b"models: " + b"[" * 40 + b"]" * 40 + b"\n", "nested deeper"),
    (LAUGHS.encode(), "more than"),
    (b"models:\n  - name: " + b"n" * 5000 + b"\n    source: m.onnx\n", "name is 5,000 characters"),
    (b"models:\n  - name: g\n    source: \"" + b"*" * 100000 + b"\"\n", "source is 100,000 characters"),
])
def test_hostile_manifests_are_refused_quickly_naming_the_problem(tmp_path: Path, text: bytes, expected: str) -> None:
    path = tmp_path / "manifest.yaml"
    path.write_bytes(text)
    start = time.perf_counter()
    with pytest.raises(UsageError) as err:  # a bad manifest is exit 2 however it is bad (README)
        load_manifest(path)
    assert time.perf_counter() - start < 10
    assert err.value.exit_code == EXIT_USAGE
    message = str(err.value)
    assert expected in message and str(path) in message
    assert "lollol" not in message and len(message) < 2000


@pytest.mark.parametrize("url", ["dask://", "dask://:::", "tcp://", "dask://[::1", "dask://localhost:notaport",
                                 "dask://localhost:99999", "tls://:8786"])
def test_bad_executor_addresses_are_usage_errors_naming_the_url(url: str) -> None:
    with pytest.raises(UsageError, match="--executor"):
        make_executor(url)


def test_errors_here_are_bridge_errors() -> None:
    assert issubclass(UsageError, BridgeError)
