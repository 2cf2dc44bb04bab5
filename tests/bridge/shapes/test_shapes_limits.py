"""shapes fix / shapes buckets / debug never hang and never exit 70 on absurd settings: validation runs in
a child process under --timeout, settings are bounded, annotation files with absurd numbers are refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from bridge.errors import EXIT_USAGE, BadInputFileError, UsageError
from bridge.shapes.datasets import read_annotations
from bridge.shapes.scaling import ScalingConfig

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "tests" / "bridge" / "runtimes"))
from test_isolated_orphans import spinning_loop_model  # noqa: E402


def _bridge(*args: str, cwd: Path, tmpdir: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "300"}
    if tmpdir is not None:
        env["TMPDIR"] = str(tmpdir)
    return subprocess.run([sys.executable, "-m", "bridge", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=240, env=env)


def _conv_transpose_group0(path: Path) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])
    # the output declares its shape: a source that passes onnx's checker, so the crash happens in onnxruntime
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 6, 6])
    w = helper.make_tensor("w", TensorProto.FLOAT, [2, 1, 3, 3], [1.0] * 18)
    graph = helper.make_graph([helper.make_node("ConvTranspose", ["x", "w"], ["y"], group=0)], "ct", [x], [y], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)


@pytest.mark.parametrize("command", [
    ["shapes", "fix", "{m}", "-o", "{o}", "--input", "x:1", "--timeout", "3"],
    ["shapes", "buckets", "{m}", "-o", "{d}", "--input-shape", "1", "--timeout", "3"],
    ["debug", "{m}", "--timeout", "3"],
])
def test_a_spinning_loop_is_stopped_by_the_time_limit(tmp_path: Path, command: list[str]) -> None:
    onnx.save(spinning_loop_model(), tmp_path / "spin.onnx")
    argv = [a.format(m="spin.onnx", o="fixed.onnx", d="buckets") for a in command]
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    proc = _bridge(*argv, cwd=tmp_path, tmpdir=scratch)
    assert proc.returncode == 3, proc.stderr
    assert "did not answer within 3 s" in proc.stderr
    # (.ses: a session id a runtime library writes into TMPDIR on import; not a file of the stopped work)
    left = [p.name for p in scratch.iterdir() if p.name != ".ses"]
    assert not left, f"the stopped child's temporary files were left behind: {left}"


def test_debug_names_the_attribute_that_would_crash_the_runtime(tmp_path: Path) -> None:
    """ConvTranspose group=0 kills onnxruntime with SIGFPE while loading; debug refuses it first, naming the node,
    the op and the attribute (the crash isolation itself is covered by tests/cli/test_isolation_cli.py)."""
    _conv_transpose_group0(tmp_path / "ct.onnx")
    _conv_transpose_group0(tmp_path / "converted.onnx")
    proc = _bridge("debug", "ct.onnx", "--model", "converted.onnx", cwd=tmp_path)
    assert proc.returncode == 3, proc.stderr
    assert "(ConvTranspose): attribute 'group' is 0" in proc.stderr and "node '" in proc.stderr
    assert "SIGFPE" not in proc.stderr


def test_debug_refuses_a_report_over_its_source(tmp_path: Path) -> None:
    _conv_transpose_group0(tmp_path / "ct.onnx")
    before = (tmp_path / "ct.onnx").read_bytes()
    proc = _bridge("debug", "ct.onnx", "--report", "ct.onnx", cwd=tmp_path)
    assert proc.returncode == 2 and "--report" in proc.stderr
    assert (tmp_path / "ct.onnx").read_bytes() == before


@pytest.mark.parametrize(("key", "value"), [("max_buckets", 1e12), ("max_buckets", "1e12"), ("interval", float("nan")),
                                            ("expand_ratio", float("inf")), ("n_std", "nan"), ("timeout", "nan"),
                                            ("timeout", 1e308), ("limit_side_len", 10**30)])
def test_absurd_bucket_settings_are_usage_errors_naming_the_key(key: str, value: object) -> None:
    with pytest.raises(UsageError, match=key):
        ScalingConfig.from_mapping({key: value})


def test_absurd_bucket_settings_in_a_config_file(tmp_path: Path) -> None:
    (tmp_path / "cfg.yaml").write_text("max_buckets: 1000000000000\n")
    with pytest.raises(UsageError, match="max_buckets"):
        ScalingConfig.load(tmp_path / "cfg.yaml")


@pytest.mark.parametrize("text", [
    '{"images": [{"id": 1, "height": 10, "width": 1e400}]}',
    '{"images": [{"id": 1, "height": NaN, "width": 3}]}',
    '{"images": [{"id": [1], "height": 10, "width": 3}]}',
    '{"images": [], "annotations": [{"image_id": {"a": 1}}]}',
    '{"images": ' + "[" * 100000 + "]" * 100000 + "}",
])
def test_annotation_files_with_absurd_values_are_bad_input_files(tmp_path: Path, text: str) -> None:
    path = tmp_path / "ann.json"
    path.write_text(text)
    with pytest.raises(BadInputFileError, match=str(path)):
        read_annotations(path)
    json.dumps(text)  # the probe itself is plain text


def test_candidates_from_the_api_are_bounded_too() -> None:
    from bridge.shapes import candidates

    with pytest.raises(UsageError, match="max-buckets"):
        candidates([100, 200], max_buckets=10**12)
    with pytest.raises(UsageError, match="expand-ratio"):
        candidates([100, 200], expand_ratio=float("nan"))


@pytest.mark.parametrize(("text", "expected"), [
    ("interval: " + "[" * 5000 + "]" * 5000 + "\n", "nested too deeply"),
    ("interval: [\n", "not readable YAML"),
    (b"interval: \xff\xfe 3\n", "not readable YAML"),
])
def test_an_unreadable_config_file_is_a_usage_error(tmp_path: Path, text: str | bytes, expected: str) -> None:
    """--config stands in for options: a file that does not read as settings is exit 2, like a bad option."""
    path = tmp_path / "cfg.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(UsageError, match=expected) as err:
        ScalingConfig.load(path)
    assert err.value.exit_code == EXIT_USAGE and str(path) in str(err.value)
