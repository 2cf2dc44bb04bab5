"""`bridge shapes fix|dynamic|buckets` in a fresh interpreter: exit 0 on success, 2 on bad arguments.

Until bridge/cli/main.py registers the group, the commands run through a launcher that registers it
first (the same `main()` and exit-code mapping); afterwards they run exactly as `bridge shapes ...`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx import numpy_helper as nh
from support import REPO, make_model, run_cli

_LAUNCHER = ("import sys; from bridge.cli import main as m; from bridge.cli.shapes import register; "
             "register(m.app); sys.exit(m.main(sys.argv[1:]))")


def _wired() -> bool:
    from bridge.cli.main import app

    return any(g.name == "shapes" for g in app.registered_groups)


def shapes(*args: str) -> subprocess.CompletedProcess[str]:
    if _wired():
        return run_cli("shapes", *args)
    return subprocess.run([sys.executable, "-c", _LAUNCHER, "shapes", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=600)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("cli")
    rng = np.random.default_rng(0)
    w = nh.from_array(rng.standard_normal((2, 3, 3, 3)).astype(np.float32), "w")
    conv = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1], strides=[2, 2], name="conv")
    dynamic = make_model([conv], [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])],
                         [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2, "H2", "W2"])], initializers=[w])
    static = make_model([conv], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 8, 8])],
                        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2, 4, 4])], initializers=[w])
    onnx.save(dynamic, str(root / "dynamic.onnx"))
    onnx.save(static, str(root / "static.onnx"))
    data = root / "data"
    data.mkdir()
    for k, (h, wd) in enumerate([(20, 30), (40, 20), (33, 33)]):
        np.save(data / f"{k}.npy", np.zeros((h, wd, 3), np.uint8))
    return {"root": root, "dynamic": root / "dynamic.onnx", "static": root / "static.onnx", "data": data}


def test_fix(files: dict[str, Path]) -> None:
    out = files["root"] / "fixed.onnx"
    r = shapes("fix", str(files["dynamic"]), "--input", "x:1,3,16,16", "-o", str(out), "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["outputs"] == {"y": [1, 2, 8, 8]}
    assert out.is_file()


def test_dynamic(files: dict[str, Path]) -> None:
    out = files["root"] / "dyn.onnx"
    r = shapes("dynamic", str(files["static"]), "--axis", "x:0=batch", "--axis", "x:2=height", "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert "PASS" in r.stdout and out.is_file()


def test_buckets_and_report(files: dict[str, Path]) -> None:
    out = files["root"] / "buckets"
    r = shapes("buckets", str(files["dynamic"]), "--input-shape", "-1,3,-1,-1", "--data", str(files["data"]),
               "--strategy", "max_min", "--max-buckets", "2", "--interval", "16", "--batch-choices", "1,2",
               "-o", str(out), "--report")
    assert r.returncode == 0, r.stderr
    assert "padding waste" in r.stdout and (out / "buckets.json").is_file()
    r = shapes("buckets", "--report", "-o", str(out), "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["samples"] == 3


@pytest.mark.parametrize("args", [
    ("fix", "{dynamic}", "-o", "{root}/x.onnx"),  # symbolic input without --input
    ("fix", "{dynamic}", "--input", "x:1,3,a,b", "-o", "{root}/x.onnx"),
    ("fix", "{root}/missing.onnx", "--input", "x:1,3,8,8", "-o", "{root}/x.onnx"),
    ("dynamic", "{static}", "--axis", "x0batch", "-o", "{root}/x.onnx"),
    ("dynamic", "{static}", "--axis", "x:0=batch", "--check-size", "batch", "-o", "{root}/x.onnx"),
    ("buckets", "{dynamic}", "--input-shape", "-1,3,-1", "--data", "{data}", "-o", "{root}/b"),
    ("buckets", "{dynamic}", "--input-shape", "-1,3,-1,-1", "--data", "{data}", "--strategy", "median", "-o", "{root}/b"),
    ("buckets", "{dynamic}", "--data", "{data}", "-o", "{root}/b"),
    ("buckets", "-o", "{root}/b"),
    ("fix", "{dynamic}", "--no-such-option"),
])
def test_bad_arguments_exit_2(files: dict[str, Path], args: tuple[str, ...]) -> None:
    r = shapes(*(a.format(**{k: str(v) for k, v in files.items()}) for a in args))
    assert r.returncode == 2, (r.stdout, r.stderr)
