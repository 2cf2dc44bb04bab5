"""``--dataset`` streams at constant memory: peak RSS of 10,000 images against 1,000, and the metric's share.

``python -m bench.dataset_stream [--counts 1000,10000] [--runtimes onnxruntime] [--out FILE.md]``

Writes the bundled trained MXNet SSD's procedural images (``examples/mxnet_ssd/make_dataset.py``, 10,000
PNG files with COCO labels, cached in ``bench/.cache/dataset``), converts the SSD once, then for each count
runs ``bridge validate out.onnx --source model-symbol.json --dataset ... --labels ... --dataset-limit N`` in
a fresh process. Measured there: wall time, the bridge process's peak RSS (``ru_maxrss`` of itself) and
its largest child's (the MXNet reference or a runtime, ``RUSAGE_CHILDREN``), and from the JSON report the
dataset run's seconds and the metric's own seconds (COCO evaluation and accumulation, agreement counts, worst
images). The result: the RSS ratio 10,000 / 1,000 (flat: within 1.10) and the metric's share of the run (under
10%). The machine's load average is recorded before and after each run: on a shared machine both the inference
and the metric slow down with it, the share less so than the absolute times.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "bench" / ".cache" / "dataset"
SYMBOL = ROOT / "examples" / "mxnet_ssd" / "model-symbol.json"


def prepare(count: int) -> tuple[Path, Path, Path]:
    """The images, labels and converted SSD (made once, reused while the count suffices)."""
    images, labels, model = CACHE / "images", CACHE / "labels.json", CACHE / "ssd.onnx"
    if not labels.is_file() or len(list(images.glob("*.png"))) < count:
        sys.path.insert(0, str(ROOT / "examples" / "mxnet_ssd"))
        from make_dataset import write_dataset

        t = time.perf_counter()
        write_dataset(CACHE, count)
        print(f"wrote {count} images in {time.perf_counter() - t:.0f} s", file=sys.stderr)
    if not model.is_file():
        from bridge.cli.main import main

        code = main(["convert", str(SYMBOL), "--input", "data:4,3,64,64", "--dynamic", "data:0=batch",
                     "--validate", "none", "-o", str(model)])
        assert code == 0, "the SSD did not convert"
    return images, labels, model


def child(count: int, runtimes: str, report: Path) -> None:
    """One measured run (in its own process): bridge validate on ``count`` images, then the peaks."""
    from bridge.cli.main import main

    images, labels, model = CACHE / "images", CACHE / "labels.json", CACHE / "ssd.onnx"
    t = time.perf_counter()
    code = main(["validate", str(model), "--source", str(SYMBOL), "--dataset", str(images), "--labels", str(labels),
                 "--dataset-limit", str(count), "--runtime", runtimes, "--report", str(report)])
    wall = time.perf_counter() - t
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(json.dumps({"exit_code": code, "wall_s": wall, "peak_rss_mb": own, "largest_child_peak_rss_mb": kids}))


def measure(counts: list[int], runtimes: str) -> dict:
    prepare(max(counts))
    rows = []
    for count in counts:
        report = CACHE / f"report-{count}.json"
        load_before = os.getloadavg()[0]
        proc = subprocess.run([sys.executable, "-m", "bench.dataset_stream", "--child", str(count), "--runtimes",
                               runtimes, "--report", str(report)], cwd=ROOT, capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)}, check=False)
        line = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else "{}"
        peaks = json.loads(line)
        if peaks.get("exit_code") != 0:
            raise SystemExit(f"bridge validate on {count} images failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        data = json.loads(report.read_text())
        run = data["dataset_run"]
        rows.append({"images": count, **peaks, "load_average": [round(load_before, 1), round(os.getloadavg()[0], 1)],
                     "dataset_s": run["seconds"], "metric_s": run["metric_seconds"],
                     "metric_share": run["metric_seconds"] / run["seconds"],
                     "figures": {k: {f: v.get(f) for f in ("map50", "map50_95", "agreement_ap50", "images_per_s")}
                                 for k, v in data["dataset"].items()}})
        print(f"{count} images: peak RSS {peaks['peak_rss_mb']:.0f} MB (largest child "
              f"{peaks['largest_child_peak_rss_mb']:.0f} MB), dataset run {run['seconds']:.1f} s, metric "
              f"{run['metric_seconds']:.2f} s ({100 * rows[-1]['metric_share']:.1f}%)", file=sys.stderr)
    first, last = rows[0], rows[-1]
    return {"benchmark": "dataset_stream", "date": datetime.now(UTC).strftime("%Y-%m-%dT%H%MZ"),
            "machine": {"host": platform.node(), "cpus": os.cpu_count(), "python": platform.python_version()},
            "runtimes": runtimes, "runs": rows,
            "rss_ratio": last["peak_rss_mb"] / first["peak_rss_mb"],
            "child_rss_ratio": last["largest_child_peak_rss_mb"] / first["largest_child_peak_rss_mb"],
            "max_metric_share": max(r["metric_share"] for r in rows)}


def markdown(result: dict) -> str:
    lines = [f"# --dataset streaming, {result['date']} ({result['machine']['cpus']} CPUs, runtimes "
             f"{result['runtimes']})\n",
             "Bundled trained MXNet SSD (64x64), procedural PNG images with COCO labels; `bridge validate --dataset "
             "--labels --dataset-limit N` in a fresh process per N (`python -m bench.dataset_stream`).\n",
             "| images | wall s | dataset run s | metric s | metric share | peak RSS MB | largest child MB | load avg |",
             "|---|---|---|---|---|---|---|---|"]
    for r in result["runs"]:
        load = "-".join(f"{v:g}" for v in r.get("load_average", []))
        lines.append(f"| {r['images']} | {r['wall_s']:.1f} | {r['dataset_s']:.1f} | {r['metric_s']:.2f} | "
                     f"{100 * r['metric_share']:.1f}% | {r['peak_rss_mb']:.0f} | {r['largest_child_peak_rss_mb']:.0f} | "
                     f"{load} |")
    lines.append(f"\nPeak RSS {result['runs'][-1]['images']} / {result['runs'][0]['images']} images: bridge "
                 f"{result['rss_ratio']:.3f}, largest child {result['child_rss_ratio']:.3f} (flat: <= 1.10). "
                 f"Metric share at most {100 * result['max_metric_share']:.1f}% (target < 10%).")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--counts", default="1000,10000")
    parser.add_argument("--runtimes", default="onnxruntime")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--report", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.runtimes, args.report)
        return
    result = measure([int(c) for c in args.counts.split(",")], args.runtimes)
    out = args.out or ROOT / "bench" / "results" / f"{result['date']}-dataset-stream.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    out.write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
