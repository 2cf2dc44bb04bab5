"""What a newcomer types, answered in their words and before anything slow: ``-h``; usage lines without
``{SOURCE}``; the shape syntax of tf2onnx and Polygraphy; "did you mean" for choice values; a ``--dynamic`` or
``shapes fix --input`` mistake named as the option (not as an internal pass), before the export; ``validate`` of a
dynamic model without sizes refused before the source is loaded; a node named once in a wrapped message."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from support import REPO, env_without, run_cli

from bridge.config import InputSpec
from bridge.errors import at_node

SSD = "examples/mxnet_ssd/model-symbol.json"


@pytest.mark.parametrize("words", [["-h"], ["convert", "-h"], ["shapes", "-h"], ["shapes", "fix", "-h"],
                                   ["migrate", "-h"]])
def test_h_is_help(words: list[str]) -> None:
    proc = run_cli(*words)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("Usage: bridge") and "-h, --help" in proc.stdout


@pytest.mark.parametrize(("words", "usage"), [(["convert"], "bridge convert [OPTIONS] SOURCE"),
                                              (["shapes", "fix"], "bridge shapes fix [OPTIONS] MODEL")])
def test_usage_lines_name_arguments_plainly(words: list[str], usage: str) -> None:
    proc = run_cli(*words)
    assert proc.returncode == 2 and usage in proc.stderr and "{" not in proc.stderr, proc.stderr


@pytest.mark.parametrize(("text", "name", "shape", "dtype"), [
    ("data[4,3,64,64]", "data", (4, 3, 64, 64), "float32"),          # tf2onnx --inputs
    ("data:[4,3,64,64]", "data", (4, 3, 64, 64), "float32"),         # Polygraphy --input-shapes
    ("x:0[1,4]", "x:0", (1, 4), "float32"),                          # a TF tensor name
    ("x:0:[1,4]:float16", "x:0", (1, 4), "float16"),
    ("data:4,3,64,64", "data", (4, 3, 64, 64), "float32"),           # bridge's own, as before
])
def test_shape_syntax_users_bring(text: str, name: str, shape: tuple[int, ...], dtype: str) -> None:
    spec = InputSpec.parse(text)
    assert (spec.name, spec.shape, spec.dtype) == (name, shape, dtype)


def test_the_bracket_syntax_converts(tmp_path: Path) -> None:
    proc = run_cli("convert", SSD, "--input", "data[1,3,64,64]", "--validate", "none", "-o", str(tmp_path / "m.onnx"))
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize(("option", "value", "meant"), [
    ("--to", "onxx", "onnx"), ("--validate", "onnxruntim", "onnxruntime"),
    ("--detection-format", "boxes", "boxes-scores-classes"), ("--framework", "mxnt", "mxnet"),
])
def test_choice_values_say_did_you_mean(tmp_path: Path, option: str, value: str, meant: str) -> None:
    proc = run_cli("convert", SSD, "--input", "data:1,3,64,64", option, value, "-o", str(tmp_path / "m.onnx"))
    assert proc.returncode == 2 and f"(did you mean '{meant}'?)" in proc.stderr, proc.stderr


def test_a_dynamic_axis_on_no_input_is_the_options_error(tmp_path: Path) -> None:
    proc = run_cli("convert", SSD, "--input", "data:1,3,64,64", "--dynamic", "dta:0=batch", "--validate", "none",
                   "-o", str(tmp_path / "m.onnx"))
    assert proc.returncode == 2, proc.stderr
    assert "--dynamic 'dta'" in proc.stderr and "did you mean 'data'" in proc.stderr and "Pass" not in proc.stderr


def _dynamic_ssd(tmp_path: Path) -> Path:
    out = tmp_path / "ssd.onnx"
    proc = run_cli("convert", SSD, "--input", "data:2,3,64,64", "--dynamic", "data:0=batch", "--validate", "none",
                   "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    return out


def test_shapes_fix_rank_mistake_is_the_options_error(tmp_path: Path) -> None:
    proc = run_cli("shapes", "fix", str(_dynamic_ssd(tmp_path)), "--input", "data:4,3,64", "-o", str(tmp_path / "f.onnx"))
    assert proc.returncode == 2, proc.stderr
    assert "--input data: rank 3 given" in proc.stderr and "FixInputShapesPass" not in proc.stderr


def test_validate_asks_for_sizes_before_loading_the_source(tmp_path: Path) -> None:
    """With MXNet not importable, loading the reference first would end in "not installed" (exit 4): exit 2 and
    the line to give shows the check comes first."""
    model = _dynamic_ssd(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "bridge", "validate", str(model), "--source", SSD], cwd=REPO,
                          env={**env_without(tmp_path / "site", "mxnet"), "COLUMNS": "200"}, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert "input 'data' is ['batch', 3, 64, 64]" in proc.stderr and "--input data:1,3,64,64" in proc.stderr


def test_a_node_is_named_once() -> None:
    assert at_node("bn", "BatchNorm", "node 'bn': rank unknown") == "node 'bn' (BatchNorm): rank unknown"
    assert at_node("bn", "BatchNorm", "node 'bn' (BatchNorm): x") == "node 'bn' (BatchNorm): x"
    assert at_node("bn", "BatchNorm", "node 'bnx': y") == "node 'bn' (BatchNorm): node 'bnx': y"
    proc = run_cli("convert", SSD, "-o", "/tmp/never.onnx")
    assert proc.returncode == 2 and proc.stderr.count("node 'stage1_bn'") == 1, proc.stderr


def test_validate_with_a_dataset_takes_its_sizes_from_the_images(tmp_path: Path) -> None:
    """--dataset feeds the images' batches: a dynamic model needs no --input then (no early 'give the size')."""
    model = _dynamic_ssd(tmp_path)
    made = subprocess.run([sys.executable, str(REPO / "examples/mxnet_ssd/make_dataset.py"), str(tmp_path / "shapes"),
                           "--count", "8"], capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stderr
    proc = run_cli("validate", str(model), "--source", SSD, "--dataset", str(tmp_path / "shapes/images"),
                   "--labels", str(tmp_path / "shapes/labels.json"))
    assert proc.returncode == 0, proc.stderr
    assert "dataset: PASS" in proc.stdout and "give the size" not in proc.stderr
