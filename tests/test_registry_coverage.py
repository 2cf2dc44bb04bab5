"""Everything registered by name has tests: each adapter and runtime in the lazy registries has a test
folder or module, and each one imports and satisfies its protocol where its framework is installed."""

from __future__ import annotations

import importlib.util

import pytest
from support import REPO

from adapters import _ADAPTERS, registered_frameworks
from bridge.runtimes import _RUNTIMES, available_runtimes
from bridge.targets import registered_targets

TEST_HOME = {"torch": "tests/adapters/pytorch", "tensorflow": "tests/adapters/tensorflow",
             "mxnet": "tests/adapters/mxnet", "onnx": "tests/adapters/onnx"}


@pytest.mark.parametrize("framework", registered_frameworks())
def test_every_adapter_has_tests_and_loads(framework: str) -> None:
    home = REPO / TEST_HOME[framework]
    assert home.is_dir() and list(home.glob("test_*.py")), f"no tests for the {framework} adapter"
    module_name, cls_name = _ADAPTERS[framework].split(":")
    adapter = getattr(importlib.import_module(module_name), cls_name)()
    assert adapter.framework == framework
    assert callable(adapter.claims) and callable(adapter.export) and callable(adapter.reference_runner)


@pytest.mark.parametrize("runtime", available_runtimes())
def test_every_runtime_has_tests(runtime: str) -> None:
    assert (REPO / "tests" / "bridge" / "runtimes" / f"test_{runtime}.py").is_file()
    module_name, _ = _RUNTIMES[runtime].split(":")
    assert importlib.util.find_spec(module_name) is not None


@pytest.mark.parametrize("target", registered_targets())
def test_every_target_has_tests(target: str) -> None:
    assert (REPO / "tests" / "bridge" / "targets" / f"test_{target}_target.py").is_file()


def _variant_targets() -> list[str]:
    from bridge.precision import _BUILDERS

    return _BUILDERS.names()


@pytest.mark.parametrize("target", _variant_targets())
def test_every_precision_variant_builder_has_tests(target: str) -> None:
    """``--precision``'s builders (bridge.precision) vary registered targets, each with its own tests."""
    assert target in registered_targets()
    assert (REPO / "tests" / "bridge" / "precision" / f"test_{target}_variant.py").is_file()
