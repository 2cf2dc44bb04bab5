"""A settings file the user wrote - a ``bridge migrate`` manifest, a ``bridge shapes buckets --config`` YAML - is
user input standing in for options: however it is bad (not UTF-8, not YAML, nested past the parser, the wrong
shape, an unknown key), the CLI exits 2, the usage-error code the README documents ("2 for a bad manifest or
arguments"), never 3 (a model bridge cannot convert), and names the file."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import onnx
import pytest
from support import fcn_model

from bridge.cli.main import main
from bridge.errors import EXIT_USAGE

BAD_FILES = {
    "not UTF-8": b"\xff\xfe: 1\n",
    "not YAML": b"key: [\n",
    "nested past the parser": b"[" * 5000 + b"]" * 5000 + b"\n",
    "not a mapping": b"- 1\n- 2\n",
    "nested deeper than a settings file": b"models: " + b"[" * 40 + b"]" * 40 + b"\n",
}


def _run(args: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(args)
    return code, " ".join((err.getvalue() + out.getvalue()).split())


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_a_bad_manifest_is_a_usage_error(tmp_path: Path, case: str) -> None:
    manifest = tmp_path / "manifest.yaml"
    manifest.write_bytes(BAD_FILES[case])
    code, text = _run(["migrate", str(manifest), "--out", str(tmp_path / "out")])
    assert code == EXIT_USAGE, text
    assert "manifest.yaml" in text and "internal error" not in text


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_a_bad_buckets_config_is_a_usage_error(tmp_path: Path, case: str) -> None:
    onnx.save(fcn_model(), tmp_path / "fcn.onnx")
    config = tmp_path / "cfg.yaml"
    config.write_bytes(BAD_FILES[case])
    code, text = _run(["shapes", "buckets", str(tmp_path / "fcn.onnx"), "--config", str(config),
                       "--input-shape", "-1,3,-1,-1", "-o", str(tmp_path / "buckets")])
    assert code == EXIT_USAGE, text
    assert "cfg.yaml" in text and "internal error" not in text
