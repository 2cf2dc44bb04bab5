"""Child processes never import from the working directory: ``bridge convert``, ``validate`` and ``migrate`` run
from a folder holding ``json.py``, ``queue.py`` and ``numpy.py`` (each refuses to be imported, loudly) give their
normal results. The children (runtimes, references, the migrate worker) are started with ``python -P``: the
working directory is not on their path, PYTHONPATH still is.

bridge itself is started with ``-P`` too, as the ``bridge`` console script would be (it puts its own folder, not
the working directory, on the path); ``python -m bridge`` from such a folder would import them in bridge's own
process, which is Python's rule, not bridge's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from support import make_model

HOSTILE = ("json", "queue", "numpy")


def _hostile_folder(root: Path) -> Path:
    folder = root / "work"
    folder.mkdir()
    for name in HOSTILE:
        (folder / f"{name}.py").write_text(
            "import sys\n"
            f"sys.stderr.write('HOSTILE: {name}.py of the working directory was imported\\n')\n"
            f"raise ImportError('{name}.py of the working directory was imported')\n")
    return folder


def _bridge(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-P", "-m", "bridge", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=900)


def test_children_never_import_from_the_working_directory(tmp_path: Path) -> None:
    model = make_model([helper.make_node("Mul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["y"])],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
                       initializers=[numpy_helper.from_array(np.linspace(-1, 1, 4, dtype=np.float32)[None], "w")])
    onnx.save(model, tmp_path / "source.onnx")
    work = _hostile_folder(tmp_path)
    converted = _bridge(["convert", str(tmp_path / "source.onnx"), "-o", str(tmp_path / "out.onnx"),
                         "--report", str(tmp_path / "convert.json")], work)
    assert converted.returncode == 0, converted.stderr
    validated = _bridge(["validate", str(tmp_path / "out.onnx"), "--source", str(tmp_path / "source.onnx"),
                         "--report", str(tmp_path / "validate.json")], work)
    assert validated.returncode == 0, validated.stderr
    manifest = tmp_path / "manifest.yaml"
    manifest.write_text(f"models:\n  - name: m\n    source: {tmp_path / 'source.onnx'}\n")
    migrated = _bridge(["migrate", str(manifest), "--out", str(tmp_path / "migration")], work)
    assert migrated.returncode == 0, migrated.stdout + migrated.stderr
    for run in (converted, validated, migrated):
        assert "HOSTILE" not in run.stdout + run.stderr
    assert json.loads((tmp_path / "convert.json").read_text())["passed"]
    assert json.loads((tmp_path / "validate.json").read_text())["passed"]
    log = (tmp_path / "migration" / "models" / "m" / "log.txt")
    assert not log.exists() or "HOSTILE" not in log.read_text()
