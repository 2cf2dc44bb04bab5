"""int8 against fp32 in each runtime, with the accuracy each keeps: the done-when figures of ``--precision``.

``python -m bench.precision [--batches 1,4] [--threads 2] [--iterations 60] [--rounds 12] [--out FILE.md]``

The model is ``ssd256`` (``tests/precision_models``: an MXNet SSD for 256 x 256 images, 1.03 GMAC, trained on
the procedural shapes and cached). For each target (onnx, openvino, tflite) ``bridge convert --precision int8``
runs once (cached in ``bench/.cache/precision``): the fp32 artefact validated elementwise against MXNet, the
int8 variant judged on the model's 400 held-out images with labels (agreement with MXNet's detections, mAP
drop), calibrated on 128 other images. Then one ``bridge bench`` run times all six files - each runtime's fp32
artefact and its int8 variant (``--variant``) - at the given batch sizes and threads in the same interleaved
rounds, so every ratio is paired; the load average at the start and the end is recorded with it. Writes
``bench/results/<date>-precision.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "bench" / ".cache" / "precision"
RESULTS = ROOT / "bench" / "results"
TARGETS = {"onnx": ("onnxruntime", ".onnx"), "openvino": ("openvino", ".xml"), "tflite": ("litert", ".tflite")}


def model() -> Any:
    sys.path.insert(0, str(ROOT / "tests"))
    from precision_models import precision_model

    return precision_model("ssd256")


def convert(m: Any, target: str) -> dict[str, Any]:
    """``bridge convert --precision int8 --to TARGET`` of the model (once); its report's precision section."""
    out = CACHE / target
    report = out / "report.json"
    if not report.is_file():
        from bridge.cli.main import main

        out.mkdir(parents=True, exist_ok=True)
        code = main(["convert", str(m.source), "-o", str(out / "ssd256.onnx"), "--to", target, *m.convert_args,
                     "--feeds", str(m.feeds), "--dataset", str(m.images), "--labels", str(m.labels),
                     "--precision", "int8", "--calibration", str(m.calibration), "--report", str(report)])
        if code != 0:
            raise SystemExit(f"bridge convert --to {target} --precision int8 exited {code}")
    data = json.loads(report.read_text())
    return {"precision": data["precision"], "target_path": (data.get("target") or {}).get("path")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", default="1,4")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--iterations", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--targets", default="onnx,openvino,tflite")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    from bridge import api

    m = model()
    targets = [t for t in args.targets.split(",") if t]
    conversions = {t: convert(m, t) for t in targets}
    variants: dict[str, tuple[str, Path]] = {}
    for target, info in conversions.items():
        runtime, _suffix = TARGETS[target]
        fp32 = Path(info["target_path"]) if target != "onnx" else CACHE / "onnx" / "ssd256.onnx"
        variants[f"{runtime} fp32"] = (runtime, fp32)
        variants[f"{runtime} int8"] = (runtime, Path(info["precision"]["destination"]))
    batches = [int(b) for b in args.batches.split(",")]
    result = api.bench(CACHE / targets[0] / "ssd256.onnx", runtime=[], batch=batches, threads=args.threads,
                       iterations=args.iterations, rounds=args.rounds, feeds=m.feeds, variants=variants,
                       progress=lambda msg: print(msg, file=sys.stderr))
    data = result.to_dict()
    rows = []
    for target, info in conversions.items():
        runtime, _suffix = TARGETS[target]
        side = {r["precision"]: r for r in info["precision"]["side_by_side"]}
        for b in batches:
            fp32_cell, int8_cell = result.cell(f"{runtime} fp32", b), result.cell(f"{runtime} int8", b)
            rows.append({
                "runtime": runtime, "batch": b,
                "fp32_ms": None if fp32_cell is None or fp32_cell.latency is None else fp32_cell.latency.p50 * 1e3,
                "int8_ms": None if int8_cell is None or int8_cell.latency is None else int8_cell.latency.p50 * 1e3,
                "speedup": result.relative(f"{runtime} int8", f"{runtime} fp32", b),
                "agreement_ap50": side["int8"]["agreement_ap50"], "map50_fp32": side["fp32"]["map50"],
                "map50_int8": side["int8"]["map50"], "map50_drop": side["int8"]["map50_drop"],
                "size_fp32": side["fp32"]["size_bytes"], "size_int8": side["int8"]["size_bytes"],
                "images": info["precision"]["dataset_run"]["images"]})
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H%MZ")
    out = args.out or RESULTS / f"{stamp}-precision.md"
    payload = {"model": {"name": "ssd256", "gmac": m.training.get("gmac_per_image"), "quality": m.quality},
               "rows": rows, "bench": {k: v for k, v in data.items() if k != "results"},
               "cells": [{k: v for k, v in c.items() if k != "samples_ms"} for c in data["results"]]}
    out.with_suffix(".json").write_text(json.dumps(payload, indent=1, default=str))
    load = data["machine"].get("load_avg"), data["machine"].get("load_avg_end")
    lines = [f"# int8 vs fp32 per runtime: ssd256 ({m.training.get('gmac_per_image')} GMAC, 256 x 256), {stamp}", "",
             f"One `bridge bench` run, all six files in the same interleaved rounds ({args.rounds} rounds, "
             f"{args.iterations} calls per file and batch), {args.threads} threads; machine "
             f"{data['machine'].get('cpu')}, load average at start {load[0]}, at end {load[1]}. Accuracy: "
             f"`bridge convert --precision int8` on {rows[0]['images'] if rows else '-'} held-out images with labels "
             "(agreement AP@0.5 of the int8 detections with MXNet's, mAP@0.5 drop vs MXNet), calibrated on 128 others.",
             "", "| runtime | batch | fp32 p50 ms | int8 p50 ms | int8 speed-up | agreement AP@0.5 | mAP@0.5 fp32 | "
             "mAP@0.5 int8 | mAP drop | size fp32 / int8 MiB |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['runtime']} | {r['batch']} | {r['fp32_ms']:.1f} | {r['int8_ms']:.1f} | "
                     f"{r['speedup']:.2f}x | {r['agreement_ap50']:.4f} | {r['map50_fp32']:.4f} | {r['map50_int8']:.4f} | "
                     f"{r['map50_drop']:.4f} | {r['size_fp32'] / 2**20:.2f} / {r['size_int8'] / 2**20:.2f} |")
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
