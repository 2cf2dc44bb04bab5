"""Every lowering pass of bridge.passes.contrib has a parity test in this folder."""

from __future__ import annotations

from pathlib import Path

import bridge.passes.contrib as contrib


def test_every_lowering_pass_is_tested() -> None:
    here = Path(__file__).resolve().parent
    text = "".join(p.read_text() for p in here.glob("test_*.py") if p.name != Path(__file__).name)
    passes = [name for name in contrib.__all__ if name.endswith("Pass")]
    assert passes
    untested = [name for name in passes if f"{name}(" not in text]
    assert not untested, f"lowering passes without a test: {untested}"
