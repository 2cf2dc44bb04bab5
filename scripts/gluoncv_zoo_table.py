"""GluonCV model-zoo families through bridge: export with GluonCV, convert + validate with bridge.

GluonCV 0.10.5 does not import beside torch >= 2, so the two halves run in two environments:

    # 1. in a venv with mxnet==1.9.1 gluoncv==0.10.5 'numpy<1.24' (random weights: pretrained=False)
    /tmp/gcv/bin/python scripts/gluoncv_zoo_table.py export OUTDIR [--models a,b]
    # 2. in bridge's environment: bridge convert (validated in onnxruntime against MXNet) per exported model
    python scripts/gluoncv_zoo_table.py convert OUTDIR [--models a,b] [--markdown table.md]

``export`` builds each model with ``gluoncv.model_zoo.get_model(name, pretrained=False)`` (backbones not
downloaded either), initialises it, hybridises, runs it once on its input shape and writes
``OUTDIR/NAME-symbol.json`` + ``NAME-0000.params`` and ``NAME.json`` (input shape, export time or error).
``convert`` runs ``python -m bridge convert`` per model in a child process, records exit code, the report's
validation verdict (detections matched / max error) and time in ``OUTDIR/results.jsonl``, and prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

# name -> (family, input shape NCHW)
MODELS: dict[str, tuple[str, tuple[int, ...]]] = {
    "ssd_300_vgg16_atrous_voc": ("SSD", (1, 3, 300, 300)),
    "ssd_512_mobilenet1.0_voc": ("SSD", (1, 3, 512, 512)),
    "ssd_512_resnet50_v1_voc": ("SSD", (1, 3, 512, 512)),
    "yolo3_darknet53_voc": ("YOLOv3", (1, 3, 416, 416)),
    "yolo3_mobilenet1.0_coco": ("YOLOv3", (1, 3, 416, 416)),
    "faster_rcnn_resnet50_v1b_voc": ("Faster R-CNN", (1, 3, 512, 512)),
    "faster_rcnn_fpn_resnet50_v1b_coco": ("Faster R-CNN", (1, 3, 512, 512)),
    "mask_rcnn_resnet18_v1b_coco": ("Mask R-CNN", (1, 3, 512, 512)),
    "center_net_resnet18_v1b_voc": ("CenterNet", (1, 3, 512, 512)),
    "fcn_resnet50_voc": ("FCN/PSP/DeepLab", (1, 3, 480, 480)),
    "psp_resnet50_ade": ("FCN/PSP/DeepLab", (1, 3, 480, 480)),
    "deeplab_resnet50_ade": ("FCN/PSP/DeepLab", (1, 3, 480, 480)),
    "simple_pose_resnet18_v1b": ("SimplePose", (1, 3, 256, 192)),
    "resnet50_v1b": ("classification", (1, 3, 224, 224)),
    "mobilenetv3_large": ("classification", (1, 3, 224, 224)),
    "resnet18_v1": ("classification", (1, 3, 224, 224)),
    "mobilenet1.0": ("classification", (1, 3, 224, 224)),
    "vgg16": ("classification", (1, 3, 224, 224)),
    "densenet121": ("classification", (1, 3, 224, 224)),
    "squeezenet1.0": ("classification", (1, 3, 224, 224)),
    "inceptionv3": ("classification", (1, 3, 299, 299)),
    "se_resnext50_32x4d": ("classification", (1, 3, 224, 224)),
    "darknet53": ("classification", (1, 3, 224, 224)),
}


def _selected(models: str | None) -> list[str]:
    return [m for m in models.split(",")] if models else list(MODELS)


def _initialize(mx: Any, net: Any) -> None:
    """Xavier for weights; batch-norm scales and variances 1, shifts, means and biases 0 (a fresh network)."""
    for pname, param in net.collect_params().items():
        if pname.endswith(("gamma", "running_var", "moving_var")):
            init = mx.init.One()
        elif pname.endswith(("beta", "running_mean", "moving_mean", "bias")) or len(param.shape or ()) == 1:
            init = mx.init.Zero()
        else:
            init = mx.init.Xavier(magnitude=2)
        param.initialize(init=init, force_reinit=True)


def export(outdir: Path, names: list[str]) -> None:
    import mxnet as mx
    from gluoncv import model_zoo

    outdir.mkdir(parents=True, exist_ok=True)
    for name in names:
        shape = MODELS[name][1]
        done = outdir / f"{name}.json"
        if done.exists() and json.loads(done.read_text()).get("status") == "ok":
            continue
        info: dict[str, Any] = {"name": name, "shape": list(shape)}
        t0 = time.perf_counter()
        try:
            kwargs = {} if MODELS[name][0] == "classification" else {"pretrained_base": False}
            net = model_zoo.get_model(name, pretrained=False, **kwargs)
            _initialize(mx, net)
            net.hybridize()
            x = mx.nd.random.uniform(0, 1, shape=shape, dtype="float32")
            out = net(x)
            mx.nd.waitall()
            outs = out if isinstance(out, (list, tuple)) else [out]
            info["outputs"] = [list(o.shape) for o in outs]
            net.export(str(outdir / name), epoch=0)
            info["status"] = "ok"
        except Exception as e:
            info["status"] = "error"
            info["error"] = f"{type(e).__name__}: {e}"[:600]
        info["export_s"] = round(time.perf_counter() - t0, 1)
        (outdir / f"{name}.json").write_text(json.dumps(info))
        print(json.dumps(info), flush=True)


def _verdict(report: Path) -> str:
    """Per runtime: pass/FAIL, detection groups' match counts, the worst elementwise error."""
    if not report.exists():
        return ""
    data = json.loads(report.read_text())
    parts = []
    for v in data.get("validation") or []:
        outs = v.get("outputs") or []
        bits = [f"{v.get('candidate', '?')} {'pass' if v.get('passed') else 'FAIL'}"]
        bits += [f"{(o.get('detection') or {}).get('matched')} dets matched" for o in outs if o.get("detection")]
        errs = [o["max_abs"] for o in outs if isinstance(o.get("max_abs"), (int, float))]
        if errs:
            bits.append(f"max abs err {max(errs):.2g}")
        bits += [o["note"][:200] for o in outs if not o.get("passed") and o.get("note")]
        parts.append(", ".join(bits))
    return "; ".join(parts) or str(data.get("validation_skipped") or "")


def convert(outdir: Path, names: list[str], markdown: Path | None, timeout: float) -> None:
    results = outdir / "results.jsonl"
    for name in names:
        meta_file = outdir / f"{name}.json"
        if not meta_file.exists():
            continue
        meta = json.loads(meta_file.read_text())
        row: dict[str, Any] = {"name": name, "family": MODELS[name][0]}
        if meta["status"] != "ok":
            row.update(status="export failed", detail=meta.get("error", ""))
        else:
            report = outdir / f"{name}.report.json"
            cmd = [sys.executable, "-m", "bridge", "convert", str(outdir / f"{name}-symbol.json"),
                   "-o", str(outdir / f"{name}.onnx"), "--params", str(outdir / f"{name}-0000.params"),
                   "--input", "data:" + ",".join(str(d) for d in meta["shape"]), "--report", str(report)]
            t0 = time.perf_counter()
            try:
                p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=os.environ.copy())
                rc, tail = p.returncode, (p.stdout + p.stderr).strip().splitlines()[-6:]
            except subprocess.TimeoutExpired:
                rc, tail = -1, [f"timeout after {timeout:.0f} s"]
            row.update(rc=rc, time_s=round(time.perf_counter() - t0, 1), tail=tail, validation=_verdict(report))
            row["status"] = {0: "converted + validated", 1: "converted, validation mismatch", 2: "usage error",
                             3: "refused (conversion error)", 70: "internal error", -1: "timeout"}.get(rc, f"exit {rc}")
        with results.open("a") as f:
            f.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)
    if markdown:
        markdown.write_text(table(results))


def table(results: Path) -> str:
    rows: dict[str, dict[str, Any]] = {}
    for line in results.read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            rows[r["name"]] = r
    lines = ["| family | model | convert | validate (onnxruntime vs MXNet) | time s |", "|---|---|---|---|---|"]
    for name, (fam, _) in MODELS.items():
        r = rows.get(name)
        if r is None:
            continue
        rc = r.get("rc")
        conv = "yes" if rc in (0, 1) else r["status"]
        val = r.get("validation") or ("" if rc in (0, 1) else (r.get("tail") or [r.get("detail", "")])[-1][:160])
        lines.append(f"| {fam} | `{name}` | {conv} | {val} | {r.get('time_s', '')} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("step", choices=["export", "convert", "table"])
    p.add_argument("outdir", type=Path)
    p.add_argument("--models", help="comma-separated subset of the zoo names")
    p.add_argument("--markdown", type=Path)
    p.add_argument("--timeout", type=float, default=1800)
    a = p.parse_args()
    if a.step == "export":
        export(a.outdir, _selected(a.models))
    elif a.step == "convert":
        convert(a.outdir, _selected(a.models), a.markdown, a.timeout)
    else:
        print(table(a.outdir / "results.jsonl"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
