"""LazyRegistry.load quiets the frameworks' C++ logs before the module it names is imported (not with -v)."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest

from bridge.registry import QUIET_LOG_ENV, LazyRegistry


@pytest.fixture
def probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> LazyRegistry:
    """A registry whose one entry records, at its import, the log variables it saw."""
    for key in QUIET_LOG_ENV:
        monkeypatch.delenv(key, raising=False)
    (tmp_path / "log_env_probe.py").write_text(
        f"import os\nSEEN = {{k: os.environ.get(k) for k in {sorted(QUIET_LOG_ENV)!r}}}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "log_env_probe", raising=False)
    return LazyRegistry({"probe": "log_env_probe:SEEN"}, "unknown {name}")


@pytest.mark.parametrize(("level", "quiet"), [(logging.WARNING, True), (logging.INFO, False), (logging.DEBUG, False)])
def test_framework_log_variables_are_set_before_import(probe: LazyRegistry, level: int, quiet: bool) -> None:
    root = logging.getLogger()
    old = root.level
    root.setLevel(level)
    try:
        seen = probe.load("probe")
    finally:
        root.setLevel(old)
    assert seen == (dict(QUIET_LOG_ENV) if quiet else dict.fromkeys(QUIET_LOG_ENV))


def test_a_value_the_user_exported_is_kept(probe: LazyRegistry, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MXNET_SUBGRAPH_VERBOSE", "1")
    assert probe.load("probe")["MXNET_SUBGRAPH_VERBOSE"] == "1"
