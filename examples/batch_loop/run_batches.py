"""Run a batch through a model exported at batch 1, one image at a time, and stack the results.

The way out for detectors whose traced graph fixes the batch axis (torchvision's detectors take the
images apart with ``unbind``; bridge refuses ``--dynamic images:0=batch`` for them): export with
batch 1, then loop over the batch here::

    bridge convert detector.py:build -o det.onnx --input images:1,3,320,320
    python examples/batch_loop/run_batches.py det.onnx batch.npz out.npz   # batch.npz: images [B, 3, 320, 320]

Output layout, per output of the batch-1 model:

- an output whose leading axis is 1 (logits ``[1, C]``, a padded detector's ``[1, D, 4]``) is concatenated
  over the images: ``[B, ...]``;
- any other output (a variable number of rows per image, e.g. torchvision's boxes ``[K, 4]``, scores
  ``[K]``, labels ``[K]``) is padded with ``pad`` (default 0) to the largest K in the batch:
  ``[B, K_max, ...]``, and ``<name>_count`` ``[B]`` (int64) says how many rows of image b are real.

Inputs without the batched axis (named in ``--shared``) are fed unchanged to every image.
"""

from __future__ import annotations

import argparse
from collections.abc import Collection, Mapping
from typing import Any

import numpy as np


def run_batches(session: Any, feeds: Mapping[str, np.ndarray], shared: Collection[str] = (),
                pad: float = 0) -> dict[str, np.ndarray]:
    """``session`` (an onnxruntime InferenceSession of a batch-1 model) run image by image over axis 0 of
    every feed not in ``shared``; the results stacked as the module docstring describes."""
    batched = [n for n in feeds if n not in shared]
    if not batched:
        raise ValueError("every input is shared: nothing to loop over")
    sizes = {feeds[n].shape[0] for n in batched}
    if len(sizes) != 1:
        raise ValueError(f"the batched inputs disagree on the batch size: {sorted(sizes)}")
    names = [o.name for o in session.get_outputs()]
    per_image = [dict(zip(names, session.run(None, {n: (v[b:b + 1] if n in batched else v) for n, v in feeds.items()}),
                          strict=True))
                 for b in range(sizes.pop())]
    out: dict[str, np.ndarray] = {}
    for name in names:
        values = [r[name] for r in per_image]
        if all(v.ndim and v.shape[0] == 1 for v in values) and len({v.shape for v in values}) == 1:
            out[name] = np.concatenate(values)
            continue
        rows = max((v.shape[0] if v.ndim else 1) for v in values)
        padded = []
        for v in values:
            v = v.reshape(1) if v.ndim == 0 else v
            fill = np.full((rows - v.shape[0], *v.shape[1:]), pad, dtype=v.dtype)
            padded.append(np.concatenate([v, fill]))
        out[name] = np.stack(padded)
        out[f"{name}_count"] = np.array([v.shape[0] if v.ndim else 1 for v in values], dtype=np.int64)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", help="an .onnx exported with batch 1")
    ap.add_argument("feeds", help=".npz of the batched inputs, keyed by input name")
    ap.add_argument("out", help=".npz to write the stacked outputs to")
    ap.add_argument("--shared", default="", help="comma-separated inputs fed whole to every image")
    ap.add_argument("--pad", type=float, default=0.0, help="value of the padding rows")
    args = ap.parse_args(argv)
    import onnxruntime as ort

    session = ort.InferenceSession(args.model, providers=["CPUExecutionProvider"])
    with np.load(args.feeds) as data:
        feeds = {k: data[k] for k in data.files}
    result = run_batches(session, feeds, [s for s in args.shared.split(",") if s], args.pad)
    np.savez(args.out, **result)
    for name, value in result.items():
        print(f"{name}: {list(value.shape)} {value.dtype}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
