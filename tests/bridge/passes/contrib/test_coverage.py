"""Every lowering pass of bridge.passes.contrib has a parity test: in this folder, or beside the adapter that
emits its node (the MXNet Proposal lowering is tested against MXNet in tests/adapters/mxnet)."""

from __future__ import annotations

from pathlib import Path

import bridge.passes.contrib as contrib


def test_every_lowering_pass_is_tested() -> None:
    tests = Path(__file__).resolve().parents[3]
    text = "".join(p.read_text() for p in tests.rglob("test_*.py") if p.name != Path(__file__).name)
    passes = [name for name in contrib.__all__ if name.endswith("Pass")]
    assert passes
    untested = [name for name in passes if f"{name}(" not in text]
    assert not untested, f"lowering passes without a test: {untested}"
