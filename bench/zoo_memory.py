"""Bridge against the plain exporters on small zoo-style models: wall time and process-tree peak RSS.

``python -m bench.zoo_memory [--models convnext_atto,resnet_small,keras_convnext] [--out FILE.md]``

For each model two fresh processes run one after the other: ``bridge convert`` (default validation,
whose framework reference and candidate runtimes are child processes) and the plain exporter doing the
equivalent work in one process (``torch.onnx.export`` + an onnxruntime run compared with the torch
output; for Keras, ``tf2onnx.convert.from_keras`` + onnxruntime). Memory is sampled from ``/proc`` every
20 ms over the whole process tree (the process and all its descendants, summed), so a validation child
counts while it lives; the peak of that sum is reported with the wall time and the ratio bridge / plain.
Models are built in code (random weights); nothing is downloaded.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def _rss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def tree_rss(pid: int) -> int:
    """Resident bytes of ``pid`` and every descendant, summed."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        total += _rss(p)
        todo.extend(_children(p))
    return total


@dataclass
class Measured:
    returncode: int
    wall_s: float
    peak_tree_rss: int
    output: str


def run_measured(cmd: list[str], env: dict[str, str] | None = None, interval: float = 0.02,
                 timeout: float = 3600) -> Measured:
    """Run ``cmd``, sampling its process tree's summed RSS until it exits."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    peak = 0
    stop = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, tree_rss(proc.pid))
            time.sleep(interval)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        out, _ = proc.communicate(timeout=timeout)
    finally:
        stop.set()
        sampler.join()
    return Measured(proc.returncode, time.perf_counter() - start, peak, out)


# --- models (factories importable by ``bridge convert module:factory``) -------------------------------------

def convnext_atto():  # type: ignore[no-untyped-def]
    """A ConvNeXt-atto-sized torch model (dims 40/80/160/320, depths 2/2/6/2, ~3.7M parameters)."""
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self, dim: int) -> None:
            super().__init__()
            self.dw = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
            self.norm = nn.LayerNorm(dim, eps=1e-6)
            self.pw1, self.act, self.pw2 = nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim)
            self.gamma = nn.Parameter(torch.full((dim,), 0.5))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.dw(x).permute(0, 2, 3, 1)
            y = self.pw2(self.act(self.pw1(self.norm(y)))) * self.gamma
            return x + y.permute(0, 3, 1, 2)

    dims, depths = (40, 80, 160, 320), (2, 2, 6, 2)
    layers: list[nn.Module] = [nn.Conv2d(3, dims[0], 4, stride=4)]
    for i, (d, n) in enumerate(zip(dims, depths, strict=True)):
        if i:
            layers.append(nn.Conv2d(dims[i - 1], d, 2, stride=2))
        layers.extend(Block(d) for _ in range(n))
    torch.manual_seed(0)
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(dims[-1], 1000)).eval()


def resnet_small():  # type: ignore[no-untyped-def]
    """A ResNet-18-shaped torch model at half width (~2.8M parameters)."""
    import torch
    from torch import nn

    class Basic(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.c1, self.b1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout)
            self.c2, self.b2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout)
            self.down = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                         if stride != 1 or cin != cout else nn.Identity())

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(self.b2(self.c2(torch.relu(self.b1(self.c1(x))))) + self.down(x))

    torch.manual_seed(0)
    w = (32, 64, 128, 256)
    layers: list[nn.Module] = [nn.Conv2d(3, 32, 7, 2, 3, bias=False), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
    cin = 32
    for i, c in enumerate(w):
        layers += [Basic(cin, c, 1 if i == 0 else 2), Basic(c, c, 1)]
        cin = c
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, 1000)).eval()


TORCH_MODELS = {"convnext_atto": "3,224,224", "resnet_small": "3,224,224"}
KERAS_MODELS = {"keras_convnext": "ConvNeXtTiny", "keras_mobilenet": "MobileNetV2"}

PLAIN_TORCH = """
import sys, time, numpy as np, torch, onnxruntime as ort
sys.path.insert(0, {root!r})
from bench.zoo_memory import {name} as factory
model = factory()
x = torch.randn(1, {shape})
torch.onnx.export(model, (x,), {out!r}, input_names=["x"], dynamo=True)
sess = ort.InferenceSession({out!r}, providers=["CPUExecutionProvider"])
with torch.no_grad():
    ref = model(x).numpy()
got = sess.run(None, {{"x": x.numpy()}})[0]
print("max_abs", float(np.abs(ref - got).max()))
"""

PLAIN_KERAS = """
import numpy as np, keras, tensorflow as tf, tf2onnx, onnxruntime as ort
model = keras.models.load_model({src!r}, compile=False)
shape = (1,) + tuple(model.inputs[0].shape[1:])
spec = [tf.TensorSpec(shape, tf.float32, name="x")]
proto, _ = tf2onnx.convert.from_keras(model, input_signature=spec, opset=17)
sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
ref = model(x, training=False).numpy()
got = sess.run(None, {{sess.get_inputs()[0].name: x}})[0]
print("max_abs", float(np.abs(ref - got).max()))
"""


def _keras_file(name: str, folder: Path) -> Path:
    path = folder / f"{name}.keras"
    if not path.exists():
        code = (f"import keras; keras.applications.{KERAS_MODELS[name]}(weights=None).save({str(path)!r})")
        subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    return path


def _max_abs(output: str) -> str:
    for line in output.splitlines()[::-1]:
        if "max_abs" in line:
            return line.split("max_abs")[-1].split()[0]
    return "?"


def measure(name: str, folder: Path, extra: list[str]) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    if name in TORCH_MODELS:
        shape = TORCH_MODELS[name]
        bridge_cmd = [sys.executable, "-m", "bridge", "convert", f"bench.zoo_memory:{name}", "-o",
                      str(folder / f"{name}.onnx"), "--input", f"input:1,{shape}", *extra]
        plain = PLAIN_TORCH.format(root=str(ROOT), name=name, shape=shape, out=str(folder / f"{name}_plain.onnx"))
    else:
        src = _keras_file(name, folder)
        bridge_cmd = [sys.executable, "-m", "bridge", "convert", str(src), "-o", str(folder / f"{name}.onnx"), *extra]
        plain = PLAIN_KERAS.format(src=str(src))
    b = run_measured(bridge_cmd, env=env)
    p = run_measured([sys.executable, "-c", plain], env=env)
    return {"model": name, "bridge_rc": b.returncode, "bridge_s": round(b.wall_s, 1),
            "bridge_peak_mb": round(b.peak_tree_rss / 2**20), "bridge_max_abs": _max_abs(b.output),
            "plain_rc": p.returncode, "plain_s": round(p.wall_s, 1), "plain_peak_mb": round(p.peak_tree_rss / 2**20),
            "plain_max_abs": _max_abs(p.output),
            "rss_ratio": round(b.peak_tree_rss / max(p.peak_tree_rss, 1), 2),
            "time_ratio": round(b.wall_s / max(p.wall_s, 1e-9), 2),
            "bridge_tail": b.output.strip().splitlines()[-3:] if b.returncode else []}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="convnext_atto,resnet_small")
    ap.add_argument("--bridge-args", default="", help="extra arguments for bridge convert (space-separated)")
    ap.add_argument("--out", type=Path, help="also write the table (Markdown) here")
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            row = measure(name, Path(tmp), args.bridge_args.split())
            print(json.dumps(row), flush=True)
            rows.append(row)
    head = "| model | bridge | max err | time s (bridge / plain) | peak tree RSS MB (bridge / plain) | RSS ratio |"
    lines = [head, "|---|---|---|---|---|---|"]
    for r in rows:
        verdict = "ok" if r["bridge_rc"] == 0 else f"exit {r['bridge_rc']}"
        lines.append(f"| {r['model']} | {verdict} | {r['bridge_max_abs']} (plain {r['plain_max_abs']}) | "
                     f"{r['bridge_s']} / {r['plain_s']} | {r['bridge_peak_mb']} / {r['plain_peak_mb']} | {r['rss_ratio']} |")
    table = "\n".join(lines)
    print(table)
    if args.out:
        args.out.write_text(table + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
