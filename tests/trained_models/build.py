"""``python -m trained_models.build NAME OUT``: train model NAME into folder OUT (run by trained_model(), in a child).

Writes the builder's files and then ``OUT/model.json`` (the manifest, last: it marks the folder complete),
adding the name and the build's wall time.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from trained_models import COMPLETE, builder
from trained_models.common import write_json


def main(argv: list[str]) -> int:
    name, out = argv[0], Path(argv[1])
    t0 = time.perf_counter()
    manifest = builder(name).build(out)
    manifest = {"name": name, **manifest, "build_seconds": round(time.perf_counter() - t0, 1)}
    write_json(out / COMPLETE, manifest)
    print(f"built {name} in {manifest['build_seconds']} s: {manifest.get('quality')}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
