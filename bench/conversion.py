"""Conversion cost against an I/O floor, each measured in a fresh child process (wall time, peak RSS).

``python -m bench.conversion convert SYMBOL OUT --input data:1,3,300,300 [--validate] [--external-data]``
runs ``bridge.api.convert`` (``validate=[]`` = ``--validate none``, or the default runtimes with
``--validate``); ``python -m bench.conversion floor PARAMS OUT [--external-data]`` is the floor: read the
``.params`` bytes into numpy and ``onnx.save`` a model holding the same number of bytes as one
initializer (with ``--external-data``: saved as ONNX external data, as the conversion writes it).
``python -m bench.conversion build-wide FOLDER [--gb 1.5]`` writes ``wide_vgg-symbol.json`` +
``wide_vgg-0000.params`` with numpy only (no MXNet): a VGG with doubled widths and a block of 2048-wide
3x3 convolutions, global average pooling and one classifier, ~1.5 GB of float32 weights (largest tensor
151 MB), random values.
Each prints one JSON line: ``wall_s`` (the operation only, imports excluded), ``peak_rss`` (the
process's high-water mark, bytes) and ``base_rss`` (resident after imports, before the operation), so
``peak_rss - base_rss`` is what the operation itself added.
"""

from __future__ import annotations

import argparse
import json
import resource
import struct
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


def _convert(symbol: str, out: str, inputs: list[str], validate: bool, external_data: bool) -> None:
    from bridge import api

    base = _rss_now()
    start = time.perf_counter()
    api.convert(symbol, out, inputs=inputs, validate=None if validate else [], external_data=external_data or None)
    print(json.dumps({"wall_s": time.perf_counter() - start, "peak_rss": _peak(), "base_rss": base}))


def _floor(params: str, out: str, external_data: bool) -> None:
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
    if external_data:
        onnx.save(helper.make_model(graph), out, save_as_external_data=True, location=Path(out).name + ".data")
    else:
        onnx.save(helper.make_model(graph), out)
    print(json.dumps({"wall_s": time.perf_counter() - start, "peak_rss": _peak(), "base_rss": base}))


# -- a ~1.5 GB model written with numpy only -----------------------------------------------------------------
_V2_MAGIC = 0xF993FAC9  # MXNet NDArray V2 (as adapters/mxnet/params.py reads it)


def wide_vgg_layers(gb: float = 1.5) -> list[tuple[str, int, int]]:
    """(name, in channels, out channels) of the 3x3 convolutions: VGG16's five blocks at twice the width,
    then 2048-wide convolutions until the weights reach ``gb`` GB."""
    layers: list[tuple[str, int, int]] = []
    cin = 3
    for block, (n, width) in enumerate([(2, 128), (2, 256), (3, 512), (3, 1024), (3, 1024)], 1):
        for k in range(1, n + 1):
            layers.append((f"conv{block}_{k}", cin, width))
            cin = width
    k = 0
    while sum(ci * co * 9 + co for _, ci, co in layers) * 4 + cin * 1000 * 4 < gb * 1e9:
        k += 1
        layers.append((f"conv6_{k}", cin, 2048))
        cin = 2048
    return layers


def build_wide_vgg(folder: Path, gb: float = 1.5) -> tuple[Path, Path, int]:
    """Write ``wide_vgg-symbol.json`` + ``wide_vgg-0000.params`` (MXNet checkpoint layout) with numpy only,
    one array at a time; returns (symbol, params, weight bytes)."""
    return write_vgg(folder, "wide_vgg", wide_vgg_layers(gb))


def write_vgg(folder: Path, prefix: str, layers: list[tuple[str, int, int]]) -> tuple[Path, Path, int]:
    """A VGG-style classifier for a 224x224 input with numpy only: ``layers`` = (``conv<block>_<k>``, in, out)
    3x3 convolutions + ReLU, a 2x2 max pool before blocks 2-5 and after the last, global average pooling,
    a 1000-way FullyConnected; returns (symbol, params, weight bytes)."""
    import numpy as np

    folder.mkdir(parents=True, exist_ok=True)
    nodes: list[dict[str, object]] = [{"op": "null", "name": "data", "inputs": []}]
    arrays: list[tuple[str, tuple[int, ...], float]] = []  # name, shape, He-normal scale

    def var(name: str, shape: tuple[int, ...], scale: float) -> int:
        nodes.append({"op": "null", "name": name, "inputs": []})
        arrays.append((f"arg:{name}", shape, scale))
        return len(nodes) - 1

    def op(kind: str, name: str, attrs: dict[str, str], inputs: list[int]) -> int:
        nodes.append({"op": kind, "name": name, "attrs": attrs, "inputs": [[i, 0, 0] for i in inputs]})
        return len(nodes) - 1

    x = 0
    block = "1"
    for name, cin, cout in layers:
        if name[4] != block:  # blocks 2-5 start after a 2x2 max pool; block 6 stays at 14x14 (224 input)
            if name[4] in "2345":
                x = op("Pooling", f"pool{block}", {"kernel": "(2, 2)", "stride": "(2, 2)", "pool_type": "max"}, [x])
            block = name[4]
        w = var(f"{name}_weight", (cout, cin, 3, 3), (2.0 / (cin * 9)) ** 0.5)
        b = var(f"{name}_bias", (cout,), 0.01)
        x = op("Convolution", name, {"kernel": "(3, 3)", "pad": "(1, 1)", "num_filter": str(cout)}, [x, w, b])
        x = op("Activation", f"{name}_relu", {"act_type": "relu"}, [x])
    x = op("Pooling", "pool5", {"kernel": "(2, 2)", "stride": "(2, 2)", "pool_type": "max"}, [x])
    x = op("Pooling", "gap", {"kernel": "(1, 1)", "global_pool": "True", "pool_type": "avg"}, [x])
    x = op("Flatten", "flatten", {}, [x])
    width = layers[-1][2]  # the last convolution's channels
    w = var("fc_weight", (1000, width), (1.0 / width) ** 0.5)
    b = var("fc_bias", (1000,), 0.01)
    x = op("FullyConnected", "fc", {"num_hidden": "1000"}, [x, w, b])
    symbol = {"nodes": nodes, "arg_nodes": [i for i, n in enumerate(nodes) if n["op"] == "null"],
              "node_row_ptr": list(range(len(nodes) + 1)), "heads": [[x, 0, 0]],
              "attrs": {"mxnet_version": ["int", 10901]}}
    sym_path, params_path = folder / f"{prefix}-symbol.json", folder / f"{prefix}-0000.params"
    sym_path.write_text(json.dumps(symbol))
    rng = np.random.default_rng(0)
    total = 0
    with open(params_path, "wb") as f:  # NDArray list: header, arrays, names (adapters/mxnet/params.py)
        f.write(struct.pack("<QQQ", 0x112, 0, len(arrays)))
        for _, shape, scale in arrays:
            f.write(struct.pack("<Ii", _V2_MAGIC, 0) + struct.pack(f"<i{len(shape)}q", len(shape), *shape)
                    + struct.pack("<iii", 1, 0, 0))
            value = rng.standard_normal(shape, dtype=np.float32)
            value *= np.float32(scale)
            f.write(value.tobytes())
            total += value.nbytes
            del value
        f.write(struct.pack("<Q", len(arrays)))
        for name, _, _ in arrays:
            f.write(struct.pack("<Q", len(name.encode())) + name.encode())
    return sym_path, params_path, total


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
    c.add_argument("--external-data", action="store_true")
    f = sub.add_parser("floor")
    f.add_argument("params")
    f.add_argument("out")
    f.add_argument("--external-data", action="store_true")
    w = sub.add_parser("build-wide")
    w.add_argument("folder", type=Path)
    w.add_argument("--gb", type=float, default=1.5)
    args = parser.parse_args(argv)
    if args.cmd == "convert":
        _convert(args.symbol, args.out, args.input, args.validate, args.external_data)
    elif args.cmd == "floor":
        _floor(args.params, args.out, args.external_data)
    else:
        sym, params, nbytes = build_wide_vgg(args.folder, args.gb)
        print(json.dumps({"symbol": str(sym), "params": str(params), "weight_bytes": nbytes}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
