"""Test hooks for batch migrations: a convert function that misbehaves on request, else calls bridge.convert.

Passed to ``bridge.migrate.run(convert=...)``; the worker child imports it by file path. The source's
file name picks the failure: ``abort*`` calls os.abort() (SIGABRT), ``hog*`` allocates far past the
worker's max_memory, ``hang*`` sleeps past its timeout; anything else is a real conversion.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any


def convert(source: str, output: Path, **kwargs: Any) -> Any:
    stem = Path(str(source)).name
    if stem.startswith("abort"):
        os.abort()
    if stem.startswith("hog"):
        hog = bytearray(16 * 2**30)  # 16 GiB: far past the test's max_memory
        return hog
    if stem.startswith("hang"):
        time.sleep(600)
    from bridge.api import convert as real_convert

    return real_convert(source, output, **kwargs)
