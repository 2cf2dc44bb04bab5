"""Ops whose translation needs some static dims (Pooling 'full', Deconvolution, Correlation, GridGenerator
warp, split sections) convert with a dynamic batch - only the dims they read must be static - and validate
against MXNet at batch sizes other than the sample's; a dynamic dim they do read is refused naming the dims."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from mxnet_testlib import need_mxnet

from bridge import api
from bridge.errors import ExportError


def _pool_full(mx: Any, x: Any) -> tuple[Any, dict[str, np.ndarray]]:
    a = mx.sym.Pooling(x, kernel=(3, 3), stride=(2, 2), pool_type="max", pooling_convention="full", name="p1")
    b = mx.sym.Pooling(x, kernel=(3, 3), stride=(2, 2), pad=(1, 1), pool_type="avg", pooling_convention="full",
                       name="p2")
    return mx.sym.Group([a, b]), {}


def _deconv(mx: Any, x: Any) -> tuple[Any, dict[str, np.ndarray]]:
    w = np.random.default_rng(0).standard_normal((3, 2, 4, 4)).astype(np.float32)
    y = mx.sym.Deconvolution(x, kernel=(4, 4), stride=(2, 2), pad=(1, 1), num_filter=2, no_bias=True,
                             target_shape=(14, 14), name="up")
    return y, {"arg:up_weight": w}


def _correlation(mx: Any, x: Any) -> tuple[Any, dict[str, np.ndarray]]:
    return mx.sym.Correlation(x, x * 0.5, kernel_size=1, max_displacement=2, stride1=1, stride2=1, pad_size=2,
                              name="corr"), {}


def _split(mx: Any, x: Any) -> tuple[Any, dict[str, np.ndarray]]:
    return mx.sym.Group(list(mx.sym.split(x, num_outputs=3, axis=1, name="sp"))), {}


BUILDERS: dict[str, Callable[[Any, Any], tuple[Any, dict[str, np.ndarray]]]] = {
    "pooling_full": _pool_full, "deconvolution": _deconv, "correlation": _correlation, "split_sections": _split}


@pytest.mark.parametrize("name", list(BUILDERS))
def test_dynamic_batch_reaches_ops_that_read_only_spatial_dims(name: str, tmp_path: Path) -> None:
    mx = need_mxnet()
    sym, params = BUILDERS[name](mx, mx.sym.var("data"))
    sym.save(str(tmp_path / "net-symbol.json"))
    mx.nd.save(str(tmp_path / "net-0000.params"), {k: mx.nd.array(v) for k, v in params.items()})
    result = api.convert(str(tmp_path / "net-symbol.json"), tmp_path / "net.onnx", inputs=["data:2,3,7,7"],
                         dynamic=["data:0=batch"])
    assert result.passed and (tmp_path / "net.onnx").is_file()
    import onnx

    model = onnx.load(tmp_path / "net.onnx")
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"


def test_a_dynamic_dim_the_op_reads_is_refused_naming_it(tmp_path: Path) -> None:
    mx = need_mxnet()
    sym, _ = _pool_full(mx, mx.sym.var("data"))
    sym.save(str(tmp_path / "net-symbol.json"))
    with pytest.raises(ExportError, match=r"needs static dims \[2:\] of 'data'.*pass concrete --input shapes"):
        api.convert(str(tmp_path / "net-symbol.json"), tmp_path / "net.onnx", inputs=["data:2,3,7,7"],
                    dynamic=["data:2=height"])
    assert not (tmp_path / "net.onnx").exists()



@pytest.mark.parametrize("opset", [13, 17, 18])
@pytest.mark.parametrize("squeeze", [False, True])
def test_split_over_the_dynamic_axis_at_any_opset(opset: int, squeeze: bool, tmp_path: Path) -> None:
    """Faster R-CNN splits its rois per image over the dynamic batch axis: before opset 18 (no Split
    num_outputs) the sizes come from the input's shape; every part matches MXNet at several batches
    (squeeze_axis needs parts of size 1: batch 2 only)."""
    from mxnet_testlib import Model, run_mxnet, run_onnx

    from adapters.mxnet import MXNetAdapter
    from bridge.config import DynamicAxis, ExportSpec, InputSpec

    mx = need_mxnet()
    parts = mx.sym.split(mx.sym.var("data"), num_outputs=2, axis=0, squeeze_axis=squeeze, name="split1")
    mx.sym.Group([p * (i + 1) for i, p in enumerate(parts)]).save(str(tmp_path / "net-symbol.json"))
    model = Model(tmp_path / "net-symbol.json", None, {})
    spec = ExportSpec(inputs=(InputSpec("data", (2, 3), "float32"),), dynamic=(DynamicAxis("data", 0, "n"),),
                      opset=opset)
    result = MXNetAdapter().export(model.source(), spec)
    assert result.model.opset_import[0].version == opset
    rng = np.random.default_rng(opset)
    for batch in (2,) if squeeze else (2, 4, 8):
        model.feeds = {"data": rng.standard_normal((batch, 3)).astype(np.float32)}
        got, ref = run_onnx(result.model, model.feeds), run_mxnet(model, result)
        assert list(ref) == list(result.output_names) and len(ref) == 2
        for name, value in ref.items():
            assert got[name].shape == value.shape
            np.testing.assert_allclose(got[name], value, rtol=1e-6, err_msg=f"{name} at batch {batch}")



@pytest.mark.parametrize("batch", [1, 3])
def test_squeeze_with_an_axis_over_a_dynamic_batch_keeps_mxnets_shapes(batch: int, tmp_path: Path) -> None:
    """squeeze(axis=1) of [n, 1]: shape (n,) at every batch, (1,) at batch 1 as in MXNet."""
    from mxnet_testlib import Model, run_mxnet, run_onnx

    from adapters.mxnet import MXNetAdapter
    from bridge.config import DynamicAxis, ExportSpec, InputSpec

    mx = need_mxnet()
    mx.sym.squeeze(mx.sym.var("data"), axis=1, name="sq").save(str(tmp_path / "net-symbol.json"))
    model = Model(tmp_path / "net-symbol.json", None, {})
    spec = ExportSpec(inputs=(InputSpec("data", (2, 1), "float32"),), dynamic=(DynamicAxis("data", 0, "n"),))
    result = MXNetAdapter().export(model.source(), spec)
    model.feeds = {"data": np.arange(batch, dtype=np.float32).reshape(batch, 1) + 1}
    got, ref = run_onnx(result.model, model.feeds), run_mxnet(model, result)
    for name, value in ref.items():
        assert got[name].shape == value.shape == (batch,)
        np.testing.assert_array_equal(got[name], value)


def test_squeeze_without_axis_over_a_dynamic_dim_is_refused_naming_the_node(tmp_path: Path) -> None:
    """Without an axis, MXNet drops the dynamic axis only when it is 1 at run time: the result's rank is not
    fixed, which an ONNX graph output needs; refused (exit 3) naming the node and the dims, not a crash."""
    mx = need_mxnet()
    mx.sym.squeeze(mx.sym.var("data"), name="sq").save(str(tmp_path / "net-symbol.json"))
    with pytest.raises(ExportError, match=r"node 'sq' \(squeeze without axis\).*dims \[0\] of 'data'"):
        api.convert(str(tmp_path / "net-symbol.json"), tmp_path / "net.onnx", inputs=["data:2,1"],
                    dynamic=["data:0=batch"])
