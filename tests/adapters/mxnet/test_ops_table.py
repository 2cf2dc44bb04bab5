"""The README's MXNet operator table is generated from the registry and must be current."""

from __future__ import annotations

import subprocess
import sys

from support import REPO


def test_readme_operator_table_is_current() -> None:
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "mxnet_ops_table.py"), "--check"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, ("README.md's MXNet operator table is stale: run "
                                  f"`python scripts/mxnet_ops_table.py` ({proc.stderr})")


def test_every_refused_op_has_a_reason_and_no_translator() -> None:
    import adapters.mxnet.convert  # noqa: F401
    from adapters.mxnet.registry import NOT_TRANSLATED, TRANSLATORS

    assert NOT_TRANSLATED and not set(NOT_TRANSLATED) & set(TRANSLATORS)
    assert all(len(why) > 20 for why in NOT_TRANSLATED.values())
