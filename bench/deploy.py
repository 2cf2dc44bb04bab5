"""Deployment runtimes side by side: MXNet, onnxruntime, OpenVINO and LiteRT on bridge's converted SSDs.

    .venv/bin/python -m bench.deploy [--models bundled_ssd,vgg16_ssd300] [--batches 1,4] [--threads 2]
                                     [--rounds 15] [--no-tflite]

For each model (``bench.ssd_models``) and batch: ``bridge convert --validate none`` to a static-batch ONNX
model, then the OpenVINO IR (``bridge.targets.openvino.export_ir``, FP32) and the .tflite
(``bridge.targets.tflite.export_tflite``, builtin ops) from it, each conversion timed. MXNet (Module,
NaiveEngine), onnxruntime, OpenVINO (CPU plugin, f32) and LiteRT (XNNPACK) run the same random image
batch with ``--threads`` threads each, interleaved round by round (``bridge.bench.timing.interleaved``); ratio =
MXNet median / runtime median (> 1: faster than MXNet). Agreement: each runtime's [B, N, 6] detections
against MXNet's, detection-aware (``bridge.validation.detection.compare_detections``: matched boxes,
boxes on one side only, ties). Prints a Markdown table and writes it with the JSON to bench/results/.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import tempfile
import time
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from bench.ssd_bench import convert, mx_module, ort_session
from bench.ssd_models import build, mxnet_import
from bridge.bench.timing import interleaved

RESULTS = Path(__file__).resolve().parent / "results"


def _openvino(xml: Path, threads: int) -> Any:
    import openvino as ov

    compiled = ov.Core().compile_model(str(xml), "CPU", {"INFERENCE_NUM_THREADS": threads,
                                                          "INFERENCE_PRECISION_HINT": "f32"})
    request = compiled.create_infer_request()
    return lambda x: request.infer({0: x})[compiled.outputs[0]]


def _litert(path: Path, threads: int) -> Any:
    from ai_edge_litert.interpreter import Interpreter

    runner = Interpreter(model_path=str(path), num_threads=threads).get_signature_runner()
    key = next(iter(runner.get_input_details()))
    return lambda x: next(iter(runner(**{key: x}).values()))


def _agreement(reference: np.ndarray, candidate: np.ndarray) -> str:
    from bridge.validation.detection.matching import compare_detections, from_mxnet

    c = compare_detections(from_mxnet(reference), from_mxnet(candidate))
    return (f"{'PASS' if c.passed else 'FAIL'}{' (vacuous: ' + c.vacuous_reason + ')' if c.vacuous else ''}: "
            f"{c.matched} matched, {c.unmatched_reference}/{c.unmatched_candidate} "
            "on one side only" + (f", {c.tie_ambiguous} tie-ambiguous" if c.tie_ambiguous else "")
            + f", max score diff {c.max_score_diff:.1e}")


def bench_model(mx: Any, name: str, batches: list[int], threads: int, rounds: int, work: Path,
                tflite: bool) -> list[dict[str, Any]]:
    from bridge.targets.openvino import export_ir
    from bridge.targets.tflite import export_tflite

    built = build(mx, name)
    rows = []
    for batch in batches:
        onnx_path = work / f"{name}_b{batch}.onnx"
        start = time.perf_counter()
        convert(built, onnx_path, batch)
        conversion = {"onnx_s": time.perf_counter() - start}
        ir = export_ir(onnx_path, work / f"{name}_b{batch}.xml")
        conversion["openvino_s"] = ir.seconds
        lite = export_tflite(onnx_path, work / f"{name}_b{batch}.tflite") if tflite else None
        if lite is not None:
            conversion["tflite_s"] = lite.seconds
        x = np.random.default_rng(0).uniform(0, 255, (batch, 3, built.spec.size, built.spec.size)).astype(np.float32)
        runs: dict[str, Any] = {"mxnet": (lambda f: lambda a: f(a)[0])(mx_module(mx, built, batch)),
                                "onnxruntime": (lambda s: lambda a: s.run(None, {"data": a})[0])(
                                    ort_session(onnx_path, threads)),
                                "openvino": _openvino(ir.path, threads)}
        if lite is not None:
            runs["litert"] = _litert(lite.path, threads)
        ways = {k: partial(fn, x) for k, fn in runs.items()}
        outputs = {k: np.asarray(fn()) for k, fn in ways.items()}
        timings = interleaved(ways, rounds)
        for way, t in timings.items():
            rows.append({"model": name, "batch": batch, "runtime": way, "median_ms": t.ms, "spread": t.spread(),
                         "vs_mxnet": timings["mxnet"].median / t.median,
                         "vs_onnxruntime": timings["onnxruntime"].median / t.median,
                         "agreement": "reference" if way == "mxnet" else _agreement(outputs["mxnet"], outputs[way]),
                         "conversion_s": conversion.get(f"{way}_s" if way != "litert" else "tflite_s",
                                                        conversion["onnx_s"] if way == "onnxruntime" else None)})
    return rows


def markdown(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = [f"# bench.deploy {meta['when']} on {meta['host']} ({meta['cpus']} CPUs, load {meta['load']}; "
             f"{meta['threads']} threads per runtime, {meta['rounds']} rounds)", "",
             "| model | batch | runtime | median ms (min-max) | vs MXNet | vs onnxruntime | detections vs MXNet | "
             "conversion s |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        conv = f"{r['conversion_s']:.1f}" if r["conversion_s"] is not None else ""
        lines.append(f"| {r['model']} | {r['batch']} | {r['runtime']} | {r['median_ms']:.2f} ({r['spread']}) | "
                     f"{r['vs_mxnet']:.2f}x | {r['vs_onnxruntime']:.2f}x | {r['agreement']} | {conv} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="bundled_ssd,vgg16_ssd300")
    parser.add_argument("--batches", default="1,4")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--no-tflite", action="store_true", help="skip the .tflite conversion and LiteRT")
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    mx = mxnet_import(args.threads)
    batches = [int(b) for b in args.batches.split(",")]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-deploy-") as work:
        for name in args.models.split(","):
            rows += bench_model(mx, name, batches, args.threads, args.rounds, Path(work), not args.no_tflite)
    now = datetime.now(UTC)
    meta = {"when": now.strftime("%Y-%m-%dT%H%MZ"), "host": socket.gethostname(), "cpus": os.cpu_count(),
            "load": " ".join(f"{v:.1f}" for v in os.getloadavg()), "threads": args.threads, "rounds": args.rounds}
    text = markdown(rows, meta)
    print(text)
    RESULTS.mkdir(exist_ok=True)
    stem = RESULTS / f"{meta['when']}-{meta['host']}-deploy"
    stem.with_suffix(".md").write_text(text)
    stem.with_suffix(".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
