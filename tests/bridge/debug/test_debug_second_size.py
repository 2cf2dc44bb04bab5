"""``bridge debug`` checks a dynamic axis at a second size as ``convert`` does: on a conversion right at the
given batch and wrong at another, its verdict fails as convert's does (the tensors and passes are still
compared at the first size, and the result says so)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from support import make_model

from bridge import api
from bridge.conversion.options import build_config
from bridge.debug.run import debug_conversion
from bridge.errors import ValidationMismatch
from bridge.model import ModelContainer

RNG = np.random.default_rng(0)
W = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)


def _onnx(tmp: Path) -> tuple[Any, dict[str, Any]]:
    model = make_model([helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
                        helper.make_node("Relu", ["c"], ["y"], name="relu")],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, 6, 6])],
                       initializers=[onnx.numpy_helper.from_array(W, "w")])
    onnx.save(model, tmp / "net.onnx")
    return tmp / "net.onnx", {}


def _torch(tmp: Path) -> tuple[Any, dict[str, Any]]:
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install 'bridge[torch]')")
    (tmp / "net.py").write_text(
        "import torch\n\n\nclass Net(torch.nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n        self.conv = torch.nn.Conv2d(3, 4, 3, bias=False)\n\n"
        "    def forward(self, x):\n        return torch.relu(self.conv(x))\n\n\n"
        "def build():\n    return Net().eval()\n")
    torch.save({"conv.weight": torch.from_numpy(W)}, tmp / "w.pt")
    return f"{tmp / 'net.py'}:build", {"weights": tmp / "w.pt"}


def _mxnet(tmp: Path) -> tuple[Any, dict[str, Any]]:
    from adapters.mxnet.reference import import_mxnet
    from bridge.errors import AdapterUnavailableError

    try:
        mx = import_mxnet()
    except AdapterUnavailableError:
        pytest.skip("MXNet is not installed (pip install 'bridge[mxnet]')")
    y = mx.sym.relu(mx.sym.Convolution(mx.sym.var("x"), kernel=(3, 3), num_filter=4, no_bias=True, name="conv"))
    y.save(str(tmp / "net-symbol.json"))
    mx.nd.save(str(tmp / "net-0000.params"), {"arg:conv_weight": mx.nd.array(W)})
    return tmp / "net-symbol.json", {}


SOURCES: dict[str, Callable[[Path], tuple[Any, dict[str, Any]]]] = {"onnx": _onnx, "mxnet": _mxnet, "pytorch": _torch}


def _bake_batch(proto: onnx.ModelProto, batch: int) -> None:
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


def _options(tmp: Path) -> dict[str, Any]:
    np.savez(tmp / "feeds.npz", x=RNG.standard_normal((2, 3, 8, 8)).astype(np.float32))
    return {"inputs": ["x:2,3,8,8"], "dynamic": ["x:0=batch"], "feeds": tmp / "feeds.npz"}


@pytest.mark.parametrize("wrong", [True, False], ids=["wrong-at-another-batch", "right"])
@pytest.mark.parametrize("framework", list(SOURCES))
def test_debug_of_a_given_model_agrees_with_validate_at_the_second_size(framework: str, wrong: bool,
                                                                        tmp_path: Path) -> None:
    source, extra = SOURCES[framework](tmp_path)
    options = _options(tmp_path)
    api.convert(source, tmp_path / "good.onnx", **options, **extra)
    model = onnx.load(tmp_path / "good.onnx")
    if wrong:
        _bake_batch(model, 2)
    onnx.save(model, tmp_path / "m.onnx")
    try:
        api.validate(tmp_path / "m.onnx", source=source, feeds=options["feeds"], **extra)
        validated = True
    except ValidationMismatch:
        validated = False
    result = api.debug(source, model=tmp_path / "m.onnx", report=tmp_path / "d.json", **options, **extra)
    assert validated is not wrong and result.passed is validated
    assert [s["x"][0] for s in result.validation_sizes] == [2, 3]
    assert any("the tensors and passes at x[2, 3, 8, 8] only" in n for n in result.notes)
    if wrong:  # right at the first size: no node can be blamed there, and the note says why
        assert result.culprit() is None
        assert any("goes wrong at another size" in n for n in result.notes)
        assert "at x[3, 3, 8, 8]: FAIL" in result.validation[0].failures[0].note
    assert json.loads((tmp_path / "d.json").read_text())["validation_sizes"] == result.validation_sizes


def test_debug_pass_by_pass_fails_where_convert_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The conversion itself bakes the batch (the convert test's model); debug converts in this process."""
    source, extra = SOURCES["onnx"](tmp_path)
    options = _options(tmp_path)
    to_proto = ModelContainer.to_proto

    def baked(self: ModelContainer, *args: Any, **kwargs: Any) -> onnx.ModelProto:
        proto = to_proto(self, *args, **kwargs)
        _bake_batch(proto, 2)
        return proto

    monkeypatch.setattr(ModelContainer, "to_proto", baked)
    with pytest.raises(ValidationMismatch, match=r"at 2 sizes"):
        api.convert(source, tmp_path / "out.onnx", **options, **extra)
    result = debug_conversion(build_config(source, tmp_path / "debug.onnx", {**options, **extra}),
                              workdir=tmp_path)
    assert not result.passed and not result.validation[0].passed
    assert [s["x"][0] for s in result.validation_sizes] == [2, 3]
