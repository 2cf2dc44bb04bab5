"""Bridge against the plain exporters on small zoo-style models: wall time and process-tree peak RSS.

``python -m bench.zoo_memory [--models convnext_atto,resnet_small,keras_convnext] [--out FILE.md]``

For each model two fresh processes run one after the other: ``bridge convert`` (default validation,
whose framework reference and candidate runtimes are child processes) and the plain exporter doing the
equivalent work in one process (``torch.onnx.export`` + an onnxruntime run compared with the torch
output; for Keras, ``tf2onnx.convert.from_keras`` + onnxruntime). Memory is sampled from ``/proc`` every
20 ms over the whole process tree (the process and all its descendants, summed), so a validation child
counts while it lives; the peak of that sum is reported with the wall time and the ratio bridge / plain.
A child caught between fork and exec is not counted in RSS: it shows its parent's memory (numpy.testing's
import runs ``lscpu`` from each torch process; one such moment in a 360 MB export child read as +360 MB,
e.g. an RSS ratio of 1.31 for a run whose peak was 1.09x). The same peak over PSS (``pss_ratio``) divides
the pages processes share among them.
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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _children(pid: int) -> list[int]:
    """Child pids of ``pid``, whichever of its threads started them."""
    found: list[int] = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return found
    for task in tasks:
        try:
            found += [int(p) for p in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def _rss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _pss(pid: int) -> int:
    """Proportional set size: each resident page divided among the processes sharing it (a forked child that
    has not exec'd yet shares all its parent's pages, and RSS would count them twice)."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def tree_rss(pid: int) -> int:
    """Resident bytes of ``pid`` and every descendant, summed."""
    return sum(tree_rss_by_process(pid).values())


def _identity(pid: int) -> tuple[bytes, str]:
    """A process's command line and address-space size: a child that forked and has not exec'd yet shows its
    parent's (subprocess uses vfork: the very same pages; after a plain fork, copy-on-write shares them)."""
    try:
        size = next((ln for ln in Path(f"/proc/{pid}/status").read_text().splitlines() if ln.startswith("VmSize:")), "")
        return Path(f"/proc/{pid}/cmdline").read_bytes(), size
    except OSError:
        return b"", ""


def tree_rss_by_process(pid: int, measure: Callable[[int], int] = _rss) -> dict[int, int]:
    """Resident bytes (``measure``: RSS, or PSS) of ``pid`` and of every descendant, by pid. For RSS, a child
    caught between fork and exec (its parent's command line and address-space size: numpy.testing's import
    runs ``lscpu`` from a 360 MB torch process) counts 0, not its parent's pages a second time; PSS divides
    pages a fork shares by itself, so it counts every process as it is."""
    found: dict[int, int] = {}
    todo: list[tuple[int, int | None]] = [(pid, None)]
    while todo:
        p, parent = todo.pop()
        forked = measure is _rss and parent is not None and _identity(p) == _identity(parent)
        found[p] = 0 if forked else measure(p)
        todo.extend((c, p) for c in _children(p))
    return found


_MARKERS = (("libtorch_cpu", "torch"), ("libtensorflow_framework", "tensorflow"), ("onnxruntime_pybind", "onnxruntime"),
            ("libopenvino", "openvino"), ("libmxnet", "mxnet"))


def process_label(pid: int) -> str:
    """What a process of the tree is: its command (bridge's children are all ``python -c``) and the heavy
    native libraries it has loaded (torch, tensorflow, onnxruntime, ...), read from ``/proc/PID/maps``."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        maps = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return "?"
    words = [a.decode(errors="replace") for a in argv if a]
    command = (f"bridge child, {words[-1]}" if any("bridge.runtimes.isolated" in w for w in words)
               else " ".join(w for w in words[1:4] if not w.startswith("\n"))[:40])
    libs = [label for marker, label in _MARKERS if marker in maps]
    return f"{command} [{', '.join(libs)}]" if libs else command


@dataclass
class Measured:
    returncode: int
    wall_s: float
    peak_tree_rss: int
    output: str
    peak_processes: list[tuple[str, int]]  # at the peak: (what the process is, resident bytes), largest first
    peak_tree_pss: int = 0  # the same over PSS (shared pages divided): a fork is not counted twice


def run_measured(cmd: list[str], env: dict[str, str] | None = None, interval: float = 0.02,
                 timeout: float = 3600) -> Measured:
    """Run ``cmd``, sampling its process tree's summed RSS until it exits."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    peak = peak_pss = 0
    at_peak: dict[int, int] = {}
    labels: dict[int, str] = {}  # a process's label once it shows a heavy library (it keeps it)
    stop = threading.Event()

    def sample() -> None:
        nonlocal peak, at_peak, peak_pss
        while not stop.is_set():
            by_pid = tree_rss_by_process(proc.pid)
            peak_pss = max(peak_pss, sum(tree_rss_by_process(proc.pid, _pss).values()))
            total = sum(by_pid.values())
            if total > peak:
                peak, at_peak = total, by_pid
                for pid in by_pid:
                    if "[" not in labels.get(pid, ""):
                        labels[pid] = process_label(pid)
            time.sleep(interval)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        out, _ = proc.communicate(timeout=timeout)
    finally:
        stop.set()
        sampler.join()
    processes = sorted(((labels.get(pid, "?"), rss) for pid, rss in at_peak.items() if rss), key=lambda p: -p[1])
    return Measured(proc.returncode, time.perf_counter() - start, peak, out, processes, peak_pss)


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


def _hf(config_name: str, model_name: str, **config: object):  # type: ignore[no-untyped-def]
    import torch
    import transformers

    torch.manual_seed(0)
    cfg = getattr(transformers, config_name)(**config)
    model = getattr(transformers, model_name)(cfg).eval()
    model.config.return_dict = False  # tuples: the same outputs for torch.onnx.export and bridge
    if hasattr(model.config, "use_cache"):
        model.config.use_cache = False  # no cache object among the outputs (decoders)
    return model


def hf_bert():  # type: ignore[no-untyped-def]
    """BERT (random weights; 4 layers, hidden 256): needs ``transformers`` on the path."""
    return _hf("BertConfig", "BertModel", hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
               intermediate_size=1024)


def hf_distilbert():  # type: ignore[no-untyped-def]
    return _hf("DistilBertConfig", "DistilBertModel", dim=256, n_layers=4, n_heads=4, hidden_dim=1024)


def hf_gpt2():  # type: ignore[no-untyped-def]
    return _hf("GPT2Config", "GPT2Model", n_embd=256, n_layer=4, n_head=4)


def hf_vit():  # type: ignore[no-untyped-def]
    """ViT-tiny-sized (hidden 192, 12 layers, 224 px, patch 16)."""
    return _hf("ViTConfig", "ViTModel", hidden_size=192, num_hidden_layers=12, num_attention_heads=3,
               intermediate_size=768)


def hf_t5_encoder():  # type: ignore[no-untyped-def]
    return _hf("T5Config", "T5EncoderModel", d_model=256, d_ff=1024, num_layers=4, num_heads=4, d_kv=64)


def hf_whisper_encoder():  # type: ignore[no-untyped-def]
    model = _hf("WhisperConfig", "WhisperModel", d_model=256, encoder_layers=4, decoder_layers=1,
                encoder_attention_heads=4, decoder_attention_heads=4, max_source_positions=100)
    return model.get_encoder()


def detector_standin():  # type: ignore[no-untyped-def]
    """A torchvision-like detector (conv backbone, decode, NMS per image; ``tests/adapters/pytorch/detectors.py``)."""
    from tests.adapters.pytorch.detectors import torchvision_separated

    return torchvision_separated()


TEXT = ("input_ids:1,16:int64", "attention_mask:1,16:int64")
TORCH_MODELS: dict[str, tuple[str, ...]] = {
    "convnext_atto": ("input:1,3,224,224",), "resnet_small": ("input:1,3,224,224",),
    "hf_bert": TEXT, "hf_distilbert": TEXT, "hf_t5_encoder": TEXT,
    "hf_gpt2": ("input_ids:1,16:int64",),  # forward(input_ids, past_key_values, ..., attention_mask): positional
    "hf_vit": ("pixel_values:1,3,224,224",), "hf_whisper_encoder": ("input_features:1,80,200",),
    "detector_standin": ("images:1,3,32,32",),
}
# the plain export uses TorchScript where the dynamo exporter fails on the model (T5's attention reshape in
# torch 2.13's decomposition) or is not the usual way (the detector's data-dependent NMS): bridge's auto falls
# back to TorchScript on those too
PLAIN_TORCHSCRIPT = frozenset({"detector_standin", "hf_t5_encoder"})
KERAS_MODELS = {"keras_convnext": "ConvNeXtTiny", "keras_mobilenet": "MobileNetV2", "keras_densenet": "DenseNet121",
                "keras_efficientnet": "EfficientNetB0"}

PLAIN_TORCH = """
import sys, numpy as np, torch, onnxruntime as ort
sys.path.insert(0, {root!r})
from bench.zoo_memory import {name} as factory, plain_inputs
model = factory()
names, args = plain_inputs({inputs!r})
with torch.no_grad():
    ref = model(*args)
torch.onnx.export(model, tuple(args), {out!r}, input_names=names, dynamo={dynamo!r})
sess = ort.InferenceSession({out!r}, providers=["CPUExecutionProvider"])
got = sess.run(None, {{i.name: a.numpy() for i, a in zip(sess.get_inputs(), args)}})
first = ref if isinstance(ref, torch.Tensor) else ref[0]
first = first if isinstance(first, torch.Tensor) else next(iter(first.values()))
print("max_abs", float(np.abs(first.numpy() - got[0]).max()) if first.shape == got[0].shape else "shape-differs")
"""


def plain_inputs(specs: tuple[str, ...]):  # type: ignore[no-untyped-def]
    """The plain exporter's inputs: ids in [0, 100), masks of ones, floats standard normal (seeded)."""
    import torch

    gen = torch.Generator().manual_seed(0)
    names, args = [], []
    for spec in specs:
        name, shape_text, *dtype = spec.split(":")
        shape = [int(d) for d in shape_text.split(",")]
        if dtype and dtype[0].startswith("int"):
            value = torch.ones(shape, dtype=torch.int64) if "mask" in name else torch.randint(0, 100, shape, generator=gen)
        else:
            value = torch.randn(shape, generator=gen)
        names.append(name)
        args.append(value)
    return names, args
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
    """The largest ``max_abs`` figure printed (bridge prints one per output and candidate)."""
    values = []
    for line in output.splitlines():
        parts = line.split("max_abs")
        if len(parts) > 1 and parts[-1].split():
            try:
                values.append(float(parts[-1].split()[0]))
            except ValueError:
                continue
    return f"{max(values):.2g}" if values else "?"


def measure(name: str, folder: Path, extra: list[str]) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    if name in TORCH_MODELS:
        inputs = TORCH_MODELS[name]
        bridge_cmd = [sys.executable, "-m", "bridge", "convert", f"bench.zoo_memory:{name}", "-o",
                      str(folder / f"{name}.onnx"), *(a for i in inputs for a in ("--input", i)), *extra]
        plain = PLAIN_TORCH.format(root=str(ROOT), name=name, inputs=inputs, out=str(folder / f"{name}_plain.onnx"),
                                   dynamo=name not in PLAIN_TORCHSCRIPT)
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
            "bridge_peak_pss_mb": round(b.peak_tree_pss / 2**20), "plain_peak_pss_mb": round(p.peak_tree_pss / 2**20),
            "pss_ratio": round(b.peak_tree_pss / max(p.peak_tree_pss, 1), 2),
            "time_ratio": round(b.wall_s / max(p.wall_s, 1e-9), 2),
            "bridge_at_peak": [f"{what}: {round(rss / 2**20)} MB" for what, rss in b.peak_processes],
            "plain_at_peak": [f"{what}: {round(rss / 2**20)} MB" for what, rss in p.peak_processes],
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
    head = ("| model | bridge | max err | time s (bridge / plain) | peak tree RSS MB (bridge / plain) | RSS ratio "
            "| peak tree PSS MB (bridge / plain) | PSS ratio |")
    lines = [head, "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        verdict = "ok" if r["bridge_rc"] == 0 else f"exit {r['bridge_rc']}"
        lines.append(f"| {r['model']} | {verdict} | {r['bridge_max_abs']} (plain {r['plain_max_abs']}) | "
                     f"{r['bridge_s']} / {r['plain_s']} | {r['bridge_peak_mb']} / {r['plain_peak_mb']} | {r['rss_ratio']} "
                     f"| {r['bridge_peak_pss_mb']} / {r['plain_peak_pss_mb']} | {r['pss_ratio']} |")
    table = "\n".join(lines)
    print(table)
    if args.out:
        args.out.write_text(table + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
