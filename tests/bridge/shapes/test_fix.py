"""`fix_shapes` on models exported dynamically by each adapter's exporter: PyTorch (dynamo with
dynamic_shapes, TorchScript with dynamic_axes), TensorFlow (tf2onnx, `unk__N` dims) and MXNet (the
adapter with a symbolic batch). The result has no symbolic dim anywhere, matches the original at the
fixed shape, and onnxruntime runs it without shape-mismatch warnings."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import onnx
import pytest
from support import all_value_infos, dims_of

from bridge import api
from bridge.errors import UsageError
from bridge.runtimes.onnxruntime import OnnxRuntime
from bridge.shapes import fix_shapes
from bridge.validation.inputs import make_inputs


def _assert_static_and_quiet(path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    assert api.inspect(path, load_in_runtime=False).symbolic == []
    model = onnx.load(str(path))
    for vi in all_value_infos(model):
        assert all(isinstance(d, int) and d > 0 for d in dims_of(vi)), (vi.name, dims_of(vi))
    capfd.readouterr()
    rt = OnnxRuntime(path, log_severity=1)  # verbose: onnxruntime would warn "... does not match ..." here
    rt.activate()
    rt.infer(make_inputs(rt.input_metadata(), seed=3))
    rt.deactivate()
    assert "does not match" not in capfd.readouterr().err


def _check(result_passed: bool, path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    assert result_passed
    assert path.is_file()
    _assert_static_and_quiet(path, capfd)


def test_fix_torch_dynamo_dynamic_shapes(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    torch = pytest.importorskip("torch")

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
            self.fc = torch.nn.Linear(4, 5)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = torch.nn.functional.max_pool2d(torch.relu(self.conv(x)), 2)
            return self.fc(y.mean(dim=(2, 3)).reshape(y.shape[0], -1))

    batch, height = torch.export.Dim("batch", min=1, max=64), torch.export.Dim("height", min=4, max=512)
    program = torch.onnx.export(Net().eval(), (torch.randn(2, 3, 16, 16),), dynamo=True, input_names=["x"],
                                dynamic_shapes={"x": {0: batch, 2: 2 * height}}, opset_version=18)
    src = tmp_path / "dynamo.onnx"
    onnx.save(program.model_proto, str(src))
    assert any(isinstance(d, str) for d in dims_of(onnx.load(str(src)).graph.input[0]))
    out = tmp_path / "fixed.onnx"
    result = fix_shapes(src, out, inputs=["x:4,3,24,16"])
    assert result.inputs == {"x": [4, 3, 24, 16]}
    assert all(isinstance(d, int) for d in next(iter(result.outputs.values())))
    _check(result.passed, out, capfd)


def test_fix_torchscript_dynamic_axes_folds_reshape_target(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    torch = pytest.importorskip("torch")

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
            self.fc = torch.nn.Linear(4 * 4 * 4, 5)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = torch.nn.functional.max_pool2d(torch.relu(self.conv(x)), 2)
            return self.fc(y.reshape(y.shape[0], -1))  # the batch flows into the Reshape target via Shape()

    src = tmp_path / "ts.onnx"
    torch.onnx.export(Net().eval(), (torch.randn(2, 3, 8, 8),), str(src), dynamo=False, input_names=["x"],
                      output_names=["y"], dynamic_axes={"x": {0: "N"}, "y": {0: "N"}}, opset_version=17)
    assert "Shape" in {n.op_type for n in onnx.load(str(src)).graph.node}
    out = tmp_path / "fixed.onnx"
    result = fix_shapes(src, out, inputs=["x:3,3,8,8"])
    assert result.outputs == {"y": [3, 5]}
    assert result.folded.get("Shape") == 1  # the Shape->Gather->Concat target became a constant
    assert "Shape" not in {n.op_type for n in onnx.load(str(out)).graph.node}
    assert "x[0]=N" in result.symbolic_before
    _check(result.passed, out, capfd)


def test_fix_tf2onnx_unk_dims(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    tf = pytest.importorskip("tensorflow")
    tf2onnx = pytest.importorskip("tf2onnx")
    inp = tf.keras.Input((None, None, 3), name="img")
    y = tf.keras.layers.Conv2D(4, 3, padding="same", activation="relu")(inp)
    y = tf.keras.layers.Dense(2)(tf.keras.layers.GlobalAveragePooling2D()(y))
    spec = (tf.TensorSpec((None, None, None, 3), tf.float32, name="img"),)
    proto, _ = tf2onnx.convert.from_keras(tf.keras.Model(inp, y), input_signature=spec, opset=17)
    assert str(dims_of(proto.graph.input[0])[0]).startswith("unk__")
    src, out = tmp_path / "tf.onnx", tmp_path / "fixed.onnx"
    onnx.save(proto, str(src))
    result = fix_shapes(src, out, inputs=["img:2,20,12,3"])
    assert list(result.outputs.values()) == [[2, 2]]
    _check(result.passed, out, capfd)


def _write_params(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """An MXNet NDArray list file (dense float32), as NDArray::Save writes it."""
    data = bytearray(struct.pack("<QQQ", 0x112, 0, len(arrays)))
    for arr in arrays.values():
        data += struct.pack("<Ii", 0xF993FAC9, 0) + struct.pack("<i", arr.ndim) + struct.pack(f"<{arr.ndim}q", *arr.shape)
        data += struct.pack("<iii", 1, 0, 0) + np.ascontiguousarray(arr, np.float32).tobytes()
    data += struct.pack("<Q", len(arrays))
    for name in arrays:
        data += struct.pack("<Q", len(name)) + name.encode()
    path.write_bytes(bytes(data))


def test_fix_mxnet_adapter_symbolic_batch(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    from adapters.mxnet import MXNetAdapter
    from bridge.config import DynamicAxis, ExportSpec, InputSpec, Source

    nodes = [{"op": "null", "name": "data", "inputs": []}, {"op": "null", "name": "conv_weight", "inputs": []},
             {"op": "null", "name": "conv_bias", "inputs": []},
             {"op": "Convolution", "name": "conv", "attrs": {"num_filter": "4", "kernel": "(3, 3)", "pad": "(1, 1)"},
              "inputs": [[0, 0, 0], [1, 0, 0], [2, 0, 0]]},
             {"op": "Activation", "name": "relu", "attrs": {"act_type": "relu"}, "inputs": [[3, 0, 0]]},
             {"op": "Flatten", "name": "flat", "inputs": [[4, 0, 0]]},
             {"op": "null", "name": "fc_weight", "inputs": []}, {"op": "null", "name": "fc_bias", "inputs": []},
             {"op": "FullyConnected", "name": "fc", "attrs": {"num_hidden": "3"}, "inputs": [[5, 0, 0], [6, 0, 0], [7, 0, 0]]}]
    sym = tmp_path / "net-symbol.json"
    sym.write_text(json.dumps({"nodes": nodes, "arg_nodes": [0, 1, 2, 6, 7], "node_row_ptr": list(range(len(nodes) + 1)),
                               "heads": [[8, 0, 0]], "attrs": {"mxnet_version": ["int", 10901]}}))
    rng = np.random.default_rng(0)
    _write_params(tmp_path / "net-0000.params", {
        "arg:conv_weight": rng.standard_normal((4, 3, 3, 3)), "arg:conv_bias": rng.standard_normal(4),
        "arg:fc_weight": rng.standard_normal((3, 4 * 8 * 8)), "arg:fc_bias": rng.standard_normal(3)})
    export = MXNetAdapter().export(Source(location=str(sym)), ExportSpec(
        inputs=(InputSpec("data", (2, 3, 8, 8)),), dynamic=(DynamicAxis("data", 0, "batch"),)))
    assert dims_of(export.model.graph.input[0])[0] == "batch"
    out = tmp_path / "fixed.onnx"
    result = fix_shapes(export.model, out, inputs=["data:5,3,8,8"])
    assert list(result.outputs.values()) == [[5, 3]]
    _check(result.passed, out, capfd)


def test_fix_needs_every_symbolic_input(tmp_path: Path, fcn: onnx.ModelProto) -> None:
    with pytest.raises(UsageError, match=r"x\['N', 3, 'H', 'W'\]"):
        fix_shapes(fcn, tmp_path / "o.onnx", inputs=[])
    with pytest.raises(UsageError, match="not inputs of the model"):
        fix_shapes(fcn, tmp_path / "o.onnx", inputs=["nope:1,3,8,8"])
    with pytest.raises(UsageError, match=r"--input x: axis 1 is fixed to 3"):  # the option's error, no pass named
        fix_shapes(fcn, tmp_path / "o.onnx", inputs=["x:1,5,8,8"])
    assert not (tmp_path / "o.onnx").exists()


def test_fix_without_output_returns_proto(fcn: onnx.ModelProto) -> None:
    result = fix_shapes(fcn, None, inputs=["x:1,3,16,12"], validate=False)
    assert result.proto is not None and not result.written
    assert result.outputs == {"y": [1, 4, 8, 6]}
    assert result.to_dict()["validation_skipped"] == "validation disabled"


def test_fix_keeps_sequence_values_sequences() -> None:
    """A sequence grown from SequenceEmpty (no recorded type): inference must not make it a tensor."""
    from onnx import TensorProto, helper
    from support import make_model

    model = make_model(
        [helper.make_node("SequenceEmpty", [], ["s0"], dtype=TensorProto.FLOAT),
         helper.make_node("SequenceInsert", ["s0", "x"], ["s1"]),
         helper.make_node("SequenceInsert", ["s1", "x"], ["s2"]),
         helper.make_node("ConcatFromSequence", ["s2"], ["y"], axis=0)],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["m", 3])])
    result = fix_shapes(model, None, inputs=["x:2,3"])
    assert result.passed and result.proto is not None
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(OnnxRuntime(result.proto).infer({"x": x})["y"], np.concatenate([x, x]))
