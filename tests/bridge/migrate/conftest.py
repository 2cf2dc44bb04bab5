"""Fixtures for batch-migration tests: tiny ONNX sources written in code and the misbehaving convert hook."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import onnx
import pytest
from support import fcn_model

HOOKS = Path(__file__).with_name("migrate_hooks.py")


@pytest.fixture(scope="session")
def hook_convert() -> Callable[..., Any]:
    """``migrate_hooks.convert``, loaded under a plain module name the worker child can find by file."""
    spec = importlib.util.spec_from_file_location("migrate_hooks", HOOKS)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["migrate_hooks"] = module
    spec.loader.exec_module(module)
    return module.convert  # type: ignore[no-any-return]


@pytest.fixture
def onnx_zoo(tmp_path: Path) -> Callable[..., Path]:
    """``onnx_zoo(*names)`` writes one tiny ONNX model per name into tmp_path/zoo and returns the folder."""

    def make(*names: str) -> Path:
        zoo = tmp_path / "zoo"
        zoo.mkdir(exist_ok=True)
        for name in names:
            onnx.save(fcn_model(), str(zoo / f"{name}.onnx"))
        return zoo

    return make
