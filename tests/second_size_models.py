"""Sources for the second-size tests (convert, validate, debug): one 3x3 convolution, 3 -> 4 channels, written
as an ONNX file, an MXNet symbol, a PyTorch factory and a Keras file, all with the same weights ``W``; and
``bake_batch`` / ``baking_conversions``, a conversion that is right at one batch and wrong at any other."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from support import make_model

from bridge.model import ModelContainer

RNG = np.random.default_rng(0)
W = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)  # one 3x3 convolution, 3 -> 4 channels, no padding


def onnx_source(tmp: Path) -> tuple[Any, dict[str, Any], str]:
    model = make_model([helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
                        helper.make_node("Relu", ["c"], ["y"], name="relu")],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, 6, 6])],
                       initializers=[onnx.numpy_helper.from_array(W, "w")])
    onnx.save(model, tmp / "net.onnx")
    return tmp / "net.onnx", {}, "x"


def mxnet_source(tmp: Path) -> tuple[Any, dict[str, Any], str]:
    from adapters.mxnet.reference import import_mxnet
    from bridge.errors import AdapterUnavailableError

    try:
        mx = import_mxnet()
    except AdapterUnavailableError:
        pytest.skip("MXNet is not installed (pip install 'bridge[mxnet]')")
    y = mx.sym.relu(mx.sym.Convolution(mx.sym.var("x"), kernel=(3, 3), num_filter=4, no_bias=True, name="conv"))
    y.save(str(tmp / "net-symbol.json"))
    mx.nd.save(str(tmp / "net-0000.params"), {"arg:conv_weight": mx.nd.array(W)})
    return tmp / "net-symbol.json", {}, "x"


def torch_source(tmp: Path) -> tuple[Any, dict[str, Any], str]:
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install 'bridge[torch]')")
    (tmp / "net.py").write_text(
        "import torch\n\n\nclass Net(torch.nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n        self.conv = torch.nn.Conv2d(3, 4, 3, bias=False)\n\n"
        "    def forward(self, x):\n        return torch.relu(self.conv(x))\n\n\n"
        "def build():\n    return Net().eval()\n")
    torch.save({"conv.weight": torch.from_numpy(W)}, tmp / "w.pt")
    return f"{tmp / 'net.py'}:build", {"weights": tmp / "w.pt"}, "x"


def tensorflow_source(tmp: Path) -> tuple[Any, dict[str, Any], str]:
    tf = pytest.importorskip("tensorflow", reason="TensorFlow is not installed (pip install 'bridge[tensorflow]')")
    x = tf.keras.Input((3, 8, 8), name="x")  # channels first in the feed, as the other sources
    y = tf.keras.layers.Conv2D(4, 3, use_bias=False, activation="relu")(tf.keras.layers.Permute((2, 3, 1))(x))
    model = tf.keras.Model(x, y)
    model.layers[-1].set_weights([W.transpose(2, 3, 1, 0)])
    model.save(tmp / "net.keras")
    return tmp / "net.keras", {}, "x"


SOURCES: dict[str, Callable[[Path], tuple[Any, dict[str, Any], str]]] = {
    "onnx": onnx_source, "mxnet": mxnet_source, "pytorch": torch_source, "tensorflow": tensorflow_source}


def bake_batch(proto: onnx.ModelProto, batch: int) -> None:
    """Add ``(dim 0 of x) - batch`` to the output: right at ``batch``, wrong at any other (a conversion that
    fixed the batch somewhere inside)."""
    g = proto.graph
    out = g.output[0].name
    for node in g.node:
        node.output[:] = [f"{out}__raw" if o == out else o for o in node.output]
    g.initializer.extend([onnx.numpy_helper.from_array(np.array([0], np.int64), "bake_axis"),
                          onnx.numpy_helper.from_array(np.array(batch, np.float32), "bake_batch")])
    g.node.extend([helper.make_node("Shape", [g.input[0].name], ["bake_shape"], name="bake_shape"),
                   helper.make_node("Gather", ["bake_shape", "bake_axis"], ["bake_n"], name="bake_gather"),
                   helper.make_node("Cast", ["bake_n"], ["bake_nf"], to=TensorProto.FLOAT, name="bake_cast"),
                   helper.make_node("Sub", ["bake_nf", "bake_batch"], ["bake_off"], name="bake_sub"),
                   helper.make_node("Add", [f"{out}__raw", "bake_off"], [out], name="bake_add")])


def baking_conversions(monkeypatch: pytest.MonkeyPatch, batch: int = 2) -> None:
    """Every model a conversion writes from now on in this test is baked at ``batch`` (``bake_batch``)."""
    to_proto = ModelContainer.to_proto

    def baked(self: ModelContainer, *args: Any, **kwargs: Any) -> onnx.ModelProto:
        proto = to_proto(self, *args, **kwargs)
        bake_batch(proto, batch)
        return proto

    monkeypatch.setattr(ModelContainer, "to_proto", baked)
