"""RunResults: the inputs and outputs of one run, saved as ``.npz`` plus a JSON sidecar.

This is how a reference made in one environment (e.g. an image with MXNet) is compared with a
candidate run in another (e.g. an image with TensorFlow): ``bridge validate --reference R.npz``.
The npz holds arrays under ``input/NAME`` and ``output/NAME``; the sidecar ``R.json`` holds the
order of names, the runtime that produced them and free-form provenance.

A model with dynamic axes is validated at a second size of them too (``run_and_compare(second_size=True)``);
the run there travels in the same file (format ``bridge.RunResults/2``): arrays under ``size2/input/NAME``
and ``size2/output/NAME`` (``size3/...`` for a further size), the sidecar's ``sizes`` listing each one's
names. Every candidate also runs on a second, different input of the same shapes; the reference's run there
travels under ``second/input/NAME`` and ``second/output/NAME`` (the sidecar's ``second_input`` lists them).
A file written before (``bridge.RunResults/1``, or no sidecar) holds one size and still loads; one without
``second/`` arrays holds no second input (the check then says the candidates ran on one input only).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bridge.errors import BadInputFileError, SourceNotFoundError
from bridge.io import atomic_path, atomic_write_text, read_npz
from bridge.version import __version__

FORMAT = "bridge.RunResults/2"
FORMATS = ("bridge.RunResults/1", FORMAT)  # the ones this version reads


@dataclass
class SizedRun:
    """The inputs and outputs of the same reference at another size of the model's dynamic axes."""

    inputs: dict[str, np.ndarray]
    outputs: dict[str, np.ndarray]


@dataclass
class RunResults:
    inputs: dict[str, np.ndarray]
    outputs: dict[str, np.ndarray]
    runtime: str
    meta: dict[str, Any] = field(default_factory=dict)
    other_sizes: list[SizedRun] = field(default_factory=list)  # the runs at a second (third, ...) size
    second_input: SizedRun | None = None  # the run on a second, different input of the first size's shapes
    format: str = FORMAT  # the format the file was read from (an older file holds one size)

    @staticmethod
    def sidecar(path: Path) -> Path:
        return Path(path).with_suffix(".json")

    def save(self, path: Path) -> None:
        path = Path(path)
        if path.suffix != ".npz":
            path = path.with_suffix(".npz")
        arrays = {f"input/{k}": v for k, v in self.inputs.items()}
        arrays.update({f"output/{k}": v for k, v in self.outputs.items()})
        for i, run in enumerate(self.other_sizes, start=2):
            arrays.update({f"size{i}/input/{k}": v for k, v in run.inputs.items()})
            arrays.update({f"size{i}/output/{k}": v for k, v in run.outputs.items()})
        if self.second_input is not None:
            arrays.update({f"{_SECOND}/input/{k}": v for k, v in self.second_input.inputs.items()})
            arrays.update({f"{_SECOND}/output/{k}": v for k, v in self.second_input.outputs.items()})
        with atomic_path(path) as tmp, open(tmp, "wb") as fh:
            np.savez_compressed(fh, **arrays)  # type: ignore[arg-type]
        atomic_write_text(self.sidecar(path), json.dumps({
            "format": FORMAT,
            "bridge_version": __version__,
            "runtime": self.runtime,
            "inputs": _described(self.inputs),
            "outputs": _described(self.outputs),
            "sizes": [{"inputs": _described(r.inputs), "outputs": _described(r.outputs)} for r in self.other_sizes],
            **({"second_input": {"inputs": _described(self.second_input.inputs),
                                 "outputs": _described(self.second_input.outputs)}} if self.second_input else {}),
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
        fmt = str(info.get("format", FORMATS[0]))
        if fmt not in FORMATS:
            raise BadInputFileError(f"{sidecar} is in format {fmt!r}; this bridge ({__version__}) reads "
                                    f"{', '.join(FORMATS)} (saved by a newer bridge?)")
        prefixes = sorted({k.split("/", 1)[0] for k in arrays if _SIZE_KEY.match(k)}, key=lambda p: int(p[4:]))
        bad = [k for k in arrays if not k.startswith(("input/", "output/", f"{_SECOND}/input/", f"{_SECOND}/output/"))
               and not _SIZE_KEY.match(k)]
        if bad or not any(k.startswith("output/") for k in arrays):
            raise BadInputFileError(f"{path} is not a bridge RunResults file (keys: {sorted(arrays)[:5]})")
        if prefixes != [f"size{i}" for i in range(2, len(prefixes) + 2)]:
            raise BadInputFileError(f"{path}: the runs at other sizes are not numbered size2, size3, ... ({prefixes})")
        listed = info.get("sizes")
        sizes: list[Any] = listed if isinstance(listed, list) else []

        # keep the saved order of names when the sidecar has it
        def ordered(prefix: str, names: Any) -> dict[str, np.ndarray]:
            names = list(names) if isinstance(names, dict) else []
            keys = [k[len(prefix):] for k in arrays if k.startswith(prefix)]
            order = [n for n in names if n in keys] + [k for k in keys if k not in names]
            return {n: arrays[prefix + n] for n in order}

        def described(i: int, what: str) -> Any:
            entry = sizes[i] if i < len(sizes) and isinstance(sizes[i], dict) else {}
            return entry.get(what, {})

        others = [SizedRun(ordered(f"{p}/input/", described(i, "inputs")), ordered(f"{p}/output/", described(i, "outputs")))
                  for i, p in enumerate(prefixes)]
        if any(not r.outputs for r in others):
            raise BadInputFileError(f"{path}: a run at another size holds no outputs")
        listed_second = info.get("second_input")
        second_names = listed_second if isinstance(listed_second, dict) else {}
        second = SizedRun(ordered(f"{_SECOND}/input/", second_names.get("inputs", {})),
                          ordered(f"{_SECOND}/output/", second_names.get("outputs", {})))
        if bool(second.inputs) != bool(second.outputs):
            raise BadInputFileError(f"{path}: the run on a second input holds inputs or outputs only")
        return cls(
            inputs=ordered("input/", info.get("inputs", {})),
            outputs=ordered("output/", info.get("outputs", {})),
            runtime=str(info.get("runtime", "unknown")),
            meta=dict(info.get("meta", {})),
            other_sizes=others,
            second_input=second if second.outputs else None,
            format=fmt,
        )


_SIZE_KEY = re.compile(r"size\d+/(input|output)/")
_SECOND = "second"  # the prefix of the run on a second input


def _described(arrays: dict[str, np.ndarray]) -> dict[str, dict[str, Any]]:
    return {k: {"shape": list(v.shape), "dtype": v.dtype.name} for k, v in arrays.items()}
