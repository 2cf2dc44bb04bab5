"""`bridge shapes fix|dynamic|buckets` in a fresh interpreter: exit 0 on success, 2 on bad arguments,
3 on a hostile image header; the buckets settings (config file, ranges, layouts, defaults) in-process.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx import numpy_helper as nh
from support import make_model, run_cli


def shapes(*args: str) -> subprocess.CompletedProcess[str]:
    return run_cli("shapes", *args)


def in_process(*args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """`bridge shapes ...` through the same `main()` (exit-code mapping) in this interpreter: the buckets
    options below need no fresh interpreter each (import and wiring are covered by the runs above)."""
    from bridge.cli import main as m

    capsys.readouterr()
    code = m.main(["shapes", *args])
    captured = capsys.readouterr()
    return code, " ".join(captured.out.split()), " ".join(captured.err.split())  # rich wraps at the width


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


def test_report_on_data_no_bucket_holds_is_an_error(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    """Samples that all fit no bucket give no waste figure ("0.0% waste"): exit 2 saying so, in text and JSON."""
    out = files["root"] / "small_buckets"
    code, _, err = in_process("buckets", str(files["dynamic"]), "--input-shape", "1,3,-1,-1", "--default-scaling",
                              "16x16", "--no-validate", "-o", str(out), capsys=capsys)
    assert code == 0, err
    for extra in ([], ["--json"]):
        code, stdout, err = in_process("buckets", "--report", "-o", str(out), "--data", str(files["data"]), *extra,
                                       capsys=capsys)
        assert code == 2, (stdout, err)
        assert "none of the 3 sample(s)" in err and "fits a bucket" in err and "the buckets are 16x16" in err, err
        assert "0.0%" not in stdout


def test_buckets_config_file_overridden_by_options(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    cfg = files["root"] / "auto_scaling.yaml"
    cfg.write_text("input_shape: -1,3,-1,-1\ndata: data\nstrategy: max_min\nmax_buckets: 3\ninterval: 16\n"
                   "batch_choices: [1]\nvalidate: false\n")
    code, out, err = in_process("buckets", str(files["dynamic"]), "--config", str(cfg), "--max-buckets", "1",
                                "-o", str(files["root"] / "from_config"), "--json", capsys=capsys)
    assert code == 0, err
    result = json.loads(out)
    assert result["settings"]["strategy"] == "max_min" and result["settings"]["interval"] == 16  # from the file
    assert result["settings"]["max_buckets"] == 1  # the option wins
    assert result["settings"]["data"] == str(files["data"])  # relative to the YAML file
    assert result["batch"]["source"] == "batch_choices"


def test_buckets_layouts_and_single_static(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    common = ("--data", str(files["data"]), "--strategy", "max_min", "--max-buckets", "2", "--interval", "16",
              "--batch-choices", "1,2", "--no-validate")
    code, out, err = in_process("buckets", str(files["dynamic"]), "--input-shape", "-1,3,-1,-1", *common,
                                "--layout", "per-batch", "-o", str(files["root"] / "pb"), capsys=capsys)
    assert code == 0, err
    assert "2 per-batch (height/width dynamic) model(s)" in out and "batch (batch_choices)" in out
    assert sorted(p.name for p in (files["root"] / "pb").glob("*.onnx")) == ["dynamic_dynamic_bs1_hw.onnx",
                                                                             "dynamic_dynamic_bs2_hw.onnx"]
    code, out, err = in_process("buckets", str(files["dynamic"]), "--input-shape", "4,3,48,192",
                                "-o", str(files["root"] / "one"), "--json", capsys=capsys)
    assert code == 0, err
    assert json.loads(out)["files"] == ["dynamic_4x3x48x192.onnx"]
    code, out, err = in_process("buckets", str(files["dynamic"]), "--input-shape", "1,3,-1,-1", "--default-scaling",
                                "32x32,32x64", "--no-validate", "-o", str(files["root"] / "defaults"), "--json",
                                capsys=capsys)
    assert code == 0, err
    assert [b["shape"] for b in json.loads(out)["buckets"]] == [[1, 3, 32, 32], [1, 3, 32, 64]]


def test_buckets_range_report_and_default_batch(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = in_process("buckets", str(files["dynamic"]), "--input-shape", "-1,3,-1,-1", "--data",
                                str(files["data"]), "--height-range", "16,35", "--no-validate", "--max-buckets", "1",
                                "-o", str(files["root"] / "ranged"), capsys=capsys)
    assert code == 0, err
    assert "range filter: 2 image(s) inside, 1 outside (0 go to the nearest bucket, 1 refused)" in out
    assert "default batch choices [1, 2, 4, 8] apply" in out


def test_hostile_image_header_exits_3(files: dict[str, Path]) -> None:
    import struct
    import zlib

    data = files["root"] / "hostile"
    data.mkdir()
    ihdr = struct.pack(">IIBBBBB", 100000, 100000, 8, 2, 0, 0, 0)
    (data / "bomb.png").write_bytes(b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + ihdr
                                    + struct.pack(">I", zlib.crc32(b"IHDR" + ihdr)) + bytes(12))
    r = shapes("buckets", str(files["dynamic"]), "--input-shape", "1,3,-1,-1", "--data", str(data),
               "-o", str(files["root"] / "never"))
    assert r.returncode == 3, (r.stdout, r.stderr)
    text = " ".join(r.stderr.split())
    assert "bomb.png" in text and "100000x100000" in text and "limit of 268,435,456 pixels" in text
    assert not (files["root"] / "never").exists()


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


@pytest.mark.parametrize(("args", "message"), [
    (("--input-shape", "1,3,-1,-1", "--data", "{data}", "--height-range", "500,600"),
     "all 3 image(s) of --data"),  # the range filters every image
    (("--config", "{root}/unknown_key.yaml",), "unknown setting 'max_bucket' (did you mean 'max_buckets'?)"),
    (("--input-shape", "1,3,-1,-1"), "no --data: give --default-scaling"),
    (("--input-shape", "1,3,-1,-1", "--default-scaling", "32x"), "is not HxW"),
    (("--input-shape", "1,3,-1,-1", "--default-scaling", "32x32", "--layout", "dyn"), "layout 'dyn'"),
    (("--input-shape", "1,3,-1,-1", "--width-range", "64"), "MIN,MAX"),
])
def test_buckets_bad_settings_exit_2(files: dict[str, Path], capsys: pytest.CaptureFixture[str],
                                     args: tuple[str, ...], message: str) -> None:
    (files["root"] / "unknown_key.yaml").write_text("input_shape: 1,3,-1,-1\nmax_bucket: 3\n")
    code, _, err = in_process("buckets", str(files["dynamic"]), *(a.format(**{k: str(v) for k, v in files.items()})
                                                                 for a in args), "-o", str(files["root"] / "bad"),
                              capsys=capsys)
    assert code == 2, err
    assert message in err and "Traceback" not in err
    assert not (files["root"] / "bad").exists()
