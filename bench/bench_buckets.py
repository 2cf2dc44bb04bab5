"""Throughput and padding waste of shape buckets (both layouts) vs one max-size static model vs one
dynamic model, on mixed-size images.

A small fully-convolutional net (dynamic N/H/W; or with ``--model tiny_detector`` the bundled
``examples/tiny_detector`` exported by ``bridge convert`` with dynamic N/H/W, which needs torch) runs
over a generated dataset of mixed image sizes (deterministic by ``--seed``; examples/ ships no
mixed-size images) four ways, all in onnxruntime on CPU, one image per run:

* buckets    - ``bridge shapes buckets --layout static`` models through ``bridge.shapes.BucketedSession``
  (route to the smallest fitting static model, pad, un-pad);
* per-batch  - ``bridge shapes buckets --layout per-batch``: one model per batch with height/width
  dynamic, through ``BucketedSession`` (same routing and envelope, height/width at their real size);
* max static - one static model at the largest bucket size, every image padded to it;
* dynamic    - the dynamic model at each image's exact size.

Each way is timed over the whole dataset ``--repeats`` times, interleaved; the table shows the median,
images/s, the ratio against buckets measured in the same run, and the pixel padding waste of each way.
Usage: ``python bench/bench_buckets.py [--images 60] [--repeats 7] [--threads 1] [--model fcn|tiny_detector]``
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper
from onnx import numpy_helper as nh

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bridge.shapes import BucketedSession, buckets, fix_shapes


def build_model(channels: int = 32) -> onnx.ModelProto:
    rng = np.random.default_rng(0)

    def w(name: str, shape: tuple[int, ...]) -> onnx.TensorProto:
        return nh.from_array((rng.standard_normal(shape) * 0.2).astype(np.float32), name)

    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("Conv", ["r2", "w3"], ["c3"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Relu", ["c3"], ["r3"]),
             helper.make_node("Conv", ["r3", "w4"], ["y"])]
    graph = helper.make_graph(
        nodes, "bench_fcn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, "H4", "W4"])],
        initializer=[w("w1", (channels, 3, 3, 3)), w("w2", (channels, channels, 3, 3)),
                     w("w3", (channels, channels, 3, 3)), w("w4", (4, channels, 1, 1))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def tiny_detector(folder: Path) -> onnx.ModelProto:
    """examples/tiny_detector exported with dynamic batch/height/width (needs torch)."""
    from bridge.api import convert

    repo = Path(__file__).resolve().parents[1]
    out = folder / "tiny_detector.onnx"
    convert(f"{repo}/examples/tiny_detector/model.py:build", out, weights=repo / "examples/tiny_detector/weights.pt",
            inputs=["images:1,3,64,64"], dynamic=["images:0=batch", "images:2=height", "images:3=width"],
            validate=[])
    return onnx.load(str(out))


def make_dataset(folder: Path, n: int, seed: int, multiple: int = 1) -> list[np.ndarray]:
    """Mixed sizes: mostly small-to-medium images, a few large ones (a long-tailed size distribution);
    sides rounded down to ``multiple`` (the tiny detector needs multiples of 8)."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    images = []
    for k in range(n):
        big = rng.random() < 0.1
        h = int(rng.integers(200, 320)) if big else int(rng.integers(64, 192))
        w = int(rng.integers(200, 320)) if big else int(rng.integers(64, 192))
        h, w = h // multiple * multiple, w // multiple * multiple
        img = rng.standard_normal((h, w, 3)).astype(np.float32)
        np.save(folder / f"{k:04d}.npy", img)
        images.append(img.transpose(2, 0, 1)[None].copy())
    return images


def session(path: Path | bytes, threads: int):  # type: ignore[no-untyped-def]
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.log_severity_level = 3
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")  # as BucketedSession does
    return ort.InferenceSession(path if isinstance(path, bytes) else str(path), opts, providers=["CPUExecutionProvider"])


def timed(fn: Callable[[], None], repeats: int) -> list[float]:
    fn()  # warm-up: session creation / first-run allocations are not throughput
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--max-buckets", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", choices=("fcn", "tiny_detector"), default="fcn")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model = build_model() if args.model == "fcn" else tiny_detector(root)
        input_name = model.graph.input[0].name
        images = make_dataset(root / "data", args.images, args.seed, multiple=1 if args.model == "fcn" else 8)
        settings = {"input_shape": "1,3,-1,-1", "data": root / "data", "strategy": "max_min", "expand_ratio": 0.0,
                    "interval": 32, "max_buckets": args.max_buckets, "validate": False}
        t0 = time.perf_counter()
        result = buckets(model, root / "buckets", **settings)
        build_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        per_batch = buckets(model, root / "per_batch", layout="per-batch", **settings)
        build_pb_s = time.perf_counter() - t0
        largest = max(result.buckets, key=lambda b: b.volume)
        fixed = fix_shapes(model, root / "max.onnx", inputs=[f"{input_name}:{','.join(map(str, largest.shape))}"],
                           validate=False)
        assert fixed.written

        bucketed = BucketedSession(root / "buckets", intra_op_threads=args.threads)
        per_batch_sess = BucketedSession(root / "per_batch", intra_op_threads=args.threads)
        max_sess = session(root / "max.onnx", args.threads)
        dyn_sess = session(model.SerializeToString(), args.threads)
        real = sum(x.shape[2] * x.shape[3] for x in images)
        waste = {"buckets": result.report.waste, "per-batch": per_batch.report.waste,
                 "max static": 1 - real / (len(images) * largest.shape[2] * largest.shape[3]), "dynamic": 0.0}

        def run_buckets() -> None:
            for x in images:
                bucketed.run(x)

        def run_per_batch() -> None:
            for x in images:
                per_batch_sess.run(x)

        def run_max() -> None:
            for x in images:
                padded = np.zeros(largest.shape, np.float32)
                padded[:, :, : x.shape[2], : x.shape[3]] = x
                max_sess.run(None, {input_name: padded})

        def run_dynamic() -> None:
            for x in images:
                dyn_sess.run(None, {input_name: x})

        # interleave the ways so drift on a shared machine hits all of them alike
        ways = {"buckets": run_buckets, "per-batch": run_per_batch, "max static": run_max, "dynamic": run_dynamic}
        results: dict[str, list[float]] = {k: [] for k in ways}
        for _ in range(args.repeats):
            for name, fn in ways.items():
                results[name] += timed(fn, 1)

    medians = {k: statistics.median(v) for k, v in results.items()}
    print(f"model {args.model}; {args.images} images (seed {args.seed}), {len(result.buckets)} buckets "
          f"({', '.join(f'{b.height}x{b.width}' for b in result.buckets)}), max static {largest.height}x{largest.width}; "
          f"built in {build_s:.2f} s (static layout, {len(result.files)} models) / {build_pb_s:.2f} s "
          f"(per-batch layout, {len(per_batch.files)} model); {args.repeats} repeats, {args.threads} thread(s)")
    print(f"{'way':<12} {'median s':>9} {'images/s':>9} {'vs buckets':>11} {'pixel waste':>12}")
    for name, med in medians.items():
        print(f"{name:<12} {med:>9.3f} {args.images / med:>9.1f} {med / medians['buckets']:>10.2f}x {waste[name]:>11.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
