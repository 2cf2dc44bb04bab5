"""The onnx-tf compatibility layer: needed, sufficient, and invisible to processes that do not use the TF target."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto

from bridge.targets.onnx_tf_compat import (
    SHIMMED,
    OnnxTfCompatError,
    build_mapping_module,
    build_stub_modules,
    shimmed_modules,
)

REPO = Path(__file__).resolve().parents[3]
needs_onnx_tf = pytest.mark.skipif(importlib.util.find_spec("onnx_tf") is None or
                                   importlib.util.find_spec("tensorflow") is None,
                                   reason="onnx-tf / TensorFlow not installed")


def _python(code: str) -> subprocess.CompletedProcess[str]:
    env_code = "import os; os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')\n" + textwrap.dedent(code)
    return subprocess.run([sys.executable, "-c", env_code], capture_output=True, text=True, timeout=120, cwd=REPO)


def test_mapping_shim_has_the_tables_onnx_tf_reads() -> None:
    m = build_mapping_module()
    assert m.TENSOR_TYPE_TO_NP_TYPE[TensorProto.FLOAT] == np.dtype("float32")
    assert m.TENSOR_TYPE_TO_NP_TYPE[TensorProto.BOOL] == np.dtype("bool")
    assert m.NP_TYPE_TO_TENSOR_TYPE[np.dtype("int64")] == TensorProto.INT64
    assert m.NP_TYPE_TO_TENSOR_TYPE[np.dtype("float16")] == TensorProto.FLOAT16
    storage = m.TENSOR_TYPE_TO_STORAGE_TENSOR_TYPE
    assert m.STORAGE_TENSOR_TYPE_TO_FIELD[storage[TensorProto.FLOAT16]] == "int32_data"
    assert m.STORAGE_TENSOR_TYPE_TO_FIELD[storage[TensorProto.DOUBLE]] == "double_data"
    assert m.STORAGE_TENSOR_TYPE_TO_FIELD[storage[TensorProto.INT64]] == "int64_data"
    assert m.STORAGE_TENSOR_TYPE_TO_FIELD[storage[TensorProto.STRING]] == "string_data"


def test_stubs_fail_clearly_when_touched() -> None:
    stubs = build_stub_modules()
    with pytest.raises(OnnxTfCompatError, match="Bernoulli needs tensorflow-probability"):
        _ = stubs["tensorflow_probability.distributions"].Bernoulli
    with pytest.raises(OnnxTfCompatError, match=r"only tfa\.seq2seq\.hardmax"):
        _ = stubs["tensorflow_addons"].image
    assert callable(stubs["tensorflow_addons"].seq2seq.hardmax)


def test_shim_is_scoped_and_never_shadows_a_real_module() -> None:
    assert "onnx.mapping" not in sys.modules
    sentinel = object()
    sys.modules["tensorflow_addons"] = sentinel  # type: ignore[assignment]
    try:
        with shimmed_modules():
            assert "onnx.mapping" in sys.modules and sys.modules["tensorflow_addons"] is sentinel
        assert sys.modules["tensorflow_addons"] is sentinel
    finally:
        del sys.modules["tensorflow_addons"]
    assert not any(name in sys.modules for name in SHIMMED)
    assert not hasattr(onnx, "mapping")


@needs_onnx_tf
def test_onnx_tf_fails_without_the_layer_and_works_with_it() -> None:
    bare = _python("import onnx_tf.backend")
    assert bare.returncode != 0
    assert "mapping" in bare.stderr or "tensorflow_addons" in bare.stderr

    shimmed = _python("""
        import sys
        from bridge.targets.onnx_tf_compat import SHIMMED, load_onnx_tf
        backend = load_onnx_tf()
        assert hasattr(backend, "prepare")
        leaked = [n for n in SHIMMED if n in sys.modules]
        assert not leaked, leaked
        import onnx
        assert not hasattr(onnx, "mapping")
        try:
            import tensorflow_addons
        except ImportError:
            pass
        else:
            raise AssertionError("the stub leaked")
        from onnx_tf.handlers.backend.squeeze import Squeeze
        assert hasattr(Squeeze, "version_13")  # the handler extension ran
        print("ok")
    """)
    assert shimmed.returncode == 0 and "ok" in shimmed.stdout, shimmed.stderr[-3000:]


def test_layer_is_not_loaded_by_a_plain_convert(tmp_path: Path) -> None:
    """`import bridge; bridge.convert(...)` of an ONNX model never imports onnx-tf, TF or the shim."""
    model = onnx.helper.make_model(onnx.helper.make_graph(
        [onnx.helper.make_node("Relu", ["x"], ["y"])], "g",
        [onnx.helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [onnx.helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])]),
        opset_imports=[onnx.helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "in.onnx")
    proc = _python(f"""
        import sys
        import bridge
        result = bridge.convert({str(tmp_path / 'in.onnx')!r}, {str(tmp_path / 'out.onnx')!r}, opset=17)
        assert result.passed
        from bridge.targets.onnx_tf_compat import SHIMMED
        loaded = [n for n in sys.modules if n in SHIMMED or n.split(".")[0] in ("onnx_tf", "tensorflow")]
        assert not loaded, loaded
        print("ok")
    """)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr[-3000:]


@needs_onnx_tf
def test_unsqueeze_of_a_tensor_whose_rank_tf_does_not_know() -> None:
    """onnx-tf leaves some tensors' rank unknown (in tf2onnx's combined NMS of the trained Keras detector,
    tests/trained_models): Unsqueeze-13 with non-negative axes needs no rank (it failed with "Cannot take the
    length of shape with unknown rank"); with negative ones it names the node."""
    code = textwrap.dedent("""
        import os; os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')
        from types import SimpleNamespace
        import numpy as np, tensorflow as tf
        from bridge.targets.onnx_tf_compat import OnnxTfCompatError, _unsqueeze_13

        def unsqueeze(axes):
            node = SimpleNamespace(inputs=["x", "axes"], name="unsq", op_type="Unsqueeze")

            @tf.function(input_signature=[tf.TensorSpec(None, tf.float32)])  # rank unknown while tracing
            def run(x):
                return _unsqueeze_13(None, node, tensor_dict={"x": x, "axes": tf.constant(axes, tf.int64)})[0]
            return run

        x = np.arange(6, dtype=np.float32).reshape(2, 3)
        y = unsqueeze([0, 2])(x).numpy()
        assert y.shape == (1, 2, 1, 3), y.shape
        np.testing.assert_array_equal(y.reshape(2, 3), x)
        try:
            unsqueeze([-1])(x)
        except OnnxTfCompatError as exc:
            assert "unsq" in str(exc) and "negative" in str(exc), exc
        else:
            raise AssertionError("a negative axis on an unknown rank was accepted")
        print("ok")
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=REPO)
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr[-3000:]
