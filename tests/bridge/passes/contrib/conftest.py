"""pytest runs with --import-mode=importlib, so make this folder's helper module importable."""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType

import pytest

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)


@pytest.fixture(scope="session")
def mx() -> ModuleType:
    from adapters.mxnet.reference import import_mxnet
    from bridge.errors import AdapterUnavailableError

    try:
        return import_mxnet("the MXNet parity tests")
    except AdapterUnavailableError as exc:
        pytest.skip(str(exc))
