"""Conversion cost against an I/O floor, each measured in a fresh child process (wall time, peak RSS).

``python -m bench.conversion convert SYMBOL OUT --input data:1,3,300,300 [--validate]`` runs
``bridge.api.convert`` (``validate=[]`` = ``--validate none``, or the default runtimes with
``--validate``); ``python -m bench.conversion floor PARAMS OUT`` is the floor: read the ``.params``
bytes into numpy and ``onnx.save`` a model holding the same number of bytes as one initializer.
Each prints one JSON line: ``wall_s`` (the operation only, imports excluded), ``peak_rss`` (the
process's high-water mark, bytes) and ``base_rss`` (resident after imports, before the operation), so
``peak_rss - base_rss`` is what the operation itself added.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path


def _rss_now() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _peak() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _convert(symbol: str, out: str, inputs: list[str], validate: bool) -> None:
    from bridge import api

    base = _rss_now()
    start = time.perf_counter()
    api.convert(symbol, out, inputs=inputs, validate=None if validate else [])
    print(json.dumps({"wall_s": time.perf_counter() - start, "peak_rss": _peak(), "base_rss": base}))


def _floor(params: str, out: str) -> None:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    base = _rss_now()
    start = time.perf_counter()
    raw = np.fromfile(params, dtype=np.uint8)
    weights = raw[: raw.size // 4 * 4].view(np.float32)
    graph = helper.make_graph([helper.make_node("Identity", ["w"], ["y"])], "floor", [],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [weights.size])],
                              initializer=[numpy_helper.from_array(weights, "w")])
    onnx.save(helper.make_model(graph), out)
    print(json.dumps({"wall_s": time.perf_counter() - start, "peak_rss": _peak(), "base_rss": base}))


@dataclass(frozen=True)
class ChildRun:
    wall_s: float
    peak_rss: int
    base_rss: int

    @property
    def added_rss(self) -> int:
        return max(self.peak_rss - self.base_rss, 0)


def run_child(*args: str) -> ChildRun:
    """Run this module in a fresh interpreter with ``args``; parse its JSON line."""
    proc = subprocess.run([sys.executable, "-m", "bench.conversion", *args], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[1], check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"bench.conversion {' '.join(args)} failed:\n{proc.stderr[-3000:]}")
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    return ChildRun(data["wall_s"], data["peak_rss"], data["base_rss"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("convert")
    c.add_argument("symbol")
    c.add_argument("out")
    c.add_argument("--input", action="append", default=[])
    c.add_argument("--validate", action="store_true")
    f = sub.add_parser("floor")
    f.add_argument("params")
    f.add_argument("out")
    args = parser.parse_args(argv)
    if args.cmd == "convert":
        _convert(args.symbol, args.out, args.input, args.validate)
    else:
        _floor(args.params, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
