"""RunResults: the inputs and outputs of one run, saved as ``.npz`` plus a JSON sidecar.

This is how a reference made in one environment (e.g. an image with MXNet) is compared with a
candidate run in another (e.g. an image with TensorFlow): ``bridge validate --reference R.npz``.
The npz holds arrays under ``input/NAME`` and ``output/NAME``; the sidecar ``R.json`` holds the
order of names, the runtime that produced them and free-form provenance.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bridge.errors import BadInputFileError, SourceNotFoundError
from bridge.io import atomic_path, atomic_write_text, read_npz
from bridge.version import __version__


@dataclass
class RunResults:
    inputs: dict[str, np.ndarray]
    outputs: dict[str, np.ndarray]
    runtime: str
    meta: dict[str, Any] = field(default_factory=dict)

    @staticmethod
    def sidecar(path: Path) -> Path:
        return Path(path).with_suffix(".json")

    def save(self, path: Path) -> None:
        path = Path(path)
        if path.suffix != ".npz":
            path = path.with_suffix(".npz")
        arrays = {f"input/{k}": v for k, v in self.inputs.items()}
        arrays.update({f"output/{k}": v for k, v in self.outputs.items()})
        with atomic_path(path) as tmp, open(tmp, "wb") as fh:
            np.savez_compressed(fh, **arrays)  # type: ignore[arg-type]
        atomic_write_text(self.sidecar(path), json.dumps({
            "format": "bridge.RunResults/1",
            "bridge_version": __version__,
            "runtime": self.runtime,
            "inputs": {k: {"shape": list(v.shape), "dtype": v.dtype.name} for k, v in self.inputs.items()},
            "outputs": {k: {"shape": list(v.shape), "dtype": v.dtype.name} for k, v in self.outputs.items()},
            "meta": self.meta,
        }, indent=2))

    @classmethod
    def load(cls, path: Path) -> RunResults:
        path = Path(path)
        if not path.is_file():
            raise SourceNotFoundError(f"no such results file: {path}")
        # member by member, sizes checked before decompressing (bridge.io.read_npz)
        arrays = read_npz(path, what="results file")
        sidecar = cls.sidecar(path)
        info: dict[str, Any] = {}
        if sidecar.is_file():
            try:
                info = json.loads(sidecar.read_text())
            except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
                raise BadInputFileError(f"{sidecar} is not valid JSON: {exc!r}") from exc
            if not isinstance(info, dict):
                raise BadInputFileError(f"{sidecar} is not a RunResults sidecar (a JSON object)")
        bad = [k for k in arrays if not k.startswith(("input/", "output/"))]
        if bad or not any(k.startswith("output/") for k in arrays):
            raise BadInputFileError(f"{path} is not a bridge RunResults file (keys: {sorted(arrays)[:5]})")
        # keep the saved order of names when the sidecar has it
        def ordered(prefix: str, names: list[str]) -> dict[str, np.ndarray]:
            keys = [k[len(prefix):] for k in arrays if k.startswith(prefix)]
            order = [n for n in names if n in keys] + [k for k in keys if k not in names]
            return {n: arrays[prefix + n] for n in order}
        return cls(
            inputs=ordered("input/", list(info.get("inputs", {}))),
            outputs=ordered("output/", list(info.get("outputs", {}))),
            runtime=str(info.get("runtime", "unknown")),
            meta=dict(info.get("meta", {})),
        )
