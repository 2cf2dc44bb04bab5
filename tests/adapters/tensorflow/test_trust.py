"""A SavedModel whose signature writes a file: validating it would run the write. bridge refuses (exit 3,
no file written, nothing converted) unless --trust-source, and lists the op."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def writing_saved_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    import tensorflow as tf

    root = tmp_path_factory.mktemp("trust")
    marker = root / "written.txt"

    class Writer(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([1, 4], tf.float32, name="x")])
        def serve(self, x: tf.Tensor) -> dict[str, tf.Tensor]:
            tf.io.write_file(str(marker), tf.strings.as_string(tf.reduce_sum(x)))
            return {"y": x * 2.0}

    module = Writer()
    path = root / "saved"
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve})
    return path, marker


def _convert(source: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bridge", "convert", str(source), "-o", str(out), *extra],
                          capture_output=True, text=True, timeout=600)


def test_side_effecting_source_is_refused_before_it_runs(writing_saved_model: tuple[Path, Path], tmp_path: Path) -> None:
    source, marker = writing_saved_model
    proc = _convert(source, tmp_path / "m.onnx")
    assert proc.returncode == 3, proc.stderr
    assert "WriteFile" in proc.stderr and "--trust-source" in proc.stderr
    assert not marker.exists() and not (tmp_path / "m.onnx").exists()


def test_trust_source_runs_it(writing_saved_model: tuple[Path, Path], tmp_path: Path) -> None:
    source, marker = writing_saved_model
    proc = _convert(source, tmp_path / "m.onnx", "--trust-source")
    assert proc.returncode == 0, proc.stderr
    assert marker.exists() and (tmp_path / "m.onnx").exists()


@pytest.fixture(scope="module")
def printing_saved_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    import tensorflow as tf

    root = tmp_path_factory.mktemp("print")
    marker = root / "printed.txt"

    class Printer(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([1, 4], tf.float32, name="x")])
        def serve(self, x: tf.Tensor) -> dict[str, tf.Tensor]:
            tf.print(tf.reduce_sum(x), output_stream=f"file://{marker}")
            return {"y": x * 2.0}

    module = Printer()
    path = root / "saved"
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve})
    return path, marker


def test_ops_not_known_to_be_pure_are_refused(printing_saved_model: tuple[Path, Path], tmp_path: Path) -> None:
    """tf.print to a file (PrintV2) was on no deny-list; the allow-list refuses it."""
    source, marker = printing_saved_model
    proc = _convert(source, tmp_path / "m.onnx")
    assert proc.returncode == 3, proc.stderr
    assert "PrintV2" in proc.stderr and "--trust-source" in proc.stderr
    assert not marker.exists()


def test_the_allow_list_follows_the_registry() -> None:
    from adapters.tensorflow.trust import allowed

    assert allowed("MatMul") and allowed("ReadVariableOp") and allowed("StatefulPartitionedCall")
    assert not allowed("PrintV2") and not allowed("WriteFile") and not allowed("SomeCustomOpNobodyKnows")
