"""Test models for reduced precision, trained in code and cached: a 256 x 256 MXNet SSD of about 1 GMAC.

The bundled example SSD (examples/mxnet_ssd, 64 x 64) is too small to show what int8 buys: its convolutions
take a fraction of its run time. ``precision_model("ssd256")`` returns a ``PrecisionModel`` - the MXNet
checkpoint, held-out png images with COCO labels, separate calibration images, realistic feeds, the
preprocessing and the measured quality - trained on first use (seeded, in a child process) and cached under
``tests/.cache/precision/<name>-<hash of its code and seed>/`` (``BRIDGE_PRECISION_CACHE`` moves it).
The cache follows the trained models' rules (branch ``trained``): build into a temporary folder beside the
final one under an exclusive lock, rename into place, a folder without ``model.json`` is rebuilt.
"""

from __future__ import annotations

import ast
import fcntl
import hashlib
import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CACHE = Path(os.environ.get("BRIDGE_PRECISION_CACHE") or REPO / "tests" / ".cache" / "precision")
COMPLETE = "model.json"
BUILDERS = {"ssd256": "precision_models.ssd256"}  # the only list of these models
SHARED = (REPO / "examples" / "mxnet_ssd" / "shapes.py",)


@dataclass(frozen=True)
class PrecisionModel:
    name: str
    framework: str
    source: Path  # what `bridge convert` takes
    convert_args: tuple[str, ...]  # besides SOURCE and -o
    feeds: Path  # .npz of preprocessed held-out images keyed by input name
    images: Path  # held-out png images (the judge's dataset)
    labels: Path  # their COCO labels (category ids 1..3 = the model's classes 0..2 by position)
    calibration: Path  # other png images (another seed), for --calibration
    preprocessing: dict[str, Any]
    quality: dict[str, Any] = field(default_factory=dict)
    training: dict[str, Any] = field(default_factory=dict)
    folder: Path = Path()


def _content(path: Path) -> bytes:
    """A .py file's syntax tree without docstrings (what runs), any other file's bytes."""
    if path.suffix != ".py":
        return path.read_bytes()
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef) and body and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree).encode()


def model_folder(name: str) -> Path:
    module = importlib.import_module(BUILDERS[name])
    digest = hashlib.sha256(f"seed={module.SEED}\n".encode())
    for path in sorted({Path(module.__file__), *SHARED}):
        digest.update(path.name.encode() + b"\0" + _content(path) + b"\0")
    return CACHE / f"{name}-{digest.hexdigest()[:12]}"


def _build_once(final: Path, name: str) -> Path:
    if (final / COMPLETE).is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with open(final.with_name(final.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if this process dies
        if (final / COMPLETE).is_file():
            return final
        if final.exists():
            shutil.rmtree(final)
        for stale in final.parent.glob(f".{final.name}.*"):
            shutil.rmtree(stale, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
        try:
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests")])}
            proc = subprocess.run([sys.executable, "-m", BUILDERS[name], str(tmp)], cwd=REPO, env=env,
                                  capture_output=True, text=True, timeout=4 * 3600)
            (tmp / "build.log").write_text(proc.stdout + proc.stderr)
            if proc.returncode != 0 or not (tmp / COMPLETE).is_file():
                raise RuntimeError(f"building {name} failed (exit {proc.returncode}):\n"
                                   + (proc.stdout + proc.stderr)[-4000:])
            os.rename(tmp, final)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return final


def precision_model(name: str) -> PrecisionModel:
    """Model ``name``, trained on first use and cached (module docstring)."""
    folder = _build_once(model_folder(name), name)
    data = json.loads((folder / COMPLETE).read_text())
    return PrecisionModel(
        name=name, framework=data["framework"], source=folder / data["source"],
        convert_args=tuple(data["convert_args"]), feeds=folder / data["feeds"], images=folder / data["images"],
        labels=folder / data["labels"], calibration=folder / data["calibration"],
        preprocessing=data["preprocessing"], quality=data.get("quality", {}), training=data.get("training", {}),
        folder=folder)


__all__ = ["BUILDERS", "PrecisionModel", "model_folder", "precision_model"]
