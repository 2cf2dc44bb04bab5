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

A results file may come from anywhere, so loading trusts nothing in it: the sidecar's fields are checked
by type (``Sidecar``, a usage error naming the field), only the members of the layout above are read (a
member under another name is listed in ``ignored``, never decompressed), and each is checked against the
shape and dtype the sidecar declares and against the memory limit before it is decompressed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from bridge.errors import BadInputFileError, UsageError
from bridge.io import atomic_path, atomic_write_text, npz_keys, read_npz, require_file
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
    ignored: list[str] = field(default_factory=list)  # members of the file outside the layout: never read

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
        """Read a saved run. The sidecar is validated field by field first (``Sidecar``: UsageError naming the
        field); then only the arrays of the RunResults layout are read (``input/``, ``output/``, ``sizeN/``:
        any other member is named in ``ignored`` and never decompressed), each checked against the shape and
        dtype the sidecar declares for it and against the memory limit before it is decompressed."""
        path = Path(path)
        require_file(path, "results file")
        sidecar_path = cls.sidecar(path)
        info = Sidecar.read(sidecar_path)
        keys = npz_keys(path, "results file")  # from the zip directory: nothing decompressed yet
        layout = [k for k in keys if k.startswith(("input/", "output/", f"{_SECOND}/input/", f"{_SECOND}/output/"))
                  or _SIZE_KEY.match(k)]
        if not any(k.startswith("output/") for k in layout):
            raise BadInputFileError(f"{path} is not a bridge RunResults file (keys: {sorted(keys)[:5]})")
        prefixes = sorted({k.split("/", 1)[0] for k in layout if _SIZE_KEY.match(k)}, key=lambda p: int(p[4:]))
        if prefixes != [f"size{i}" for i in range(2, len(prefixes) + 2)]:
            raise BadInputFileError(f"{path}: the runs at other sizes are not numbered size2, size3, ... ({prefixes})")
        wanted = set(layout)
        arrays = read_npz(path, wanted.__contains__, what="results file", declared=info.declared(),
                          declared_by=str(sidecar_path))

        # keep the saved order of names when the sidecar has it
        def ordered(prefix: str, names: Iterable[str]) -> dict[str, np.ndarray]:
            names = list(names)
            keys = [k[len(prefix):] for k in arrays if k.startswith(prefix)]
            order = [n for n in names if n in keys] + [k for k in keys if k not in names]
            return {n: arrays[prefix + n] for n in order}

        def described(i: int, what: str) -> Iterable[str]:
            return getattr(info.sizes[i], what) if i < len(info.sizes) else ()

        others = [SizedRun(ordered(f"{p}/input/", described(i, "inputs")), ordered(f"{p}/output/", described(i, "outputs")))
                  for i, p in enumerate(prefixes)]
        if any(not r.outputs for r in others):
            raise BadInputFileError(f"{path}: a run at another size holds no outputs")
        listed_second = info.second_input or SizeInfo()
        second = SizedRun(ordered(f"{_SECOND}/input/", listed_second.inputs),
                          ordered(f"{_SECOND}/output/", listed_second.outputs))
        if bool(second.inputs) != bool(second.outputs):
            raise BadInputFileError(f"{path}: the run on a second input holds inputs or outputs only")
        return cls(
            inputs=ordered("input/", info.inputs),
            outputs=ordered("output/", info.outputs),
            runtime=info.runtime,
            meta=dict(info.meta),
            other_sizes=others,
            second_input=second if second.outputs else None,
            format=info.format,
            ignored=sorted(set(keys) - wanted),
        )


class TensorInfo(BaseModel):
    """What the sidecar says of one saved array (both optional: the first format could leave them out)."""

    model_config = ConfigDict(extra="ignore", strict=True)
    shape: list[Annotated[int, Field(ge=0)]] | None = None
    dtype: str | None = None

    @field_validator("dtype")
    @classmethod
    def _numpy_dtype(cls, v: str | None) -> str | None:
        if v is None:
            return v
        try:
            dtype = np.dtype(v)
        except (TypeError, ValueError):
            raise ValueError(f"'{v[:40]}' is not a numpy dtype name") from None
        if dtype.hasobject:
            raise ValueError(f"'{v}' holds Python objects, which bridge never loads")
        return v


class SizeInfo(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    inputs: dict[str, TensorInfo] = Field(default_factory=dict)
    outputs: dict[str, TensorInfo] = Field(default_factory=dict)


class Sidecar(BaseModel):
    """The JSON sidecar of a RunResults file; every field checked for its type (a file from elsewhere may
    hold anything), unknown fields ignored (a newer bridge may add some)."""

    model_config = ConfigDict(extra="ignore", strict=True)
    format: str = FORMATS[0]
    bridge_version: str | None = None
    runtime: str = "unknown"
    inputs: dict[str, TensorInfo] = Field(default_factory=dict)
    outputs: dict[str, TensorInfo] = Field(default_factory=dict)
    sizes: list[SizeInfo] = Field(default_factory=list)
    second_input: SizeInfo | None = None  # the run on a second, different input (its arrays under second/)
    meta: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def read(cls, path: Path) -> Sidecar:
        """The sidecar at ``path`` (defaults when there is none); UsageError naming each bad field."""
        if not path.exists():
            return cls()
        require_file(path, "results sidecar")
        if path.stat().st_size > _SIDECAR_LIMIT:
            raise BadInputFileError(f"{path} is {path.stat().st_size:,} bytes, not a RunResults sidecar "
                                    f"(at most {_SIDECAR_LIMIT:,})")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
            raise BadInputFileError(f"{path} is not valid JSON: {exc!r}") from exc
        if not isinstance(data, dict):
            raise UsageError(f"{path} is not a RunResults sidecar: expected a JSON object, got "
                             f"{type(data).__name__}")
        try:
            sidecar = cls.model_validate(data)
        except ValidationError as exc:
            lines = []
            for err in exc.errors(include_url=False):
                where = ".".join(str(p) for p in err["loc"]) or "(top level)"
                got = json.dumps(err.get("input"), default=str)
                lines.append(f"field '{where}': {err['msg']} (got {got[:60] + ('...' if len(got) > 60 else '')})")
            raise UsageError(f"{path} is not a valid RunResults sidecar: " + "; ".join(lines[:5])
                             + (f"; and {len(lines) - 5} more" if len(lines) > 5 else "")) from None
        if sidecar.format not in FORMATS:
            raise BadInputFileError(f"{path} is in format {sidecar.format!r}; this bridge ({__version__}) reads "
                                    f"{', '.join(FORMATS)} (saved by a newer bridge?)")
        return sidecar

    def declared(self) -> dict[str, TensorInfo]:
        """Array key in the .npz -> what the sidecar declares for it."""
        found = {f"input/{k}": v for k, v in self.inputs.items()}
        found.update({f"output/{k}": v for k, v in self.outputs.items()})
        for i, size in enumerate(self.sizes, start=2):
            found.update({f"size{i}/input/{k}": v for k, v in size.inputs.items()})
            found.update({f"size{i}/output/{k}": v for k, v in size.outputs.items()})
        if self.second_input is not None:
            found.update({f"{_SECOND}/input/{k}": v for k, v in self.second_input.inputs.items()})
            found.update({f"{_SECOND}/output/{k}": v for k, v in self.second_input.outputs.items()})
        return found


_SIDECAR_LIMIT = 64 * 2**20  # names, shapes and dtypes; a sidecar this large is not one bridge wrote
_SIZE_KEY = re.compile(r"size\d+/(input|output)/")
_SECOND = "second"  # the prefix of the run on a second input


def _described(arrays: dict[str, np.ndarray]) -> dict[str, dict[str, Any]]:
    return {k: {"shape": list(v.shape), "dtype": v.dtype.name} for k, v in arrays.items()}
