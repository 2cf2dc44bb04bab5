"""Mistakes refused before any framework is imported: run with torch / TensorFlow / MXNet blocked, each is
still exit 2 naming the option (they used to surface after a 10-40 s framework import, or not at all)."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support import REPO

from bridge.config import DynamicAxis, ExportSpec, InputSpec, Source
from bridge.conversion.preflight import check_axes, check_source
from bridge.errors import SourceNotFoundError, UsageError

TINY = "examples/tiny_detector/model.py"
SSD = "examples/mxnet_ssd/model-symbol.json"
BLOCK = textwrap.dedent("""
    import sys
    class _Block:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {"torch", "tensorflow", "mxnet"}:
                raise ImportError(f"blocked for the test: {name}")
            return None
    sys.meta_path.insert(0, _Block())
    from bridge.cli.main import main
    sys.exit(main(sys.argv[1:]))
""")


@pytest.mark.parametrize(("args", "message"), [
    (["nothere.py:build", "--input", "images:1,3,8,8"], "no such Python file: nothere.py"),
    ([f"{TINY}:buil", "--input", "images:1,3,8,8"], "defines no 'buil' at its top level (did you mean 'build'?)"),
    ([f"{TINY}:build(", "--input", "images:1,3,8,8"], "expected module:factory or file.py:factory"),
    (["missing/model-symbol.json", "--input", "data:1,3,64,64"], "no such file or folder"),
    ([SSD, "--input", "data:1,3,64,64", "--feeds", "nothere.npz"], "--feeds nothere.npz: no such file"),
    ([SSD, "--input", "data:1,3,64,64", "--dynamic", "data:7=batch"], "input 'data' has rank 4"),
    ([f"{TINY}:build", "--input", "images:1,3,8,8", "--dynamic", "images:4=w"], "axes are 0..3"),
])
def test_refused_before_any_framework(tmp_path: Path, args: list[str], message: str) -> None:
    done = subprocess.run([sys.executable, "-c", BLOCK, "convert", *args, "--validate", "none",
                           "-o", str(tmp_path / "o.onnx")], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stdout + done.stderr
    assert message in " ".join(done.stderr.split()), done.stderr


@pytest.mark.parametrize("location", [f"{TINY}:build", "pkg.module:make_model", SSD])
def test_well_formed_sources_pass(location: str) -> None:
    check_source(Source(location=location))


def test_names_bound_conditionally_are_left_to_the_import(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("try:\n    from x import build\nexcept ImportError:\n    build = None\n")
    check_source(Source(location=f"{tmp_path / 'm.py'}:build"))
    check_source(Source(location=f"{tmp_path / 'm.py'}:other"))  # cannot be known without running it


def test_axes_inside_the_rank_pass_and_unshaped_inputs_are_not_judged() -> None:
    check_axes(ExportSpec((InputSpec("x", (2, 3)),), (DynamicAxis("x", 1, "n"),)))
    check_axes(ExportSpec((), (DynamicAxis("x", 9, "n"),)))
    with pytest.raises(UsageError, match=r"axes are 0\.\.1"):
        check_axes(ExportSpec((InputSpec("x", (2, 3)),), (DynamicAxis("x", 2, "n"),)))
    with pytest.raises(SourceNotFoundError):
        check_source(Source(location="nowhere/saved_model"))


# ---- every place a conversion writes is tried before the work; special files are named (issue 38, 7 and 10) ---

@pytest.mark.parametrize(("where", "option"), [
    ({"report": "/proc/bridge-test/r.json"}, "report='/proc/bridge-test/r.json'"),  # from Python: the keyword
    ({"report": "{tmp}/afile/r.json"}, "afile is a file, not a folder"),
    ({"to": "openvino", "artefact_dir": "/proc/bridge-test"}, "--artefact-dir (ir) /proc/bridge-test/out.xml"),
    ({"output": "/proc/bridge-test/out.onnx"}, "-o /proc/bridge-test/out.onnx"),
])
def test_an_output_that_cannot_be_written_fails_before_the_work_and_nothing_is_written(
        relu: Path, tmp_path: Path, where: dict[str, str], option: str) -> None:
    from bridge import api

    (tmp_path / "afile").write_text("x")
    values = {k: v.replace("{tmp}", str(tmp_path)) for k, v in where.items()}
    output = Path(values.pop("output", str(tmp_path / "out.onnx")))
    with pytest.raises(UsageError, match=re.escape(option)):
        api.convert(relu, output, isolated=False, **values)
    assert not (tmp_path / "out.onnx").exists()  # the model is not written before the report fails


@pytest.mark.parametrize("kind", ["fifo", "device", "folder"])
def test_a_source_or_feeds_that_is_no_file_is_named_for_what_it_is(tmp_path: Path, relu: Path, kind: str) -> None:
    import os

    special = {"device": Path("/dev/zero")}.get(kind, tmp_path / "special.onnx")
    if kind == "fifo":
        os.mkfifo(special)  # an adapter reading it would block until a writer came
    elif kind == "folder":
        special.mkdir()
    words = {"fifo": "is a FIFO (named pipe)", "device": "is a character device", "folder": "is a folder"}[kind]
    with pytest.raises(UsageError, match=re.escape(f"{special} {words}")):
        check_source(Source(location=str(special)))
    from bridge.conversion.preflight import preflight

    with pytest.raises(UsageError, match=re.escape(f"--feeds {special} {words}")):
        preflight(Source(location=str(relu)), ExportSpec(), special)
